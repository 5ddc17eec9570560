"""Runner events: what a run reports as it goes, independent of any wire protocol.

Each event is a small frozen dataclass with a ``kind`` tag. The transport's encoder turns
them into protocol chunks; nothing here knows about SSE or the AI SDK.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from runner.parking import ParkedCall, decode_call, encode_call

__all__ = [
    "TERMINAL_KINDS",
    "ApprovalRequested",
    "CallParked",
    "DataPublished",
    "Event",
    "FinishReason",
    "MessageFinished",
    "MessageStarted",
    "ReasoningDelta",
    "ReasoningEnded",
    "ReasoningStarted",
    "RunFailed",
    "StepFinished",
    "StepStarted",
    "TextDelta",
    "TextEnded",
    "TextStarted",
    "ToolCallIssued",
    "ToolDenied",
    "ToolFailed",
    "ToolInputDelta",
    "ToolInputRejected",
    "ToolInputStarted",
    "ToolSucceeded",
    "coalesce",
    "event_from_json",
    "event_to_json",
    "events_from_json",
    "events_to_json",
]

FinishReason = Literal[
    "stop", "tool-calls", "length", "content-filter", "error", "interrupted", "other"
]


@dataclass(frozen=True)
class MessageStarted:
    """An assistant message starts, or a parked one continues (same ``message_id``)."""

    message_id: str
    kind: Literal["message-started"] = "message-started"


@dataclass(frozen=True)
class StepStarted:
    kind: Literal["step-started"] = "step-started"


@dataclass(frozen=True)
class TextStarted:
    text_id: str
    kind: Literal["text-started"] = "text-started"


@dataclass(frozen=True)
class TextDelta:
    text_id: str
    delta: str
    kind: Literal["text-delta"] = "text-delta"


@dataclass(frozen=True)
class TextEnded:
    text_id: str
    kind: Literal["text-ended"] = "text-ended"


@dataclass(frozen=True)
class ReasoningStarted:
    reasoning_id: str
    kind: Literal["reasoning-started"] = "reasoning-started"


@dataclass(frozen=True)
class ReasoningDelta:
    reasoning_id: str
    delta: str
    kind: Literal["reasoning-delta"] = "reasoning-delta"


@dataclass(frozen=True)
class ReasoningEnded:
    reasoning_id: str
    kind: Literal["reasoning-ended"] = "reasoning-ended"


@dataclass(frozen=True)
class ToolInputStarted:
    """The model began writing a tool call's input (a widget may show it coming)."""

    tool_call_id: str
    tool_name: str
    kind: Literal["tool-input-started"] = "tool-input-started"


@dataclass(frozen=True)
class ToolInputDelta:
    """More of a tool call's input, as JSON text the model is still writing."""

    tool_call_id: str
    delta: str
    kind: Literal["tool-input-delta"] = "tool-input-delta"


@dataclass(frozen=True)
class ToolCallIssued:
    """The model called a tool with valid input."""

    tool_call_id: str
    tool_name: str
    input: Any
    kind: Literal["tool-call-issued"] = "tool-call-issued"


@dataclass(frozen=True)
class ToolInputRejected:
    """The model called an unknown tool or gave input the tool does not accept."""

    tool_call_id: str
    tool_name: str
    input: Any
    error: str
    kind: Literal["tool-input-rejected"] = "tool-input-rejected"


@dataclass(frozen=True)
class ApprovalRequested:
    tool_call_id: str
    approval_id: str
    kind: Literal["approval-requested"] = "approval-requested"


@dataclass(frozen=True)
class CallParked:
    """A call now waits for the browser or a human; ``call`` describes it for a widget."""

    call: ParkedCall
    kind: Literal["call-parked"] = "call-parked"


@dataclass(frozen=True)
class ToolSucceeded:
    tool_call_id: str
    output: Any
    kind: Literal["tool-succeeded"] = "tool-succeeded"


@dataclass(frozen=True)
class ToolFailed:
    tool_call_id: str
    error: str
    kind: Literal["tool-failed"] = "tool-failed"


@dataclass(frozen=True)
class ToolDenied:
    tool_call_id: str
    reason: str | None = None
    kind: Literal["tool-denied"] = "tool-denied"


