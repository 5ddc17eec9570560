"""Concurrency: many parks and resumes at once on one runner, against the same Redis
client doing the floor's work at once.

Every chat is a copy of a seeded 2-message chat (:class:`bench.workload.SeedSnapshot`),
made before the clock starts; the runner is one :class:`parkway.runner.engine.runner.Runner` with
the workload's agent and scripted model, in the benchmark's event loop, on a client
built as the server builds it (:func:`parkway.runner.store.client.connect`: a
``BlockingConnectionPool`` of 32 connections). The floor's commands go through the
same client, so both sides share one connection budget, as in a worker.

Rates, per round (``width`` operations started at once with ``asyncio.gather``, wall
clock from the start until the last one is done; rate = ``width`` / wall):

- **SET/s**: ``width`` SETs of 4 KB (distinct keys ``bench:baseline:<i>``) on that
  client;
- **GETDEL/s**: ``width`` GETDELs of those keys, on the same client;
- **parks/s**: ``width`` turns that park (``Runner.start_turn`` until the caller holds
  ``MessageFinished("tool-calls")``), one per chat, a fresh 2-message chat each;
- **resumes/s**: once every parked call is settled (untimed), ``width``
  ``Runner.resume`` at once, each until the caller holds ``MessageFinished("stop")``
  (the whole resume: claim, the model's answer, the final commit).

Between the phases every run's task is awaited (its last event-log batch written),
untimed. The first round warms up (it opens the client's connections) and is not
counted; the reported rate is the median over the other rounds.

**Many runs at once**: ``runs`` turns that park started at once on one runner with a
fresh client of its own, built the same way, then every call settled at once, then
every chat resumed at once. Errors are exceptions raised to the caller, runs that ended
another way (``RunFailed``, a wrong finish reason) and runs not done within
:data:`RUN_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bench.workload import (
    BENCH_CONFIG,
    CHOICE,
    SeedSnapshot,
    Workload,
    drop_chats,
    measured_user_text,
    parked_call_id,
    seed_chat,
)
from parkway.runner.engine.runner import Run, Runner
from parkway.runner.events import Event, MessageFinished, RunFailed
from parkway.runner.store.client import RedisClient, connect

__all__ = ["ConcurrencyResult", "ManyRuns", "run_concurrency"]

PRINCIPAL = "bench-principal"
MESSAGES = 2
RUN_TIMEOUT_S = 60.0
_VALUE_4K = b"x" * 4096
_FLOOR_KEY = "bench:baseline"


@dataclass
class ManyRuns:
    """``runs`` runs parked, settled and resumed at once on a server-built client."""

    runs: int
    pool: int
    park_s: float = 0.0
    settle_s: float = 0.0
    resume_s: float = 0.0
    parked: int = 0
    finished: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def ok(self) -> bool:
        return self.error_count == 0 and self.finished == self.runs


@dataclass
class ConcurrencyResult:
    """Per-round rates (operations per second) of ``width`` operations at once."""

    width: int
    messages: int = MESSAGES
    set_rates: list[float] = field(default_factory=list)
    getdel_rates: list[float] = field(default_factory=list)
    park_rates: list[float] = field(default_factory=list)
    resume_rates: list[float] = field(default_factory=list)
    many: ManyRuns | None = None

    @staticmethod
    def median(rates: list[float]) -> float:
        return statistics.median(rates) if rates else float("nan")


@dataclass
class _Outcome:
    """One run as its caller saw it: when it finished, its events, or what went wrong."""

    done_at: float = 0.0
    events: list[Event] = field(default_factory=list)
    run: Run | None = None
    error: str = ""


async def _until_finished(start: Awaitable[Run], reason: str) -> _Outcome:
    """Start a run and read it until ``MessageFinished(reason)``."""
    outcome = _Outcome()
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            outcome.run = await start
            async for event in outcome.run.events():
                outcome.events.append(event)
                if isinstance(event, MessageFinished):
                    outcome.done_at = time.perf_counter()
                if isinstance(event, RunFailed):
                    outcome.error = f"RunFailed: {event.message[:80]}"
    except Exception as exc:  # every failure is counted, none stops the others
        outcome.error = f"{type(exc).__name__}: {str(exc)[:80]}"
        return outcome
    finished = [e.reason for e in outcome.events if isinstance(e, MessageFinished)]
    if not outcome.error and finished != [reason]:
        outcome.error = f"finished {finished}, expected [{reason!r}]"
    return outcome


async def _settled_tasks(outcomes: list[_Outcome]) -> None:
    """Wait (untimed) until every run's task has ended: its last log batch is written."""
    tasks = [o.run.task for o in outcomes if o.run is not None and o.run.task is not None]
    await asyncio.gather(*tasks, return_exceptions=True)


async def _timed_gather(
    make: Callable[[int], Awaitable[Any]], n: int
) -> tuple[float, list[Any], float]:
    """Start ``make(i)`` for every ``i`` at once; the start time, results, end time."""
    started = time.perf_counter()
    results = await asyncio.gather(*(make(i) for i in range(n)), return_exceptions=True)
    return started, results, time.perf_counter()


def _wall(started: float, outcomes: list[_Outcome], ended: float) -> float:
    """From the start until the last run was seen to finish (else until gather ended)."""
    done = [o.done_at for o in outcomes if o.done_at]
    return (max(done) if len(done) == len(outcomes) else ended) - started


