"""``python -m bench``: run the whole suite, print Markdown, write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from redis.asyncio import Redis

from bench.code_mode import CodeModeResult, run_code_mode
from bench.concurrency import ConcurrencyResult, run_concurrency
from bench.eventlog import EventLogResult, run_eventlog
from bench.floor import run_floor
from bench.http_level import HttpResult, run_http_size
from bench.models import ModelsResult, run_models
from bench.redis_server import LoopbackRedis
from bench.report import Report, machine_facts
from bench.roundtrips import install
from bench.runner_level import ROUNDS, SizeResult, run_sizes
from bench.sweeper_lag import SweeperResult, run_sweeper
from bench.workload import Workload
from parkway.runner.ops.heap import settle_heap
from parkway.runner.store.client import connect

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks.md"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Parkway park/resume benchmarks on a loopback Redis (see docs/benchmarks.md).",
    )
    parser.add_argument(
        "--redis-url",
        help="use this Redis instead of starting a private one (keys pw:{bench-*} are "
        "written and deleted)",
    )
    parser.add_argument(
        "--sizes", default="2,20,200", help="history sizes in messages (default 2,20,200)"
    )
    parser.add_argument(
        "--iterations", type=int, default=1500, help="runner-level samples per size (1500)"
    )
    parser.add_argument(
        "--http-iterations", type=int, default=600, help="HTTP samples per size (600)"
    )
    parser.add_argument("--skip-http", action="store_true", help="no HTTP measurements")
    parser.add_argument(
        "--skip-concurrency",
        action="store_true",
        help="no concurrent parks/resumes and no many-runs-at-once measurement",
    )
    parser.add_argument(
        "--concurrent-runs",
        type=int,
        default=1000,
        help="runs started at once on one runner (1000; 0: not measured)",
    )
    parser.add_argument(
        "--skip-sweeper", action="store_true", help="no deadline sweeper measurements"
    )
    parser.add_argument(
        "--sweeper-parked",
        type=int,
        default=100_000,
        help="parked calls during the sweeper measurements (100000)",
    )
    parser.add_argument(
        "--skip-models", action="store_true", help="no real-model (provider adapter) measurements"
    )
    parser.add_argument(
        "--skip-code", action="store_true", help="no Code Mode (sandbox) measurements"
    )
    parser.add_argument(
        "--quick", action="store_true", help="few samples (a smoke run; numbers are rough)"
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="report file (docs/benchmarks.md)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no file")
    return parser


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"--sizes: {text!r} is not a comma-separated list of numbers") from None
    for size in sizes:
        Workload(size)  # validates
    return sizes


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()
    return url


async def _suite(args: argparse.Namespace, url: str, where: str) -> Report:
    install()
    sizes = _sizes(args.sizes)
    iterations, http_iterations = args.iterations, args.http_iterations
    warmup, http_warmup = 50, 20
    if args.quick:
        iterations, http_iterations, warmup, http_warmup = 100, 40, 10, 5
    redis = connect(url)  # the client the server builds: the runner's and the floor's
    if not isinstance(redis, Redis):
        raise SystemExit("the benchmark needs one Redis server (not a Cluster)")
    helper = Redis.from_url(url)
    try:
        info = await helper.info("server")
        version = f"Redis {info.get('redis_version', '?')}"
        log = _progress()
        log("floor: PING, SET and GETDEL of 4 KB, GETDEL of a 200-message history + json.loads")
        floor = await run_floor(redis, max(iterations, 500))
        log(
            f"runner level, {', '.join(map(str, sizes))} messages, {iterations} samples each "
            f"(in {ROUNDS} rounds, the sizes taking turns)"
        )
        runner: list[SizeResult] = await run_sizes(
            redis, helper, [Workload(size) for size in sizes], iterations=iterations, warmup=warmup
        )
        concurrency: ConcurrencyResult | None = None
        if not args.skip_concurrency:
            rounds = 3 if args.quick else 10
            log(
                f"concurrency: 100 parks and 100 resumes at once, {rounds} rounds; "
                f"{args.concurrent_runs} runs at once"
            )
            concurrency = await run_concurrency(
                helper, url, width=100, rounds=rounds, many=max(args.concurrent_runs, 0)
            )
        http: list[HttpResult] = []
        if not args.skip_http:
            for size in sizes:
                log(f"HTTP, {size} messages, {http_iterations} samples")
                http.append(
                    await run_http_size(
                        url,
                        helper,
                        Workload(size),
                        iterations=http_iterations,
                        warmup=http_warmup,
                        probes=6,
                    )
                )
        sweeper: SweeperResult | None = None
        if not args.skip_sweeper:
            parked = 10_000 if args.quick else args.sweeper_parked
            if parked < 11_000 and not args.quick:
                raise SystemExit(
                    "--sweeper-parked: at least 11000 (1,000 spread + 10,000 burst deadlines)"
                )
            sweeper = await run_sweeper(
                redis,
                parked=parked,
                spread=200 if args.quick else 1_000,
                burst=2_000 if args.quick else 10_000,
                samples=100 if args.quick else 500,
                log=log,
            )
        eventlog: EventLogResult | None = await run_eventlog(
            url,
            samples=100 if args.quick else 600,
            warmup=10 if args.quick else 50,
            concurrency=50 if args.quick else 200,
            log=log,
        )
        models: ModelsResult | None = None
        if not args.skip_models:
            log("real models: adapter overhead, provider first byte to first chunk")
            models = await run_models(
                url,
                sizes,
                iterations=100 if args.quick else 500,
                samples=50 if args.quick else 300,
            )
        code: CodeModeResult | None = None
        if not args.skip_code:
            log("code mode: the sandbox, execute_code after approval, grep over 10 MB")
            code = await run_code_mode(
                redis, samples=30 if args.quick else 200, warmup=3 if args.quick else 10
            )
    finally:
        await redis.aclose()
        await helper.aclose()
    return Report(
        arguments=shlex.join(sys.argv[1:]),
        machine=machine_facts(version, where, ROOT),
        floor=floor,
        runner=runner,
        http=http,
        iterations=iterations,
        http_iterations=http_iterations,
        sweeper=sweeper,
        eventlog=eventlog,
        models=models,
        code=code,
        concurrency=concurrency,
    )


def _progress() -> _Log:
    return _Log(time.monotonic())


class _Log:
    """Progress lines on stderr, so stdout stays pure Markdown."""

    def __init__(self, start: float) -> None:
        self.start = start

    def __call__(self, message: str) -> None:
        print(
            f"[bench {time.monotonic() - self.start:6.1f}s] {message}", file=sys.stderr, flush=True
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settle_heap()  # as `parkway serve` does once it listens: runners run in this process
    if args.redis_url:
        report = asyncio.run(_suite(args, args.redis_url, f"at {_redacted(args.redis_url)}"))
    else:
        with LoopbackRedis() as server:
            where = "private loopback server on 127.0.0.1 TCP, no persistence"
            report = asyncio.run(_suite(args, server.url, where))
    print(report.tables())
    if not args.no_write:
        report.write(args.output)
        print(f"[bench] wrote {args.output}", file=sys.stderr)
    return 0
