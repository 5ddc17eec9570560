"""``make load`` (``python -m bench.load``): one worker under many streams and turns.

Two scenarios, each against its own ``parkway serve`` process (:mod:`bench.load_server`)
and a real Redis, measured from the outside with a cheap raw-asyncio client
(:mod:`bench.load_client`):

1. **followers**: ``--followers`` (10,000) concurrent AI SDK ``resumeStream()`` requests,
   ``GET /api/chat/{id}/stream``, spread over ``--chats`` (200) runs that stay running
   (their tool, :func:`bench.load_tools.hold`, waits for the benchmark) for ``--hold-s``
   seconds, while ``/healthz`` is timed every 50 ms and the worker's Redis connections
   are counted; then the runs are let go and every follower must see the end.
2. **turns**: ``--turns`` (300) concurrent ``POST /api/chat`` new turns from one session,
   each on a new chat, on a worker with the default admission limits: each must either
   run to the end (200) or be refused with 429 and ``Retry-After``; never 5xx.

Redis: ``--redis-url``; else the Redis service at ``127.0.0.1:6379`` database 14 when it
answers; else a private ``redis-server`` (:class:`bench.redis_server.LoopbackRedis`).
Only keys of the benchmark's own chats and agents are written, all named with the run's
unique prefix (``load-<random>-``); they are deleted at the end. Results are
printed as Markdown and written to their own section of ``docs/benchmarks.md``
(:mod:`bench.load_report`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import os
import re
import resource
import secrets
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.exceptions import RedisError

from bench.load_followers import run_followers
from bench.load_report import FollowersResult, LoadReport, TurnsResult, write_section
from bench.load_server import BENCH_CLIENT_NAME
from bench.load_turns import run_turns
from bench.load_workload import LoadConfig, Log
from bench.redis_server import LoopbackRedis
from bench.report import machine_facts

__all__ = ["LoadConfig", "LoadOutcome", "main", "run_load"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks.md"
SERVICE_REDIS_URL = "redis://127.0.0.1:6379/14"


@dataclass(frozen=True)
class LoadOutcome:
    """The results of the scenarios that ran (None: skipped)."""

    followers: FollowersResult | None
    turns: TurnsResult | None


async def _delete_keys(redis: Redis, prefix: str) -> int:
    """Delete every key whose name holds the run's unique prefix: its chats' keys and its
    agents' (a worker stores its agent file as revision 1 of the agent named after the
    file, without a TTL). ``SCAN``, never ``KEYS``."""
    deleted = 0
    batch: list[bytes] = []
    async for key in redis.scan_iter(match=f"*{prefix}-*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += await redis.unlink(*batch)
            batch.clear()
    if batch:
        deleted += await redis.unlink(*batch)
    return deleted


async def run_load(
    config: LoadConfig,
    redis_url: str,
    *,
    followers: bool = True,
    turns: bool = True,
    log: Log = lambda _: None,
) -> LoadOutcome:
    """Run the scenarios against the Redis at ``redis_url``; delete their keys after."""
    prefix = f"load-{secrets.token_hex(4)}"
    redis = Redis.from_url(redis_url, client_name=BENCH_CLIENT_NAME, socket_timeout=10)
    try:
        with tempfile.TemporaryDirectory(prefix="parkway-load-") as name:
            folder = Path(name)
            try:
                first = (
                    await run_followers(
                        config, redis_url, redis=redis, folder=folder, prefix=prefix, log=log
                    )
                    if followers
                    else None
                )
                second = await run_turns(config, redis_url, folder, prefix, log) if turns else None
            finally:
                await _delete_keys(redis, prefix)
    finally:
        await redis.aclose()
    return LoadOutcome(first, second)


def _open_files(needed: int) -> int:
    """Raise this process's open-file limit to its hard limit (the worker inherits it);
    refuse to start when even that is too low for ``needed`` descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft < needed:
        raise SystemExit(
            f"the open-file limit ({soft}) is below the {needed} descriptors this run needs; "
            "raise `ulimit -n` or lower --followers"
        )
    return soft


def _ram() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


async def _answers(url: str) -> bool:
    client = Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(await client.ping())
    except (OSError, RedisError):  # not usable: fall back to a private server
        return False
    finally:
        await client.aclose()


async def _redis_version(url: str) -> str:
    client = Redis.from_url(url, socket_timeout=10)
    try:
        return f"Redis {(await client.info('server')).get('redis_version', '?')}"
    finally:
        await client.aclose()


def _parser() -> argparse.ArgumentParser:
    defaults = LoadConfig()
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--redis-url",
        help=f"Redis to use (default {SERVICE_REDIS_URL} when it answers, else a private "
        "redis-server)",
    )
    parser.add_argument(
        "--followers", type=int, default=defaults.followers, help="concurrent SSE followers (10000)"
    )
    parser.add_argument(
        "--chats",
        type=int,
        default=defaults.chats,
        help="running chats the followers are spread over (200)",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=defaults.turns,
        help="concurrent new turns from one session (300)",
    )
    parser.add_argument(
        "--hold-s", type=float, default=defaults.hold_s, help="seconds all followers stay open (30)"
    )
    parser.add_argument(
        "--batch", type=int, default=defaults.batch, help="followers opened at a time (500)"
    )
    parser.add_argument("--skip-followers", action="store_true", help="only the concurrent turns")
    parser.add_argument("--skip-turns", action="store_true", help="only the followers")
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="report file (docs/benchmarks.md)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no file")
    return parser


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()
    return url


def _progress() -> Log:
    start = time.monotonic()

    def log(message: str) -> None:
        print(f"[load {time.monotonic() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    return log


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("followers", "chats", "turns", "batch"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name}: must be at least 1")
    if args.hold_s <= 0:
        raise SystemExit("--hold-s: must be more than 0")
    config = LoadConfig(
        followers=args.followers,
        chats=min(args.chats, args.followers),
        turns=args.turns,
        hold_s=args.hold_s,
        batch=args.batch,
    )
    open_files = _open_files(config.followers + config.chats + config.turns + 256)
    load_average = os.getloadavg()[0]
    log = _progress()
    scenarios = {"followers": not args.skip_followers, "turns": not args.skip_turns}
    url = args.redis_url or SERVICE_REDIS_URL
    if args.redis_url or asyncio.run(_answers(SERVICE_REDIS_URL)):
        where = (
            f"at {_redacted(url)}"
            if args.redis_url
            else "the Redis service at 127.0.0.1:6379, db 14"
        )
        version = asyncio.run(_redis_version(url))
        outcome = asyncio.run(run_load(config, url, log=log, **scenarios))
    else:
        with LoopbackRedis() as server:
            where = "private loopback server on 127.0.0.1 TCP, no persistence"
            version = asyncio.run(_redis_version(server.url))
            outcome = asyncio.run(run_load(config, server.url, log=log, **scenarios))
    machine = machine_facts(version, where, ROOT)
    # bench.report names the HTTP benchmark's client; this one is h11 on raw asyncio.
    libraries = re.sub(
        r"httpx \S+ \(client\)", f"h11 {_version('h11')} (client, raw asyncio)", machine.libraries
    )
    report = LoadReport(
        arguments=shlex.join(
            _redacted(a) if a == args.redis_url else a
            for a in (sys.argv[1:] if argv is None else argv)
        ),
        machine=dataclasses.replace(machine, libraries=libraries),
        ram=_ram(),
        open_files=open_files,
        load_average=load_average,
        followers=outcome.followers,
        turns=outcome.turns,
    )
    print(report.tables())
    if not args.no_write:
        write_section(args.output, report.section())
        print(f"[load] wrote the Load section of {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
