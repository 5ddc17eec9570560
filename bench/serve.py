"""The HTTP benchmark's server: the real app, served like ``parkway serve``, in its own
process, plus one read-only probe.

``python -m bench.serve --port P --redis-url URL --agent FILE`` builds the settings the
way the CLI does (flags over ``PARKWAY_*`` variables; ``PARKWAY_SECRET_KEY`` comes from
the environment), builds the app with :func:`parkway.transport.app.create_app` and runs it with
``uvicorn.run`` and the CLI's options. The only addition is ``GET /_bench/redis``,
answered before the app sees the request and without touching Redis: the number of
Redis round trips (and request bytes) this process has made so far, so the benchmark
can count the round trips of each HTTP operation.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from bench.roundtrips import RoundTrips, install
from parkway.transport.app import create_app
from parkway.transport.settings import Settings

__all__ = ["PROBE_PATH", "main"]

PROBE_PATH = "/_bench/redis"


def with_probe(app: ASGIApp, counter: RoundTrips) -> ASGIApp:
    """``app``, with ``GET /_bench/redis`` answering the round-trip counter."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == PROBE_PATH:
            body = json.dumps(
                {"round_trips": counter.count, "bytes_sent": counter.bytes_sent}
            ).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return wrapped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--agent", required=True, help="agent file")
    args = parser.parse_args(argv)
    counter = install()
    settings = Settings.from_sources(
        {
            "host": "127.0.0.1",
            "port": args.port,
            "redis_url": args.redis_url,
            "agent_file": args.agent,
            "log_level": "warning",
            # The app's deadline sweeper would otherwise add a ZRANGEBYSCORE to the
            # round-trip counts now and then; the benchmark's calls never expire, and
            # the sweeper has its own measurements (bench/sweeper_lag.py).
            "sweep_interval_s": 3600.0,
        }
    )
    app = with_probe(create_app(settings), counter)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=15,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
