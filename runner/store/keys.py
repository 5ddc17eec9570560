"""Every Redis key the runner uses, in one place (widgets_api keeps its own connect flow,
connection and demo provider keys in ``widgets_api/keys.py``).

All keys of one chat share the hash tag ``{<chat id>}`` so each multi-key operation
(every Lua script here) stays on one Redis Cluster slot. Chat ids are restricted to
``[A-Za-z0-9_.:-]`` so they can never break out of the tag.

Lifetime: every per-chat key gets the chat TTL (settings ``chat_ttl_s``, default
7 days) from each script that writes the chat (a claim, a commit, a settle refreshes the
keys it is given), so an abandoned chat disappears on its own; nothing else deletes
them. The one exception is the chat's audit trail (:attr:`ChatKeys.audit`), kept for
``audit_keep_s`` (default 90 days) so that who decided what outlives the chat.
"""

from __future__ import annotations

import hashlib
import re

from parkway.runner.errors import CallerError

__all__ = [
    "APPROVALS",
    "CHAT_ID",
    "DEADLINES",
    "LOGWATCH_CHANNEL",
    "MAX_CALL_ID",
    "ChatKeys",
    "UsageKeys",
    "address_usage_keys",
    "chat_keys",
    "check_call_id",
    "check_chat_id",
    "deadline_member",
    "mcp_link_done_key",
    "mcp_link_key",
    "parse_deadline_member",
    "usage_keys",
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

# sorted set, the index of approvals someone other than the chat's owner answers (a
# role, or no self-approval: runner/parking.py): member "<chat id> <toolCallId>" (as in
# DEADLINES), score = the call's park order (epoch ms x 1000 + its place in its step), so
# an approver's queue reads newest first (runner/store/approvals.py). Written with the
# commit that parks the call; a member is removed by the settle of its call (a timeout
# is one: the sweeper's settle), or, once its call is settled, superseded or gone with
# its chat, by the read that finds it so. No TTL: every member's owner (its call)
# removes it, by its deadline at the latest.
APPROVALS = "pw:approvals"

# pub/sub channel (not a key) that every worker's log watch subscribes to first, so its
# connection stays open while no chat has followers (runner/eventlog/watch.py). Nothing is
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

    __slots__ = (
        "artifact_data",
        "artifacts",
        "audit",
        "calls",
        "chat_id",
        "events",
        "history",
        "meta",
        "outcomes",
        "pending",
        "wake",
    )

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
        # hash artifact id -> the artifact's record JSON (bytes, media type, source tool,
        # call, time), and hash artifact id -> its bytes (runner/store/artifacts.py): large
        # tool results and code output. Written once per artifact; TTL chat_ttl_s from
        # that write, refreshed by every turn's claim.
        self.artifacts = f"{tag}:artifacts"
        self.artifact_data = f"{tag}:artifact-data"
        # stream: the chat's audit trail (runner/store/audit.py), one entry per settle, written
        # by the SETTLE or ANSWER run that won it (CLAIM_TURN for the calls a new message
        # supersedes), each naming the chat's owner (the meta
        # key may expire first). Not among :meth:`all`: it outlives the chat. Trimmed by
        # age (entries older than audit_keep_s) and its TTL set to audit_keep_s on every
        # append; nothing deletes it.
        self.audit = f"{tag}:audit"

    def live(self, live_id: str) -> str:
        """hash: one live question a running call put to the chat's person
        (runner/store/live.py): ``call``, ``principal``, ``schema`` (its form's JSON
        Schema), ``deadline`` and ``seen`` (epoch ms: when the wait ends, and when its
        worker last looked), ``state`` (``open``, ``answered``, ``expired``) and
        ``answer`` (JSON). Written when the question is asked, with a TTL of its wait
        and two minutes; nothing else deletes it."""
        return f"pw:{{{self.chat_id}}}:live:{live_id}"

    def settle_attempt(self, tool_call_id: str) -> str:
        """string: the nonce of the settle that won a call, so that the same attempt
        sent again (its reply lost) is told it won. TTL 60 s."""
        return f"pw:{{{self.chat_id}}}:settled:{tool_call_id}"

    def all(self) -> tuple[str, ...]:
        return (self.meta, self.history, self.calls, self.outcomes, self.pending, self.events)


def chat_keys(chat_id: str) -> ChatKeys:
    return ChatKeys(check_chat_id(chat_id))


# -- a principal's storage use (runner/quotas.py) ---------------------------------------


class UsageKeys:
    """The keys that count one principal's stored bytes and live chats, under the tag
    ``{usage:<digest>}`` (a digest of the principal id: any string may be a principal, a
    JWT's ``sub`` included, and a key must not carry it raw); or, made by
    :func:`address_usage_keys`, the same two keys of one address under ``{addr:<digest>}``.
    Both get the chat TTL on every write, so an idle principal's (or address's) count
    goes with its last chat."""

    __slots__ = ("bytes", "chats")

    def __init__(self, principal: str, *, kind: str = "usage") -> None:
        digest = hashlib.sha256(principal.encode()).hexdigest()[:32]
        tag = f"pw:{{{kind}:{digest}}}"
        # hash chat id -> the chat's stored bytes as last rolled up, and USAGE_TOTAL ->
        # their sum (runner/store/scripts/_functions.py, USAGE_FUNCTION).
        self.bytes = f"{tag}:bytes"
        # sorted set chat id -> when the chat expires (epoch ms) as far as its last roll-up
        # knows: the live chats, and which counts to drop once a chat is gone.
        self.chats = f"{tag}:chats"


def usage_keys(principal: str) -> UsageKeys:
    return UsageKeys(principal)


def address_usage_keys(address: str) -> UsageKeys:
    """The usage keys of one address (runner/store/addresses.py): the live chats and
    stored bytes of all the principals the transport maps to it (anonymous sessions,
    by the client address that minted them), under ``{addr:<digest of the address>}``.
    Written by the ADDRESS_* scripts (the chat TTL on every write) and pruned by them as
    chats lapse; nothing else deletes them."""
    return UsageKeys(address, kind="addr")


# The links an MCP server asked a person to open (URL elicitations of parked calls,
# runner/store/links.py), under the tag ``{mcplink:<scope>}``, ``scope`` being a digest
# of the server's address and credentials' sources (runner/mcp/input.py, link_scope).


def mcp_link_key(scope: str, elicitation_id: str) -> str:
    """string, the call that waits for the link ``elicitation_id`` (the server's id), as
    JSON ``{"chat", "call", "principal", "keys"}``: written when the call parks, with a
    TTL of the call's deadline plus a minute; deleted once a completion settled the
    call, else by its TTL."""
    digest = hashlib.sha256(elicitation_id.encode()).hexdigest()[:32]
    return f"pw:{{mcplink:{scope}}}:id:{digest}"


def mcp_link_done_key(scope: str, chat_id: str, tool_call_id: str) -> str:
    """set, the elicitation ids of a call's links the server said were completed:
    written by each completion, with the TTL of the call's link keys; deleted with
    them."""
    call = hashlib.sha256(f"{chat_id} {tool_call_id}".encode()).hexdigest()[:32]
    return f"pw:{{mcplink:{scope}}}:done:{call}"


# -- agent revisions (runner/agent/revisions.py) -------------------------------------------------

AGENT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class AgentKeys:
    """The keys of one agent's revisions, under the tag ``{agent:<id>}``. No TTL: an
    agent's revisions are its configuration, owned by the operator; nothing in Parkway
    deletes them (tests/helpers/topologies.py exempts them from the TTL check)."""

    __slots__ = ("audit", "function_versions", "functions", "head", "revisions")

    def __init__(self, agent_id: str) -> None:
        if not AGENT_ID.match(agent_id):
            raise CallerError("an agent id is 1-64 of letters, digits, '_', '.' and '-'")
        tag = f"pw:{{agent:{agent_id}}}"
        # hash: version, revision_id, digest, seed_digest, record (the head's JSON).
        self.head = f"{tag}:head"
        # hash version -> revision record JSON (template, time, author, summary).
        self.revisions = f"{tag}:revisions"
        # hash function name -> its head record JSON (version, code, description, author,
        # time): the agent's function library (runner/codemode/library.py).
        self.functions = f"{tag}:functions"
        # hash "<name>@<version>" -> that version's record JSON, every version kept.
        self.function_versions = f"{tag}:function-versions"
        # stream: the agent's audit trail, one entry per committed revision (who, when,
        # version), appended by the commit script itself. Unlike the revisions it has a
        # TTL: trimmed by age and its TTL set to audit_keep_s on every append.
        self.audit = f"{tag}:audit"


def owned_without_ttl(key: bytes | str) -> bool:
    """Keys that legitimately have no TTL because an owner deletes them: the deadline
    and approvals indexes and agent revisions (not the agent's audit trail, which expires like every
    trail). (The keyspace checks of the tests use this.)"""
    text = key.decode() if isinstance(key, bytes) else key
    agent = text.startswith("pw:{agent:") and not text.endswith(":audit")
    return text in (DEADLINES, APPROVALS) or agent
