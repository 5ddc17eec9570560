"""AG-UI messages: reading a ``RunAgentInput``, a chat as AG-UI messages, interrupts.

Inbound, an AG-UI client sends its whole conversation with every run, like an AI SDK
client. The server trusts none of it except the new user message, the tool messages
that answer calls it has pending (matched by id, then by parkedCallKey, by the runner)
and the ``resume`` entries that answer its interrupts, which are checked here against
the chat's parked calls before anything is settled (:func:`plan_resume`).

Outbound, :func:`agui_messages` rebuilds a chat's messages from what Redis holds, with
the ids the live stream gave them (:mod:`parkway.transport.agui.encoder`), and
:func:`interrupt_of` describes a parked call as an AG-UI interrupt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Interrupt,
    ReasoningMessage,
    ResumeEntry,
    RunAgentInput,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import ValidationError

from parkway.runner.canonical import canonical_json, is_plain_json, parked_call_key
from parkway.runner.engine import Answer
from parkway.runner.errors import NotPlainJSONError, ParkwayError
from parkway.runner.outcomes import normalize_outcome
from parkway.runner.parking import ParkedCall
from parkway.runner.store import MAX_CALL_ID, ChatRecord
from parkway.transport.agui.encoder import result_message_id, step_message_id, tool_result_text
from parkway.transport.errors import HTTPError, invalid_body

__all__ = [
    "AguiPost",
    "ResumePlan",
    "ResumeProblem",
    "agui_messages",
    "interrupt_of",
    "parse_agui_post",
    "plan_resume",
    "steps_of",
]

MAX_MESSAGES = 5000
MAX_TEXT = 100_000
MAX_TOOLS = 128
MAX_RESUME = 256
MAX_ANSWER_TEXT = 2000
# Where Parkway's own description of an interrupt sits in its ``metadata``.
METADATA_KEY = "parkway"


@dataclass(frozen=True)
class AguiPost:
    """What a ``RunAgentInput`` asks, read and bounded (not yet trusted)."""

    thread_id: str
    run_id: str
    user_text: str | None
    user_message_id: str | None
    answers: list[Answer]
    resume: list[ResumeEntry]
    tools: list[Tool]
    has_input: bool = field(default=True)


def _bounded_id(value: str, what: str) -> str:
    if not value or len(value) > MAX_CALL_ID:
        raise HTTPError(400, "invalid_request", f"{what} is 1-{MAX_CALL_ID} characters")
    return value


def _text_of(content: Any, what: str) -> str:
    """The text of a message's content: a string, or its text parts joined. A part that
    is not text (an image, a document) is refused: Parkway's models read text here."""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if getattr(part, "type", None) != "text":
            raise HTTPError(
                422,
                "unsupported_content",
                f"{what} may hold text parts only (got a {getattr(part, 'type', '?')!r} part)",
            )
        texts.append(part.text)
    return "".join(texts)


def _tool_answer(message: ToolMessage, calls: Mapping[str, ToolCall]) -> Answer:
    check = _bounded_id(message.tool_call_id, "a tool message's toolCallId")
    call = calls.get(check)
    name = call.function.name if call is not None else ""
    tool_input: Any = None
    has_input = False
    if call is not None:
        try:
            tool_input = json.loads(call.function.arguments or "{}")
            has_input = is_plain_json(tool_input)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's reach
            has_input = False
    outcome: dict[str, Any]
    if message.error:
        outcome = {"outcome": "error", "message": message.error[:MAX_ANSWER_TEXT]}
    else:
        text = _text_of(message.content, "a tool message")
        try:
            output: Any = json.loads(text)
        except (ValueError, RecursionError):
            output = text
        outcome = {"outcome": "output", "output": output}
    return Answer(
        tool_call_id=check,
        tool_name=name,
        tool_input=tool_input if has_input else None,
        outcome=outcome,
        has_input=has_input,
        match_by_key=has_input and bool(name),
    )


