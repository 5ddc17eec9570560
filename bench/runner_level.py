"""Runner-level benchmark: park, settle and resume through
:class:`parkway.runner.engine.runner.Runner`.

Definitions (all wall-clock, ``time.perf_counter``, one operation at a time, the runner
and the benchmark in one asyncio event loop, Redis on loopback TCP):

- **turn that parks**: from calling ``Runner.start_turn`` until the caller receives
  ``MessageFinished("tool-calls")``. Claims the chat's lease, reads the history, builds
  the model request, streams the model's sentence and tool call, parks.
- **park**: the part of that turn after the model has spoken: from the moment the
  model's stream ends with the ``choose_option`` call until the caller receives
  ``MessageFinished("tool-calls")``. Validates the call's input, computes its
  parkedCallKey, builds and encodes the parked-call record, persists the step (one
  ``COMMIT`` script: history entry, call record, pending set, chat state, and the
  step's events in the event log) and emits the events. This is the work parking adds to a turn.
- **park commit**: just the ``ChatStore.commit`` call inside *park* (the Redis write).
- **settle**: ``Runner.settle`` of the parked call with ``{"choice": "Oslo"}`` (even
  samples, each followed by a resume).
- **answer + resume -> model request / -> finished** (odd samples): the path
  ``POST /api/chat`` takes when an AI SDK client sends a tool output,
  ``Runner.answer_and_resume`` with the same outcome (matches the pending call, settles
  it and claims the resume: one ``ANSWER`` script on the worker that parked the call),
  until the model is called, and until the caller receives ``MessageFinished("stop")``.
- **resume -> model request**: from calling ``Runner.resume`` until the model is called
  with the rebuilt request (lease claimed, history, template snapshot and outcomes
  loaded, tool result added, model messages built), on the worker that ran the chat's
  last operation, which keeps the chat's decoded history (:mod:`parkway.runner.store.histcache`)
  and decodes and converts only what is new. Every other resume (even samples) instead
  runs as on a worker that never saw the chat (its kept history dropped first): those
  are the breakdown row *resume -> model request, history not kept by this worker*, and
  are not in this row.
- **resume -> finished**: from calling ``Runner.resume`` until the caller receives
  ``MessageFinished("stop")``: the above, plus the scripted model streaming a 14-word
  answer, the final ``COMMIT`` and the events.

Round trips are counted by :mod:`bench.roundtrips` over the same regions. Per cycle
they are also counted over the two regions the issue sets targets for: **settle +
resume** (``Runner.settle``, then ``Runner.resume`` up to the model request) and
**answer + resume** (``Runner.answer_and_resume`` up to the model request).

The chat's stored bytes (:func:`bench.workload.stored_bytes`, every key of the chat) are
measured once per size after the first measured park, once its run has ended (its last
event-log batch written), and once after the first measured resume.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bench.roundtrips import ROUND_TRIPS
from bench.stats import Counts, Latency
from bench.workload import (
    BENCH_CONFIG,
    CHOICE,
    PARK_TOOL,
    SeedSnapshot,
    StoredBytes,
    Workload,
    finished_reason,
    measured_user_text,
    parked_call_id,
    seed_chat,
    stored_bytes,
)
from parkway.runner.agent.template import load_template_json
from parkway.runner.canonical import canonical_json
from parkway.runner.engine.runner import Answer, Runner
from parkway.runner.events import CallParked, Event, MessageFinished
from parkway.runner.llm.model import Model, ModelEvent, ModelRequest
from parkway.runner.store.chats import ChatStore
from parkway.runner.store.history import decode_entries, to_model_messages
from parkway.runner.store.keys import chat_keys

__all__ = ["ROUNDS", "SizeResult", "run_sizes"]

PRINCIPAL = "bench-principal"
# Connections opened before the first sample: one opened inside a measured region would
# add its handshake (CLIENT SETINFO) to that operation's round trips.
WARM_CONNECTIONS = 8
# The sizes take turns in this many rounds (run_sizes).
ROUNDS = 5
# The breakdown row of the resumes made as on a worker that never saw the chat.
COLD_RESUME = "resume -> model request, history not kept by this worker (every 2nd resume)"


# -- instruments ------------------------------------------------------------------------


@dataclass
class _Marks:
    """When (and after how many round trips) the model was called and finished."""

    request_at: float = 0.0
    request_rt: int = 0
    end_at: float = 0.0
    end_rt: int = 0

    def reset(self) -> None:
        self.request_at = self.end_at = 0.0
        self.request_rt = self.end_rt = 0


class _MarkingModel:
    """Wraps a model to stamp the start and the end of each model step."""

    def __init__(self, inner: Model, marks: _Marks) -> None:
        self.inner = inner
        self.marks = marks

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.marks.request_at = time.perf_counter()
        self.marks.request_rt = ROUND_TRIPS.count
        async for item in self.inner.stream(request):
            yield item
        self.marks.end_at = time.perf_counter()
        self.marks.end_rt = ROUND_TRIPS.count


class _StoreTimer:
    """Times the calls a runner makes on its :class:`ChatStore`.

    It wraps the named methods of the runner's own store instance (whatever their
    signatures), so the runner code runs unchanged; each call logs its duration and
    its Redis round trips.
    """

    METHODS = ("claim_turn", "claim_resume", "commit", "calls", "settle", "pending_count")

    def __init__(self, store: ChatStore) -> None:
        self.log: list[tuple[str, float, int]] = []
        for name in self.METHODS:
            original = getattr(store, name, None)
            if original is not None:
                setattr(store, name, self._wrap(name, original))

    def _wrap(self, name: str, original: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            rt = ROUND_TRIPS.count
            start = time.perf_counter()
            result = await original(*args, **kwargs)
            self.log.append((name, time.perf_counter() - start, ROUND_TRIPS.count - rt))
            return result

        return timed

    def took(self, name: str) -> float:
        """Total seconds of the logged calls named ``name``."""
        return sum(seconds for n, seconds, _ in self.log if n == name)

    def trips(self, name: str) -> int:
        """Total round trips of the logged calls named ``name``."""
        return sum(trips for n, _, trips in self.log if n == name)


# -- results ------------------------------------------------------------------------------

OPERATIONS = (
    "turn",
    "park",
    "commit",
    "settle",
    "answer_request",
    "answer_finish",
    "resume_request",
    "resume_finish",
)
# Round trips summed over a settle (or answer) and the resume that follows it, up to the
# model request.
TRIP_SUMS = ("settle_resume", "answer_resume")  # (answer_resume: to the model request)


@dataclass
class SizeResult:
    """Everything measured for one history size."""

    messages: int
    latency: dict[str, Latency] = field(default_factory=lambda: {k: Latency() for k in OPERATIONS})
    round_trips: dict[str, Counts] = field(
        default_factory=lambda: {k: Counts() for k in (*OPERATIONS, *TRIP_SUMS)}
    )
    bytes_sent: dict[str, Counts] = field(default_factory=lambda: {k: Counts() for k in OPERATIONS})
    breakdown: dict[str, Latency] = field(default_factory=dict)
    breakdown_trips: dict[str, Counts] = field(default_factory=dict)
    stored_parked: StoredBytes | None = None
    stored_idle: StoredBytes | None = None
    history_bytes: int = 0

    def part(self, name: str, round_trips: int | None = None) -> Latency:
        """The breakdown entry ``name``, noting its round trips when given."""
        if round_trips is not None:
            self.breakdown_trips.setdefault(name, Counts()).add(round_trips)
        return self.breakdown.setdefault(name, Latency())


# -- the benchmark ------------------------------------------------------------------------


async def _events_until_finished(events: AsyncIterator[Event]) -> tuple[list[Event], float, int]:
    """Drain a run; return its events and when (and at which round trip) it finished."""
    seen: list[Event] = []
    finished_at, finished_rt = 0.0, 0
    async for event in events:
        if isinstance(event, MessageFinished):
            finished_at, finished_rt = time.perf_counter(), ROUND_TRIPS.count
        seen.append(event)
    return seen, finished_at, finished_rt


async def run_sizes(
    redis: Redis,
    helper: Redis,
    workloads: Sequence[Workload],
    *,
    iterations: int,
    warmup: int,
    rounds: int = ROUNDS,
) -> list[SizeResult]:
    """Measure ``iterations`` park/settle-or-answer/resume cycles at each history size.

    The sizes take turns, ``rounds`` rounds of an equal share of the samples each, so a
    machine that speeds up or slows down during the run (this one does, by tens of
    percent within minutes) moves every size alike and cannot pass for a cost of the
    history's length."""
    sizes = [_Size(redis, helper, w) for w in workloads]
    await asyncio.gather(*(redis.ping() for _ in range(WARM_CONNECTIONS)))
    for size in sizes:
        await size.seed()
    for size in sizes:
        await size.cycles(warmup, measured=False)
    gc.collect()
    done = 0
    for r in range(rounds):
        share = iterations * (r + 1) // rounds - done
        done += share
        for size in sizes:
            await size.cycles(share, measured=True)
    return [await size.close() for size in sizes]


