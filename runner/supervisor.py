"""What watches a run while it executes: its lease, stop requests and its event log.

A :class:`RunSupervisor` runs beside each run (two tasks the runner starts with it):

- :meth:`RunSupervisor.watch` renews the run's lease (a long tool must not let it lapse,
  or another worker would take the chat over); one poller per runner notices stop
  requests (``POST .../stop``, from any worker) for all its runs in one round trip,
  cancelling the model stream at once;
- :meth:`RunSupervisor.write_log` writes the run's events to the chat's event log in
  batches, which every HTTP response and every reconnecting browser follows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from runner.errors import ChatBusyError
from runner.eventlog import cancel_requested
from runner.events import coalesce, events_to_json
from runner.run import Run, RunnerConfig, RunState
from runner.store import ChatStore

__all__ = ["RunSupervisor"]

log = logging.getLogger(__name__)

STOP_POLL_S = 0.2  # how often a running run checks for a stop request
WRITER_YIELDS = 3  # event-loop turns the log writer lets the run have before each batch


class RunSupervisor:
    """Lease renewal, the stop watch and the batched log writer of the runs of a runner."""

    def __init__(self, store: ChatStore, config: RunnerConfig, clock: Callable[[], float]):
        self.store = store
        self.config = config
        self.clock = clock
        self._watched: dict[str, RunState] = {}  # by lease token
        self._poller: asyncio.Task[None] | None = None

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def watch(self, state: RunState) -> None:
        """Renew the lease and watch for a stop until cancelled or the lease is lost.

        Stop requests of all the runs of this runner are read together, in one pipelined
        round trip every ``STOP_POLL_S`` (:meth:`_poll_stops`), not one read per run."""
        self._watched[state.token] = state
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll_stops(), name="parkway-stop-poll")
        renew_every = self.config.lease_s / 3
        try:
            while not cancel_requested():
                await asyncio.sleep(renew_every)
                try:
                    held = await self.store.renew(
                        state.keys,
                        token=state.token,
                        now_ms=self._now_ms(),
                        lease_ms=int(self.config.lease_s * 1000),
                    )
                except Exception:
                    # Try again next period; commits stay fenced by the token.
                    log.warning("could not renew the lease of chat %s", state.chat_id)
                    continue
                if not held:
                    log.warning("run of chat %s lost its lease", state.chat_id)
                    return
        finally:
            self._watched.pop(state.token, None)

    async def _poll_stops(self) -> None:
        """Every ``STOP_POLL_S``, whether any watched run was asked to stop (from any
        worker); ends when no run is left to watch."""
        while self._watched and not cancel_requested():
            await asyncio.sleep(STOP_POLL_S)
            states = [s for s in self._watched.values() if not s.stop.is_set()]
            if not states:
                continue
            try:
                stopped = await self.store.stops_requested([(s.keys, s.token) for s in states])
            except Exception:
                log.warning("could not check %d runs for stop requests", len(states))
                continue
            for state, stop in zip(states, stopped, strict=True):
                if stop:
                    state.stop.set()
                    if state.consumer is not None:
                        state.consumer.cancel()

    async def write_log(self, run: Run, state: RunState) -> None:
        """Append the run's events to the chat's log, a batch at a time, until the run is
        closed and everything it emitted is written; resolve ``run.log_start``."""
        while True:
            await run.wait_for_events()
            # The run goes first: its next step (the model call, a commit) is not held
            # up by the log, a commit never queues behind the log in Redis, and more
            # events gather into this batch meanwhile.
            for _ in range(WRITER_YIELDS):
                await asyncio.sleep(0)
            await state.quiet.wait()
            await asyncio.sleep(0)
            batch, finish = run.take_batch()
            if batch:
                state.log_batches += 1
                try:
                    first = await self.store.append_events(
                        state.keys,
                        token=state.token,
                        batch=events_to_json(coalesce(batch)),
                        finish=finish,
                        now_ms=self._now_ms(),
                        seq=state.log_batches,
                    )
                except Exception:
                    log.exception("could not append events of chat %s", state.chat_id)
                    first = ""
                if not run.log_start.done():
                    if first:
                        run.log_start.set_result(first)
                    else:
                        run.log_start.set_exception(ChatBusyError("no event log"))
            if run.drained:
                return
