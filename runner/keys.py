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
    "LOGWATCH_CHANNEL",
    "MAX_CALL_ID",
    "ChatKeys",
    "chat_keys",
    "check_call_id",
    "check_chat_id",
    "deadline_member",
    "parse_deadline_member",
]

CHAT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# Parkway's own call ids are about 20 characters and providers' well under 100; a longer
# one names no call, and is refused without being repeated back.
MAX_CALL_ID = 256


# sorted set, the one cross-chat index: member "<chat id> <toolCallId>", score = the
# call's deadline (epoch ms). Written with the commit that parks the call; members are
# removed by the settle of that call, or by the sweeper once it has settled (or found
# settled) an expired call. No TTL: every member's owner (its call) removes it.
DEADLINES = "pw:deadlines"

# pub/sub channel (not a key) that every worker's log watch subscribes to first, so its
# connection stays open while no chat has followers (runner/logwatch.py). Nothing is
# published on it.
LOGWATCH_CHANNEL = "pw:logwatch"


def deadline_member(chat_id: str, tool_call_id: str) -> str:
    return f"{chat_id} {tool_call_id}"


def parse_deadline_member(member: str) -> tuple[str, str]:
    chat_id, _, tool_call_id = member.partition(" ")
    return chat_id, tool_call_id


def check_chat_id(chat_id: str) -> str:
    """Return ``chat_id`` if it is a valid chat id, else raise :class:`CallerError`."""
    if not isinstance(chat_id, str) or not CHAT_ID.fullmatch(chat_id):
        raise CallerError(
            "chat id must be 1-128 characters of letters, digits, '_', '.', ':' or '-'"
        )
    return chat_id


def check_call_id(tool_call_id: str) -> str:
    """Return ``tool_call_id`` if it can name a call, else raise :class:`CallerError`
    (whose message does not repeat it)."""
    if not isinstance(tool_call_id, str) or not 0 < len(tool_call_id) <= MAX_CALL_ID:
        raise CallerError(f"a tool call id is 1-{MAX_CALL_ID} characters")
    return tool_call_id


class ChatKeys:
    """The keys of one chat."""

    __slots__ = ("calls", "chat_id", "events", "history", "meta", "outcomes", "pending", "wake")

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
        # pub/sub channel (not a key): every append to the event log publishes on it,
        # so the followers of the chat on any worker read the log again.
        self.wake = f"{tag}:wake"

    def settle_attempt(self, tool_call_id: str) -> str:
        """string: the nonce of the settle that won a call, so that the same attempt
        sent again (its reply lost) is told it won. TTL 60 s."""
        return f"pw:{{{self.chat_id}}}:settled:{tool_call_id}"

    def all(self) -> tuple[str, ...]:
        return (self.meta, self.history, self.calls, self.outcomes, self.pending, self.events)


def chat_keys(chat_id: str) -> ChatKeys:
    return ChatKeys(check_chat_id(chat_id))


# -- the connect flow (widgets_api/connect/) -------------------------------------------


def flow_key(state_digest: str) -> str:
    """string: one OAuth flow's record (JSON: chat, call, principal, provider, issuer,
    PKCE verifier, per-flow cookie hash, playground origin), keyed by the SHA-256 of its
    ``state``. Written by ``start``, taken once (GETDEL) by the callback, deleted early
    by a second ``start`` for the same call or by the user's cancel. TTL: the flow TTL
    (10 minutes by default)."""
    return f"pw:flow:{{{state_digest}}}"


def flow_pointer_key(chat_id: str, tool_call_id: str) -> str:
    """string: the state digest of the current flow of one parked call, so a second
    ``start`` or a cancel can invalidate the earlier flow. Same TTL as the flow."""
    return f"pw:{{{check_chat_id(chat_id)}}}:flow:{tool_call_id}"


