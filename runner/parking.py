"""Parked calls: the stored record of a tool call that waits for the browser or a human.

A record is written once, when the call parks, and never rewritten. It carries the
schemas its outcome is checked against (the client tool's output schema; an editable
approval's input schema), so a settle is judged by the template the run started with,
whatever template the settling worker has. Its outcome lives
beside it (one field per call in the chat's outcomes hash), so settling is a single
atomic write that compares strings. Records carry a schema version: a record this code
cannot read fails closed with :class:`IncompatibleStateError`, never a crash mid-stream.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from parkway.runner.errors import IncompatibleStateError
from parkway.runner.validation import describe_first_error

__all__ = [
    "APPROVER_ROLE",
    "RECORD_VERSION",
    "CallCache",
    "CallKind",
    "ParkedCall",
    "decode_call",
    "encode_call",
    "may_answer",
]

RECORD_VERSION = 1

CallKind = Literal["client", "approval"]

# The role that answers an approval whose policy forbids self-approval without naming a
# role: "someone other than the requester" must still be someone the operator trusts.
APPROVER_ROLE = "approver"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: int
    id: str
    tool: str
    kind: CallKind
    input: Any
    key: str
    seq: int
    message_id: str
    created_at: float
    deadline: float | None = None
    approval_id: str | None = None
    allow_edits: bool = False
    render: dict[str, Any] | None = None
    result_style: str | None = None
    description: str = ""
    output_schema: dict[str, Any] | None = None
    edit_schema: dict[str, Any] | None = None
    auto_resume: bool = False
    trace: str | None = None
    approvers: str | None = None
    self_approval: bool = True
    requester: str | None = None
    continuation: dict[str, Any] | None = None
    input_round: int = 0


@dataclass(frozen=True)
class ParkedCall:
    """A parked call and, once settled, its outcome (``None`` while pending)."""

    tool_call_id: str
    tool_name: str
    kind: CallKind
    input: Any
    key: str
    seq: int
    message_id: str
    created_at: float
    deadline: float | None = None
    approval_id: str | None = None
    allow_edits: bool = False
    render: Mapping[str, Any] | None = None
    result_style: str | None = None
    description: str = ""
    output_schema: Mapping[str, Any] | None = None
    edit_schema: Mapping[str, Any] | None = None
    auto_resume: bool = False
    # The W3C traceparent of the run that parked the call, when tracing is on: the
    # resume and the settles of the call continue its trace (runner/ops/telemetry.py).
    trace: str | None = None
    # An approval answered by someone other than the chat's owner (its policy, written
    # at park): the role its answerer must hold, whether the requester may answer it
    # too, and who requested it (the chat's owner). ``approvers`` is None for every
    # other call: the chat's owner answers it, as always.
    approvers: str | None = None
    self_approval: bool = True
    requester: str | None = None
    # A server tool that parked asking for input (ToolNeedsInput): what it needs to go
    # on once answered (an MCP server's requestState, say). Private: kept in the stored
    # record only; :func:`encode_call` with ``private=False`` (the event log's copy)
    # leaves it out, and no descriptor, view or wire encoder reads it.
    continuation: Mapping[str, Any] | None = None
    # Which round of a person's input it asks for (1, 2, ...; 0: not a tool asking for
    # input). Each round is a new record under the same toolCallId (the COMMIT script
    # drops the outcome of the round before), so a call with a continuation is the one
    # kind of record that may change: :class:`CallCache` does not vouch for it.
    input_round: int = 0
    outcome: Mapping[str, Any] | None = None

    @property
    def status(self) -> Literal["pending", "settled"]:
        return "pending" if self.outcome is None else "settled"

    @property
    def for_others(self) -> bool:
        """Whether someone other than the chat's owner may (or must) answer it."""
        return self.kind == "approval" and self.approvers is not None

    def with_outcome(self, outcome: Mapping[str, Any] | None) -> ParkedCall:
        return ParkedCall(**{**self.__dict__, "outcome": outcome})


