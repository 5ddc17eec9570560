"""The connect flow's state in Redis: one record per started flow, and a pointer per call.

A flow's record is stored under the SHA-256 digest of its ``state`` (never the state
itself) and taken once; the per-call pointer lets a second ``start`` or the user's
cancel invalidate the earlier flow. Both expire with the flow TTL.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from parkway.runner.store import RedisClient, as_text
from parkway.widgets_api.keys import flow_key, flow_pointer_key

__all__ = ["FlowRecord", "FlowStore", "outcome_summary"]


class FlowRecord(BaseModel):
    """One started flow, as stored under its state's digest (version 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    chat: str
    call: str
    principal: str
    provider: str
    issuer: str | None
    verifier: str | None
    cookie_hash: str
    origin: str
    redirect_uri: str
    scopes: list[str]
    retry: bool
    created: float
    # started with a ticket (start_tokens.py): the callback's popup may have no identity
    ticket: bool = False
    # the RFC 8707 resource asked for (an MCP server's canonical URL), on both the
    # authorization and the token request
    resource: str | None = None


def outcome_summary(outcome: dict[str, Any] | None) -> str:
    """One word for a connect call's recorded outcome: ``connected`` or the reason."""
    if outcome is None:
        return "pending"
    if outcome.get("outcome") == "output":
        output = outcome.get("output") or {}
        return "connected" if output.get("connected") else str(output.get("reason", "error"))
    return str(outcome.get("outcome"))


_text = as_text


class FlowStore:
    """Started flows: saved by ``start``, taken once by the callback, forgotten when the
    browser settles the call."""

    def __init__(self, redis: RedisClient, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s

    async def save(self, digest: str, record: FlowRecord) -> None:
        """Store ``record`` under ``digest``; one live flow per call, so the older state
        of the same call dies."""
        pointer = flow_pointer_key(record.chat, record.call)
        previous = await self.redis.get(pointer)
        async with self.redis.pipeline(transaction=False) as pipe:
            if previous is not None:
                pipe.delete(flow_key(_text(previous)))
            pipe.set(flow_key(digest), record.model_dump_json(), ex=self.ttl_s)
            pipe.set(pointer, digest, ex=self.ttl_s)
            await pipe.execute()

    async def take(self, digest: str) -> FlowRecord | None:
        """The flow of ``digest``, removed in the same step (GETDEL: single use, whatever
        follows); ``None`` when unknown, already used or expired. Raises pydantic's
        ``ValidationError`` when the stored record cannot be read."""
        raw = await self.redis.getdel(flow_key(digest))
        if raw is None:
            return None
        return FlowRecord.model_validate_json(raw)

    async def forget(self, chat_id: str, call_id: str) -> None:
        """Drop the current flow of a call, so a callback arriving later is refused."""
        digest = await self.redis.getdel(flow_pointer_key(chat_id, call_id))
        if digest is not None:
            await self.redis.delete(flow_key(_text(digest)))
