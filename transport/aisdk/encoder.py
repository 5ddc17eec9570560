"""The protocol encoder: runner events in, AI SDK UI message stream chunks out.

A pure translator: no Starlette, no Redis, no I/O. The widget descriptor of a parked
call comes from the ``describe`` function it is given (``widgets_api`` supplies it), so
the encoder can be rebuilt long after the request that produced the events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from parkway.runner.events import (
    ApprovalRequested,
    CallParked,
    DataPublished,
    Event,
    MessageFinished,
    MessageStarted,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    RunFailed,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallIssued,
    ToolDenied,
    ToolFailed,
    ToolInputDelta,
    ToolInputRejected,
    ToolInputStarted,
    ToolSucceeded,
)
from parkway.runner.parking import ParkedCall
from parkway.transport.aisdk.chunks import (
    Chunk,
    DataChunk,
    ErrorChunk,
    FinishChunk,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
)

__all__ = ["WIDGET_PART", "Describe", "encode_event"]

WIDGET_PART = "parkway-widget"

Describe = Callable[[ParkedCall], Mapping[str, Any]]


def encode_event(event: Event, describe: Describe) -> Chunk:
    """The one chunk that stands for ``event`` on the wire."""
    match event:
        case MessageStarted(message_id=message_id):
            return StartChunk(message_id=message_id)
        case StepStarted():
            return StartStepChunk()
        case TextStarted(text_id=text_id):
            return TextStartChunk(id=text_id)
        case TextDelta(text_id=text_id, delta=delta):
            return TextDeltaChunk(id=text_id, delta=delta)
        case TextEnded(text_id=text_id):
            return TextEndChunk(id=text_id)
        case ReasoningStarted(reasoning_id=reasoning_id):
            return ReasoningStartChunk(id=reasoning_id)
        case ReasoningDelta(reasoning_id=reasoning_id, delta=delta):
            return ReasoningDeltaChunk(id=reasoning_id, delta=delta)
        case ReasoningEnded(reasoning_id=reasoning_id):
            return ReasoningEndChunk(id=reasoning_id)
        case ToolInputStarted(tool_call_id=call_id, tool_name=name):
            return ToolInputStartChunk(tool_call_id=call_id, tool_name=name)
        case ToolInputDelta(tool_call_id=call_id, delta=delta):
            return ToolInputDeltaChunk(tool_call_id=call_id, input_text_delta=delta)
        case ToolCallIssued(tool_call_id=call_id, tool_name=name, input=tool_input):
            return ToolInputAvailableChunk(tool_call_id=call_id, tool_name=name, input=tool_input)
        case ToolInputRejected(tool_call_id=call_id, tool_name=name, input=tool_input, error=err):
            return ToolInputErrorChunk(
                tool_call_id=call_id, tool_name=name, input=tool_input, error_text=err
            )
        case ApprovalRequested(tool_call_id=call_id, approval_id=approval_id):
            return ToolApprovalRequestChunk(approval_id=approval_id, tool_call_id=call_id)
        case CallParked(call=call):
            return DataChunk(name=WIDGET_PART, id=call.tool_call_id, data=dict(describe(call)))
        case ToolSucceeded(tool_call_id=call_id, output=output):
            return ToolOutputAvailableChunk(tool_call_id=call_id, output=output)
        case ToolFailed(tool_call_id=call_id, error=err):
            return ToolOutputErrorChunk(tool_call_id=call_id, error_text=err)
        case ToolDenied(tool_call_id=call_id):
            return ToolOutputDeniedChunk(tool_call_id=call_id)
        case DataPublished(name=name, data=data, part_id=part_id):
            return DataChunk(name=name, id=part_id, data=dict(data))
        case StepFinished():
            return FinishStepChunk()
        case MessageFinished(reason=reason, metadata=metadata):
            return FinishChunk(finish_reason=reason, message_metadata=metadata)
        case RunFailed(message=message):
            return ErrorChunk(error_text=message)
    raise TypeError(f"not a runner event: {event!r}")
