"""``python -m bench.fanout``: one run, or one parked call, looked at by many at once.

A chat open in several tabs, a stream reconnecting, a widget asking for its call again:
the same run's events and the same call's widget go out many times from one worker.
Four measurements, each against a Redis of its own (:class:`bench.redis_server.LoopbackRedis`)
unless ``--redis-url`` says otherwise:

- **followers of one run** (runner level): ``--followers`` followers of one run on the
  worker that runs it (:meth:`Runner.follow <parkway.runner.engine.runner.Runner.follow>` from the
  run's first entry, what each HTTP response does), started once that entry is logged.
  The model streams its answer in 24 pieces 2 ms apart (as a provider's deltas arrive),
  so the run logs them in about as many batches, then calls a client tool and the run
  parks. Per round: the process's CPU time (the run, its log writer, the followers) and
  the wall time from ``start_turn`` until the last follower holds the run's end. The
  followers only take the events: this is what following costs, without the wire.
- **followers of a run that parks a code review**: the model says a sentence and calls
  ``execute_code`` with a 60-line program (an approval, drawn as highlighted code). Each
  follower turns every event into its chunk's JSON as a response does
  (:func:`parkway.transport.aisdk.encoder.encode_event` with the serving app's describer:
  providers, start tokens, code mode, as ``transport/app.py`` builds it). Per round, CPU
  and wall time as above.
- **describe the parked code review**: ``describe_call`` of that call, as the app's
  describer calls it for each follower and each ``GET``, p50 over ``--samples``.
- **GET the parked code review** over HTTP: ``GET /api/chats/{id}/calls/{call}`` and
  ``GET /api/chats/{id}`` (the chat's view: the call's widget in its messages and in its
  calls) by the chat's owner, on the real app served in its own process
  (:mod:`bench.serve`), one request at a time with keep-alive, p50 over ``--samples``.

Medians over rounds are printed as Markdown; nothing is written to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from bench.http_level import _Server
from bench.redis_server import LoopbackRedis
from bench.stats import Latency, fmt_ms, markdown_table, percentile
from bench.workload import BENCH_CONFIG, drop_chats
from parkway.runner.agent.template import load_template
from parkway.runner.codemode.runtime import CodeMode
from parkway.runner.engine.runner import Runner
from parkway.runner.events import CallParked, Event
from parkway.runner.llm.model import ModelEvent, ModelRequest, ModelTextDelta, ModelToolCall
from parkway.runner.ops.heap import settle_heap
from parkway.runner.parking import ParkedCall
from parkway.runner.store.client import connect
from parkway.runner.store.keys import chat_keys
from parkway.transport.aisdk.encoder import encode_event
from parkway.transport.aisdk.streaming import Describer
from parkway.transport.sse import DONE, SseDecoder
from parkway.widgets_api.descriptors import describe_call

__all__ = ["FanoutResult", "main", "run_fanout"]

_PRINCIPAL = "bench-principal"
_PREFIX = "bench-fan"
_PIECES = 24
_PACE_S = 0.002
_PICK = {"type": "client", "name": "pick", "input_schema": {"type": "object"}}
_CODE_OP = {"type": "platform", "op": "execute_code"}
_TEMPLATE = {"instructions": "bench", "tools": [_PICK, _CODE_OP]}


def _program(lines: int = 60) -> str:
    """A plausible analysis program of ``lines`` lines (what a model asks to run)."""
    body = [
        "import statistics",
        "",
        "rows = args['rows']",
        "totals: dict[str, float] = {}",
    ]
    n = 0
    while len(body) < lines - 2:
        body += [
            f"def metric_{n}(values, scale={n + 1}):",
            f'    """Metric {n}: the scaled mean of the values over {n}."""',
            f"    kept = [v * scale for v in values if v > {n} and v % 3 != 1]",
            "    return statistics.fmean(kept) if kept else 0.0  # empty: zero",
            f"totals['m{n}'] = metric_{n}([r['amount'] for r in rows])",
        ]
        n += 1
    body = body[: lines - 2]
    body += ["print(f'{len(totals)} metrics')", "result(totals)"]
    return "\n".join(body) + "\n"


PROGRAM = _program()
_CODE_INPUT = {"code": PROGRAM, "args": {"rows": [{"amount": 4}, {"amount": 9}]}}


class _PacedModel:
    """Streams its answer in pieces ``_PACE_S`` apart, then calls ``tool`` (or, with
    ``pieces`` 1, says one sentence at once before the call)."""

    def __init__(self, tool: str, tool_input: Any, pieces: int) -> None:
        self.tool, self.tool_input, self.pieces = tool, tool_input, pieces

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        del request
        for i in range(self.pieces):
            yield ModelTextDelta(f"word{i} ")
            if self.pieces > 1:
                await asyncio.sleep(_PACE_S)
        yield ModelToolCall(self.tool, self.tool_input)


@dataclass
class FanoutResult:
    followers: list[int]
    # per number of followers: CPU and wall seconds per round
    plain_cpu: dict[int, Latency] = field(default_factory=dict)
    plain_wall: dict[int, Latency] = field(default_factory=dict)
    code_cpu: dict[int, Latency] = field(default_factory=dict)
    code_wall: dict[int, Latency] = field(default_factory=dict)
    batches: int = 0  # log entries of one followed run (plain)
    describe: Latency = field(default_factory=Latency)
    get_call: Latency = field(default_factory=Latency)
    get_chat: Latency = field(default_factory=Latency)
    code_lines: int = 0


async def _follow(runner: Runner, chat: str, start: str, describer: Describer | None) -> int:
    """Follow the run to its end; with ``describer``, encode each event as a response
    does (the chunk, then its JSON)."""
    count = 0

    def describe(call: ParkedCall) -> dict[str, Any]:
        assert describer is not None
        return describer(chat, call)

    async for event in runner.follow(chat, start):  # (it ends at the run's end)
        count += 1
        if describer is not None:
            json.dumps(encode_event(event, describe).to_dict(), separators=(",", ":"))
    return count


async def _round(
    runner: Runner, chat: str, followers: int, describer: Describer | None
) -> tuple[float, float, list[Event]]:
    cpu, wall = time.process_time(), time.perf_counter()
    run = await runner.start_turn(chat, _PRINCIPAL, "hi")
    start = await run.log_start
    await asyncio.gather(*(_follow(runner, chat, start, describer) for _ in range(followers)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    events = await run.collect()
    if run.task is not None:
        await run.task
    return cpu, wall, events


async def _rounds(
    redis: Redis,
    *,
    model: _PacedModel,
    followers: int,
    rounds: int,
    describer: Describer | None,
    tag: str,
) -> tuple[Latency, Latency, int]:
    runner = Runner(redis, model, load_template(_TEMPLATE), config=BENCH_CONFIG)
    cpu, wall = Latency(), Latency()
    batches = 0
    try:
        for i in range(rounds + 2):  # two warm-up rounds
            chat = f"{_PREFIX}-{tag}-{followers}-{i}"
            spent, elapsed, _ = await _round(runner, chat, followers, describer)
            if i >= 2:
                cpu.add(spent)
                wall.add(elapsed)
            batches = int(await redis.xlen(chat_keys(chat).events))
            await drop_chats(redis, chat)
    finally:
        await runner.aclose()
    return cpu, wall, batches


async def _describer() -> tuple[Describer, CodeMode]:
    """The serving app's describer (transport/app.py), with code mode as configured by
    default there but without a sandbox probe (its status is what each widget shows)."""
    code = CodeMode(None)
    await code.start()

    def describe(chat_id: str, call: ParkedCall) -> dict[str, Any]:
        return describe_call(chat_id, call, {}, None, code=code, prefix="")

    return describe, code


async def _parked_code_call(redis: Redis) -> ParkedCall:
    runner = Runner(
        redis,
        _PacedModel("execute_code", _CODE_INPUT, 1),
        load_template(_TEMPLATE),
        config=BENCH_CONFIG,
    )
    try:
        run = await runner.start_turn(f"{_PREFIX}-describe", _PRINCIPAL, "go")
        events = await run.collect()
        if run.task is not None:
            await run.task
    finally:
        await runner.aclose()
    await drop_chats(redis, f"{_PREFIX}-describe")
    [call] = [e.call for e in events if isinstance(e, CallParked)]
    return call


def _describe_samples(describer: Describer, call: ParkedCall, samples: int) -> Latency:
    latency = Latency()
    for i in range(samples + 10):
        start = time.perf_counter()
        describer(f"{_PREFIX}-describe", call)
        if i >= 10:
            latency.add(time.perf_counter() - start)
    return latency


async def _http(url: str, result: FanoutResult, samples: int) -> None:
    """GET the parked code review's call and chat on the real app (bench/serve.py)."""
    agent = {
        "template": _TEMPLATE,
        "model": {
            "scripted": {
                "turns": [[{"text": "Let me run it."}, {"tool_call": {
                    "name": "execute_code", "input": _CODE_INPUT}}]]
            }
        },
    }  # fmt: skip
    chat = f"{_PREFIX}-http-{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="parkway-bench-") as folder:
        server = _Server(url, agent, Path(folder))
        server.spawn()
        try:
            await server.wait_until_healthy()
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
                session = (await client.post("/api/sessions")).json()
                client.headers["authorization"] = f"Bearer {session['token']}"
                message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
                body = {"id": chat, "messages": [message], "trigger": "submit-message"}
                call_id = ""
                async with client.stream("POST", "/api/chat", json=body) as response:
                    decoder = SseDecoder()
                    async for piece in response.aiter_bytes():
                        for payload in decoder.feed(piece):
                            if payload != DONE:
                                chunk = json.loads(payload)
                                if chunk["type"] == "tool-input-available":
                                    call_id = chunk["toolCallId"]
                if not call_id:
                    raise RuntimeError("the code review did not park")
                for path, latency in (
                    (f"/api/chats/{chat}/calls/{call_id}", result.get_call),
                    (f"/api/chats/{chat}", result.get_chat),
                ):
                    for i in range(samples + 10):
                        start = time.perf_counter()
                        got = await client.get(path)
                        elapsed = time.perf_counter() - start
                        if got.status_code != 200:
                            raise RuntimeError(f"GET {path}: {got.status_code} {got.text[:300]}")
                        if i >= 10:
                            latency.add(elapsed)
        finally:
            server.stop()


