"""The deadline index as the sweeper uses it: which parked calls are due, and timing
many of them out in one round trip.

Every pending call has a member in the global sorted set ``pw:deadlines`` (scored by
its deadline, epoch ms; written with the step that parks it, see
:meth:`parkway.runner.store.chats.ChatStore.commit`). The sweeper
(:mod:`parkway.runner.engine.sweeper`) reads what is due and settles it with
:data:`~parkway.runner.engine.sweeper.TIMEOUT_OUTCOME` through the same SETTLE script every other
settler runs, so a timeout races a human's answer like any two settles do.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from parkway.runner.store.audit import AuditSource, answer_audit
from parkway.runner.store.client import RedisClient, as_text
from parkway.runner.store.keys import APPROVALS, DEADLINES, ChatKeys, deadline_member
from parkway.runner.store.replies import SettleReply, settle_reply

__all__ = ["DeadlineIndex"]


class DeadlineIndex:
    """``pw:deadlines`` for the sweep; ``settle`` is the store's registered SETTLE."""

    def __init__(self, redis: RedisClient, settle: Any, *, ttl_s: int, audit_keep_s: int) -> None:
        self.redis = redis
        self._settle = settle
        self.ttl_s = ttl_s
        self.audit_keep_s = audit_keep_s

    async def expired(self, now_ms: int, limit: int) -> tuple[list[tuple[str, int]], int]:
        """Up to ``limit`` deadline members due at or before ``now_ms``, earliest first,
        each with its deadline (epoch ms); and how many calls wait in all (the index's
        size: every pending call has a deadline).

        One round trip: ``ZRANGEBYSCORE ... LIMIT`` (O(log N + M) for N indexed and M
        returned: the same with ten parked calls or a million when none has expired)
        and ``ZCARD`` (O(1)).
        """
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrangebyscore(DEADLINES, "-inf", now_ms, start=0, num=limit, withscores=True)
        pipe.zcard(DEADLINES)
        raw, waiting = await pipe.execute()
        return [(as_text(pair[0]), int(pair[1])) for pair in raw], int(waiting)

    async def settle_many(
        self,
        calls: Sequence[tuple[ChatKeys, str]],
        outcome_json: str,
        *,
        source: AuditSource,
        drop: Sequence[str] = (),
    ) -> list[SettleReply]:
        """Run SETTLE with one outcome for many calls and drop their deadlines (plus the
        members named by ``drop``), in one round trip.

        A non-transactional pipeline: each ``EVALSHA`` names the keys of one chat (one
        Cluster slot), the closing ``ZREM`` only the deadline index; nothing needs them
        to be atomic together, because each settle is decided by its own script and
        the members are dropped after them (from the approvals index too), whatever
        they answered. (A winner's audit
        entry names ``source``, no principal; its script reads the call's tool.)

        Returns one :class:`SettleReply` per call, in order; a call whose script raised
        gets one with status ``error``. On
        NOSCRIPT (the first use after Redis started) the script is loaded and only the
        calls it did not run are sent again.
        """
        members = [*drop, *(deadline_member(k.chat_id, call_id) for k, call_id in calls)]
        if not members:
            return []
        replies: list[SettleReply | None] = [None] * len(calls)
        nonces = [secrets.token_hex(8) for _ in calls]
        # no owner check, no deadline member (dropped below), then the audit's fields
        audit = ["", "", *answer_audit(None, outcome_json, source=source).args(self.audit_keep_s)]
        todo = list(range(len(calls)))
        for attempt in range(2):
            pipe = self.redis.pipeline(transaction=False)
            for i in todo:
                keys, call_id = calls[i]
                script_keys = (
                    keys.calls,
                    keys.outcomes,
                    keys.pending,
                    keys.meta,
                    keys.history,
                    keys.settle_attempt(call_id),
                    keys.audit,
                )
                pipe.execute_command(
                    "EVALSHA",
                    self._settle.sha,
                    len(script_keys),
                    *script_keys,
                    call_id,
                    outcome_json,
                    self.ttl_s,
                    nonces[i],
                    *audit,
                )
            pipe.execute_command("ZREM", DEADLINES, *members)
            # a call timed out has nobody left to answer it: off the approvers' queue too
            pipe.execute_command("ZREM", APPROVALS, *members)
            *settled, dropped, unqueued = await pipe.execute(raise_on_error=False)
            for result in (dropped, unqueued):
                if isinstance(result, Exception):
                    raise result
            again = []
            for i, reply in zip(todo, settled, strict=True):
                if isinstance(reply, NoScriptError) or (
                    isinstance(reply, ResponseError) and "NOSCRIPT" in str(reply)
                ):
                    again.append(i)
                elif isinstance(reply, Exception):
                    replies[i] = SettleReply("error", error=str(reply))
                else:
                    replies[i] = settle_reply(reply)
            if not again or attempt == 1:
                break
            await self.redis.script_load(self._settle.script)
            todo, members = (
                again,
                [deadline_member(calls[i][0].chat_id, calls[i][1]) for i in again],
            )
        return [reply or SettleReply("error", error="NOSCRIPT") for reply in replies]
