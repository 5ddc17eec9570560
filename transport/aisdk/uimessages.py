"""UI messages: reading what an AI SDK client POSTs, and rebuilding a chat for reloads.

Inbound, the browser sends its whole history. The server trusts none of it except the
new user message and the answers (tool outputs, approval responses) in the last
assistant message, and those only as claims: the runner matches each to a call it has
pending and drops the rest. Outbound, :func:`chat_messages` rebuilds the UI messages of
a chat from what Redis holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictBool,
    StrictStr,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from parkway.runner.engine import Answer
from parkway.runner.parking import ParkedCall
from parkway.runner.store import UNKNOWN_RESULT, ChatRecord, messages_metadata, part_ids
from parkway.transport.errors import HTTPError, invalid_body

__all__ = ["ChatPost", "chat_messages", "parse_chat_post"]

MAX_MESSAGES = 5000
MAX_TEXT = 100_000
MAX_ANSWER_TEXT = 2000  # an error text or a denial reason, as the runner stores it

_T = TypeVar("_T")


def _or_none(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        return None


# A field of a part that only counts when it has its documented type. The history is the
# client's claim and the real client sends fields this server never reads, so a part
# with an odd field is not refused: the field is taken as absent (None).
_IfValid = Annotated[_T | None, WrapValidator(_or_none)]
# A flag that counts when it is truthy, whatever its JSON type.
_Truthy = Annotated[bool, BeforeValidator(bool)]


def _error_text(value: Any) -> str:
    return str(value or "error")[:MAX_ANSWER_TEXT]


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel)


class _TextPart(_Part):
    type: Literal["text"]
    text: _IfValid[StrictStr] = None


class _StepStartPart(_Part):
    type: Literal["step-start"]


class _Approval(_Part):
    """A tool part's ``approval`` once the human decided: ``approved`` is a bool."""

    approved: StrictBool
    id: _IfValid[StrictStr] = None
    reason: _IfValid[StrictStr] = None


class _ToolPart(_Part):
    """A static (``tool-<name>``) or dynamic (``dynamic-tool`` with ``toolName``) tool part."""

    type: StrictStr
    tool_name: _IfValid[StrictStr] = None
    tool_call_id: _IfValid[StrictStr] = None
    state: _IfValid[StrictStr] = None
    input: Any = None
    output: Any = None
    preliminary: _Truthy = False
    error_text: Annotated[str, BeforeValidator(_error_text)] = "error"
    approval: _IfValid[_Approval] = None
    provider_executed: _Truthy = False

    @property
    def name(self) -> str | None:
        if self.type == "dynamic-tool":
            return self.tool_name
        return self.type.removeprefix("tool-")


class _OtherPart(_Part):
    """Any other part (reasoning, files, sources, data parts...): kept in place, unread."""


def _part_kind(part: Any) -> str:
    kind = part.get("type") if isinstance(part, dict) else getattr(part, "type", None)
    if kind in ("text", "step-start"):
        return str(kind)
    if isinstance(kind, str) and (kind == "dynamic-tool" or kind.startswith("tool-")):
        return "tool"
    return "other"


_UIPart = Annotated[
    Annotated[_TextPart, Tag("text")]
    | Annotated[_StepStartPart, Tag("step-start")]
    | Annotated[_ToolPart, Tag("tool")]
    | Annotated[_OtherPart, Tag("other")],
    Discriminator(_part_kind),
]
_PARTS: TypeAdapter[list[_UIPart]] = TypeAdapter(list[_UIPart])