class _Size:
    """One history size: its runner, its seeded chat, and the cycles run so far."""

    def __init__(self, redis: Redis, helper: Redis, workload: Workload) -> None:
        self.helper = helper
        self.workload = workload
        self.marks = _Marks()
        self.runner = Runner(
            redis,
            _MarkingModel(workload.model(), self.marks),
            workload.template(),
            config=BENCH_CONFIG,
        )
        self.store = _StoreTimer(self.runner.store)
        self.seed_id = f"bench-seed-{workload.messages}"
        self.result = SizeResult(workload.messages)
        self.history: list[str] = []
        self.snapshot: SeedSnapshot | None = None
        self.next = 0

    async def seed(self) -> None:
        await SeedSnapshot.drop(self.helper, self.seed_id)
        await seed_chat(self.runner, self.seed_id, PRINCIPAL, self.workload.messages)
        self.snapshot = await SeedSnapshot.take(self.helper, self.seed_id)
        self.history = [
            x.decode() if isinstance(x, bytes) else str(x)
            for x in await self.helper.lrange(chat_keys(self.seed_id).history, 0, -1)
        ]
        self.result.history_bytes = sum(len(x.encode()) for x in self.history)

    async def cycles(self, count: int, *, measured: bool) -> None:
        """``count`` more cycles, each on a fresh copy of the seeded chat."""
        if self.snapshot is None:
            raise RuntimeError("seed() first")
        for _ in range(count):
            i, self.next = self.next, self.next + 1
            chat_id = f"bench-{self.workload.messages}-{i}"
            await self.snapshot.clone(self.helper, chat_id)
            await _cycle(
                self.runner,
                self.store,
                self.marks,
                self.helper,
                chat_id,
                i=i,
                result=self.result if measured else None,
            )
            await SeedSnapshot.drop(self.helper, chat_id)

    async def close(self) -> SizeResult:
        await SeedSnapshot.drop(self.helper, self.seed_id)
        _python_parts(self.result, history=self.history, runner=self.runner)
        return self.result


