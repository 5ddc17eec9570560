"""The audit trail: who decided what about a parked call, and who changed the agent or a
connection, when and from where.

Three append-only Redis streams (keys in :mod:`parkway.runner.store.keys` and
``widgets_api/keys.py``):

- a chat's trail (:attr:`ChatKeys.audit`): one entry per settled call, appended by the
  script that wins the settle (``SETTLE`` or ``ANSWER`` in :mod:`parkway.runner.store.scripts`),
  so a settle and its entry are one atomic step: a crash cannot separate them, and an
  identical repeat, a replay or a losing settle writes nothing. Each entry names the
  chat's owner, because the trail outlives the chat's own keys;
- the agent's trail (:attr:`AgentKeys.audit`): one entry per committed revision,
  appended by the commit script (runner/agent/revisions.py);
- a principal's connection trail (``ConnectionKeys.audit``): grants and revocations,
  appended in the transaction that makes the change (widgets_api/connect/connections.py).

What an entry holds: the principal (``who``), the time (the entry's id: Redis's clock),
the source (``browser``: a client's settle or AI SDK answer; ``callback``: the OAuth
callback's settle; ``sweeper``: a deadline's timeout; ``server``: another settle the
server makes), and what: the call id, tool name, outcome kind, a digest of the input
(``sha1:`` + the SHA-1 of the call's parkedCallKey, ``tool#canonical input``: the one
hash Redis computes itself, for the sweeper's settles, whose caller does not know the
input) and, for an approval whose input the human edited, the edits as an RFC 6902 JSON
Patch from the input shown to the input approved. Never an output, a message, a token
or a code; every field is bounded.

Retention: ``audit_keep_s`` (settings; default 90 days). Each append trims entries older
than that and sets the stream's TTL to it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Self, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from parkway.runner.canonical import canonical_json
from parkway.runner.errors import CallerError, NotPlainJSONError
from parkway.runner.parking import ParkedCall
from parkway.runner.store.client import RedisClient, as_text
from parkway.runner.store.keys import ChatKeys

__all__ = [
    "AUDIT_KEEP_S",
    "MAX_EDITS_BYTES",
    "MAX_PAGE",
    "AuditEdits",
    "AuditPage",
    "AuditSource",
    "CommitEntry",
    "ConnectionEntry",
    "SettleAudit",
    "SettleEntry",
    "answer_audit",
    "chat_audit",
    "edits_of",
    "input_digest",
    "json_patch",
    "read_page",
    "settle_audit",
]

AUDIT_KEEP_S = 90 * 24 * 3600
MAX_PAGE = 200
# An edit's patch is kept whole up to this size (canonical JSON); past it, its
# operations are kept without their values (which paths changed, not to what).
MAX_EDITS_BYTES = 4096
_MAX_EDIT_OPS = 64

AuditSource = Literal["browser", "callback", "sweeper", "server"]

_STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


# -- writing: what a settle's entry records besides what Redis knows ------------------


def input_digest(key: str) -> str:
    """The digest of a call's input in its audit entry: SHA-1 of its parkedCallKey, as
    Redis's ``redis.sha1hex`` computes it for the sweeper's entries. It names the input;
    it authorises nothing (an approval is bound to the stored input itself)."""
    return "sha1:" + hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class SettleAudit:
    """The audit fields of one settle that only its caller knows: who, from where, and
    (when the caller has the call's record) its tool and input digest; '' leaves those
    two for the script to read from the record."""

    who: str
    source: AuditSource
    outcome: str
    tool: str = ""
    digest: str = ""
    edits: str = ""

    def args(self, keep_s: int) -> list[Any]:
        """SETTLE's ARGV 7-13 (runner/store/scripts/_calls.py)."""
        return [self.who, self.source, self.tool, self.digest, self.outcome, self.edits, keep_s]

    def answer_args(self) -> list[Any]:
        """ANSWER's per-call audit fields (tool, digest, outcome kind, edits)."""
        return [self.tool, self.digest, self.outcome, self.edits]


def settle_audit(
    call: ParkedCall | None, outcome: Mapping[str, Any], *, who: str, source: AuditSource
) -> SettleAudit:
    """The audit of settling ``call`` with the (normalized) ``outcome``."""
    edits = ""
    if call is not None and outcome.get("outcome") == "approved" and "input" in outcome:
        edits = edits_of(call.input, outcome["input"])
    return SettleAudit(
        who=who,
        source=source,
        outcome=str(outcome.get("outcome", "")),
        tool="" if call is None else call.tool_name,
        digest="" if call is None else input_digest(call.key),
        edits=edits,
    )


def answer_audit(
    call: ParkedCall | None, outcome_json: str, *, who: str = "", source: AuditSource = "browser"
) -> SettleAudit:
    """:func:`settle_audit` of an outcome the caller holds as canonical JSON (without
    ``call``, the script reads its tool and input from its record)."""
    outcome = orjson.loads(outcome_json)
    return settle_audit(call, outcome if isinstance(outcome, dict) else {}, who=who, source=source)


def _pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _same(a: Any, b: Any) -> bool:
    try:
        return canonical_json(a) == canonical_json(b)
    except NotPlainJSONError:
        return bool(a == b)


def json_patch(original: Any, edited: Any) -> list[dict[str, Any]]:
    """An RFC 6902 JSON Patch that turns ``original`` into ``edited``: objects are
    compared key by key, arrays index by index (extra items added or removed at the
    end), anything else replaced whole. Values compare as canonical JSON (``1`` and
    ``1.0`` alike, ``true`` and ``1`` not).

    Written here rather than taken from a library: the audit only records the diff (it
    never applies one), and these few lines cost less than another dependency."""
    ops: list[dict[str, Any]] = []
    _diff(original, edited, [], ops)
    return ops


def _diff(a: Any, b: Any, path: list[str | int], ops: list[dict[str, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a):
            if key not in b:
                ops.append({"op": "remove", "path": _pointer([*path, key])})
        for key in sorted(b):
            if key in a:
                _diff(a[key], b[key], [*path, key], ops)
            else:
                ops.append({"op": "add", "path": _pointer([*path, key]), "value": b[key]})
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(min(len(a), len(b))):
            _diff(a[i], b[i], [*path, i], ops)
        for i in range(len(a), len(b)):
            ops.append({"op": "add", "path": _pointer([*path, i]), "value": b[i]})
        # from the end, so each removal's index is still the item's
        for i in range(len(a) - 1, len(b) - 1, -1):
            ops.append({"op": "remove", "path": _pointer([*path, i])})
    elif not _same(a, b):
        ops.append({"op": "replace", "path": _pointer(path), "value": b})


def edits_of(original: Any, edited: Any) -> str:
    """The stored edits of an approval: JSON ``{"complete", "patch"}``, the patch whole
    when it fits :data:`MAX_EDITS_BYTES`, else (``complete`` false) its first operations
    without their values, so a large edit is recorded as where, not what."""
    patch = json_patch(original, edited)
    whole = canonical_json({"complete": True, "patch": patch})
    if len(whole.encode()) <= MAX_EDITS_BYTES:
        return whole
    paths = [{"op": op["op"], "path": op["path"][:256]} for op in patch[:_MAX_EDIT_OPS]]
    return canonical_json({"complete": False, "patch": paths})


# -- reading -------------------------------------------------------------------------


class _Entry(BaseModel):
    """An audit entry as stored (stream fields), read back. ``id`` is its stream id (a
    paging cursor), ``at`` its time in ms since the epoch (Redis's clock)."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True
    )
    id: str
    at: int
    principal: str | None = Field(
        default=None, description="who: the principal; null for the server's own (a timeout)"
    )
    source: str

    @classmethod
    def of(cls, entry_id: str, fields: Mapping[str, str]) -> Self:
        """The entry stored under ``entry_id`` with these stream fields."""
        raise NotImplementedError

    @staticmethod
    def _head(entry_id: str, fields: Mapping[str, str]) -> dict[str, Any]:
        """The fields every entry has, read from its stream id and fields."""
        return {
            "id": entry_id,
            "at": _ms(entry_id),
            "principal": fields.get("who") or None,
            "source": fields.get("source", ""),
        }


class AuditEdits(BaseModel):
    """An approval's edits: an RFC 6902 JSON Patch from the input shown to the input
    approved; ``complete`` false when it was too large to keep, and only the operations'
    paths were."""

    model_config = ConfigDict(frozen=True)
    complete: bool
    patch: list[dict[str, Any]]


class SettleEntry(_Entry):
    """A settled call: its outcome kind, and for an edited approval, the edits."""

    tool_call_id: str
    tool_name: str
    input_digest: str = Field(description="sha1: + the SHA-1 of the call's parkedCallKey")
    outcome: str
    edits: AuditEdits | None = None
    reason: str | None = Field(
        default=None,
        description="why the server settled it (superseded_by_user_message: the owner sent "
        "a new message while the call was pending)",
    )

    @classmethod
    def of(cls, entry_id: str, fields: Mapping[str, str]) -> Self:
        edits = fields.get("edits")
        return cls(
            **cls._head(entry_id, fields),
            tool_call_id=fields.get("call", ""),
            tool_name=fields.get("tool", ""),
            input_digest=fields.get("input", ""),
            outcome=fields.get("outcome", ""),
            edits=None if not edits else AuditEdits.model_validate_json(edits),
            reason=fields.get("reason") or None,
        )


class CommitEntry(_Entry):
    """A committed revision of the agent."""

    committed_by: str = Field(description="user, agent (commit_config) or agent-file")
    version: int
    previous_version: int
    revision_id: str
    template_digest: str
    summary: str

    @classmethod
    def of(cls, entry_id: str, fields: Mapping[str, str]) -> Self:
        return cls(
            **cls._head(entry_id, fields),
            committed_by=fields.get("by", ""),
            version=int(fields.get("version", "0")),
            previous_version=int(fields.get("previous", "0")),
            revision_id=fields.get("revision", ""),
            template_digest=fields.get("digest", ""),
            summary=fields.get("summary", ""),
        )


class ConnectionEntry(_Entry):
    """A connection granted (the OAuth callback stored it) or revoked (deleted)."""

    action: str = Field(description="granted or revoked")
    provider: str
    connection_id: str
    account: str = ""
    scopes: list[str] = []
    chat_id: str | None = None
    tool_call_id: str | None = None

    @classmethod
    def of(cls, entry_id: str, fields: Mapping[str, str]) -> Self:
        scopes = orjson.loads(fields.get("scopes") or "[]")
        return cls(
            **cls._head(entry_id, fields),
            action=fields.get("action", ""),
            provider=fields.get("provider", ""),
            connection_id=fields.get("connection", ""),
            account=fields.get("account", ""),
            scopes=[str(s) for s in scopes] if isinstance(scopes, list) else [],
            chat_id=fields.get("chat") or None,
            tool_call_id=fields.get("call") or None,
        )


E = TypeVar("E", bound=_Entry)


@dataclass(frozen=True)
class AuditPage(Generic[E]):
    """A page of entries, oldest first. ``before``: the cursor for the entries older
    than these (None when there are none); ``after``: the cursor for entries newer than
    these (the last entry's id; None for an empty trail)."""

    entries: list[E]
    before: str | None
    after: str | None


def _ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


def _check_page(before: str | None, after: str | None, limit: int) -> None:
    if before is not None and after is not None:
        raise CallerError("give one cursor, 'before' or 'after', not both")
    for cursor in (before, after):
        if cursor is not None and not _STREAM_ID.fullmatch(cursor):
            raise CallerError("a cursor is an entry id as a page's 'before' or 'after' gives it")
    if not 1 <= limit <= MAX_PAGE:
        raise CallerError(f"limit is 1-{MAX_PAGE}")


def _queue_page(pipe: Any, key: str, before: str | None, after: str | None, limit: int) -> None:
    """One page's read (one more than ``limit``, to know if there are more)."""
    if after is not None:
        pipe.xrange(key, min=f"({after}", max="+", count=limit + 1)
    else:
        pipe.xrevrange(key, max="+" if before is None else f"({before}", min="-", count=limit + 1)


def _decode(raw: Any) -> list[tuple[str, dict[str, str]]]:
    return [(as_text(i), {as_text(k): as_text(v) for k, v in f.items()}) for i, f in raw or []]


def _page(
    raw: Any, before: str | None, after: str | None, limit: int
) -> tuple[list[tuple[str, dict[str, str]]], str | None, str | None]:
    """The entries of ``_queue_page``'s reply, oldest first, and the two cursors."""
    items = _decode(raw)
    more = len(items) > limit
    items = items[:limit]
    if after is not None:
        newest = items[-1][0] if items else after
        return items, (items[0][0] if items else None), newest
    items.reverse()
    return items, (items[0][0] if more else None), (items[-1][0] if items else before)


async def read_page(
    redis: RedisClient,
    key: str,
    entry: type[E],
    *,
    before: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> AuditPage[E]:
    """A page of the audit stream ``key``: the newest ``limit`` entries, or those just
    before ``before`` / just after ``after`` (each an entry id); one round trip.
    Raises :class:`CallerError` for a bad cursor or limit."""
    _check_page(before, after, limit)
    pipe = redis.pipeline(transaction=False)
    _queue_page(pipe, key, before, after, limit)
    (raw,) = await pipe.execute()
    items, older, newer = _page(raw, before, after, limit)
    return AuditPage(_entries(entry, items), older, newer)


def _entries(entry: type[E], items: Sequence[tuple[str, Mapping[str, str]]]) -> list[E]:
    out = []
    for entry_id, fields in items:
        try:
            out.append(entry.of(entry_id, fields))
        except (ValidationError, ValueError):
            continue  # an entry this code cannot read is left out, never a 500
    return out


async def chat_audit(
    redis: RedisClient,
    keys: ChatKeys,
    principal: str,
    *,
    before: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> AuditPage[SettleEntry] | None:
    """A page of the chat's trail for ``principal``, or None when the chat is not
    theirs: its owner is another principal, or (its keys expired, the trail lives on)
    its newest entry names another owner. Only the principal's own entries are listed,
    so a chat id used again by someone else after it expired shows neither its old nor
    its new owner the other's decisions. One round trip."""
    _check_page(before, after, limit)
    pipe = redis.pipeline(transaction=False)
    pipe.hget(keys.meta, "owner")
    pipe.xrevrange(keys.audit, max="+", min="-", count=1)
    _queue_page(pipe, keys.audit, before, after, limit)
    owner_raw, newest, raw = await pipe.execute()
    if owner_raw is not None:
        owner = as_text(owner_raw)
    else:
        last = _decode(newest)
        owner = last[0][1].get("owner", "") if last else ""
    if not owner or owner != principal:
        return None
    items, older, newer = _page(raw, before, after, limit)
    mine = [(i, f) for i, f in items if f.get("owner") == principal]
    return AuditPage(_entries(SettleEntry, mine), older, newer)