async def run_fanout(
    url: str, *, followers: Sequence[int], rounds: int, samples: int, http: bool, log: Any
) -> FanoutResult:
    """Run the measurements (see the module docstring); the chats are deleted after."""
    redis = connect(url)
    if not isinstance(redis, Redis):
        raise SystemExit("the benchmark needs one Redis server (not a Cluster)")
    result = FanoutResult(followers=list(followers))
    describer, code = await _describer()
    try:
        plain = _PacedModel("pick", {"q": "colour"}, _PIECES)
        reviewed = _PacedModel("execute_code", _CODE_INPUT, 1)
        for count in followers:
            log(f"fanout: {count} followers of one run, {rounds} rounds")
            cpu, wall, batches = await _rounds(
                redis, model=plain, followers=count, rounds=rounds, describer=None, tag="p"
            )
            result.plain_cpu[count], result.plain_wall[count] = cpu, wall
            result.batches = batches
            log(f"fanout: {count} followers of a run that parks a code review, {rounds} rounds")
            cpu, wall, _ = await _rounds(
                redis, model=reviewed, followers=count, rounds=rounds, describer=describer, tag="c"
            )
            result.code_cpu[count], result.code_wall[count] = cpu, wall
        log(f"fanout: describe the parked code review, {samples} samples")
        call = await _parked_code_call(redis)
        result.code_lines = PROGRAM.count("\n")
        result.describe = _describe_samples(describer, call, samples)
        if http:
            log(f"fanout: GET the parked code review over HTTP, {samples} samples each")
            await _http(url, result, samples)
    finally:
        await drop_chats(redis, _PREFIX)
        await code.close()
        await redis.aclose()
    return result


