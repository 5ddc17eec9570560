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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner.history import UNKNOWN_RESULT, messages_metadata
from runner.loop import Answer
from runner.parking import ParkedCall
from runner.store import ChatRecord
from transport.errors import HTTPError
from transport.requests import invalid_body

__all__ = ["ChatPost", "chat_messages", "parse_chat_post"]

MAX_MESSAGES = 5000
MAX_TEXT = 100_000


class _UIMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(default="", max_length=256)
    role: Literal["user", "assistant", "system"]
    parts: list[dict[str, Any]] = Field(default_factory=list)


class _ChatBody(BaseModel):
    # The AI SDK adds the transport's ``body`` keys at the top level, so extra keys are
    # allowed here (and ignored).
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=128)
    messages: list[_UIMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    trigger: str | None = None
    messageId: str | None = None


@dataclass(frozen=True)
class ChatPost:
    """What a ``POST /api/chat`` asks for, before anything is trusted."""

    chat_id: str
    user_text: str | None
    user_message_id: str | None
    answers: tuple[Answer, ...]


def _tool_name(part: Mapping[str, Any]) -> str | None:
    kind = part.get("type")
    if kind == "dynamic-tool":
        name = part.get("toolName")
        return name if isinstance(name, str) else None
    if isinstance(kind, str) and kind.startswith("tool-"):
        return kind[len("tool-") :]
    return None


def _answer(part: Mapping[str, Any], in_last_step: bool) -> Answer | None:
    name = _tool_name(part)
    call_id = part.get("toolCallId")
    if name is None or not isinstance(call_id, str) or part.get("providerExecuted"):
        return None
    state = part.get("state")
    outcome: dict[str, Any]
    approval_id = None
    if state == "output-available" and not part.get("preliminary"):
        outcome = {"outcome": "output", "output": part.get("output")}
    elif state == "output-error":
        outcome = {"outcome": "error", "message": str(part.get("errorText") or "error")[:2000]}
    elif state in {"approval-responded", "output-denied"}:
        approval = part.get("approval")
        if not isinstance(approval, Mapping) or not isinstance(approval.get("approved"), bool):
            return None
        approval_id = approval.get("id") if isinstance(approval.get("id"), str) else None
        outcome = {"outcome": "approved" if approval["approved"] else "denied"}
        reason = approval.get("reason")
        if not approval["approved"] and isinstance(reason, str) and reason:
            outcome["reason"] = reason[:2000]
    else:
        return None
    return Answer(
        tool_call_id=call_id,
        tool_name=name,
        tool_input=part.get("input"),
        outcome=outcome,
        approval_id=approval_id,
        has_input="input" in part,
        match_by_key=in_last_step,
    )


def _answers(message: _UIMessage) -> list[Answer]:
    last_step = max(
        (i for i, p in enumerate(message.parts) if p.get("type") == "step-start"), default=-1
    )
    found = []
    for index, part in enumerate(message.parts):
        answer = _answer(part, in_last_step=index > last_step)
        if answer is not None:
            found.append(answer)
    return found


def parse_chat_post(body: Any) -> ChatPost:
    """Validate the body's shape and pull out the new user message and the answers."""
    try:
        parsed = _ChatBody.model_validate(body)
    except ValidationError as exc:
        raise invalid_body(exc) from None
    last = parsed.messages[-1]
    user_text = None
    user_id = None
    if last.role == "user":
        texts = [p.get("text") for p in last.parts if p.get("type") == "text"]
        user_text = "\n".join(t for t in texts if isinstance(t, str))
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
                parts.append(_tool_part(call, results.get(call["id"]), call_parked))
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