async def _cycle(
    runner: Runner,
    store: _StoreTimer,
    marks: _Marks,
    helper: Redis,
    chat_id: str,
    *,
    i: int,
    result: SizeResult | None,
) -> None:
    """One measured park, settle (or answer) and resume of a fresh copy of the seed."""
    call_id, call_input = await _park(runner, store, marks, helper, chat_id, i=i, result=result)
    if i % 2:
        await _answer_and_resume(
            runner, store, marks, chat_id, call=(call_id, call_input), result=result
        )
        return
    settled = await _settle(runner, store, chat_id, call_id, result=result)
    # Every other resume runs as on a worker that never saw the chat: its history is
    # decoded and converted whole (the others find it kept, runner/store/histcache.py).
    if (i // 2) % 2:
        runner.store.histories.forget(chat_id)
        took, trips = await _resume(
            runner, store, marks, helper, chat_id, settled=settled, result=None
        )
        if result is not None:
            result.part(COLD_RESUME, trips).add(took)
        return
    await _resume(runner, store, marks, helper, chat_id, settled=settled, result=result)


async def _park(
    runner: Runner,
    store: _StoreTimer,
    marks: _Marks,
    helper: Redis,
    chat_id: str,
    *,
    i: int,
    result: SizeResult | None,
) -> tuple[str, Any]:
    """The measured turn that parks; the parked call's id and input."""
    marks.reset()
    store.log.clear()
    rt0, sent0 = ROUND_TRIPS.snapshot()
    t0 = time.perf_counter()
    run = await runner.start_turn(
        chat_id, PRINCIPAL, measured_user_text(i), user_message_id=f"m{i}"
    )
    events, t1, rt1 = await _events_until_finished(run.events())
    sent1 = ROUND_TRIPS.bytes_sent
    if finished_reason(events) != "tool-calls":
        raise RuntimeError("the measured turn did not park")
    call_id = parked_call_id(events)
    call_input = next(e.call.input for e in events if isinstance(e, CallParked))
    if result is not None:
        result.latency["turn"].add(t1 - t0)
        result.latency["park"].add(t1 - marks.end_at)
        result.latency["commit"].add(store.took("commit"))
        result.round_trips["turn"].add(rt1 - rt0)
        result.round_trips["park"].add(rt1 - marks.end_rt)
        result.round_trips["commit"].add(store.trips("commit"))
        result.bytes_sent["turn"].add(sent1 - sent0)
        result.part("turn: claim_turn", store.trips("claim_turn")).add(store.took("claim_turn"))
        result.part("turn: start_turn -> model request", marks.request_rt - rt0).add(
            marks.request_at - t0
        )

    # Let the run finish (its last event-log batch) before the next operation is timed,
    # so that operation's round trips are its own.
    if run.task is not None:
        await run.task
    if result is not None and result.stored_parked is None:
        result.stored_parked = await stored_bytes(helper, chat_id)
    return call_id, call_input


async def _settle(
    runner: Runner,
    store: _StoreTimer,
    chat_id: str,
    call_id: str,
    *,
    result: SizeResult | None,
) -> int:
    """The measured settle of the parked call (even samples); its round trips."""
    store.log.clear()
    rt0, sent0 = ROUND_TRIPS.snapshot()
    t0 = time.perf_counter()
    await runner.settle(chat_id, PRINCIPAL, call_id, CHOICE)
    t1 = time.perf_counter()
    trips = ROUND_TRIPS.count - rt0
    if result is not None:
        result.latency["settle"].add(t1 - t0)
        result.round_trips["settle"].add(trips)
        result.bytes_sent["settle"].add(ROUND_TRIPS.bytes_sent - sent0)
    return trips


async def _answer_and_resume(
    runner: Runner,
    store: _StoreTimer,
    marks: _Marks,
    chat_id: str,
    *,
    call: tuple[str, Any],
    result: SizeResult | None,
) -> None:
    """The measured answer and resume of the AI SDK path (odd samples):
    ``Runner.answer_and_resume`` with the parked call's output, to the model request and
    to the end of the run."""
    marks.reset()
    store.log.clear()
    rt0, sent0 = ROUND_TRIPS.snapshot()
    call_id, call_input = call
    t0 = time.perf_counter()
    answer = Answer(call_id, PARK_TOOL, call_input, CHOICE)
    report, run = await runner.answer_and_resume(chat_id, PRINCIPAL, [answer])
    if run is None or report.settled != (call_id,):
        raise RuntimeError(f"the answer did not settle the call and resume: {report}")
    events, t1, rt1 = await _events_until_finished(run.events())
    if finished_reason(events) != "stop":
        raise RuntimeError("the resumed run did not finish with an answer")
    if result is not None:
        result.latency["answer_request"].add(marks.request_at - t0)
        result.latency["answer_finish"].add(t1 - t0)
        result.round_trips["answer_resume"].add(marks.request_rt - rt0)
        result.round_trips["answer_finish"].add(rt1 - rt0)
        result.bytes_sent["answer_finish"].add(ROUND_TRIPS.bytes_sent - sent0)
    if run.task is not None:
        await run.task


async def _resume(
    runner: Runner,
    store: _StoreTimer,
    marks: _Marks,
    helper: Redis,
    chat_id: str,
    *,
    settled: int,
    result: SizeResult | None,
) -> tuple[float, int]:
    """The measured resume, to the model request and to the end of the run; ``settled``
    is the round trips of the settle before it. Returns the time and round trips to the
    model request."""
    marks.reset()
    store.log.clear()
    rt0, sent0 = ROUND_TRIPS.snapshot()
    t0 = time.perf_counter()
    run = await runner.resume(chat_id, PRINCIPAL)
    events, t1, rt1 = await _events_until_finished(run.events())
    sent1 = ROUND_TRIPS.bytes_sent
    if finished_reason(events) != "stop":
        raise RuntimeError("the resumed run did not finish with an answer")
    if result is not None:
        result.latency["resume_request"].add(marks.request_at - t0)
        result.latency["resume_finish"].add(t1 - t0)
        result.round_trips["resume_request"].add(marks.request_rt - rt0)
        result.round_trips["settle_resume"].add(settled + marks.request_rt - rt0)
        result.round_trips["resume_finish"].add(rt1 - rt0)
        result.bytes_sent["resume_finish"].add(sent1 - sent0)
        claim = store.took("claim_resume")
        calls = store.took("calls")
        result.part("resume: claim_resume", store.trips("claim_resume")).add(claim)
        result.part("resume: calls (parked call records + outcomes)", store.trips("calls")).add(
            calls
        )
        result.part("resume: rest until the model request (Python)", 0).add(
            marks.request_at - t0 - claim - calls
        )
        result.part("resume: final commit", store.trips("commit")).add(store.took("commit"))
    if run.task is not None:
        await run.task  # the next cycle starts with nothing of this one still running
    if result is not None and result.stored_idle is None:
        result.stored_idle = await stored_bytes(helper, chat_id)
    return marks.request_at - t0, marks.request_rt - rt0


def _python_parts(result: SizeResult, *, history: list[str], runner: Runner) -> None:
    """Time, outside any run, the pure-Python steps whose cost grows with the history."""
    raw = history
    template_json = canonical_json(runner.template.raw)
    entries = decode_entries(raw)
    for _ in range(200):
        start = time.perf_counter()
        decode_entries(raw)
        mid = time.perf_counter()
        to_model_messages(entries)
        end = time.perf_counter()
        load_template_json(template_json)
        after = time.perf_counter()
        result.part("python: decode_entries(history)").add(mid - start)
        result.part("python: to_model_messages(history)").add(end - mid)
        result.part("python: load_template_json(snapshot), cached").add(after - end)
