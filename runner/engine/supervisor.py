"""What a run has besides its logic: its events, its lease, its commits, its event log.

A :class:`RunSupervisor` is made for each run (by the runner's launcher,
``_launcher.py``). It owns the run's events: :meth:`RunSupervisor.emit` hands each one to
the caller (the queue behind :meth:`Run.events <runner.run.Run.events>`) and to the batch
the log writer takes next.
It persists the run's steps under the run's lease (:meth:`RunSupervisor.commit`), each
step with the events not yet logged and those that announce it, in one script. While
the run's work executes (:meth:`RunSupervisor.supervise`):

- the runner's :class:`RunWatch` (one task per worker, whatever its number of runs)
  renews the run's lease with all the others' in one round trip, and notices stop
  requests (``POST .../stop``, from any worker) for all of them in another, cancelling
  the model stream at once;
- the run's log writer appends the events emitted between commits (a model's streamed
  text, say) to the chat's event log in batches, which every HTTP response and every
  reconnecting browser follows (the reader is :func:`parkway.runner.eventlog.followers.follow`).

A run that fails or is cancelled is ended here too: its chat is handed over, its
followers told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Literal

from parkway.runner.engine.run import Run, RunnerConfig, RunState
from parkway.runner.errors import ChatBusyError
from parkway.runner.eventlog import LogWatch, cancel_requested
from parkway.runner.events import (
    Event,
    MessageFinished,
    MessageStarted,
    RunFailed,
    coalesce,
    events_to_json,
)
from parkway.runner.ops import (
    EVENT_LOG_WRITE,
    REDIS_ERRORS,
    RUNS,
    RUNS_IN_PROGRESS,
    Stopwatch,
    logcontext,
    mark_failed,
    span,
)
from parkway.runner.parking import ParkedCall
from parkway.runner.store import ChatStore, LogBatch, breaker_of, is_redis_outage

__all__ = ["RunSupervisor", "RunWatch", "Work"]

log = logging.getLogger(__name__)

STOP_POLL_S = 0.2  # how often the running runs are checked for a stop request
WRITER_YIELDS = 3  # event-loop turns the log writer lets the run have before each batch
LOG_FLUSH_S = 5.0  # how long a finished run waits for its last events to reach the log
FAILED_HINT = "Send your message again, or resume the chat."


class RunWatch:
    """Keeps the leases of all the running runs of one runner, and notices stop requests
    for them: one task per worker, not one per run.

    Stop requests are read together, in one pipelined round trip every ``STOP_POLL_S``;
    every ``lease_s / 3`` the leases are renewed together, in another (a long tool must
    not let a lease lapse, or another worker would take the chat over). The task ends
    when no run is left to watch. A run whose lease was lost is no longer renewed; its
    next commit fails (fenced by its token).
    """

    def __init__(self, store: ChatStore, *, lease_s: float, clock: Callable[[], float]) -> None:
        self.store = store
        self.lease_s = lease_s
        self.clock = clock
        self._watched: dict[str, RunState] = {}  # by lease token
        self._lost: set[str] = set()
        self._poller: asyncio.Task[None] | None = None
        self._failing = False  # the last check for stop requests failed

    @contextlib.contextmanager
    def watching(self, state: RunState) -> Iterator[None]:
        """Keep ``state``'s lease and watch its run for a stop request while the block
        runs."""
        self._watched[state.token] = state
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="parkway-run-watch")
        try:
            yield
        finally:
            self._watched.pop(state.token, None)
            self._lost.discard(state.token)

    async def aclose(self) -> None:
        """Stop watching (the runner is closing and its runs have ended)."""
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        renew_every = self.lease_s / 3
        renew_at = loop.time() + renew_every
        while self._watched and not cancel_requested():
            await asyncio.sleep(min(STOP_POLL_S, renew_every))
            await self._check_stops()
            if loop.time() >= renew_at:
                renew_at = loop.time() + renew_every
                await self._renew()

    async def _check_stops(self) -> None:
        states = [s for s in self._watched.values() if not s.stop.is_set()]
        if not states:
            return
        try:
            stopped = await self.store.stops_requested([(s.keys, s.token) for s in states])
        except Exception as exc:
            # (every STOP_POLL_S during an outage: logged when it starts, not each time)
            if not self._failing:
                log.warning("could not check %d runs for stop requests: %s", len(states), exc)
            self._failing = True
            return
        if self._failing:
            log.info("checking runs for stop requests works again")
            self._failing = False
        for state, stop in zip(states, stopped, strict=True):
            if stop:
                state.stop.set()
                if state.consumer is not None:
                    state.consumer.cancel()

    async def _renew(self) -> None:
        states = [s for t, s in self._watched.items() if t not in self._lost]
        if not states:
            return
        try:
            held = await self.store.renew_many(
                [(s.keys, s.token) for s in states],
                now_ms=int(self.clock() * 1000),
                lease_ms=int(self.lease_s * 1000),
            )
        except Exception:
            # Try again next period; commits stay fenced by the token.
            log.warning("could not renew the leases of %d runs", len(states))
            return
        for state, ok in zip(states, held, strict=True):
            if not ok:
                log.warning("run of chat %s lost its lease", state.chat_id)
                self._lost.add(state.token)


class RunSupervisor:
    """One run's events, commits and batched log writer (its lease and stops are the
    :class:`RunWatch`'s).

    ``run`` is the handle for the run's caller. Events go to its queue at once, and to
    the log in batches: each batch is what was emitted since the writer last took one,
    with the finish reason among it (``""`` if none).
    """

    def __init__(
        self,
        state: RunState,
        *,
        store: ChatStore,
        config: RunnerConfig,
        clock: Callable[[], float],
        watch: RunWatch,
        logwatch: LogWatch | None = None,
    ) -> None:
        self.state = state
        self.logwatch = logwatch
        self.store = store
        self.config = config
        self.clock = clock
        self.watch = watch
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self.run = Run(state.message_id, self._queue)
        self._batch: list[Event] = []
        self._finish = ""
        self._closed = False
        self._wake = asyncio.Event()  # set when there is a batch to take, or on close
        self._ended = "failed"  # how the run ended, for metrics: set by its last event
        self._log_lock = asyncio.Lock()  # one log write (append or commit) at a time

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def _lease_ms(self) -> int:
        return int(self.config.lease_s * 1000)

    # -- the run's events --------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Report ``event`` to the run's caller and queue it for the log."""
        self._queue.put_nowait(event)
        self._batch.append(event)
        finish = _finish_of(event)
        if finish:
            self._finish = finish
            self._ended = _ENDS.get(finish, "finished")
        self._wake.set()

    def close(self) -> None:
        """The run emits nothing more: end the caller's events and the log writer."""
        self._queue.put_nowait(None)
        self._closed = True
        self._wake.set()

    def _take_batch(self) -> tuple[list[Event], str]:
        self._wake.clear()
        batch, self._batch = self._batch, []
        finish, self._finish = self._finish, ""
        return batch, finish

    # -- the run's steps ---------------------------------------------------------------

    async def commit(
        self,
        next_state: Literal["running", "parked", "idle"],
        *,
        calls: Sequence[ParkedCall] = (),
        parked_ids: Sequence[str] | None = None,
        then: Sequence[Event] = (),
    ) -> None:
        """Persist the run's unsaved entries (and ``calls``, a step's parked calls) and
        set the chat's state, if the run still holds the lease; then emit ``then``.

        The run's events not yet logged, and ``then`` (what announces the step: its
        calls, the message's end), go to the event log in the same atomic step, so a
        reader never sees a call the store does not have, and a run's end costs one
        round trip. Raises :class:`ChatBusyError` if the lease was lost."""
        state = self.state
        if parked_ids is None and state.clear_parked:
            parked_ids = []
        async with self._log_lock:  # after an append in flight: the log keeps its order
            pending, pending_finish = self._take_batch()
            batch, finish = [*pending, *then], pending_finish
            for event in then:
                finish = _finish_of(event) or finish
            log = None
            logged: list[Event] = []
            if batch:
                state.log_batches += 1
                logged = coalesce(batch)
                log = LogBatch(events_to_json(logged), state.log_batches, finish)
            state.commits += 1
            try:
                entry_id = await self.store.commit(
                    state.keys,
                    token=state.token,
                    seq=state.commits,
                    state=next_state,
                    model_calls=state.model_calls,
                    now_ms=self._now_ms(),
                    lease_ms=self._lease_ms,
                    entries=state.unsaved,
                    calls=calls,
                    parked_ids=parked_ids,
                    # The duplicate guard is written with the turn's commits (a retry
                    # stores no user entry); a run that ends without an answer clears it.
                    last_uid=state.user_message_id,
                    forget_uid=state.retry_open,
                    log=log,
                    principal=state.principal,
                )
            except BaseException:
                self._unsure()  # its batch may have landed
                self._put_back(pending, pending_finish)
                raise
            if entry_id is None:
                self._unsure()
                self._put_back(pending, pending_finish)
                raise ChatBusyError("this run lost the chat's lease to another worker")
            if entry_id and log is not None:
                self._logged(entry_id, log.batch, logged, last=bool(log.finish))
            elif log is not None:
                self._unsure()  # a replay whose entry Redis no longer names
        state.entries.extend(state.unsaved)
        state.unsaved = []
        state.clear_parked = False
        for event in then:
            self._queue.put_nowait(event)
            if finish:
                self._ended = _ENDS.get(finish, "finished")

    def _put_back(self, events: list[Event], finish: str) -> None:
        """Events a failed commit did not log: the log writer takes them next."""
        if events:
            self._batch[:0] = events
            self._finish = self._finish or finish
            self._wake.set()

    # -- the run's life ----------------------------------------------------------------

    async def supervise(self, work: Work) -> None:
        """Execute ``work`` with the lease kept and the log written, then close the run.

        A run cancelled (the worker shutting down) hands its chat over at once instead
        of at lease expiry; a run that raised is ended as failed, with a reference its
        caller sees and the log has the traceback under. Either way its followers are
        told, and the run waits (up to ``LOG_FLUSH_S``) for its last events to be logged.
        """
        state = self.state
        # This task's log lines, metrics and spans name the run (runner/ops/telemetry.py).
        logcontext.bind(chat_id=state.chat_id, run_id=state.run_id)
        RUNS_IN_PROGRESS.inc()
        with span(
            f"invoke_agent {self._agent_name()}",
            parent=state.trace_parent,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self._agent_name(),
                "gen_ai.conversation.id": state.chat_id,
                "parkway.run.id": state.run_id,
                "parkway.run.start": state.start,
            },
        ) as current:
            try:
                await self._supervise(work)
            finally:
                RUNS_IN_PROGRESS.dec()
                ended = self._ended
                if ended == "finished" and state.stop.is_set():
                    ended = "stopped"
                RUNS.labels(state.start, ended).inc()
                if current.is_recording():
                    current.set_attribute("parkway.run.end", ended)
                    if ended == "failed":
                        mark_failed(current, "run_failed")

    def _agent_name(self) -> str:
        name = self.state.template.raw.get("name")
        return name if isinstance(name, str) and name else "agent"

    async def _supervise(self, work: Work) -> None:
        state = self.state
        writer = asyncio.create_task(self._write_log())
        try:
            self.emit(MessageStarted(state.message_id))
            with self.watch.watching(state):
                await work(self)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.store.release(state.keys, token=state.token))
            self.emit(RunFailed("The run was interrupted; it can be resumed."))
            self._ended = "interrupted"
            raise
        except Exception as exc:
            if is_redis_outage(exc):
                REDIS_ERRORS.labels("run").inc()
            ref = secrets.token_hex(4)
            log.exception("run failed (chat %s, ref %s)", state.chat_id, ref)
            # Nothing the run did not commit is written now: a step whose commit
            # failed (its parked calls included) is dropped whole, never stored as
            # calls without records.
            released = await self._fail()
            self.emit(RunFailed(f"The run failed (reference {ref}). {FAILED_HINT}"))
            if not released:
                await self._fail_once_back()
        finally:
            self.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(writer), LOG_FLUSH_S)
            self._log_over()

    async def _fail(self) -> bool:
        """Run ``FAIL`` (the chat leaves ``running``); whether it was written."""
        state = self.state
        try:
            await self.store.fail(
                state.keys, token=state.token, now_ms=self._now_ms(), principal=state.principal
            )
        except Exception:
            return False
        return True

    async def _fail_once_back(self) -> None:
        """``FAIL`` could not be written (Redis unreachable): write it once the client's
        breaker finds Redis back, if that is before the lease lapses (after, the next
        turn or resume takes the chat over anyway). Without this, a Redis restart of a
        second would leave the chats whose runs it cut ``running`` for a whole lease."""
        breaker = breaker_of(self.store.redis)
        if breaker is None:
            return
        if await breaker.wait_closed(self.config.lease_s) and not await self._fail():
            log.warning("run of chat %s could not release its chat", self.state.chat_id)

    async def _write_log(self) -> None:
        """Append the run's events to the chat's log, a batch at a time, until the run is
        closed and everything it emitted is written (a commit takes the batch instead
        when one comes first)."""
        while True:
            await self._wake.wait()
            # The run goes first: its next step (the model call, a commit) is not held
            # up by the log, and more events gather into this batch meanwhile.
            for _ in range(WRITER_YIELDS):
                await asyncio.sleep(0)
            async with self._log_lock:
                batch, finish = self._take_batch()
                if batch:
                    entry_id, text, logged = await self._append(batch, finish)
                    self._logged(entry_id, text, logged, last=bool(finish))
            if self._closed and not self._batch:
                if not self.run.log_start.done():
                    self.run.log_start.set_exception(ChatBusyError("no event log"))
                return

    def _logged(self, entry_id: str, batch: str, events: list[Event], *, last: bool) -> None:
        """A batch (JSON, made of ``events``) went to the log as ``entry_id`` ('' if it
        could not be written, or may have been): the run's first resolves
        ``run.log_start``; followers on this worker take it from memory
        (runner/eventlog/local.py) while every entry of the run so far is known to be there."""
        log_start = self.run.log_start
        if not entry_id:
            self._unsure()
            if not log_start.done():
                log_start.set_exception(ChatBusyError("no event log"))
            return
        if not log_start.done():
            log_start.set_result(entry_id)
        if self.logwatch is not None and log_start.exception() is None:
            start = log_start.result()
            channel = self.state.keys.wake
            self.logwatch.local_append(
                channel, entry_id, batch, start=start, last=last, events=events
            )

    def _log_over(self) -> None:
        """The run logs nothing more (runner/eventlog/local.py)."""
        log_start = self.run.log_start
        if self.logwatch is not None and log_start.done() and log_start.exception() is None:
            self.logwatch.local.run_over(self.state.keys.wake, log_start.result())

    def _unsure(self) -> None:
        """A batch of the run's may or may not be in the log: followers here read what
        follows from Redis (runner/eventlog/local.py)."""
        if self.logwatch is not None:
            self.logwatch.local.broken(self.state.keys.wake)

    async def _append(self, batch: list[Event], finish: str) -> tuple[str, str, list[Event]]:
        """Append one batch; the entry's id ('' if it could not be written), the batch's
        JSON and the events it was made of (``batch``, deltas joined)."""
        state = self.state
        state.log_batches += 1
        watch = Stopwatch()
        logged = coalesce(batch)
        text = events_to_json(logged)
        try:
            entry_id = await self.store.append_events(
                state.keys,
                token=state.token,
                batch=text,
                finish=finish,
                now_ms=self._now_ms(),
                seq=state.log_batches,
            )
        except Exception as exc:
            if is_redis_outage(exc):
                REDIS_ERRORS.labels("event_log").inc()
            log.exception("could not append events of chat %s", state.chat_id)
            return "", text, logged
        EVENT_LOG_WRITE.observe(watch.seconds())
        return entry_id, text, logged


# How a run that ended with a finish reason counts in ``parkway_runs_total``.
_ENDS = {"tool-calls": "parked", "error": "failed", "interrupted": "interrupted"}


def _finish_of(event: Event) -> str:
    """The finish reason ``event`` ends a run with ('' if it does not end one)."""
    if isinstance(event, MessageFinished):
        return event.reason
    if isinstance(event, RunFailed):
        return "error"
    return ""


Work = Callable[[RunSupervisor], Awaitable[None]]
"""What a run does (a turn, a resume), given its supervisor (its state, events, commits)."""
