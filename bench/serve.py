"""The HTTP benchmark's server: the real app, served like ``parkway serve``, in its own
process, plus read-only probes and two bare routes.

``python -m bench.serve --port P --redis-url URL --agent FILE`` builds the settings the
way the CLI does (flags over ``PARKWAY_*`` variables; ``PARKWAY_SECRET_KEY`` comes from
the environment), builds the app with :func:`parkway.transport.app.create_app` and runs it with
uvicorn and the CLI's options (the CLI's HTTP protocol with its header read timeout;
uvicorn's ``loop="auto"``, which picks uvloop when it is installed; the heap settled once
it has started, :func:`parkway.runner.ops.heap.settle_heap`). Answered before the
app sees the request:

- ``GET /_bench/redis``, without touching Redis: the number of Redis round trips (and
  request bytes) this process has made so far, so the benchmark can count the round
  trips of each HTTP operation;
- ``GET /_bench/server``: the event loop and the HTTP protocol this server runs on;
- ``POST /bench/bare`` and ``POST /bench/bare-sse``: bare Starlette routes on the same
  server (no Parkway middleware, no Redis), the floor of an HTTP request here. The first
  reads the request body and answers a small JSON object; the second reads it and
  answers a 3-event SSE stream with sse-starlette (two JSON chunks, then ``[DONE]``),
  framed like Parkway's streams.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import socket
import sys
from collections.abc import AsyncIterator, Sequence

import uvicorn
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bench.roundtrips import RoundTrips, install
from parkway.runner.ops.heap import settle_heap
from parkway.transport.aisdk.streaming import STREAM_HEADERS
from parkway.transport.app import create_app
from parkway.transport.serving import header_timeout_protocol
from parkway.transport.settings import Settings
from parkway.transport.sse import DONE

__all__ = ["BARE_PATH", "BARE_SSE_PATH", "PROBE_PATH", "SERVER_PATH", "main"]

PROBE_PATH = "/_bench/redis"
SERVER_PATH = "/_bench/server"
BARE_PATH = "/bench/bare"
BARE_SSE_PATH = "/bench/bare-sse"


async def _bare(request: Request) -> JSONResponse:
    body = await request.body()
    return JSONResponse({"ok": True, "bytes": len(body)})


async def _bare_sse(request: Request) -> EventSourceResponse:
    body = await request.body()

    async def events() -> AsyncIterator[dict[str, str]]:
        yield {"data": json.dumps({"type": "start", "bytes": len(body)})}
        yield {"data": json.dumps({"type": "finish"})}
        yield {"data": DONE}

    return EventSourceResponse(events(), headers=STREAM_HEADERS, ping=15)


def bare_app() -> Starlette:
    """The two bare routes, in a Starlette app of their own."""
    return Starlette(
        routes=[
            Route(BARE_PATH, _bare, methods=["POST"]),
            Route(BARE_SSE_PATH, _bare_sse, methods=["POST"]),
        ]
    )


def _protocol(config: uvicorn.Config) -> str:
    """The HTTP parser uvicorn runs (once the config is loaded)."""
    cls = getattr(config, "http_protocol_class", None)
    names = [c.__name__ for c in getattr(cls, "__mro__", ())]
    parser = "?"
    if "H11Protocol" in names:
        parser = "h11"
    elif "HttpToolsProtocol" in names:
        parser = "httptools"
    return f"{parser} ({names[0] if names else '?'}, uvicorn http={config.http!r})"


def _server_facts(config: uvicorn.Config) -> dict[str, str]:
    loop = type(asyncio.get_running_loop())
    installed = {
        name: importlib.util.find_spec(name) is not None for name in ("uvloop", "httptools")
    }
    return {
        "loop": f"{loop.__module__}.{loop.__qualname__} (uvicorn loop={config.loop!r}; "
        f"uvloop {'installed' if installed['uvloop'] else 'not installed'})",
        "http": f"{_protocol(config)}; httptools "
        f"{'installed' if installed['httptools'] else 'not installed'}",
    }


def with_probe(app: ASGIApp, counter: RoundTrips, config: uvicorn.Config | None = None) -> ASGIApp:
    """``app``, with the probes and the bare routes (see the module docstring)."""
    bare = bare_app()

    async def answer(send: Send, value: dict[str, object]) -> None:
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(value).encode()})

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path == PROBE_PATH:
                await answer(send, {"round_trips": counter.count, "bytes_sent": counter.bytes_sent})
                return
            if path == SERVER_PATH and config is not None:
                await answer(send, dict(_server_facts(config)))
                return
            if path in (BARE_PATH, BARE_SSE_PATH):
                await bare(scope, receive, send)
                return
        await app(scope, receive, send)

    return wrapped


class _SettlingServer(uvicorn.Server):
    """As ``parkway serve``: the heap is settled once the server has started."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            settle_heap()


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
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=15,
        # as `parkway serve`: its protocol with a header read timeout
        http=header_timeout_protocol(settings.header_read_timeout_s),
    )
    config.app = with_probe(app, counter, config)
    _SettlingServer(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
