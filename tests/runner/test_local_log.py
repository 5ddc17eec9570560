"""A worker's followers of its own runs take the runs' log entries from memory
(runner/eventlog/local.py), with exactly what a follower on another worker reads from Redis."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Runner, ScriptedModel, chat_keys, parse_agent_file
from parkway.runner.eventlog.local import LocalLog, id_before
from parkway.runner.events import (
    CallParked,
    Event,
    MessageStarted,
    TextDelta,
    ToolSucceeded,
    events_from_json,
    events_to_json,
)
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
    assert followed_here == followed_later == followed_there
    assert _same_but_joined(followed_here, direct)
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
    assert followed == await _collect(there.follow("lb", start))
    assert _same_but_joined(followed, direct)
    assert reads.count >= 1
    await here.aclose()
    await there.aclose()


async def test_a_follower_here_takes_the_run_s_own_events_instead_of_decoding_them(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker that ran the run already holds the events it logged: its followers
    take those very objects for each batch of nothing but strings (the streamed text,
    the starts and ends), with no JSON decoded, and decode only the batches carrying a
    value the run's code may still change (a tool's input, the parked call, the
    message's metadata), once for all of them, as before."""
    decoded: list[str] = []

    def counted(text: str | bytes) -> list[Event]:
        decoded.append(str(text))
        return events_from_json(text)

    # (the module that defines LocalLog decodes what it keeps)
    monkeypatch.setattr(sys.modules[LocalLog.__module__], "events_from_json", counted)
    here, there = _runner(redis), _runner(redis)
    handed: set[int] = set()  # the events the run's writer handed over with its appends
    keep = here.logwatch.local.appended

    def appended(*args: Any, events: Sequence[Event] | None = None, **kwargs: Any) -> None:
        handed.update(id(event) for event in events or ())
        keep(*args, events=events, **kwargs)

    monkeypatch.setattr(here.logwatch.local, "appended", appended)
    run = await here.start_turn("lo", "alice", "hi")
    start = await run.log_start
    live = [asyncio.create_task(_collect(here.follow("lo", start))) for _ in range(3)]
    assert run.task is not None
    await run.task
    followed = [await task for task in live]
    read_there = await _collect(there.follow("lo", start))
    assert all(events == read_there for events in followed)
    for events in followed:
        deltas = [event for event in events if isinstance(event, TextDelta)]
        assert deltas and all(id(event) in handed for event in deltas)
        parked = [event for event in events if isinstance(event, CallParked)]
        assert parked and not any(id(event) in handed for event in parked)
    entries = await here.store.read_events(chat_keys("lo"), "0-0", block_ms=None)
    carrying = [
        text
        for _, text in entries
        if not all(
            type(v) is str or v is None for e in events_from_json(text) for v in vars(e).values()
        )
    ]
    assert 0 < len(carrying) < len(entries)  # the others were not decoded at all
    assert sorted(decoded) == sorted(carrying)  # these once, for all three followers
    await here.aclose()
    await there.aclose()


def _same_but_joined(logged: list[Event], direct: list[Event]) -> bool:
    """The run's own events as its log holds them: a busy writer joins adjacent text
    deltas into one batch (so one delta), everything else is equal and in order."""

    def others(events: list[Event]) -> list[Event]:
        return [event for event in events if not isinstance(event, TextDelta)]

    def text(events: list[Event]) -> str:
        return "".join(event.delta for event in events if isinstance(event, TextDelta))

    return others(logged) == others(direct) and text(logged) == text(direct) != ""


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


def test_a_batch_holding_a_value_its_run_may_change_is_kept_as_logged() -> None:
    """A tool's output is a dict the tool's code may still hold and change after it was
    logged: a follower here yields what the log holds, as one on another worker does,
    not the dict as it became. A batch of strings is handed over as it is, and the
    caller's own list is not the one kept."""
    output: dict[str, Any] = {"rows": [1, 2]}
    changing: list[Event] = [ToolSucceeded("c1", output)]
    words: list[Event] = [TextDelta("t", "a"), TextDelta("t", "b")]

    class Name(str):
        """A str subclass: the log reads it back as a plain str."""

    named: list[Event] = [TextDelta(Name("t"), "c")]
    kept = LocalLog()
    for entry_id, events in (("5-0", changing), ("5-1", words), ("5-2", named)):
        kept.appended("c", entry_id, events_to_json(events), start="5-0", events=events)
    output["rows"].append(3)
    words.clear()
    got = kept.after("c", "5-0", id_before("5-0"))
    assert got is not None
    [(_, first), (_, second), (_, third)] = got
    assert first == [ToolSucceeded("c1", {"rows": [1, 2]})]
    assert second == [TextDelta("t", "a"), TextDelta("t", "b")]
    assert type(third[0].text_id) is str and not isinstance(third[0].text_id, Name)


def test_the_memory_bound_counts_what_the_batches_weigh_as_logged() -> None:
    """Kept as objects or as JSON, a batch counts its JSON's size against the bound, so
    the budget evicts the same runs either way."""
    for with_events in (False, True):
        roomy = LocalLog(max_bytes=8192)
        for n in range(5):
            for entry_id, word in (("5-0", "y"), ("5-1", "z")):
                events: list[Event] = [TextDelta("t", word * 900)]
                roomy.appended(
                    f"f{n}",
                    entry_id,
                    events_to_json(events),
                    start="5-0",
                    events=events if with_events else None,
                )
        kept_runs = [n for n in range(5) if roomy.after(f"f{n}", "5-0", "5-0") is not None]
        assert kept_runs == [1, 2, 3, 4]