def encode_call(call: ParkedCall, *, private: bool = True) -> str:
    """The stored JSON of a call's record (without its outcome). Written by this code
    only, so it is built directly; :func:`decode_call` validates what it reads. Without
    ``private``, the call's continuation is left out (a copy for the event log)."""
    record: dict[str, Any] = {
        "v": RECORD_VERSION,
        "id": call.tool_call_id,
        "tool": call.tool_name,
        "kind": call.kind,
        "input": call.input,
        "key": call.key,
        "seq": call.seq,
        "message_id": call.message_id,
        "created_at": call.created_at,
    }
    optional = {
        "deadline": call.deadline,
        "approval_id": call.approval_id,
        "render": dict(call.render) if call.render is not None else None,
        "result_style": call.result_style,
        "output_schema": dict(call.output_schema) if call.output_schema is not None else None,
        "edit_schema": dict(call.edit_schema) if call.edit_schema is not None else None,
        "trace": call.trace,
        "continuation": (
            dict(call.continuation) if private and call.continuation is not None else None
        ),
    }
    record.update((k, v) for k, v in optional.items() if v is not None)
    if call.allow_edits:
        record["allow_edits"] = True
    if call.description:
        record["description"] = call.description
    if call.auto_resume:
        record["auto_resume"] = True
    if call.input_round:
        record["input_round"] = call.input_round
    if call.approvers is not None:
        record["approvers"] = call.approvers
        record["requester"] = call.requester
        if not call.self_approval:
            record["self_approval"] = False
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def decode_call(raw: str | bytes, outcome: str | bytes | None = None) -> ParkedCall:
    """Read a stored record (and its outcome JSON, if settled)."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise IncompatibleStateError("a stored parked call is not valid JSON") from None
    version = data.get("v") if isinstance(data, dict) else None
    if version != RECORD_VERSION:
        raise IncompatibleStateError(
            f"a stored parked call has schema version {version!r}; this Parkway reads "
            f"version {RECORD_VERSION}. Upgrade Parkway or let the chat expire."
        )
    try:
        rec = _Record.model_validate(data)
    except ValidationError as exc:
        raise IncompatibleStateError(
            f"a stored parked call is malformed: {describe_first_error(exc)}"
        ) from None
    return ParkedCall(
        tool_call_id=rec.id,
        tool_name=rec.tool,
        kind=rec.kind,
        input=rec.input,
        key=rec.key,
        seq=rec.seq,
        message_id=rec.message_id,
        created_at=rec.created_at,
        deadline=rec.deadline,
        approval_id=rec.approval_id,
        allow_edits=rec.allow_edits,
        render=rec.render,
        result_style=rec.result_style,
        description=rec.description,
        output_schema=rec.output_schema,
        edit_schema=rec.edit_schema,
        auto_resume=rec.auto_resume,
        trace=rec.trace,
        approvers=rec.approvers,
        self_approval=rec.self_approval,
        requester=rec.requester,
        continuation=rec.continuation,
        input_round=rec.input_round,
        outcome=json.loads(outcome) if outcome is not None else None,
    )


def may_answer(
    call: ParkedCall, principal: str, roles: frozenset[str], owner: str
) -> Literal["yes", "self", "no"]:
    """Whether ``principal`` (holding ``roles``; ``owner`` owns the call's chat) may
    answer ``call``: ``"yes"``; ``"self"`` when they requested an approval that someone
    else must answer (a clear refusal: they can see the call, and must be told why
    their answer is not taken); ``"no"`` when the call is none of theirs (it reads as
    missing). Decided by the call's own record, which never changes, so any worker
    decides the same."""
    if not call.for_others:
        return "yes" if principal == owner else "no"
    requester = call.requester or owner
    if call.approvers in roles:
        if principal == requester and not call.self_approval:
            return "self"
        return "yes"
    return "self" if principal == owner else "no"


class CallCache:
    """The records of parked calls this worker wrote or read lately, by chat and call
    (at most ``size``, the least recently used dropped first).

    A record never changes once written, so a worker that has one can judge a settle
    without reading it again: the settle is then one round trip, with the chat's owner
    and the call's existence checked by the SETTLE script itself. Outcomes change, so
    none is kept here. The exception is a tool asking a person for input (a record with
    a continuation): another worker may park it again under the same id for the next
    round, with another form, so :meth:`recall` and :meth:`step` never answer for one
    and its settle reads the record afresh. Nor is the chat's state: the parked step a
    chat was left at by this worker (:meth:`step`) is a guess that the ANSWER script
    checks.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._records: OrderedDict[tuple[str, str], ParkedCall] = OrderedDict()
        self._steps: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def remember_step(self, chat_id: str, parked_ids: Iterable[str]) -> None:
        """This worker parked the chat at a step with these calls."""
        self._steps[chat_id] = tuple(parked_ids)
        self._steps.move_to_end(chat_id)
        while len(self._steps) > self.size:
            self._steps.popitem(last=False)

    def forget_step(self, chat_id: str) -> None:
        self._steps.pop(chat_id, None)

    def step(self, chat_id: str) -> tuple[tuple[str, ...], list[ParkedCall]] | None:
        """The ids and records of the parked step this worker left the chat at, if it
        has them all."""
        ids = self._steps.get(chat_id)
        if not ids:
            return None
        calls = [self._records.get((chat_id, i)) for i in ids]
        if any(c is None or c.continuation is not None for c in calls):
            return None
        return ids, [c for c in calls if c is not None]

    def remember(self, chat_id: str, calls: Iterable[ParkedCall]) -> None:
        for call in calls:
            key = (chat_id, call.tool_call_id)
            self._records[key] = call if call.outcome is None else call.with_outcome(None)
            self._records.move_to_end(key)
        while len(self._records) > self.size:
            self._records.popitem(last=False)

    def recall(self, chat_id: str, tool_call_id: str) -> ParkedCall | None:
        """The call's record (with no outcome), if this worker has it (and it is not a
        record that may be written again: see the class doc)."""
        call = self._records.get((chat_id, tool_call_id))
        if call is not None and call.continuation is not None:
            return None
        if call is not None:
            self._records.move_to_end((chat_id, tool_call_id))
        return call
