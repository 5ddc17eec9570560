"""Following a chat's event log: the runs' events as any worker reads them.

Every run appends its events to the chat's Redis Stream, in batches (the writer is the
run's :class:`~parkway.runner.engine.supervisor.RunSupervisor`). :func:`follow` reads one run's
events from its first entry, woken by the worker's :class:`~parkway.runner.eventlog.watch.LogWatch`
when new ones arrive, until the run finishes — from any worker, also after the worker that
produced them died:

- a run whose worker died leaves its lease to lapse: the follower ends with a
  :class:`RunFailed` saying the run was interrupted;
- a run that committed its end but died before logging it (a narrow window) is
  finished by the follower from the stored state;
- a run replaced by another (a takeover) ends the follow the same way;
- a follower that starts after the log has dropped the run (it keeps the last two runs,
  for a while: runner/store/scripts/_functions.py, log_append) ends saying so, instead of reading a
  later run's events as its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from functools import partial

from parkway.runner.eventlog.local import id_before
from parkway.runner.eventlog.watch import LogWatch
from parkway.runner.events import (
    TERMINAL_KINDS,
    Event,
    MessageFinished,
    MessageStarted,
    RunFailed,
    events_from_json,
)
from parkway.runner.store import ChatKeys, ChatStore

__all__ = ["FELL_BEHIND", "INTERRUPTED", "cancel_requested", "follow", "id_before"]

INTERRUPTED = "The run was interrupted before it finished. Send the message again or resume."
FELL_BEHIND = "This stream fell too far behind the chat to go on. Reload the chat to see it."
POLL_WHILE_DOWN_S = 0.5  # how often a follower reads while the log watch reconnects
LONGEST_QUIET = 12  # a quiet follower of a live run checks it at least every 12 quiet_s


def cancel_requested() -> bool:
    """Whether the current task has been asked to cancel.

    redis-py can swallow a cancellation that lands while a command is in flight; a loop
    around Redis calls checks this so it still ends instead of running on forever.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _read(store: ChatStore, keys: ChatKeys, after: str) -> list[tuple[str, list[Event]]]:
    return [
        (entry_id, events_from_json(text))
        for entry_id, text in await store.read_events(keys, after, block_ms=None)
    ]


async def follow(
    store: ChatStore,
    keys: ChatKeys,
    start_id: str,
    *,
    watch: LogWatch,
    skip_start: bool = False,
    quiet_s: float = 5.0,
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[Event]:
    """The events of the run whose first log entry is ``start_id``, live, until it ends.

    The log is read without blocking a Redis connection: ``watch`` wakes the follower
    when the chat's log grows (:mod:`parkway.runner.eventlog.watch`). After ``quiet_s`` without a
    wake-up (a fraction of it while the watch is reconnecting) it reads anyway and
    checks the run is still alive; while the run's lease is good, it next checks when
    the lease would lapse (at most ``12 * quiet_s`` later). ``skip_start`` drops the run's own
    ``MessageStarted`` (for a caller that already sent the message's start while
    rebuilding its earlier parts).
    """
    after = first = id_before(start_id)
    quiet_rounds = 0
    quiet = quiet_s
    # A run of this worker: its entries come from memory (runner/eventlog/local.py) while the
    # sequence kept there vouches for them; Redis is read when it cannot, and after a
    # wake-up the sequence does not explain (an entry from elsewhere, a reconnect).
    local = watch.local.knows(keys.wake, start_id)
    unexplained = True
    async with watch.watching(keys.wake, confirm=not local) as woken:
        while True:
            if cancel_requested():
                raise asyncio.CancelledError
            woken.clear()
            entries = watch.local.after(keys.wake, start_id, after)
            if entries is None or (not entries and unexplained):
                # (followers of one chat woken at one entry share one read, decoded once)
                read = partial(_read, store, keys, after)
                entries = await watch.shared(keys.events, after, read)
            unexplained = False
            if entries and after == first and entries[0][0] != start_id:
                yield RunFailed(FELL_BEHIND)  # the run's entries are gone (log_append)
                return
            for entry_id, batch in entries:
                after = entry_id
                for event in batch:
                    if skip_start and isinstance(event, MessageStarted):
                        skip_start = False
                        continue
                    yield event
                    if event.kind in TERMINAL_KINDS:
                        return
            if entries:
                quiet_rounds = 0
                quiet = quiet_s
                continue
            wait_s = quiet if watch.healthy else min(quiet, POLL_WHILE_DOWN_S)
            unexplained = True  # whatever ends the wait, Redis may have more
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), wait_s)
                continue  # woken: read again
            info = await watch.shared(keys.meta, "run_info", partial(store.run_info, keys))
            if info.get("run_start") != start_id:
                yield RunFailed(INTERRUPTED)  # another run took the chat over
                return
            state = info.get("state")
            if state == "running":
                lease_left_s = float(info.get("lease_until", "0")) / 1000 - clock()
                if lease_left_s < 0:
                    yield RunFailed(INTERRUPTED)  # its worker died
                    return
                # A live run wakes its followers whenever it logs; its worker cannot be
                # taken for dead before its lease lapses. So a quiet follower checks
                # again then (spread a little, so thousands of followers do not check
                # at once), not every few seconds: one read per lease, not per 5 s.
                quiet = min(max(quiet_s, lease_left_s), LONGEST_QUIET * quiet_s)
                quiet *= random.uniform(1.0, 1.1)  # noqa: S311 (spreading, not secrecy)
                continue
            quiet = quiet_s
            # The run stored its end but its last events never reached the log.
            quiet_rounds += 1
            if quiet_rounds >= 2:
                reason = "tool-calls" if state == "parked" else info.get("last_finish") or "stop"
                yield MessageFinished(reason)  # type: ignore[arg-type]
                return
