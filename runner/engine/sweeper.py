"""The sweeper: settles every parked call whose deadline has passed as ``timeout``.

Every parked call has a server-side deadline so that an agent never waits
forever on a human who walked away. The commit that parks a call indexes its deadline
in the global sorted set :data:`parkway.runner.store.keys.DEADLINES` (member ``"<chat>
<toolCallId>"``, score = the deadline in epoch ms); any settle of the call drops the member. A
sweeper runs in every worker, and a sweep:

1. reads the members whose deadline is at or before now, earliest first, at most
   ``batch`` of them (one ``ZRANGEBYSCORE ... LIMIT``);
2. settles each of those calls with the outcome ``{"outcome": "timeout"}`` through the
   same ``SETTLE`` script every other settle uses, and drops the members, all in one
   pipelined round trip (:meth:`parkway.runner.store.deadlines.DeadlineIndex.settle_many`).

Exactly once: ``SETTLE`` decides inside Redis, first writer wins. When several sweepers
(one per worker) pick the same expired call, one gets ``settled`` and the others
``same``; when a client's answer got there first, the sweeper gets ``conflict`` and the
answer stands; when the call (or its chat) is gone, ``missing``. Whatever the reply,
the member is dropped: the call has an outcome, or there is no call. A client settling
after the timeout gets ``conflict`` carrying ``{"outcome": "timeout"}`` (HTTP 409).

Cost: ``ZRANGEBYSCORE`` is O(log N + M) for N parked and M returned, so a sweep that
finds nothing expired is one cheap round trip whatever the number parked, and a sweep
that finds M expired calls costs two round trips and work proportional to M.

The sweeper only records the outcome. Continuing a chat whose last pending call just
timed out is for whoever listens on :attr:`Sweeper.on_timeout`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from parkway.runner.canonical import canonical_json
from parkway.runner.engine.runner import Runner
from parkway.runner.errors import CallerError
from parkway.runner.ops import CALLS_SETTLED, CALLS_WAITING, REDIS_ERRORS, SWEEPER_LAG
from parkway.runner.store import ChatKeys, chat_keys, is_redis_outage, parse_deadline_member

__all__ = ["TIMEOUT_OUTCOME", "SweepReport", "Sweeper", "TimeoutHook"]

log = logging.getLogger(__name__)

TimeoutHook = Callable[[str, str, int], Awaitable[None]]
"""``on_timeout(chat_id, tool_call_id, pending_left)``, awaited once for each call this
sweeper settled ``timeout``; ``pending_left`` is how many calls of the chat still wait."""

# The stored outcome of a timed-out call. It is what normalize_outcome() makes of
# {"outcome": "timeout"} from the server for either kind of call, byte for byte: racing
# sweepers must write identical strings, so that the losers get 'same', not 'conflict'.
TIMEOUT_OUTCOME = canonical_json({"outcome": "timeout"})

# Longest wait between two sweeps while Redis keeps failing.
_MAX_BACKOFF_S = 5.0


@dataclass(frozen=True)
class SweepReport:
    """What one :meth:`Sweeper.sweep_once` did.

    ``expired`` members were read from the deadline index; each of them is counted once
    in ``settled`` (this sweeper recorded the timeout), ``already_settled`` (another
    sweeper or a client settled the call first), ``missing`` (no such call: its chat
    expired, or the member names no valid call) or ``failed`` (the settle raised an
    error inside Redis, e.g. a chat key of the wrong type). Every one of them has been
    dropped from the index.
    """

    expired: int = 0
    settled: int = 0
    already_settled: int = 0
    missing: int = 0
    failed: int = 0


class Sweeper:
    """Times out the expired parked calls of every chat, on behalf of one worker.

    Built from a :class:`~parkway.runner.engine.runner.Runner`: it uses the runner's store (so the
    same Redis client and chat TTL) and, unless ``clock`` is given, the runner's clock
    (seconds since the epoch; tests inject a fake one and drive :meth:`sweep_once`).
    ``batch`` bounds the members one sweep handles, so one sweep's round trip stays
    small however many calls expire at once; :meth:`run` takes the next batch at once.
    """

    def __init__(
        self,
        runner: Runner,
        *,
        batch: int = 500,
        clock: Callable[[], float] | None = None,
        on_timeout: TimeoutHook | None = None,
    ) -> None:
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch}")
        self.store = runner.store
        self.clock: Callable[[], float] = clock or runner.clock
        self.batch = batch
        self.on_timeout = on_timeout

    def _now_ms(self) -> int:
        # The same rounding as the scores (ChatStore.commit): a call whose deadline is
        # exactly now has expired.
        return int(self.clock() * 1000)

    async def sweep_once(self) -> SweepReport:
        """Settle ``timeout`` up to ``batch`` calls whose deadline has passed.

        One round trip when nothing has expired, two otherwise. Redis errors propagate
        (:meth:`run` logs them); a member is only dropped with its settle, so a sweep
        that fails half-way leaves the rest for the next one.
        """
        now_ms = self._now_ms()
        due, waiting = await self.store.deadlines.expired(now_ms, self.batch)
        # how late this sweep is for the call that expired first (0: none due)
        SWEEPER_LAG.set((now_ms - due[0][1]) / 1000 if due else 0.0)
        CALLS_WAITING.set(waiting)
        if not due:
            return SweepReport()
        members = [member for member, _ in due]
        calls: list[tuple[ChatKeys, str]] = []
        malformed: list[str] = []
        for member in members:
            chat_id, tool_call_id = parse_deadline_member(member)
            try:
                keys = chat_keys(chat_id)
            except CallerError:
                keys = None
            if keys is None or not tool_call_id:
                malformed.append(member)
            else:
                calls.append((keys, tool_call_id))
        # (each timeout's audit entry is written by its SETTLE, source "sweeper")
        replies = await self.store.deadlines.settle_many(
            calls, TIMEOUT_OUTCOME, source="sweeper", drop=malformed
        )
        timed_out: list[tuple[str, str, int]] = []
        already = failed = 0
        missing = len(malformed)
        for (keys, tool_call_id), reply in zip(calls, replies, strict=True):
            if reply.status == "settled":
                timed_out.append((keys.chat_id, tool_call_id, reply.pending))
            elif reply.status in {"same", "conflict"}:
                already += 1
            elif reply.status == "missing":
                missing += 1
            else:
                failed += 1
                log.warning(
                    "could not time out call %s of chat %s: %s",
                    tool_call_id,
                    keys.chat_id,
                    reply.error,
                )
        if timed_out:
            # (the sweeper reads no records: a timed-out call's kind is not known here)
            CALLS_SETTLED.labels("unknown", "timeout", "sweeper").inc(len(timed_out))
            log.info("timed out %d parked call(s)", len(timed_out))
            await self._notify(timed_out)
        return SweepReport(
            expired=len(members),
            settled=len(timed_out),
            already_settled=already,
            missing=missing,
            failed=failed,
        )

    async def _notify(self, timed_out: Sequence[tuple[str, str, int]]) -> None:
        hook = self.on_timeout
        if hook is None:
            return
        for chat_id, tool_call_id, pending in timed_out:
            try:
                await hook(chat_id, tool_call_id, pending)
            except Exception:
                # The timeout is recorded whatever the listener does; one failing
                # listener call must not cost the others theirs.
                log.exception("on_timeout failed for call %s of chat %s", tool_call_id, chat_id)

    async def run(self, interval_s: float = 0.25) -> None:
        """Sweep every ``interval_s`` seconds until cancelled.

        While sweeps come back with a full batch, the next one starts at once, so a
        burst of expiries is worked off as fast as Redis allows. Errors (Redis down, a
        timeout) are logged, never raised: the loop backs off (doubling, up to 5 s) and
        tries again. The traceback is logged for the first failure of a series only.
        """
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, not {interval_s!r}")
        failures = 0
        while True:
            try:
                report = await self.sweep_once()
            except Exception as exc:
                if is_redis_outage(exc):
                    REDIS_ERRORS.labels("sweeper").inc()
                failures += 1
                delay = max(interval_s, min(interval_s * 2 ** min(failures, 16), _MAX_BACKOFF_S))
                log.warning(
                    "deadline sweep failed (%d in a row); next try in %.2f s",
                    failures,
                    delay,
                    exc_info=failures == 1,
                )
                await _pause(delay)
                continue
            if failures:
                log.info("deadline sweep works again after %d failure(s)", failures)
                failures = 0
            # A full batch: more may be waiting, so go on at once (after letting the
            # worker's requests in).
            await _pause(0 if report.expired >= self.batch else interval_s)


async def _pause(seconds: float) -> None:
    """``asyncio.sleep``, but first honour a cancel of this task that was lost.

    A cancel that arrives just as a Redis call finishes can be dropped inside the
    client (Python 3.11's ``asyncio.wait_for`` returns the result and forgets it),
    leaving the request pending on the task; without this check the loop would go on
    sweeping and shutdown would wait for it forever.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    await asyncio.sleep(seconds)
