"""Every Redis key Parkway uses, in one place.

All keys of one chat share the hash tag ``{<chat id>}`` so each multi-key operation
(every Lua script here) stays on one Redis Cluster slot. Chat ids are restricted to
``[A-Za-z0-9_.:-]`` so they can never break out of the tag.

Lifetime: every per-chat key gets the chat TTL (settings ``chat_ttl_s``, default
7 days) from each script that writes the chat (a claim, a commit, a settle refreshes the
keys it is given), so an abandoned chat disappears on its own; nothing else deletes
them.
"""

from __future__ import annotations

import re

from runner.errors import CallerError

__all__ = [
    "CHAT_ID",
    "DEADLINES",
    "ChatKeys",
    "chat_keys",
    "check_chat_id",
    "deadline_member",
    "parse_deadline_member",
]

CHAT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


# sorted set, the one cross-chat index: member "<chat id> <toolCallId>", score = the
# call's deadline (epoch ms). Written with the commit that parks the call; members are
# removed by the settle of that call, or by the sweeper once it has settled (or found
# settled) an expired call. No TTL: every member's owner (its call) removes it.
DEADLINES = "pw:deadlines"


def deadline_member(chat_id: str, tool_call_id: str) -> str:
    return f"{chat_id} {tool_call_id}"


def parse_deadline_member(member: str) -> tuple[str, str]:
    chat_id, _, tool_call_id = member.partition(" ")
    return chat_id, tool_call_id


def check_chat_id(chat_id: str) -> str:
    """Return ``chat_id`` if it is a valid chat id, else raise :class:`CallerError`."""
    if not isinstance(chat_id, str) or not CHAT_ID.match(chat_id):
        raise CallerError(
            "chat id must be 1-128 characters of letters, digits, '_', '.', ':' or '-'"
        )
    return chat_id


class ChatKeys:
    """The keys of one chat."""

    __slots__ = ("calls", "chat_id", "events", "history", "meta", "outcomes", "pending")

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        tag = f"pw:{{{chat_id}}}"
        # hash: owner, state, lease, current message id, model call count, template
        # snapshot, schema version. TTL chat_ttl_s, refreshed on every write.
        self.meta = f"{tag}:meta"
        # list of JSON history entries, append-only (RPUSH); never rewritten.
        # TTL chat_ttl_s, refreshed on every write.
        self.history = f"{tag}:history"
        # hash toolCallId -> parked call record JSON, written once at park.
        # TTL chat_ttl_s, refreshed on every write.
        self.calls = f"{tag}:calls"
        # hash toolCallId -> canonical outcome JSON, written once by the settle winner.
        # TTL chat_ttl_s, refreshed on every write.
        self.outcomes = f"{tag}:outcomes"
        # sorted set of pending toolCallIds scored by park order (FIFO for key matching);
        # members removed by settle. TTL chat_ttl_s, refreshed on every write.
        self.pending = f"{tag}:pending"

        # stream of the chat's run events (the event log that HTTP responses are views
        # of): one entry per batch, capped at about 2,000. TTL chat_ttl_s, refreshed on
        # each append.
        self.events = f"{tag}:events"

    def all(self) -> tuple[str, ...]:
        return (self.meta, self.history, self.calls, self.outcomes, self.pending, self.events)


def chat_keys(chat_id: str) -> ChatKeys:
    return ChatKeys(check_chat_id(chat_id))
