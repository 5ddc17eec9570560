"""Event log benchmark: what following a run through the chat's Redis Stream costs.

- **per turn, direct vs log**: the same turn (a model step of 24 text deltas that parks a
  client call, a new chat each time) timed from ``Runner.start_turn`` until the caller
  holds ``MessageFinished``, read either straight from the run (``Run.events``, in
  process) or through the log (``Runner.follow`` from the run's first entry, which is
  what every HTTP response does). Samples alternate between the two. The run writes the
  log in both cases; the difference is the cost of reading through Redis.
- **events per second**: ``concurrency`` such turns started at once on one worker, all
  followed through the log at once; the events the runs emitted (each of which went
  through the log: the followers receive them, adjacent text deltas joined into one)
  divided by the wall time from the first start until the last follower has its run's
  end. The followers' own count (after joining) is reported beside it.
- **reconnect replay**: ``GET /api/chat/{id}/stream`` for a parked chat, without HTTP:
  reading the chat and rebuilding its message (``Runner.chat``, ``chat_messages``,
  ``replay_message``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bench.stats import Latency
from bench.workload import BENCH_CONFIG
from parkway.runner.agent.template import load_template
from parkway.runner.engine.runner import Run, Runner
from parkway.runner.events import TERMINAL_KINDS
from parkway.runner.llm.scripted import ScriptedModel
from parkway.runner.store.client import connect
from parkway.runner.store.keys import DEADLINES, chat_keys, deadline_member
from parkway.transport.aisdk.rebuild import replay_message
from parkway.transport.aisdk.uimessages import chat_messages

__all__ = ["EventLogResult", "run_eventlog"]

_PRINCIPAL = "bench-principal"
_TEMPLATE = {
    "instructions": "bench",
    "tools": [{"type": "client", "name": "pick", "input_schema": {"type": "object"}}],
}
_WORDS = " ".join(f"word{i}" for i in range(24))
_TURN = [{"text": _WORDS}, {"tool_call": {"name": "pick", "input": {"q": "x"}}}]


@dataclass
class EventLogResult:
    direct: Latency = field(default_factory=Latency)
    via_log: Latency = field(default_factory=Latency)
    replay: Latency = field(default_factory=Latency)
    events_per_s: float = 0.0  # emitted by the runs
    followed_per_s: float = 0.0  # as the followers count them (text deltas joined)
    events_per_turn: int = 0
    concurrency: int = 0


async def _drop(redis: Redis, runner: Runner, chat: str) -> None:
    record = await runner.store.load(chat_keys(chat))
    if record is not None:
        members = [deadline_member(chat, c.tool_call_id) for c in record.calls]
        if members:
            await redis.zrem(DEADLINES, *members)
    await redis.delete(*chat_keys(chat).all())


async def _until_end(events: Any) -> int:
    count = 0
    async for event in events:
        count += 1
        if event.kind in TERMINAL_KINDS:
            break
    return count


async def _turn(runner: Runner, chat: str, *, through_log: bool) -> tuple[float, int]:
    started = time.perf_counter()
    run = await runner.start_turn(chat, _PRINCIPAL, "hi")
    if through_log:
        first = await run.log_start
        count = await _until_end(runner.follow(chat, first))
    else:
        count = await _until_end(run.events())
    elapsed = time.perf_counter() - started
    if run.task is not None:
        await run.task
    return elapsed, count


async def run_eventlog(
    url: str, *, samples: int, warmup: int, concurrency: int, log: Any
) -> EventLogResult:
    """Run the event log measurements (chats are deleted afterwards), on a client built
    as the server builds it (a blocking pool: ``concurrency`` turns at once wait for a
    connection rather than fail)."""
    redis = connect(url)
    try:
        return await _run_eventlog(
            redis, samples=samples, warmup=warmup, concurrency=concurrency, log=log
        )
    finally:
        await redis.aclose()


async def _run_eventlog(
    redis: Any, *, samples: int, warmup: int, concurrency: int, log: Any
) -> EventLogResult:
    template = load_template(_TEMPLATE)
    runner = Runner(redis, ScriptedModel([_TURN]), template, config=BENCH_CONFIG)
    result = EventLogResult(concurrency=concurrency)
    log(f"event log: per turn, direct vs through the log, {samples} samples")
    for i in range(warmup + samples):
        chat = f"bench-log-{i}"
        through_log = i % 2 == 1
        elapsed, count = await _turn(runner, chat, through_log=through_log)
        if not through_log:
            result.events_per_turn = count  # as emitted (a follower gets them joined)
        if i >= warmup:
            (result.via_log if through_log else result.direct).add(elapsed)
        await _drop(redis, runner, chat)

    log(f"event log: {concurrency} turns at once, followed through the log")
    rounds = 5
    total_events = total_followed = 0
    total_time = 0.0

    async def followed(chat: str) -> tuple[Run, int]:
        run = await runner.start_turn(chat, _PRINCIPAL, "hi")
        return run, await _until_end(runner.follow(chat, await run.log_start))

    for r in range(rounds):
        chats = [f"bench-burst-{r}-{i}" for i in range(concurrency)]
        started = time.perf_counter()
        done = await asyncio.gather(*(followed(chat) for chat in chats))
        total_time += time.perf_counter() - started
        for run, count in done:
            total_followed += count
            total_events += len(await run.collect())
            if run.task is not None:
                await run.task
        for chat in chats:
            await _drop(redis, runner, chat)
    result.events_per_s = total_events / total_time if total_time else 0.0
    result.followed_per_s = total_followed / total_time if total_time else 0.0

    log(f"event log: reconnect replay of a parked chat, {samples} samples")
    chat = "bench-replay"
    await _turn(runner, chat, through_log=False)
    for i in range(warmup + samples):
        started = time.perf_counter()
        record = await runner.chat(chat, _PRINCIPAL)
        messages = chat_messages(record, lambda c: {"tool": c.tool_name})
        message = next(m for m in messages if m["id"] == record.meta["message_id"])
        chunks = replay_message(message, "tool-calls")
        elapsed = time.perf_counter() - started
        if i >= warmup:
            result.replay.add(elapsed)
        assert chunks[0]["type"] == "start"
    await _drop(redis, runner, chat)
    return result
