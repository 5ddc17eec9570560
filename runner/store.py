"""The Redis store: the only place that talks to Redis about chats.

Every transition that can race runs as one Lua script (:mod:`runner._scripts`); reads
are pipelined so a park or a resume costs a fixed, small number of round trips,
whatever the history's length.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from runner import _scripts
from runner.keys import ChatKeys
from runner.parking import ParkedCall, decode_call, encode_call

__all__ = ["SCHEMA_VERSION", "ChatRecord", "ChatStore"]

SCHEMA_VERSION = "1"


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _decode_pairs(flat: Sequence[Any]) -> list[ParkedCall]:
    """Calls from a flat list of (record JSON, outcome JSON or '') pairs."""
    return [decode_call(flat[i], flat[i + 1] or None) for i in range(0, len(flat), 2) if flat[i]]


@dataclass(frozen=True)
class ChatRecord:
    """Everything stored for one chat, read in one round trip."""

    meta: Mapping[str, str]
    entries: Sequence[Mapping[str, Any]]
    calls: Sequence[ParkedCall]

    @property
    def owner(self) -> str | None:
        return self.meta.get("owner")


class ChatStore:
    """Chat state in Redis. ``ttl_s`` is given to every chat key on every write."""

    def __init__(self, redis: Redis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self._claim_turn = redis.register_script(_scripts.CLAIM_TURN)
        self._claim_resume = redis.register_script(_scripts.CLAIM_RESUME)
        self._commit = redis.register_script(_scripts.COMMIT)
        self._settle = redis.register_script(_scripts.SETTLE)
        self._renew = redis.register_script(_scripts.RENEW)
        self._pending = redis.register_script(_scripts.PENDING)

    async def claim_turn(
        self,
        keys: ChatKeys,
        *,
        principal: str,
        token: str,
        now_ms: int,
        lease_ms: int,
        user_message_id: str,
        supersede_outcome: str,
        message_id: str,
        template_digest: str,
        template_json: str,
    ) -> list[str]:
        """Run CLAIM_TURN (one round trip; the history comes back with the claim)."""
        result = await self._claim_turn(
            keys=[keys.meta, keys.pending, keys.outcomes, keys.history, keys.calls],
            args=[
                SCHEMA_VERSION,
                principal,
                token,
                now_ms,
                lease_ms,
                user_message_id,
                supersede_outcome,
                self.ttl_s,
                message_id,
                template_digest,
                template_json,
            ],
        )
        return [_s(x) for x in result]

    async def claim_resume(
        self, keys: ChatKeys, *, principal: str, token: str, now_ms: int, lease_ms: int
    ) -> tuple[list[str], list[ParkedCall]]:
        """Run CLAIM_RESUME. One round trip brings the claim's fields, the parked step's
        calls with their outcomes, and the history (``fields[5:]``)."""
        raw = await self._claim_resume(
            keys=[keys.meta, keys.pending, keys.history, keys.calls, keys.outcomes],
            args=[SCHEMA_VERSION, principal, token, now_ms, lease_ms, self.ttl_s],
        )
        if _s(raw[0]) != "ok":
            return [_s(x) for x in raw], []
        count = int(raw[5])
        calls = _decode_pairs(raw[6 : 6 + 2 * count])
        return [_s(x) for x in raw[:5]] + [_s(x) for x in raw[6 + 2 * count :]], calls

    async def renew(self, keys: ChatKeys, *, token: str, now_ms: int, lease_ms: int) -> bool:
        return bool(await self._renew(keys=[keys.meta], args=[token, now_ms, lease_ms]))

    async def commit(
        self,
        keys: ChatKeys,
        *,
        token: str,
        state: str,
        model_calls: int,
        now_ms: int,
        lease_ms: int,
        entries: Sequence[Mapping[str, Any]],
        calls: Sequence[ParkedCall] = (),
        parked_ids: Sequence[str] | None = None,
        last_uid: str | None = None,
    ) -> bool:
        """Persist a step if ``token`` still holds the lease; False if it was lost."""
        args: list[Any] = [
            token,
            state,
            self.ttl_s,
            model_calls,
            now_ms,
            lease_ms,
            "" if parked_ids is None else json.dumps(list(parked_ids)),
            last_uid or "",
            len(entries),
            len(calls),
        ]
        args.extend(json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in entries)
        for call in calls:
            args.extend((call.tool_call_id, encode_call(call), call.seq))
        ok = await self._commit(
            keys=[keys.meta, keys.history, keys.calls, keys.pending, keys.outcomes], args=args
        )
        return bool(ok)

    async def settle(self, keys: ChatKeys, tool_call_id: str, outcome_json: str) -> list[str]:
        result = await self._settle(
            keys=[keys.calls, keys.outcomes, keys.pending, keys.meta, keys.history],
            args=[tool_call_id, outcome_json, self.ttl_s],
        )
        return [_s(x) for x in result]

    async def pending_count(self, keys: ChatKeys) -> int:
        return int(await self.redis.zcard(keys.pending))

    async def owner(self, keys: ChatKeys) -> str | None:
        value = await self.redis.hget(keys.meta, "owner")
        return None if value is None else _s(value)

    async def calls(
        self, keys: ChatKeys, ids: Sequence[str] | None = None
    ) -> tuple[str | None, list[ParkedCall]]:
        """The chat's owner and its parked calls named by ``ids``, with their outcomes.

        With ``ids=None``: the pending calls, in park order. One round trip either way.
        """
        if ids is None:
            raw = await self._pending(
                keys=[keys.meta, keys.pending, keys.calls, keys.outcomes], args=[]
            )
            owner_raw = _s(raw[0])
            return (owner_raw or None), _decode_pairs(raw[2:])
        if not ids:
            owner = await self.redis.hget(keys.meta, "owner")
            return (None if owner is None else _s(owner)), []
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(keys.meta, "owner")
        pipe.hmget(keys.calls, list(ids))
        pipe.hmget(keys.outcomes, list(ids))
        owner, records, outcomes = await pipe.execute()
        calls = [decode_call(rec, out) for rec, out in zip(records, outcomes, strict=True) if rec]
        return (None if owner is None else _s(owner)), calls

    async def load(self, keys: ChatKeys) -> ChatRecord | None:
        """The whole chat (meta, history, every parked call), or None if absent."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.meta)
        pipe.lrange(keys.history, 0, -1)
        pipe.hgetall(keys.calls)
        pipe.hgetall(keys.outcomes)
        meta_raw, history, calls_raw, outcomes_raw = await pipe.execute()
        if not meta_raw:
            return None
        meta = {_s(k): _s(v) for k, v in meta_raw.items()}
        outcomes = {_s(k): v for k, v in outcomes_raw.items()}
        calls = sorted(
            (decode_call(v, outcomes.get(_s(k))) for k, v in calls_raw.items()),
            key=lambda c: c.seq,
        )
        return ChatRecord(meta=meta, entries=[json.loads(h) for h in history], calls=calls)
