"""The links MCP servers asked people to open, by the server's elicitation id.

A call parked on a URL elicitation (an older server's -32042, runner/mcp/input.py) waits
for a person to say they finished. A 2025-11-25 server may say so itself, with
``notifications/elicitation/complete`` naming the elicitation's id, on the session that
made the call. :class:`McpLinks` lets whichever worker receives it find the call: the
engine :meth:`~McpLinks.remember`\\ s each link when its call parks, and
:meth:`~McpLinks.complete` notes a completion and says, once every link of the call is
completed, which call to settle. Keys: :func:`~parkway.runner.store.keys.mcp_link_key`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from parkway.runner.store.client import RedisClient
from parkway.runner.store.keys import mcp_link_done_key, mcp_link_key

__all__ = ["McpLink", "McpLinks"]

# The keys outlive the call's deadline by this much (a completion that arrives just
# after the deadline finds the call timed out, and settles nothing).
_GRACE_S = 60


@dataclass(frozen=True)
class McpLink:
    """A parked call's links: its chat, id, owner, and its links' elicitation ids."""

    chat_id: str
    tool_call_id: str
    principal: str
    keys: tuple[str, ...]


class McpLinks:
    """The link index (see the module doc)."""

    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis

    async def remember(self, scope: str, link: McpLink, ttl_s: float) -> None:
        """Index each of ``link``'s elicitation ids for ``ttl_s`` (its call's deadline
        from now) and a grace minute."""
        value = json.dumps(
            {"chat": link.chat_id, "call": link.tool_call_id, "principal": link.principal,
             "keys": list(link.keys)},
            separators=(",", ":"),
        )  # fmt: skip
        ttl = max(1, int(ttl_s) + _GRACE_S)
        pipe = self.redis.pipeline(transaction=False)
        for key in link.keys:
            pipe.set(mcp_link_key(scope, key), value, ex=ttl)
        await pipe.execute()

    async def complete(self, scope: str, elicitation_id: str) -> McpLink | None:
        """Note that the server completed ``elicitation_id``; the call to settle when
        that was its last link not yet completed, else None (an unknown id: no call of
        this server's waits for it)."""
        raw = await self.redis.get(mcp_link_key(scope, elicitation_id))
        if raw is None:
            return None
        data = json.loads(raw)
        link = McpLink(
            str(data["chat"]), str(data["call"]), str(data["principal"]),
            tuple(str(k) for k in data["keys"]),
        )  # fmt: skip
        if len(link.keys) == 1:
            return link
        done_key = mcp_link_done_key(scope, link.chat_id, link.tool_call_id)
        ttl = await self.redis.ttl(mcp_link_key(scope, elicitation_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.sadd(done_key, elicitation_id)
        pipe.expire(done_key, max(1, int(ttl)))
        pipe.smembers(done_key)
        _, _, done = await pipe.execute()
        finished = {d.decode() if isinstance(d, bytes) else str(d) for d in done}
        return link if finished >= set(link.keys) else None

    async def forget(self, scope: str, link: McpLink, keys: Sequence[str] = ()) -> None:
        """Drop ``link``'s keys (its call was settled)."""
        names = [mcp_link_key(scope, key) for key in (keys or link.keys)]
        names.append(mcp_link_done_key(scope, link.chat_id, link.tool_call_id))
        await self.redis.delete(*names)
