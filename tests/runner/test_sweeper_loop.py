"""The sweep loop and what a sweep costs: a burst worked off at once, Redis errors and
failing listeners survived, a cancel obeyed, a sweep's round trips independent of what
is parked, and thousands of expiries swept by three processes each settled once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys

import pytest
from redis.asyncio import Redis

from parkway.runner import Sweeper, SweepReport
from parkway.runner.engine.sweeper import TIMEOUT_OUTCOME
from parkway.runner.store import scripts
from parkway.runner.store.keys import DEADLINES, chat_keys
from tests.helpers.runner_rig import RoundTrips
from tests.helpers.support import (
    ROOT,
    call,
    text,
)
from tests.helpers.sweeper_rig import (
    QUICK_TOOL,
    TIMEOUT,
    Clock,
    make_runner,
    park,
    park_many,
)

# -- the loop -------------------------------------------------------------------------------


async def test_run_works_off_a_burst_at_once_and_reports_what_is_left_pending(
    redis: Redis,
) -> None:
    """While batches come back full the sweeper goes straight on (the interval here is
    an hour), and the listener learns how many calls of the chat still wait."""
    clock = Clock()
    ten = [[call("confirm", {"n": n}) for n in range(10)]]
    runner = make_runner(redis, ten, clock)
    await park_many(runner, ["b1", "b2"])
    clock.now += 15 * 60
    heard: list[tuple[str, str, int]] = []
    done = asyncio.Event()

    async def listen(chat_id: str, tool_call_id: str, pending_left: int) -> None:
        heard.append((chat_id, tool_call_id, pending_left))
        if len(heard) == 20:
            done.set()

    task = asyncio.create_task(Sweeper(runner, batch=7, on_timeout=listen).run(interval_s=3600))
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        task.cancel()
        await asyncio.wait([task])
    for chat_id in ("b1", "b2"):
        assert sorted(p for c, _, p in heard if c == chat_id) == list(range(10))
    assert await redis.zcard(DEADLINES) == 0


async def test_run_survives_redis_errors_and_failing_listeners(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A sweeper must outlive a Redis outage and a broken listener: it logs, backs off,
    and times the calls out once Redis answers again."""
    clock = Clock()
    runner = make_runner(redis, [[call("pick", {"q": "a"}), call("confirm", {})]], clock)
    first, second = await park(runner, "err")
    clock.now += 15 * 60
    heard: list[str] = []
    done = asyncio.Event()

    async def listen(chat_id: str, tool_call_id: str, pending_left: int) -> None:
        heard.append(tool_call_id)
        if len(heard) == 2:
            done.set()
        if tool_call_id == first.tool_call_id:
            raise RuntimeError("listener bug")

    sweeper = Sweeper(runner, on_timeout=listen)
    real = sweeper.store.deadlines.expired
    failures = [ConnectionError("Redis is restarting")] * 2

    async def flaky(now_ms: int, limit: int) -> tuple[list[tuple[str, int]], int]:
        if failures:
            raise failures.pop()
        return await real(now_ms, limit)

    sweeper.store.deadlines.expired = flaky  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="parkway.runner.engine.sweeper")
    task = asyncio.create_task(sweeper.run(interval_s=0.005))
    try:
        await asyncio.wait_for(done.wait(), 10)
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.wait([task])
    assert sorted(heard) == sorted([first.tool_call_id, second.tool_call_id])
    assert "deadline sweep failed (1 in a row)" in caplog.text
    assert "deadline sweep failed (2 in a row)" in caplog.text
    assert "on_timeout failed" in caplog.text
    record = await runner.chat("err", "alice")
    assert [c.outcome for c in record.calls] == [TIMEOUT, TIMEOUT]