class _AnObject:
    """A part as it is, if it is a JSON object: what ``dict[str, Any]`` accepts of a
    parsed JSON body, with its error, without copying every part of the history."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.custom_error_schema(
            core_schema.is_instance_schema(dict), custom_error_type="dict_type"
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"additionalProperties": True, "type": "object"}


class _UIMessage(BaseModel):
    # Metadata and whatever else a UI message carries are allowed (and ignored).
    model_config = ConfigDict(extra="allow")
    id: str = Field(default="", max_length=256)
    role: Literal["user", "assistant", "system"]
    # Every part must be a JSON object; what is in it is read by :meth:`read_parts`, and
    # only for the two messages the server reads (the new user message, the last
    # assistant message). Typing every part of a long history costs more than the rest
    # of reading the body, for parts nobody reads.
    parts: list[Annotated[dict[str, Any], _AnObject()]] = Field(default_factory=list)

    def read_parts(self) -> list[_UIPart]:
        """The message's parts as typed parts (never fails: odd fields read as absent)."""
        return _PARTS.validate_python(self.parts)


class ChatBody(BaseModel):
    # The AI SDK adds the transport's ``body`` keys at the top level, so extra keys are
    # allowed here (and ignored).
    model_config = ConfigDict(extra="allow", alias_generator=to_camel)
    id: str = Field(min_length=1, max_length=128)
    messages: list[_UIMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    trigger: str | None = None
    message_id: str | None = None


@dataclass(frozen=True)
class ChatPost:
    """What a ``POST /api/chat`` asks for, before anything is trusted."""

    chat_id: str
    user_text: str | None
    user_message_id: str | None
    answers: tuple[Answer, ...]


def _answer(part: _ToolPart, in_last_step: bool) -> Answer | None:
    name = part.name
    if name is None or part.tool_call_id is None or part.provider_executed:
        return None
    outcome: dict[str, Any]
    approval_id = None
    if part.state == "output-available" and not part.preliminary:
        outcome = {"outcome": "output", "output": part.output}
    elif part.state == "output-error":
        outcome = {"outcome": "error", "message": part.error_text}
    elif part.state in {"approval-responded", "output-denied"}:
        approval = part.approval
        if approval is None:
            return None
        approval_id = approval.id
        outcome = {"outcome": "approved" if approval.approved else "denied"}
        if not approval.approved and approval.reason:
            outcome["reason"] = approval.reason[:MAX_ANSWER_TEXT]
    else:
        return None
    return Answer(
        tool_call_id=part.tool_call_id,
        tool_name=name,
        tool_input=part.input,
        outcome=outcome,
        approval_id=approval_id,
        has_input="input" in part.model_fields_set,
        match_by_key=in_last_step,
    )


def _answers(message: _UIMessage) -> list[Answer]:
    """The answers in a message's tool parts; those after its last ``step-start`` may
    also match a pending call by parkedCallKey (see :class:`Answer`)."""
    parts = message.read_parts()
    last_step = max((i for i, p in enumerate(parts) if isinstance(p, _StepStartPart)), default=-1)
    found = []
    for index, part in enumerate(parts):
        if isinstance(part, _ToolPart):
            answer = _answer(part, in_last_step=index > last_step)
            if answer is not None:
                found.append(answer)
    return found


def parse_chat_post(body: Any) -> ChatPost:
    """Validate the body's shape and pull out the new user message and the answers."""
    try:
        parsed = ChatBody.model_validate(body)
    except ValidationError as exc:
        raise invalid_body(exc) from None
    last = parsed.messages[-1]
    user_text = None
    user_id = None
    if last.role == "user":
        texts = [p.text for p in last.read_parts() if isinstance(p, _TextPart)]
        user_text = "\n".join(t for t in texts if t is not None)
        if len(user_text) > MAX_TEXT:
            raise HTTPError(
                413, "message_too_large", f"the user message exceeds {MAX_TEXT} characters"
            )
        user_id = last.id or None
    assistant = next((m for m in reversed(parsed.messages) if m.role == "assistant"), None)
    answers = tuple(_answers(assistant)) if assistant is not None else ()
    if user_text is None and not answers:
        raise HTTPError(
            422,
            "nothing_to_do",
            "the last message is neither a new user message nor an answer to a tool call",
        )
    return ChatPost(parsed.id, user_text, user_id, answers)


# -- outbound ------------------------------------------------------------------------


def _tool_part(
    call: Mapping[str, Any],
    result: Mapping[str, Any] | None,
    parked: ParkedCall | None,
) -> dict[str, Any]:
    part: dict[str, Any] = {
        "type": f"tool-{call['name']}",
        "toolCallId": call["id"],
        "input": call["input"],
    }
    approval: dict[str, Any] | None = None
    if parked is not None and parked.approval_id is not None:
        approval = {"id": parked.approval_id}
    if result is not None:
        status = result["status"]
        if status == "ok":
            part.update(state="output-available", output=result["result"])
            if approval is not None:
                approval["approved"] = True
        elif status == "denied":
            part["state"] = "output-denied"
            if approval is not None:
                approval["approved"] = False
                reason = (parked.outcome or {}).get("reason") if parked else None
                if reason:
                    approval["reason"] = reason
        else:
            res = result["result"]
            text = res.get("error") if isinstance(res, Mapping) else None
            part.update(state="output-error", errorText=str(text or "error"))
    elif parked is not None and parked.outcome is None:
        part["state"] = "approval-requested" if approval is not None else "input-available"
    elif parked is not None and parked.outcome is not None:
        outcome = parked.outcome
        if approval is not None:
            approval["approved"] = outcome["outcome"] == "approved"
            part["state"] = "approval-responded"
        elif outcome["outcome"] == "output":
            part.update(state="output-available", output=outcome["output"])
        elif outcome["outcome"] == "error":
            part.update(state="output-error", errorText=outcome.get("message", "error"))
        else:
            part.update(state="output-available", output={"status": outcome["outcome"]})
    else:
        part.update(state="output-error", errorText=UNKNOWN_RESULT["error"])
    if approval is not None:
        part["approval"] = approval
    return part


def _data_parts(tool_call_id: str, result: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The data parts a tool call published, as its stream carried them (same ids)."""
    stored = [] if result is None else list(result.get("parts") or ())
    ids = part_ids(tool_call_id, [str(part["name"]) for part in stored])
    return [
        {"type": f"data-{part['name']}", "id": part_id, "data": part["data"]}
        for part, part_id in zip(stored, ids, strict=True)
    ]


def chat_messages(
    record: ChatRecord, describe: Callable[[ParkedCall], Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The chat as AI SDK UI messages, with widget parts for parked calls."""
    entries: Sequence[Mapping[str, Any]] = record.entries
    results = {e["id"]: e for e in entries if e["t"] == "result"}
    parked = {c.tool_call_id: c for c in record.calls}
    messages: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for index, entry in enumerate(entries):
        tag = entry["t"]
        if tag == "user":
            current = None
            messages.append(
                {
                    "id": entry.get("uid") or f"user-{index}",
                    "role": "user",
                    "parts": [{"type": "text", "text": entry["text"]}],
                }
            )
        elif tag == "assistant":
            if current is None or current["id"] != entry["mid"]:
                current = {"id": entry["mid"], "role": "assistant", "parts": []}
                messages.append(current)
            parts = current["parts"]
            parts.append({"type": "step-start"})
            for stored in entry.get("parts", ()):
                if stored.get("type") == "reasoning" and stored.get("text"):
                    parts.append({"type": "reasoning", "text": stored["text"], "state": "done"})
            if entry["text"]:
                parts.append({"type": "text", "text": entry["text"], "state": "done"})
            for call in entry["calls"]:
                call_parked = parked.get(call["id"])
                result = results.get(call["id"])
                parts.append(_tool_part(call, result, call_parked))
                parts.extend(_data_parts(call["id"], result))
                if call_parked is not None:
                    parts.append(
                        {
                            "type": "data-parkway-widget",
                            "id": call["id"],
                            "data": dict(describe(call_parked)),
                        }
                    )
    about = messages_metadata(entries)
    for message in messages:
        if message["role"] == "assistant" and message["id"] in about:
            message["metadata"] = about[message["id"]]
    return messages
