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
from redis.exceptions import NoScriptError, ResponseError

from runner import _scripts
from runner.keys import DEADLINES, ChatKeys, deadline_member
from runner.parking import ParkedCall, decode_call, encode_call

__all__ = ["SCHEMA_VERSION", "ChatRecord", "ChatStore"]

SCHEMA_VERSION = "1"


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _flat(mapping: Mapping[str, int]) -> list[Any]:
    """ZADD arguments: score, member, score, member, ..."""
    out: list[Any] = []
    for member, score in mapping.items():
        out.extend((score, member))
    return out


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
        script_keys = [keys.meta, keys.history, keys.calls, keys.pending, keys.outcomes]
        deadlines = {
            deadline_member(keys.chat_id, c.tool_call_id): int(c.deadline * 1000)
            for c in calls
            if c.deadline is not None
        }
        if not deadlines:
            return bool(await self._commit(keys=script_keys, args=args))
        # The deadline index is a global key (another Cluster slot), so it cannot be
        # written inside the script; it goes first in the same round trip. A deadline for
        # a call whose commit then fails is harmless: the sweeper finds no such call.
        results = await self._pipeline_with(
            self._commit, script_keys, args, [("ZADD", DEADLINES, *_flat(deadlines))]
        )
        return bool(results[-1])

    async def settle(self, keys: ChatKeys, tool_call_id: str, outcome_json: str) -> list[str]:
        """Run SETTLE and drop the call's deadline (one round trip): once a call has an
        outcome, settled now or earlier, it has nothing left to time out."""
        results = await self._pipeline_with(
            self._settle,
            [keys.calls, keys.outcomes, keys.pending, keys.meta, keys.history],
            [tool_call_id, outcome_json, self.ttl_s],
            [("ZREM", DEADLINES, deadline_member(keys.chat_id, tool_call_id))],
            script_last=False,
        )
        return [_s(x) for x in results[0]]

    async def _pipeline_with(
        self,
        script: Any,
        keys: Sequence[str],
        args: Sequence[Any],
        extra: Sequence[tuple[Any, ...]],
        *,
        script_last: bool = True,
    ) -> list[Any]:
        """A script and a few plain commands in one round trip.

        The script goes as a raw EVALSHA: a registered Script inside a pipeline makes
        redis-py send SCRIPT EXISTS first, an extra round trip. On NOSCRIPT (the first use
        after Redis started) the script is loaded and the whole pipeline sent again; the
        extra commands are idempotent and the script did not run.
        """
        for attempt in range(2):
            pipe = self.redis.pipeline(transaction=False)
            if not script_last:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            for command in extra:
                pipe.execute_command(*command)
            if script_last:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            results = await pipe.execute(raise_on_error=False)
            position = -1 if script_last else 0
            outcome = results[position]
            missing = isinstance(outcome, NoScriptError) or (
                isinstance(outcome, ResponseError) and "NOSCRIPT" in str(outcome)
            )
            if missing and attempt == 0:
                await self.redis.script_load(script.script)
                continue
            for item in results:
                if isinstance(item, Exception):
                    raise item
            return list(results)
        raise RuntimeError("unreachable")

    async def pending_count(self, keys: ChatKeys) -> int:
        return int(await self.redis.zcard(keys.pending))

    async def owner(self, keys: ChatKeys) -> str | None:
        value = await self.redis.hget(keys.meta, "owner")
        return None if value is None else _s(value)

    async def calls(
        self, keys: ChatKeys, ids: Sequence[str] | None = None, *, drop_deadlines: bool = False
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
        if drop_deadlines:  # the caller finishes these calls: nothing left to time out
            pipe.zrem(DEADLINES, *(deadline_member(keys.chat_id, i) for i in ids))
        owner, records, outcomes, *_ = await pipe.execute()
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
