"""Runner events: what a run reports as it goes, independent of any wire protocol.

Each event is a small frozen dataclass with a ``kind`` tag. The transport's encoder turns
them into protocol chunks; nothing here knows about SSE or the AI SDK.

A chat's event log stores them in batches (:func:`events_to_json`), each event a JSON
object of its fields in declaration order, ``kind`` last (first for ``call-parked``, whose
``call`` is the parked call's record as a JSON string, see :func:`encode_call`). Logs
outlive a deploy, so that form is fixed: tests/runner/test_events.py reads a batch written by
an earlier version and writes it back byte for byte. (Only the spelling of a small
float inside a tool's input or output can differ from what Python's json module wrote,
never its value: between 1e-9 and 1e-4, ``1e-7`` where it was ``1e-07``.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    ValidationError,
)

from parkway.runner.errors import IncompatibleStateError
from parkway.runner.parking import ParkedCall, decode_call, encode_call
from parkway.runner.validation import describe_first_error

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


def _read_stored_call(raw: object) -> ParkedCall:
    if not isinstance(raw, str):
        raise ValueError("the parked call must be its stored record, a JSON string")
    return decode_call(raw)


def _write_stored_call(call: ParkedCall) -> str:
    return encode_call(call, private=False)  # a continuation stays in the call's record


# A parked call inside a stored event: its record as a JSON string (what the chat's
# parked-calls hash holds too, less a private continuation), read back through the
# record's own validation.
_StoredCall = Annotated[
    ParkedCall, PlainValidator(_read_stored_call), PlainSerializer(_write_stored_call)
]


@dataclass(frozen=True)
class CallParked:
    """A call now waits for the browser or a human; ``call`` describes it for a widget."""

    # kw_only lets ``kind`` come first, as it always has in stored batches, while
    # ``CallParked(call)`` still takes the call positionally.
    kind: Literal["call-parked"] = field(default="call-parked", kw_only=True)
    call: _StoredCall


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


# Stored batches, one JSON array each, read by ``kind``. NaN and infinities are written
# as the bare constants Python's json module wrote before (and reads back): a tool's
# output keeps its value through the log, as it did.
_BATCH: TypeAdapter[list[Event]] = TypeAdapter(
    list[Annotated[Event, Field(discriminator="kind")]],
    config=ConfigDict(ser_json_inf_nan="constants"),
)

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


def events_to_json(events: list[Event]) -> str:
    """A batch of events as one JSON array (one entry of a chat's event log)."""
    return _BATCH.dump_json(events).decode()


def events_from_json(text: str | bytes) -> list[Event]:
    """Read a batch written by :func:`events_to_json` (by this or any earlier version).

    Raises :class:`IncompatibleStateError` naming the first problem when the batch is
    not one this code can read (an unknown ``kind``, a missing field).
    """
    try:
        return _BATCH.validate_json(text)
    except ValidationError as exc:
        raise IncompatibleStateError(
            f"a stored event batch is malformed: {describe_first_error(exc)}"
        ) from None
