"""Live questions: what a running call asks the chat's person and waits for.

An older MCP server may ask a form question in the middle of a call (runner/mcp/input.py);
the call cannot park, so the person is asked while it waits, for a bounded time
(runner/engine/live.py). :class:`LiveStore` keeps each question in the chat's
:meth:`~parkway.runner.store.keys.ChatKeys.live` hash, where any worker's HTTP route can
answer it and the asking worker, polling, finds the answer. Three scripts decide every
race (:mod:`parkway.runner.store.scripts`): LIVE_ANSWER lets the first answer win, and
only while the wait is on; LIVE_CLOSE ends the wait (an answer that won just before is
still read, one that comes after finds the question expired); LIVE_POLL reads and marks
the asking worker as still there, so an answer posted after that worker died is refused
instead of lost silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from parkway.runner.store import scripts
from parkway.runner.store.client import RedisClient
from parkway.runner.store.keys import ChatKeys

__all__ = ["LIVE_UNSEEN_MS", "LiveRecord", "LiveStore"]

# An answer finds the question expired when its worker has not looked for this long (it
# died, or was cut off from Redis): the poll looks several times a second.
LIVE_UNSEEN_MS = 10_000
# The question outlives its wait by this much (an answer that comes late is told so).
_GRACE_S = 120


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class LiveRecord:
    """A live question as its answerer sees it: whose (``principal``, ``call``), the
    form's ``schema`` and the wait's ``deadline`` (epoch ms)."""

    principal: str
    call: str
    schema: Mapping[str, Any]
    deadline: int
    state: str


class LiveStore:
    """The live questions of every chat (see the module doc)."""

    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis
        self._answer = redis.register_script(scripts.LIVE_ANSWER)
        self._poll = redis.register_script(scripts.LIVE_POLL)
        self._close = redis.register_script(scripts.LIVE_CLOSE)

    async def open(
        self,
        keys: ChatKeys,
        live_id: str,
        *,
        principal: str,
        call: str,
        schema: Mapping[str, Any],
        now_ms: int,
        deadline_ms: int,
    ) -> None:
        """Store a new question, open until ``deadline_ms``."""
        key = keys.live(live_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(
            key,
            mapping={
                "state": "open", "principal": principal, "call": call,
                "schema": json.dumps(schema, separators=(",", ":")),
                "deadline": deadline_ms, "seen": now_ms,
            },
        )  # fmt: skip
        pipe.expire(key, max(1, (deadline_ms - now_ms) // 1000 + _GRACE_S))
        await pipe.execute()

    async def record(self, keys: ChatKeys, live_id: str) -> LiveRecord | None:
        """The question ``live_id``, or None when there is none."""
        found = await self.redis.hmget(
            keys.live(live_id), ["principal", "call", "schema", "deadline", "state"]
        )
        if found[0] is None:
            return None
        principal, call, schema, deadline, state = (_s(v or b"") for v in found)
        return LiveRecord(principal, call, json.loads(schema or "{}"), int(deadline or 0), state)

    async def answer(
        self,
        keys: ChatKeys,
        live_id: str,
        *,
        principal: str,
        call: str,
        answer: Mapping[str, Any],
        now_ms: int,
    ) -> Literal["ok", "same", "missing", "answered", "expired"]:
        """Record ``answer`` if it is the first and the wait is on (LIVE_ANSWER)."""
        encoded = json.dumps(answer, separators=(",", ":"), sort_keys=True)
        reply = await self._answer(
            keys=[keys.live(live_id)],
            args=[principal, call, encoded, now_ms, LIVE_UNSEEN_MS],
        )
        return _s(reply)  # type: ignore[return-value]

    async def poll(self, keys: ChatKeys, live_id: str, now_ms: int) -> tuple[str, Any]:
        """The question's state and its answer (None unless answered); ``('', None)``
        when it is gone."""
        state, answer = await self._poll(keys=[keys.live(live_id)], args=[now_ms])
        text = _s(answer)
        return _s(state), (json.loads(text) if text else None)

    async def close(self, keys: ChatKeys, live_id: str) -> Any:
        """End the wait: the answer that won (None when none did; the question expires)."""
        text = _s(await self._close(keys=[keys.live(live_id)]))
        return json.loads(text) if text else None