@dataclass(frozen=True)
class DataPublished:
    """A tool published a data part (e.g. ``committed-revision``); ``part_id`` lets a
    later part with the same name and id replace it."""

    name: str
    data: dict[str, Any]
    part_id: str | None = None
    kind: Literal["data-published"] = "data-published"


@dataclass(frozen=True)
class StepFinished:
    kind: Literal["step-finished"] = "step-finished"


@dataclass(frozen=True)
class MessageFinished:
    """The message ends (or parks). ``metadata`` is what the message carries for its
    reader: the model that answered and the tokens the message used so far."""

    reason: FinishReason
    metadata: dict[str, Any] | None = None
    kind: Literal["message-finished"] = "message-finished"


@dataclass(frozen=True)
class RunFailed:
    """The run could not go on. ``message`` is safe to show; it never holds internals."""

    message: str
    kind: Literal["run-failed"] = "run-failed"


Event = (
    MessageStarted
    | StepStarted
    | TextStarted
    | TextDelta
    | TextEnded
    | ReasoningStarted
    | ReasoningDelta
    | ReasoningEnded
    | ToolInputStarted
    | ToolInputDelta
    | ToolCallIssued
    | ToolInputRejected
    | ApprovalRequested
    | CallParked
    | ToolSucceeded
    | ToolFailed
    | ToolDenied
    | DataPublished
    | StepFinished
    | MessageFinished
    | RunFailed
)


_BY_KIND: dict[str, type[Any]] = {
    cls.kind: cls
    for cls in (
        MessageStarted,
        StepStarted,
        TextStarted,
        TextDelta,
        TextEnded,
        ReasoningStarted,
        ReasoningDelta,
        ReasoningEnded,
        ToolInputStarted,
        ToolInputDelta,
        ToolCallIssued,
        ToolInputRejected,
        ApprovalRequested,
        CallParked,
        ToolSucceeded,
        ToolFailed,
        ToolDenied,
        DataPublished,
        StepFinished,
        MessageFinished,
        RunFailed,
    )
}

TERMINAL_KINDS = frozenset({"message-finished", "run-failed"})


def coalesce(events: list[Event]) -> list[Event]:
    """Merge consecutive deltas of the same text, reasoning or tool-input part: the same
    text for any reader, in fewer pieces. Deltas that arrive faster than the log is
    written come out merged; slower ones stay as they came."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            if last.text_id == event.text_id:
                out[-1] = TextDelta(last.text_id, last.delta + event.delta)
                continue
        elif isinstance(event, ReasoningDelta) and isinstance(last, ReasoningDelta):
            if last.reasoning_id == event.reasoning_id:
                out[-1] = ReasoningDelta(last.reasoning_id, last.delta + event.delta)
                continue
        elif (
            isinstance(event, ToolInputDelta)
            and isinstance(last, ToolInputDelta)
            and last.tool_call_id == event.tool_call_id
        ):
            out[-1] = ToolInputDelta(last.tool_call_id, last.delta + event.delta)
            continue
        out.append(event)
    return out


def _plain(event: Event) -> dict[str, Any]:
    if isinstance(event, CallParked):
        return {"kind": event.kind, "call": encode_call(event.call)}
    return event.__dict__  # frozen dataclasses without slots: their fields, as they are


def event_to_json(event: Event) -> str:
    """The event as stored (JSON with its ``kind`` tag)."""
    return json.dumps(_plain(event), separators=(",", ":"), ensure_ascii=False)


def events_to_json(events: list[Event]) -> str:
    """A batch of events as one JSON array (one entry of a chat's event log)."""
    return json.dumps([_plain(e) for e in events], separators=(",", ":"), ensure_ascii=False)


def events_from_json(text: str | bytes) -> list[Event]:
    """Read a batch written by :func:`events_to_json`."""
    return [_from_plain(item) for item in json.loads(text)]


def event_from_json(text: str | bytes) -> Event:
    """Read an event written by :func:`event_to_json`."""
    return _from_plain(json.loads(text))


def _from_plain(data: dict[str, Any]) -> Event:
    data = dict(data)
    kind = data.pop("kind")
    cls = _BY_KIND[kind]
    if cls is CallParked:
        return CallParked(decode_call(data["call"]))
    return cls(**data)  # type: ignore[no-any-return]