async def _floor_round(redis: RedisClient, width: int) -> tuple[float, float]:
    """SET/s and GETDEL/s of ``width`` commands at once."""
    keys = [f"{_FLOOR_KEY}:{i}" for i in range(width)]
    t0, sets, t1 = await _timed_gather(lambda i: redis.set(keys[i], _VALUE_4K), width)
    t2, gets, t3 = await _timed_gather(lambda i: redis.getdel(keys[i]), width)
    if any(isinstance(x, BaseException) for x in (*sets, *gets)):
        raise RuntimeError("a concurrent SET or GETDEL of the floor failed")
    return width / (t1 - t0), width / (t3 - t2)


def _failed(outcomes: list[_Outcome]) -> list[str]:
    return [o.error for o in outcomes if o.error]


async def _park_settle_resume(
    runner: Runner, chats: list[str]
) -> tuple[float, float, float, list[_Outcome], list[_Outcome], list[str]]:
    """Park every chat at once, settle all at once, resume all at once; the wall time of
    each phase, the parks' and resumes' outcomes, and the settles' errors."""
    n = len(chats)
    t0, parks, t1 = await _timed_gather(
        lambda i: _until_finished(
            runner.start_turn(chats[i], PRINCIPAL, measured_user_text(i), user_message_id=f"c{i}"),
            "tool-calls",
        ),
        n,
    )
    park_s = _wall(t0, parks, t1)
    await _settled_tasks(parks)
    parked = [(chat, o) for chat, o in zip(chats, parks, strict=True) if not o.error]

    async def settle(i: int) -> None:
        chat, outcome = parked[i]
        await runner.settle(chat, PRINCIPAL, parked_call_id(outcome.events), CHOICE)

    t2, settles, t3 = await _timed_gather(settle, len(parked))
    settle_errors = [f"{type(e).__name__}: {str(e)[:80]}" for e in settles if e is not None]
    t4, resumes, t5 = await _timed_gather(
        lambda i: _until_finished(runner.resume(parked[i][0], PRINCIPAL), "stop"), len(parked)
    )
    resume_s = _wall(t4, resumes, t5)
    await _settled_tasks(resumes)
    return park_s, t3 - t2, resume_s, parks, resumes, settle_errors


async def _copies(helper: Redis, snapshot: SeedSnapshot, prefix: str, n: int) -> list[str]:
    chats = [f"{prefix}{i}" for i in range(n)]
    for chat in chats:
        await snapshot.clone(helper, chat)
    return chats


async def _rates(
    url: str,
    helper: Redis,
    *,
    snapshot: SeedSnapshot,
    workload: Workload,
    result: ConcurrencyResult,
    rounds: int,
) -> None:
    redis = connect(url)
    runner = Runner(redis, workload.model(), workload.template(), config=BENCH_CONFIG)
    try:
        for r in range(rounds + 1):
            prefix = f"bench-conc-{r}-"
            chats = await _copies(helper, snapshot, prefix, result.width)
            gc.collect()
            set_rate, getdel_rate = await _floor_round(redis, result.width)
            park_s, _, resume_s, parks, resumes, errors = await _park_settle_resume(runner, chats)
            errors += _failed(parks) + _failed(resumes)
            if errors:
                raise RuntimeError(f"{len(errors)} concurrent operations failed: {errors[:3]}")
            await drop_chats(helper, prefix)
            if r == 0:
                continue  # warm-up: the client opened its connections
            result.set_rates.append(set_rate)
            result.getdel_rates.append(getdel_rate)
            result.park_rates.append(len(chats) / park_s)
            result.resume_rates.append(len(chats) / resume_s)
    finally:
        await runner.aclose()
        await redis.aclose()


async def _many(
    url: str, helper: Redis, snapshot: SeedSnapshot, workload: Workload, n: int
) -> ManyRuns:
    client = connect(url)
    pool = int(getattr(getattr(client, "connection_pool", None), "max_connections", 0))
    runner = Runner(client, workload.model(), workload.template(), config=BENCH_CONFIG)
    many = ManyRuns(n, pool)
    prefix = "bench-many-"
    try:
        chats = await _copies(helper, snapshot, prefix, n)
        gc.collect()
        park_s, settle_s, resume_s, parks, resumes, errors = await _park_settle_resume(
            runner, chats
        )
        many.park_s, many.settle_s, many.resume_s = park_s, settle_s, resume_s
        many.parked = sum(1 for o in parks if not o.error)
        many.finished = sum(1 for o in resumes if not o.error)
        for error in errors + _failed(parks) + _failed(resumes):
            many.errors[error] += 1
    finally:
        await runner.aclose()
        await client.aclose()
        await drop_chats(helper, prefix)
    return many


async def run_concurrency(
    helper: Redis, url: str, *, width: int, rounds: int, many: int
) -> ConcurrencyResult:
    """The rate rounds, then ``many`` runs at once (chats are deleted afterwards)."""
    workload = Workload(MESSAGES)
    seed_id = "bench-conc-seed"
    await SeedSnapshot.drop(helper, seed_id)
    seeder = Runner(helper, workload.model(), workload.template(), config=BENCH_CONFIG)
    try:
        await seed_chat(seeder, seed_id, PRINCIPAL, MESSAGES)
    finally:
        await seeder.aclose()
    snapshot = await SeedSnapshot.take(helper, seed_id)
    await SeedSnapshot.drop(helper, seed_id)
    result = ConcurrencyResult(width)
    await _rates(url, helper, snapshot=snapshot, workload=workload, result=result, rounds=rounds)
    if many:
        result.many = await _many(url, helper, snapshot, workload, many)
    return result
