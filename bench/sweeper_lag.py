"""Sweeper benchmark: how soon after its deadline a parked call is settled ``timeout``.

Setup: ``parked`` client calls (100,000 by default) are parked by real turns of a
:class:`parkway.runner.engine.runner.Runner` with the demo agent's template: chats of
:data:`CALLS_PER_CHAT` ``choose_option`` calls each, one turn per chat, so every call
has its record, its pending entry and its member in the deadline index, with the
default deadline (15 minutes away). Then, with all of them parked:

- **idle sweep**: ``Sweeper.sweep_once`` when nothing has expired, timed ``samples``
  times (wall clock and Redis round trips). This is what every worker pays every
  ``sweep_interval_s``.
- **lag, spread deadlines**: the deadline-index entries of ``spread`` calls are moved
  (``ZADD XX``) to known instants spread evenly over :data:`SPREAD_WINDOW_S` seconds,
  and a ``Sweeper.run`` with the default interval (0.25 s) and the real clock is
  started. A call's lag is the wall-clock time at which the sweeper's ``on_timeout``
  reports it (so after its settle's round trip) minus its deadline.
- **lag, burst**: then ``burst`` calls are given the same deadline, to the
  millisecond, and the same running sweeper works them off in batches of 500.

Only the index entries are moved, not the records' ``deadline`` fields: the sweeper
reads only the index. The sweeper runs in the benchmark's own event loop, which does
nothing else meanwhile; in a worker it shares the loop with requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bench.roundtrips import ROUND_TRIPS
from bench.stats import Counts, Latency
from bench.workload import PARK_TOOL
from parkway.runner.agent.template import load_template
from parkway.runner.demo import DEMO_AGENT
from parkway.runner.engine.runner import Runner
from parkway.runner.engine.sweeper import Sweeper
from parkway.runner.events import CallParked, MessageFinished
from parkway.runner.llm.scripted import ScriptedModel
from parkway.runner.store.keys import DEADLINES, chat_keys, deadline_member

__all__ = ["CALLS_PER_CHAT", "SPREAD_WINDOW_S", "SweeperResult", "run_sweeper"]

CALLS_PER_CHAT = 50
SPREAD_WINDOW_S = 5.0
# How far ahead of "now" the first moved deadline lies: time to start the sweeper.
_LEAD_S = 0.5
_PRINCIPAL = "bench-principal"


@dataclass
class SweeperResult:
    """Everything measured about the sweeper."""

    parked: int
    interval_s: float
    batch: int
    spread: int
    burst: int
    seed_s: float = 0.0
    idle: Latency = field(default_factory=Latency)
    idle_round_trips: Counts = field(default_factory=Counts)
    spread_lag: Latency = field(default_factory=Latency)
    burst_lag: Latency = field(default_factory=Latency)
    missed: int = 0

    @property
    def worst_lag_ms(self) -> float:
        lags = self.spread_lag.samples + self.burst_lag.samples
        return max(lags) * 1000 if lags else float("nan")


def _script() -> list[list[dict[str, Any]]]:
    calls = [
        {
            "tool_call": {
                "name": PARK_TOOL,
                "input": {"question": f"Which city, option set {n}?", "options": ["Oslo", "Rome"]},
            }
        }
        for n in range(CALLS_PER_CHAT)
    ]
    return [calls]


async def _seed(runner: Runner, chats: list[str], concurrency: int = 16) -> list[str]:
    """Park ``CALLS_PER_CHAT`` calls in each chat; return their deadline members."""
    gate = asyncio.Semaphore(concurrency)
    members: list[str] = []

    async def one(chat_id: str) -> None:
        async with gate:
            run = await runner.start_turn(chat_id, _PRINCIPAL, "Ask me.")
            events = await run.collect()
        if not events or not isinstance(events[-1], MessageFinished):
            raise RuntimeError(f"seeding chat {chat_id} failed: {[e.kind for e in events]}")
        parked = [e.call.tool_call_id for e in events if isinstance(e, CallParked)]
        if len(parked) != CALLS_PER_CHAT:
            raise RuntimeError(f"chat {chat_id} parked {len(parked)} calls")
        members.extend(deadline_member(chat_id, call_id) for call_id in parked)

    await asyncio.gather(*(one(c) for c in chats))
    return members


async def _move(redis: Redis, deadlines: dict[str, int]) -> None:
    """Give existing index members new deadlines (epoch ms)."""
    items = list(deadlines.items())
    for start in range(0, len(items), 5_000):
        chunk = dict(items[start : start + 5_000])
        await redis.zadd(DEADLINES, chunk, xx=True)


class _Ear:
    """The sweeper's ``on_timeout``: notes when each call was reported, and wakes
    :meth:`wait` once every expected call has been."""

    def __init__(self) -> None:
        self.heard: dict[str, float] = {}
        self._waiting: set[str] = set()
        self._done = asyncio.Event()

    def expect(self, members: Iterable[str]) -> None:
        self._waiting = {m for m in members if m not in self.heard}
        self._done = asyncio.Event()
        if not self._waiting:
            self._done.set()

    async def wait(self, limit_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), limit_s)

    async def __call__(self, chat_id: str, tool_call_id: str, pending_left: int) -> None:
        member = deadline_member(chat_id, tool_call_id)
        self.heard[member] = time.time()
        self._waiting.discard(member)
        if not self._waiting:
            self._done.set()


async def _cleanup(redis: Redis, chats: list[str], members: list[str]) -> None:
    for start in range(0, len(chats), 1_000):
        pipe = redis.pipeline(transaction=False)
        for chat_id in chats[start : start + 1_000]:
            pipe.unlink(*chat_keys(chat_id).all())
        await pipe.execute()
    for start in range(0, len(members), 5_000):
        await redis.zrem(DEADLINES, *members[start : start + 5_000])


async def run_sweeper(
    redis: Redis,
    *,
    parked: int,
    spread: int,
    burst: int,
    samples: int,
    interval_s: float = 0.25,
    log: Callable[[str], None] = lambda _: None,
) -> SweeperResult:
    """Park ``parked`` calls, time idle sweeps, then measure the lag of a running
    sweeper for ``spread`` calls with spread deadlines and ``burst`` calls due at once."""
    if spread + burst > parked:
        raise ValueError("spread + burst must not exceed parked")
    template = load_template(copy.deepcopy(DEMO_AGENT["template"]))
    runner = Runner(redis, ScriptedModel(_script()), template)
    chats = [f"bench-sweep-{i}" for i in range(-(-parked // CALLS_PER_CHAT))]
    result = SweeperResult(
        parked=len(chats) * CALLS_PER_CHAT,
        interval_s=interval_s,
        batch=500,
        spread=spread,
        burst=burst,
    )
    members: list[str] = []
    try:
        log(f"sweeper: parking {result.parked:,} calls in {len(chats):,} chats")
        t0 = time.perf_counter()
        members = await _seed(runner, chats)
        result.seed_s = time.perf_counter() - t0

        log(f"sweeper: sweep_once with {result.parked:,} parked, none expired, {samples} samples")
        idle = Sweeper(runner, batch=result.batch)
        await idle.sweep_once()  # warm the connection
        for _ in range(samples):
            rt = ROUND_TRIPS.count
            start = time.perf_counter()
            report = await idle.sweep_once()
            result.idle.add(time.perf_counter() - start)
            result.idle_round_trips.add(ROUND_TRIPS.count - rt)
            if report.expired:
                raise RuntimeError("a call expired during the idle measurement")

        ear = _Ear()
        sweeper = Sweeper(runner, batch=result.batch, on_timeout=ear)
        task = asyncio.create_task(sweeper.run(interval_s))
        try:
            log(f"sweeper: lag of {spread:,} deadlines spread over {SPREAD_WINDOW_S:.0f} s")
            first = time.time() + _LEAD_S
            step = SPREAD_WINDOW_S / max(spread, 1)
            spread_at = {m: int((first + i * step) * 1000) for i, m in enumerate(members[:spread])}
            ear.expect(spread_at)
            await _move(redis, spread_at)
            await ear.wait(SPREAD_WINDOW_S + _LEAD_S + 10)
            _collect(result.spread_lag, ear.heard, spread_at, result)

            log(f"sweeper: lag of a burst of {burst:,} deadlines at the same instant")
            instant = int((time.time() + _LEAD_S) * 1000)
            burst_at = dict.fromkeys(members[spread : spread + burst], instant)
            ear.expect(burst_at)
            await _move(redis, burst_at)
            await ear.wait(_LEAD_S + 30)
            _collect(result.burst_lag, ear.heard, burst_at, result)
        finally:
            task.cancel()
            await asyncio.wait([task])
    finally:
        log("sweeper: deleting the benchmark's chats")
        await _cleanup(redis, chats, members)
    return result


def _collect(
    into: Latency, heard: dict[str, float], expected: dict[str, int], result: SweeperResult
) -> None:
    for member, deadline in expected.items():
        at = heard.get(member)
        if at is None:
            result.missed += 1
        else:
            into.add(at - deadline / 1000)
