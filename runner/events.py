"""Runner events: what a run reports as it goes, independent of any wire protocol.

Each event is a small frozen dataclass with a ``kind`` tag. The transport's encoder turns
them into protocol chunks; nothing here knows about SSE or the AI SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from runner.parking import ParkedCall

__all__ = [
    "ApprovalRequested",
    "CallParked",
    "Event",
    "MessageFinished",
    "MessageStarted",
    "RunFailed",
    "StepFinished",
    "StepStarted",
    "TextDelta",
    "TextEnded",
    "TextStarted",
    "ToolCallIssued",
    "ToolDenied",
    "ToolFailed",
    "ToolInputRejected",
    "ToolSucceeded",
]

FinishReason = Literal["stop", "tool-calls", "length", "error", "interrupted"]


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
class StepFinished:
    kind: Literal["step-finished"] = "step-finished"


@dataclass(frozen=True)
class MessageFinished:
    reason: FinishReason
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
    | ToolCallIssued
    | ToolInputRejected
    | ApprovalRequested
    | CallParked
    | ToolSucceeded
    | ToolFailed
    | ToolDenied
    | StepFinished
    | MessageFinished
    | RunFailed
)