async def test_run_stops_on_cancel_even_when_a_redis_call_swallowed_it(redis: Redis) -> None:
    """Shutdown must not hang: on Python 3.11 a cancel that lands as a Redis reply
    arrives can be dropped inside the client, and the loop must still end."""
    clock = Clock()
    sweeper = Sweeper(make_runner(redis, [[text("unused")]], clock))
    entered = asyncio.Event()

    async def swallowing(now_ms: int, limit: int) -> tuple[list[tuple[str, int]], int]:
        entered.set()
        # Dropping the cancel is what asyncio.wait_for does when its inner call has
        # just finished.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        return [], 0

    sweeper.store.deadlines.expired = swallowing  # type: ignore[method-assign]
    task = asyncio.create_task(sweeper.run(interval_s=3600))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=10)
    assert done and task.cancelled()


# -- cost ---------------------------------------------------------------------------------


async def test_a_sweep_costs_what_expired_not_what_is_parked(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 2,000 calls parked and none expired a sweep is one round trip; with 50
    expired it is two and settles exactly those: the cost follows the expired calls."""
    clock = Clock()
    ten = [[call("confirm", {"n": n}) for n in range(10)]]
    await park_many(make_runner(redis, ten, clock), [f"idle{i}" for i in range(200)])
    quick = make_runner(redis, [[call("quick", {"n": n}) for n in range(10)]], clock, [QUICK_TOOL])
    await park_many(quick, [f"soon{i}" for i in range(5)])
    assert await redis.zcard(DEADLINES) == 2_050
    sweeper = Sweeper(quick)
    await redis.script_load(scripts.SETTLE)  # counted: no NOSCRIPT retry on first use
    trips = RoundTrips(monkeypatch)
    clock.now += 29
    assert await sweeper.sweep_once() == SweepReport()
    assert trips.count == 1
    clock.now += 1
    before = trips.count
    assert await sweeper.sweep_once() == SweepReport(expired=50, settled=50)
    assert trips.count - before == 2
    assert await redis.zcard(DEADLINES) == 2_000


@pytest.mark.slow
@pytest.mark.parametrize(
    "expiring",
    [2_000, pytest.param(10_000, marks=pytest.mark.load)],  # make load: the full size
)
async def test_thousands_of_expiries_swept_by_three_processes_are_each_settled_once(
    redis: Redis, redis_url: str, expiring: int
) -> None:
    """The claim is about workers, so it is tested with real processes: thousands of
    calls (ten per chat) expire at once and three sweeper processes race over them, 200
    a batch; every call ends with exactly the timeout, the processes' own settles add up
    to exactly the number expired with no call claimed twice, and the index is empty.
    ``make test`` sweeps 2,000 (ten batches raced for), ``make load`` 10,000."""
    clock = Clock()
    ten = [[call("confirm", {"n": n}) for n in range(10)]]
    runner = make_runner(redis, ten, clock)
    chats = [f"many{i}" for i in range(expiring // 10)]
    await park_many(runner, chats)
    members = {m.decode() for m in await redis.zrange(DEADLINES, 0, -1)}
    assert len(members) == expiring
    # Each process: its own Redis client, Runner and Sweeper, a clock far in the future.
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.sweep_worker", redis_url, "4000000000", "200"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            text=True,
        )
        for _ in range(3)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            ready = await asyncio.to_thread(worker.stdout.readline)
            assert ready.strip() == "ready", worker.stderr.read() if worker.stderr else ""
        for worker in workers:  # all at once: the sweeps race
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [await asyncio.to_thread(w.communicate, timeout=90) for w in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    reports = []
    for worker, (out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["settled"] for r in reports) == expiring
    claimed = [m for r in reports for m in r["mine"]]
    assert len(claimed) == expiring and set(claimed) == members
    assert sum(r["missing"] for r in reports) == 0
    assert await redis.zcard(DEADLINES) == 0
    pipe = redis.pipeline(transaction=False)
    for chat_id in chats:
        pipe.hgetall(chat_keys(chat_id).outcomes)
        pipe.exists(chat_keys(chat_id).pending)
    replies = await pipe.execute()
    for outcomes, pending in zip(replies[::2], replies[1::2], strict=True):
        assert len(outcomes) == 10 and pending == 0
        assert {v.decode() for v in outcomes.values()} == {TIMEOUT_OUTCOME}
