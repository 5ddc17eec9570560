"""Wire models of the AI SDK UI message stream, one per chunk type.

Field names are snake_case here and camelCase on the wire (the models' alias
generator). Two rules of the real client's schema (``uiMessageChunkSchema``) shape
:meth:`Chunk.to_dict`: an optional field is left out when it is ``None``, never sent as
``null``; the ``unknown``-typed fields (``input``, ``output``, ``data``) are required
keys and are always present, ``null`` included.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "Chunk",
    "DataChunk",
    "ErrorChunk",
    "FinishChunk",
    "FinishStepChunk",
    "ReasoningDeltaChunk",
    "ReasoningEndChunk",
    "ReasoningStartChunk",
    "StartChunk",
    "StartStepChunk",
    "TextDeltaChunk",
    "TextEndChunk",
    "TextStartChunk",
    "ToolApprovalRequestChunk",
    "ToolInputAvailableChunk",
    "ToolInputDeltaChunk",
    "ToolInputErrorChunk",
    "ToolInputStartChunk",
    "ToolOutputAvailableChunk",
    "ToolOutputDeniedChunk",
    "ToolOutputErrorChunk",
]

_T = TypeVar("_T")


def _is_none(value: object) -> bool:
    return value is None


# An optional field of the client's schema: absent from the chunk when it is None.
_Omitted = Annotated[_T | None, Field(exclude_if=_is_none)]


class Chunk(BaseModel):
    """One chunk of the stream; ``type`` comes first on the wire, then the fields in the
    order they are declared."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    type: str

    def to_dict(self) -> dict[str, Any]:
        """The chunk as a JSON-ready dict, as the client's schema wants it."""
        return self.model_dump()


class StartChunk(Chunk):
    type: Literal["start"] = "start"
    message_id: _Omitted[str] = None


class StartStepChunk(Chunk):
    type: Literal["start-step"] = "start-step"


class FinishStepChunk(Chunk):
    type: Literal["finish-step"] = "finish-step"


class FinishChunk(Chunk):
    type: Literal["finish"] = "finish"
    finish_reason: _Omitted[str] = None
    message_metadata: _Omitted[dict[str, Any]] = None


class TextStartChunk(Chunk):
    type: Literal["text-start"] = "text-start"
    id: str


class TextDeltaChunk(Chunk):
    type: Literal["text-delta"] = "text-delta"
    id: str
    delta: str


class TextEndChunk(Chunk):
    type: Literal["text-end"] = "text-end"
    id: str


class ReasoningStartChunk(Chunk):
    type: Literal["reasoning-start"] = "reasoning-start"
    id: str


class ReasoningDeltaChunk(Chunk):
    type: Literal["reasoning-delta"] = "reasoning-delta"
    id: str
    delta: str


class ReasoningEndChunk(Chunk):
    type: Literal["reasoning-end"] = "reasoning-end"
    id: str


class ToolInputStartChunk(Chunk):
    type: Literal["tool-input-start"] = "tool-input-start"
    tool_call_id: str
    tool_name: str


class ToolInputDeltaChunk(Chunk):
    type: Literal["tool-input-delta"] = "tool-input-delta"
    tool_call_id: str
    input_text_delta: str


class ToolInputAvailableChunk(Chunk):
    type: Literal["tool-input-available"] = "tool-input-available"
    tool_call_id: str
    tool_name: str
    input: Any


class ToolInputErrorChunk(Chunk):
    type: Literal["tool-input-error"] = "tool-input-error"
    tool_call_id: str
    tool_name: str
    input: Any
    error_text: str


class ToolApprovalRequestChunk(Chunk):
    type: Literal["tool-approval-request"] = "tool-approval-request"
    approval_id: str
    tool_call_id: str


class ToolOutputAvailableChunk(Chunk):
    type: Literal["tool-output-available"] = "tool-output-available"
    tool_call_id: str
    output: Any


class ToolOutputErrorChunk(Chunk):
    type: Literal["tool-output-error"] = "tool-output-error"
    tool_call_id: str
    error_text: str


class ToolOutputDeniedChunk(Chunk):
    type: Literal["tool-output-denied"] = "tool-output-denied"
    tool_call_id: str


class DataChunk(Chunk):
    """A ``data-<name>`` chunk; parts with the same name and id update in place."""

    type: str = Field(pattern=r"^data-.")
    data: Any
    id: _Omitted[str] = None

    def __init__(self, *, name: str, data: Any, id: str | None = None) -> None:
        # BaseModel.__init__ itself: type checkers give Chunk's an argument list of
        # Chunk's own fields only, and the fields are validated the same either way.
        BaseModel.__init__(self, type=f"data-{name}", data=data, id=id)


class ErrorChunk(Chunk):
    type: Literal["error"] = "error"
    error_text: str