def _median_ms(latency: Latency) -> str:
    return fmt_ms(percentile(latency.samples, 50) * 1000)


def _followers(count: int) -> str:
    return f"{count} follower{'s' if count != 1 else ''}"


def tables(result: FanoutResult) -> str:
    """The results as Markdown."""
    rows = []
    for count in result.followers:
        rows.append(
            [
                f"one run ({_PIECES} pieces, {result.batches} log entries), "
                f"{_followers(count)} taking its events",
                _median_ms(result.plain_cpu[count]),
                _median_ms(result.plain_wall[count]),
                str(result.plain_cpu[count].n),
            ]
        )
    for count in result.followers:
        rows.append(
            [
                f"a run that parks a code review ({result.code_lines} lines), "
                f"{_followers(count)} encoding its chunks as responses do",
                _median_ms(result.code_cpu[count]),
                _median_ms(result.code_wall[count]),
                str(result.code_cpu[count].n),
            ]
        )
    out = [
        markdown_table(["per round (ms, median)", "CPU", "wall", "rounds"], rows),
        "",
    ]
    single = [
        [
            f"describe_call of the parked code review ({result.code_lines} lines)",
            fmt_ms(result.describe.p50_ms),
            fmt_ms(result.describe.p99_ms),
            str(result.describe.n),
        ]
    ]
    if result.get_call.n:
        single += [
            [
                "GET /api/chats/{id}/calls/{call} of it (HTTP)",
                fmt_ms(result.get_call.p50_ms),
                fmt_ms(result.get_call.p99_ms),
                str(result.get_call.n),
            ],
            [
                "GET /api/chats/{id} of its chat (HTTP)",
                fmt_ms(result.get_chat.p50_ms),
                fmt_ms(result.get_chat.p99_ms),
                str(result.get_chat.n),
            ],
        ]
    out.append(markdown_table(["one parked call, again and again (ms)", "p50", "p99", "n"], single))
    return "\n".join(out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__)
    parser.add_argument("--redis-url", help="use this Redis instead of a private one")
    parser.add_argument(
        "--followers", default="1,50", help="followers of one run, comma-separated (1,50)"
    )
    parser.add_argument("--rounds", type=int, default=30, help="rounds per case (30)")
    parser.add_argument("--samples", type=int, default=300, help="describe and GET samples (300)")
    parser.add_argument("--skip-http", action="store_true", help="no GET over HTTP")
    return parser


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        followers = [int(part) for part in args.followers.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"--followers: {args.followers!r} is not a list of numbers") from None
    settle_heap()  # as `parkway serve` does once it listens

    def measure(url: str) -> FanoutResult:
        return asyncio.run(
            run_fanout(
                url,
                followers=followers,
                rounds=args.rounds,
                samples=args.samples,
                http=not args.skip_http,
                log=_log,
            )
        )

    if args.redis_url:
        result = measure(args.redis_url)
    else:
        with LoopbackRedis() as server:
            result = measure(server.url)
    print(tables(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