def start_token_key(chat_id: str, tool_call_id: str, nonce: str) -> str:
    """string "1": a spent connect start token of one parked call, named by the random
    nonce sealed inside it, so a token starts one flow only. Written once (SET NX) by
    ``start``; TTL: what was left of the token's lifetime; expires only."""
    return f"pw:{{{check_chat_id(chat_id)}}}:start:{tool_call_id}:{nonce}"


class ConnectionKeys:
    """The keys of one principal's connections (widgets_api/connections.py), all under
    the tag ``{c:<digest of the principal>}``. TTL: the connection TTL (default 180
    days), refreshed whenever a connection is stored, used or refreshed; a DELETE of the
    connection removes its keys at once."""

    __slots__ = ("by_subject", "index", "tag")

    def __init__(self, principal_digest: str) -> None:
        self.tag = f"pw:{{c:{principal_digest}}}"
        # set of the principal's connection ids.
        self.index = f"{self.tag}:index"
        # hash "<provider> <subject>" -> connection id: reconnecting the same account
        # updates its connection instead of adding another.
        self.by_subject = f"{self.tag}:subjects"

    def connection(self, connection_id: str) -> str:
        """hash: provider, account, subject, scopes, status, times, and the tokens
        encrypted (AES-GCM, bound to this principal and connection id)."""
        return f"{self.tag}:conn:{connection_id}"

    def refresh_lock(self, connection_id: str) -> str:
        """string: the holder of the one refresh allowed at a time for a connection
        (SET NX PX; released by compare-and-delete). TTL: the lock timeout."""
        return f"{self.tag}:lock:{connection_id}"


# -- agent revisions (runner/agents.py) -------------------------------------------------

AGENT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class AgentKeys:
    """The keys of one agent's revisions, under the tag ``{agent:<id>}``. No TTL: an
    agent's revisions are its configuration, owned by the operator; nothing in Parkway
    deletes them (tests/topologies.py exempts them from the TTL check)."""

    __slots__ = ("head", "revisions")

    def __init__(self, agent_id: str) -> None:
        if not AGENT_ID.match(agent_id):
            raise CallerError("an agent id is 1-64 of letters, digits, '_', '.' and '-'")
        tag = f"pw:{{agent:{agent_id}}}"
        # hash: version, revision_id, digest, seed_digest, record (the head's JSON).
        self.head = f"{tag}:head"
        # hash version -> revision record JSON (template, time, author, summary).
        self.revisions = f"{tag}:revisions"


# -- the built-in demo OAuth provider (widgets_api/demo_provider/) ---------------------

# The provider's Redis keys, "pw:demo-oauth:<kind>:<id>"; <digest> is the hex SHA-256 of
# the secret. The scripts span several keys, so the provider runs on one Redis node.
#   consent:<digest of form id>  string, JSON of the validated authorization request;
#                                TTL CONSENT_TTL_S; GETDEL by the form post
#   code:<digest>                string, JSON of the code record, then "spent:<grant id>"
#                                once redeemed, "revoked" after a replay; TTL CODE_TTL_S,
#                                then SPENT_CODE_TTL_S; expires only
#   grant:<grant id>             hash client_id, account, scope, refresh (digest of the
#                                current refresh token); TTL GRANT_TTL_S from the last
#                                rotation; deleted by revocation or refresh-token reuse
#   refresh:<digest>             string, grant id; TTL GRANT_TTL_S; kept after rotation
#                                (it is how reuse is detected); expires only
#   access:<digest>              string, JSON of the access record; TTL the access token
#                                lifetime; deleted by revocation
DEMO_OAUTH_PREFIX = "pw:demo-oauth:"


def demo_oauth_key(kind: str, ident: str) -> str:
    return f"{DEMO_OAUTH_PREFIX}{kind}:{ident}"


def owned_without_ttl(key: bytes | str) -> bool:
    """Keys that legitimately have no TTL because an owner deletes them: the deadline
    index and agent revisions. (The keyspace checks of the tests use this.)"""
    text = key.decode() if isinstance(key, bytes) else key
    return text == DEADLINES or text.startswith("pw:{agent:")
