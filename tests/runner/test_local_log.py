"""A worker's followers of its own runs take the runs' log entries from memory
(runner/eventlog/local.py), with exactly what a follower on another worker reads from Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis

from parkway.runner import Runner, ScriptedModel, chat_keys, parse_agent_file
from parkway.runner.eventlog.local import LocalLog, id_before
from parkway.runner.events import Event, MessageStarted, TextDelta, events_to_json
from parkway.runner.llm.model import ModelEvent, ModelRequest
from tests.helpers.support import agent_doc, call, text

# A streamed answer in several pieces, then a tool call that parks: the run logs a
# batch per piece (the model pauses between them) and its end with the park.
TURNS = [[text("One, two, three, four, five, six."), call("pick", {"q": "colour"})]]


class SlowModel:
    """The scripted model, pausing after each item it streams, so that each lands in a
    log batch of its own; after the first, it waits for ``gate``."""

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        self.inner = ScriptedModel(turns)
        self.gate = asyncio.Event()
        self.gate.set()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for item in self.inner.stream(request):
            yield item
            await self.gate.wait()
            await asyncio.sleep(0.01)


def _runner(redis: Redis, model: SlowModel | None = None) -> Runner:
    agent = parse_agent_file(agent_doc(TURNS))
    return Runner(redis, model or SlowModel(TURNS), agent.template)


class _Reads:
    """Counts a runner's reads of event logs from Redis."""

    def __init__(self, runner: Runner) -> None:
        self.count = 0
        read = runner.store.read_events

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await read(*args, **kwargs)

        runner.store.read_events = counted  # type: ignore[method-assign]


async def _log_entries(redis: Redis, chat: str) -> int:
    return int(await redis.xlen(chat_keys(chat).events))


async def test_a_follower_of_a_run_here_reads_no_log_and_sees_what_another_worker_reads(
    redis: Redis,
) -> None:
    """Followers on the run's worker (started at once, and after the run ended) read
    the log from memory, none from Redis, and yield the very events a follower on
    another worker reads from Redis."""
    here, there = _runner(redis), _runner(redis)
    reads_here, reads_there = _Reads(here), _Reads(there)
    run = await here.start_turn("lt", "alice", "hi")
    start = await run.log_start
    live = asyncio.create_task(_collect(here.follow("lt", start)))
    direct = await run.collect()
    assert run.task is not None
    await run.task
    followed_here = await live
    followed_later = await _collect(here.follow("lt", start))
    followed_there = await _collect(there.follow("lt", start))
    assert await _log_entries(redis, "lt") >= 4  # several batches, not one
    assert followed_here == followed_later == followed_there == direct
    assert reads_here.count == 0
    assert reads_there.count >= 1
    await here.aclose()
    await there.aclose()


async def test_a_follower_reads_redis_once_the_sequence_kept_here_breaks(redis: Redis) -> None:
    """When the worker can no longer vouch for its run's entries (an append whose
    outcome it does not know), its followers read the rest from Redis: nothing lost."""
    model = SlowModel(TURNS)
    model.gate.clear()  # the run waits after the model's first piece
    here, there = _runner(redis, model), _runner(redis)
    reads = _Reads(here)
    run = await here.start_turn("lb", "alice", "hi")
    start = await run.log_start
    followed: list[Event] = []
    async for event in here.follow("lb", start):
        followed.append(event)
        if isinstance(event, TextDelta) and not model.gate.is_set():
            assert reads.count == 0
            here.logwatch.local.broken(chat_keys("lb").wake)
            model.gate.set()
    direct = await run.collect()
    assert followed == direct == await _collect(there.follow("lb", start))
    assert reads.count >= 1
    await here.aclose()
    await there.aclose()


async def _collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


# -- the sequence kept in memory ---------------------------------------------------------


def _batch(word: str) -> str:
    return events_to_json([TextDelta("t", word)])


def test_a_sequence_vouches_only_for_its_own_run_from_its_first_entry() -> None:
    kept = LocalLog()
    kept.appended("c", "5-0", events_to_json([MessageStarted("m")]), start="5-0")
    kept.appended("c", "5-1", _batch("a"), start="5-0")
    kept.appended("c", "5-1", _batch("a"), start="5-0")  # a replayed append
    kept.appended("c", "9-0", _batch("x"), start="8-0")  # another run's: not adjacent
    whole = kept.after("c", "5-0", id_before("5-0"))
    assert whole is not None
    assert [entry_id for entry_id, _ in whole] == ["5-0", "5-1"]
    assert whole[1][1] == [TextDelta("t", "a")]
    assert kept.after("c", "5-0", "5-1") == []  # the latest: nothing newer here
    assert kept.after("c", "5-0", "4-0") is None  # before the run: Redis decides
    assert kept.after("c", "8-0", id_before("8-0")) is None  # not a run of this worker
    assert kept.after("other", "5-0", id_before("5-0")) is None
    assert kept.knows("c", "5-1") and not kept.knows("c", "9-0")
    assert kept.logging("c")  # the run goes on: a wake-up for the chat is likely its own
    kept.appended("c", "5-2", _batch("end"), start="5-0", last=True)
    assert not kept.logging("c") and kept.after("c", "5-0", "5-1") is not None
    kept.broken("c")
    assert kept.after("c", "5-0", "5-1") is None
    kept.appended("c", "5-3", _batch("b"), start="5-0")  # after a break: never again
    assert kept.after("c", "5-0", "5-1") is None and not kept.logging("c")
    kept.appended("d", "6-0", _batch("d"), start="6-0")
    kept.run_over("d", "6-0")  # a run that ended without logging its end
    assert not kept.logging("d")


def test_a_new_run_replaces_the_chat_s_sequence_and_memory_stays_bounded() -> None:
    kept = LocalLog(max_bytes=4096, max_chats=3)
    kept.appended("c", "1-0", _batch("a"), start="1-0")
    kept.appended("c", "2-0", _batch("b"), start="2-0")  # the chat's next run
    assert kept.after("c", "1-0", id_before("1-0")) is None
    assert kept.after("c", "2-0", id_before("2-0")) is not None
    for n in range(3):
        kept.appended(f"d{n}", "3-0", _batch("c"), start="3-0")
    assert kept.after("c", "2-0", id_before("2-0")) is None  # the oldest chat went
    kept.appended("e", "4-0", _batch("x" * 1500), start="4-0")  # over a quarter of it
    assert kept.after("e", "4-0", id_before("4-0")) is None
    assert kept.after("d2", "3-0", id_before("3-0")) is not None
    roomy = LocalLog(max_bytes=8192)
    for n in range(5):  # runs of about 2 KB each: past the budget, the oldest go
        roomy.appended(f"f{n}", "5-0", _batch("y" * 900), start="5-0")
        roomy.appended(f"f{n}", "5-1", _batch("z" * 900), start="5-0")
    kept_runs = [n for n in range(5) if roomy.after(f"f{n}", "5-0", "5-0") is not None]
    assert kept_runs == [1, 2, 3, 4]
