"""The approvals index as an approver reads it: the approvals waiting for them, across
chats, newest first, a page at a time.

An approval whose policy leaves it to someone other than the chat's owner (a role, or
no self-approval: :func:`parkway.runner.parking.may_answer`) has a member in the global
sorted set ``pw:approvals``, written by the commit that parks it and removed by the
settle that ends it (a timeout included), both inside their scripts on a single Redis.
Who may answer which approval is decided by each call's own record (the role it
requires, its requester), so the index is one set for everyone and a page is filtered
for its reader: a reader sees only what they may answer.

What the scripts cannot remove, the read does: a member whose call is settled (a new
message superseded it) or gone (its chat expired), or one a Cluster's second round trip
failed to remove, is dropped when a read finds it so.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parkway.runner.errors import CallerError
from parkway.runner.parking import ParkedCall, decode_call, may_answer
from parkway.runner.store.client import RedisClient, as_text
from parkway.runner.store.keys import APPROVALS, chat_keys, parse_deadline_member

__all__ = ["MAX_APPROVALS_PAGE", "Approval", "ApprovalIndex", "ApprovalPage", "approval_score"]

MAX_APPROVALS_PAGE = 100
# Index members one read looks at, at most: a reader who may answer few of many
# approvals gets a short page (with a cursor to go on), never an unbounded scan.
_SCAN_LIMIT = 2_000
_BATCH = 200


def approval_score(call: ParkedCall) -> int:
    """A call's score in the index: its park order (epoch ms x 1000 + its place in its
    step), so newer approvals score higher."""
    return call.seq


@dataclass(frozen=True)
class Approval:
    """A pending approval, in the chat ``chat_id``."""

    chat_id: str
    call: ParkedCall


@dataclass(frozen=True)
class ApprovalPage:
    """Approvals newest first; ``next`` is the cursor of the following page (None: the
    index has no more)."""

    approvals: list[Approval]
    next: str | None


def _cursor(score: int, member: str) -> str:
    return base64.urlsafe_b64encode(f"{score} {member}".encode()).decode().rstrip("=")


def _parse_cursor(cursor: str) -> tuple[int, str]:
    bad = CallerError("'after' is not a cursor this server gave out (send the 'next' of a page)")
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        score, member = text.split(" ", 1)
        return int(score), member
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None


def _pairs(raw: Any) -> list[tuple[str, int]]:
    """A ``WITHSCORES`` reply as (member, score) pairs."""
    return [(as_text(pair[0]), int(pair[1])) for pair in raw]


class ApprovalIndex:
    """``pw:approvals``, read for one approver at a time."""

    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis

    async def page(
        self,
        principal: str,
        roles: frozenset[str],
        *,
        now: float,
        limit: int = 50,
        after: str | None = None,
    ) -> ApprovalPage:
        """Up to ``limit`` pending approvals ``principal`` (holding ``roles``) may
        answer, newest first, after the cursor ``after``; ones whose deadline (``now``,
        seconds) has passed are left out, the sweeper's to time out."""
        limit = max(1, min(limit, MAX_APPROVALS_PAGE))
        top: tuple[int, str] | None = None if after is None else _parse_cursor(after)
        found: list[Approval] = []
        scanned = 0
        last: tuple[int, str] | None = top
        while scanned < _SCAN_LIMIT:
            batch = await self._batch(last)
            if not batch:
                return ApprovalPage(found, None)
            scanned += len(batch)
            calls = await self._calls(batch)
            for (member, score), call in zip(batch, calls, strict=True):
                last = (score, member)
                if call is None:
                    continue
                if call.deadline is not None and call.deadline <= now:
                    continue
                if may_answer(call, principal, roles, call.requester or "") != "yes":
                    continue
                found.append(Approval(parse_deadline_member(member)[0], call))
                if len(found) == limit:
                    return ApprovalPage(found, _cursor(score, member))
        return ApprovalPage(found, None if last is None else _cursor(*last))

    async def _batch(self, after: tuple[int, str] | None) -> list[tuple[str, int]]:
        """Members after ``after`` (score, member), newest first. Members of one score
        come in reverse lexical order, so those at the cursor's score from its member
        down were read already."""
        if after is None:
            raw = await self.redis.zrevrangebyscore(
                APPROVALS, "+inf", "-inf", start=0, num=_BATCH, withscores=True
            )
            return _pairs(raw)
        score, member = after
        raw = await self.redis.zrevrangebyscore(
            APPROVALS, score, "-inf", start=0, num=_BATCH, withscores=True
        )
        out = [(m, s) for m, s in _pairs(raw) if s < score or m < member]
        if not out and len(raw) == _BATCH:  # a whole batch at one score: step past it
            raw = await self.redis.zrevrangebyscore(
                APPROVALS, f"({score}", "-inf", start=0, num=_BATCH, withscores=True
            )
            out = _pairs(raw)
        return out

    async def _calls(self, batch: Sequence[tuple[str, int]]) -> list[ParkedCall | None]:
        """The pending call of each member (None for one that is not pending, whose
        member is dropped): one pipelined round trip, and one more to drop any."""
        pipe = self.redis.pipeline(transaction=False)
        for member, _ in batch:
            chat_id, call_id = parse_deadline_member(member)
            keys = chat_keys(chat_id)
            pipe.hget(keys.calls, call_id)
            pipe.hexists(keys.outcomes, call_id)
        replies = await pipe.execute()
        calls: list[ParkedCall | None] = []
        stale: list[str] = []
        for i, (member, _) in enumerate(batch):
            record, settled = replies[2 * i], replies[2 * i + 1]
            if record is None or settled:
                calls.append(None)
                stale.append(member)
                continue
            calls.append(decode_call(record))
        if stale:
            await self.redis.zrem(APPROVALS, *stale)
        return calls