def parse_agui_post(body: Any) -> AguiPost:
    """Read a ``RunAgentInput`` (the official pydantic model) and bound it. Raises
    :class:`HTTPError` (400/422) for a body that is not one."""
    if not isinstance(body, dict):
        raise HTTPError(422, "invalid_body", "the body must be a RunAgentInput object")
    try:
        parsed = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        raise invalid_body(exc) from None
    thread_id = _bounded_id(parsed.thread_id, "threadId")
    run_id = _bounded_id(parsed.run_id, "runId")
    messages = parsed.messages
    tools = list(parsed.tools or ())
    resume = list(parsed.resume or ())
    if len(messages) > MAX_MESSAGES:
        raise HTTPError(413, "too_many_messages", f"at most {MAX_MESSAGES} messages")
    if len(tools) > MAX_TOOLS:
        raise HTTPError(413, "too_many_tools", f"at most {MAX_TOOLS} tools")
    if len(resume) > MAX_RESUME:
        raise HTTPError(413, "too_many_resume_entries", f"at most {MAX_RESUME} resume entries")
    for entry in resume:
        _bounded_id(entry.interrupt_id, "an interrupt id")
    user_text = user_id = None
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
    if last_user >= 0 and last_user == len(messages) - 1:
        user = messages[last_user]
        assert isinstance(user, UserMessage)
        user_text = _text_of(user.content, "a user message")
        if not user_text.strip():
            raise HTTPError(422, "invalid_body", "the user message is empty")
        if len(user_text) > MAX_TEXT:
            raise HTTPError(413, "message_too_large", f"a message is at most {MAX_TEXT} characters")
        user_id = _bounded_id(user.id, "a message id")
    calls: dict[str, ToolCall] = {}
    answers: list[Answer] = []
    for message in messages[last_user + 1 :]:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls or ():
                calls[call.id] = call
        elif isinstance(message, ToolMessage):
            answers.append(_tool_answer(message, calls))
    return AguiPost(
        thread_id=thread_id,
        run_id=run_id,
        user_text=user_text,
        user_message_id=user_id,
        answers=answers,
        resume=resume,
        tools=tools,
        has_input=user_text is not None or bool(answers) or bool(resume),
    )


# -- outbound: the chat as AG-UI messages ----------------------------------------------


def steps_of(record: ChatRecord, message_id: str) -> int:
    """How many steps runner message ``message_id`` has stored."""
    return sum(1 for e in record.entries if e["t"] == "assistant" and e["mid"] == message_id)


def agui_messages(record: ChatRecord) -> list[Any]:
    """The chat as AG-UI messages (user, assistant per step, reasoning, tool results),
    with the ids its live stream used."""
    out: list[Any] = []
    steps: dict[str, int] = {}
    for index, entry in enumerate(record.entries):
        tag = entry["t"]
        if tag == "user":
            out.append(UserMessage(id=entry.get("uid") or f"user-{index}", content=entry["text"]))
        elif tag == "assistant":
            mid = entry["mid"]
            k = steps.get(mid, 0)
            steps[mid] = k + 1
            sid = step_message_id(mid, k)
            n = 0
            for stored in entry.get("parts", ()):
                if stored.get("type") == "reasoning" and stored.get("text"):
                    out.append(ReasoningMessage(id=f"{sid}-r{n}", content=stored["text"]))
                    n += 1
            calls = [
                ToolCall(
                    id=c["id"],
                    function=FunctionCall(name=c["name"], arguments=tool_result_text(c["input"])),
                )
                for c in entry["calls"]
            ]
            out.append(
                AssistantMessage(id=sid, content=entry["text"] or None, tool_calls=calls or None)
            )
        elif tag == "result":
            out.append(
                ToolMessage(
                    id=result_message_id(entry["id"]),
                    tool_call_id=entry["id"],
                    content=tool_result_text(entry["result"]),
                )
            )
    return out


# -- interrupts ----------------------------------------------------------------------------


