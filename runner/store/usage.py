"""Quotas: how much one principal may store, counted on the writes that already happen.

What counts (``bytes`` of a chat's meta, runner/store/scripts/): the history entries,
parked call records and outcomes a chat stores, and its artifacts; each script that
writes one of them adds its size in the same atomic step, so counting costs no round
trip. A principal's total is the sum of its live chats' counts, kept in its usage keys
(:class:`~parkway.runner.store.keys.UsageKeys`). A turn's claim rolls the chat's count
up into that total and refuses the turn when the total is at the quota, or a new chat
when the principal has as many live chats as it may; an artifact is stored only if the
total stays within the quota and the chat has room for one more. Nothing is refused
half-way through: a run that has started stores what it produces (its own output is
bounded by the run's limits), so the next turn finds the quota used up.

Not counted: a chat's event log, which lives only for its running run and
``log_keep_s`` after (capped at about 2,000 entries), and the audit trail; the agent's
function library is bounded by its approvals and its own size limits. The agent's
template snapshot is the operator's, not the principal's.

On one Redis (or Sentinel) the check and the write are one script. On a Cluster the
usage keys live in another slot than the chat's, so the check is its own round trip
before the claim or the artifact it guards (:class:`UsageGate`): two requests racing
there may both pass, overshooting the quota by what they store.

A chat counts from the roll-up of its last turn (or artifact) for the chat TTL; a chat
written later than that lives longer than its count does, and counts again from its
next turn.

What the principals of one address (anonymous sessions) store together is counted apart,
in the address's own keys: :mod:`parkway.runner.store.addresses`.
"""

from __future__ import annotations

from dataclasses import dataclass

from parkway.runner.errors import QuotaExceededError
from parkway.runner.store.client import RedisClient, as_text
from parkway.runner.store.keys import ChatKeys, usage_keys
from parkway.runner.store.scripts import USAGE

__all__ = ["Quotas", "UsageGate", "quota_error"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class Quotas:
    """One principal's limits (settings ``quota_stored_bytes``, ``quota_live_chats``,
    ``quota_artifacts_per_chat``; docs/operations.md, "Quotas")."""

    stored_bytes: int = 256 * MIB
    live_chats: int = 1000
    artifacts_per_chat: int = 256


_TEXT = {
    "stored_bytes": "you have used your storage quota ({limit} bytes); nothing was stored. "
    "Chats expire on their own after their time to live",
    "live_chats": "you have as many chats as you may keep ({limit}); older ones expire on "
    "their own after their time to live",
    "artifacts_per_chat": "this chat holds as many artifacts as it may ({limit})",
}


def quota_error(name: str, quotas: Quotas) -> QuotaExceededError:
    """The error for a script's ``{'quota', name}`` refusal."""
    limit = int(getattr(quotas, name))
    return QuotaExceededError(name, limit, _TEXT[name].format(limit=limit))


class UsageGate:
    """A Cluster's quota check (see the module's docstring): one script on the
    principal's usage keys, before the write it guards."""

    def __init__(self, redis: RedisClient, quotas: Quotas, ttl_s: int) -> None:
        self.redis = redis
        self.quotas = quotas
        self.ttl_s = ttl_s
        self._usage = redis.register_script(USAGE)

    async def check_turn(self, keys: ChatKeys, principal: str, now_ms: int) -> None:
        """Roll the chat's count up (when it is ``principal``'s) and raise
        :class:`QuotaExceededError` when a turn is not allowed."""
        owner, stored = await self.redis.hmget(keys.meta, ["owner", "bytes"])
        new = owner is None
        mine = "" if new or as_text(owner) != principal else as_text(stored or b"0")
        await self._check(keys, principal, now_ms, mine, add=1, new_chat=new)

    async def check_artifact(
        self, keys: ChatKeys, principal: str, now_ms: int, chat_bytes: int, size: int
    ) -> None:
        await self._check(keys, principal, now_ms, str(chat_bytes), add=size, new_chat=False)

    async def _check(self, keys: ChatKeys, principal: str, now_ms: int, mine: str, *,
                     add: int, new_chat: bool) -> None:  # fmt: skip
        usage = usage_keys(principal)
        reply = await self._usage(
            keys=[usage.bytes, usage.chats],
            args=[keys.chat_id, mine, now_ms, self.ttl_s, add, self.quotas.stored_bytes,
                  self.quotas.live_chats if new_chat else ""],
        )  # fmt: skip
        if as_text(reply[0]) == "quota":
            raise quota_error(as_text(reply[1]), self.quotas)