def _iso(epoch_s: float) -> str:
    moment = datetime.fromtimestamp(epoch_s, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _reason(call: ParkedCall) -> str:
    if call.kind == "approval":
        return "tool_call"
    if call.result_style == "connection":
        return "connection"
    return "client_tool"


def _response_schema(call: ParkedCall) -> dict[str, Any]:
    if call.kind == "approval":
        properties: dict[str, Any] = {
            "approved": {"type": "boolean"},
            "reason": {"type": "string", "maxLength": MAX_ANSWER_TEXT},
        }
        if call.allow_edits:
            properties["editedArgs"] = dict(call.edit_schema or {"type": "object"})
        return {
            "type": "object",
            "properties": properties,
            "required": ["approved"],
            "additionalProperties": False,
        }
    if call.result_style == "connection":
        # Success is recorded by the OAuth callback; a client reports only a failure,
        # or resolves with no payload once the connect card says it is done.
        return {
            "type": "object",
            "properties": {
                "connected": {"const": False},
                "reason": {"enum": ["declined", "cancelled", "error"]},
                "message": {"type": "string"},
            },
            "required": ["connected", "reason"],
        }
    return dict(call.output_schema or {})


def _message(call: ParkedCall) -> str:
    if call.kind == "approval":
        return f"Approve the call of {call.tool_name}?"
    if call.result_style == "connection":
        return "Connect the account the agent asked for, in the connect card's popup."
    return call.description or f"{call.tool_name} needs an answer."


def interrupt_of(call: ParkedCall, widget: Mapping[str, Any]) -> Interrupt:
    """A pending parked call as an AG-UI interrupt. Its id is the call's toolCallId:
    stable across reloads and workers, and unique within the chat's parked step."""
    about: dict[str, Any] = {
        "kind": call.kind,
        "toolName": call.tool_name,
        "input": call.input,
        "parkedCallKey": _key(call),
        "widget": dict(widget),
    }
    if call.approval_id is not None:
        about["approvalId"] = call.approval_id
    if call.allow_edits:
        about["allowEdits"] = True
    if call.for_others:
        about["approvers"] = call.approvers
        about["selfApproval"] = call.self_approval
    return Interrupt(
        id=call.tool_call_id,
        reason=_reason(call),
        message=_message(call),
        tool_call_id=call.tool_call_id,
        response_schema=_response_schema(call),
        expires_at=_iso(call.deadline) if call.deadline is not None else None,
        metadata={METADATA_KEY: about},
    )


def _key(call: ParkedCall) -> str:
    try:
        return parked_call_key(call.tool_name, call.input)
    except NotPlainJSONError:
        return call.key


# -- resume entries ----------------------------------------------------------------------


class ResumeProblem(Exception):
    """A resume the server refuses before changing anything: ``code`` names it on the
    run's RUN_ERROR."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ResumePlan:
    """What the resume entries do: ``answers`` settle pending calls (through the runner's
    one-winner settle), ``acknowledged`` name calls already settled (nothing to do)."""

    answers: list[Answer]
    acknowledged: list[str]


def _approval_outcome(payload: Any) -> dict[str, Any]:
    if isinstance(payload, bool):  # a bare yes/no, as some clients send it
        payload = {"approved": payload}
    if not isinstance(payload, Mapping) or not isinstance(payload.get("approved"), bool):
        raise ResumeProblem(
            "invalid_resume",
            "an approval's resume payload is {approved: boolean, reason?, editedArgs?}",
        )
    extra = sorted(set(payload) - {"approved", "reason", "editedArgs"})
    if extra:
        raise ResumeProblem("invalid_resume", f"unexpected field(s) {', '.join(extra)}")
    reason = payload.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ResumeProblem("invalid_resume", "'reason' must be a string")
    if payload["approved"]:
        outcome: dict[str, Any] = {"outcome": "approved"}
        if "editedArgs" in payload:
            outcome["input"] = payload["editedArgs"]
        return outcome
    outcome = {"outcome": "denied"}
    if reason:
        outcome["reason"] = reason
    return outcome


def _entry_outcome(call: ParkedCall, entry: ResumeEntry) -> dict[str, Any] | None:
    """The outcome ``entry`` records for ``call``; None: nothing to record (a connection
    resolved with no payload, which only says the connect card is done)."""
    if entry.status == "cancelled":
        outcome: dict[str, Any] = {"outcome": "cancelled"}
        reason = entry.payload.get("reason") if isinstance(entry.payload, Mapping) else None
        if isinstance(reason, str) and reason:
            outcome["reason"] = reason[:MAX_ANSWER_TEXT]
        return outcome
    if call.kind == "approval":
        return _approval_outcome(entry.payload)
    if call.result_style == "connection" and entry.payload is None:
        return None
    return {"outcome": "output", "output": entry.payload}


def plan_resume(
    entries: Sequence[ResumeEntry],
    calls: Sequence[ParkedCall],
    *,
    open_ids: set[str],
    superseding: bool,
    now: float,
    max_bytes: int,
    answerable: Callable[[ParkedCall], bool] = lambda _call: True,
) -> ResumePlan:
    """Check ``entries`` against the chat's parked ``calls`` and say what they settle.

    The rules (AG-UI 1.0, "Interrupts and Resume"), checked before anything changes:
    each entry names a parked call of the chat (else ``unknown_interrupt``), once (else
    ``duplicate_resume``); together they answer every open interrupt (``open_ids``)
    unless a new user message supersedes them (else ``resume_incomplete``); an expired
    interrupt can only be cancelled (``interrupt_expired``); a resolved payload must be
    an answer the call accepts (``invalid_resume``). An entry for a call that is settled
    already is idempotent: the same answer, or a cancel, is acknowledged and changes
    nothing; a different answer is ``already_settled``.

    An approval the caller may not answer (``answerable``: its policy leaves it to an
    approver) is covered by an entry without a payload, which only says "still
    waiting"; an answer to it is ``not_yours``.
    """
    by_id = {c.tool_call_id: c for c in calls}
    seen: set[str] = set()
    answers: list[Answer] = []
    acknowledged: list[str] = []
    for entry in entries:
        call = by_id.get(entry.interrupt_id)
        if call is None:
            raise ResumeProblem(
                "unknown_interrupt", f"no open interrupt has id {entry.interrupt_id!r}"
            )
        if entry.interrupt_id in seen:
            raise ResumeProblem(
                "duplicate_resume", f"interrupt {entry.interrupt_id!r} is answered twice"
            )
        seen.add(entry.interrupt_id)
        expired = call.deadline is not None and call.deadline <= now
        if call.outcome is not None and call.outcome.get("outcome") == "timeout":
            expired = True
        if expired and entry.status == "resolved":
            raise ResumeProblem(
                "interrupt_expired",
                f"interrupt {entry.interrupt_id!r} expired"
                + (f" at {_iso(call.deadline)}" if call.deadline is not None else "")
                + " and can no longer be answered; cancel it to continue the thread",
            )
        if call.outcome is None and not answerable(call):
            if entry.payload is None:
                continue  # waiting for its approver
            raise ResumeProblem(
                "not_yours",
                f"interrupt {entry.interrupt_id!r} is an approval for "
                + (
                    f"a principal with the role {call.approvers!r}"
                    if call.approvers
                    else "someone else"
                )
                + " to answer; resume it without a payload to keep waiting",
            )
        if call.outcome is not None and (entry.status == "cancelled" or entry.payload is None):
            acknowledged.append(call.tool_call_id)  # decided already: nothing to add
            continue
        outcome = _entry_outcome(call, entry)
        if call.outcome is not None:
            if outcome is None or not _same_outcome(call, outcome, max_bytes):
                raise ResumeProblem(
                    "already_settled",
                    f"interrupt {entry.interrupt_id!r} was answered already "
                    f"({call.outcome.get('outcome')}); cancel it to continue the thread",
                )
            acknowledged.append(call.tool_call_id)
            continue
        if outcome is None:
            raise ResumeProblem(
                "connection_pending",
                f"the connection of interrupt {entry.interrupt_id!r} has not completed; "
                "finish it in the connect card's popup, or cancel it",
            )
        try:
            normalize_outcome(call, outcome, by="client", max_bytes=max_bytes)
        except ParkwayError as exc:
            raise ResumeProblem(
                "invalid_resume", f"interrupt {entry.interrupt_id!r}: {exc}"
            ) from None
        answers.append(
            Answer(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                tool_input=call.input,
                outcome=outcome,
                has_input=False,
                match_by_key=False,
            )
        )
    missing = sorted(open_ids - seen)
    if missing and not superseding:
        raise ResumeProblem(
            "resume_incomplete",
            "a resume must answer every open interrupt; unanswered: " + ", ".join(missing),
        )
    return ResumePlan(answers, acknowledged)


def _same_outcome(call: ParkedCall, outcome: Mapping[str, Any], max_bytes: int) -> bool:
    recorded = dict(call.outcome or {})
    recorded.pop("by", None)
    try:
        mine = normalize_outcome(call, outcome, by="server", max_bytes=max_bytes)
    except ParkwayError:
        return False
    return canonical_json(mine) == canonical_json(recorded)


Describe = Callable[[ParkedCall], Mapping[str, Any]]
