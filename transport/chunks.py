"""Wire models of the AI SDK UI message stream, one per chunk type.

Two rules of the real client's schema (``uiMessageChunkSchema``) shape :meth:`to_dict`:
optional fields are left out, never ``null``; the ``unknown``-typed fields (``input``,
``output``, ``data``) are required keys and are always present, ``null`` included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

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


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True)
class Chunk:
    TYPE: ClassVar[str] = ""
    ALWAYS: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.chunk_type()}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name not in self.ALWAYS:
                continue
            out[_camel(f.name)] = value
        return out

    def chunk_type(self) -> str:
        return self.TYPE


@dataclass(frozen=True)
class StartChunk(Chunk):
    TYPE = "start"
    message_id: str | None = None


@dataclass(frozen=True)
class StartStepChunk(Chunk):
    TYPE = "start-step"


@dataclass(frozen=True)
class FinishStepChunk(Chunk):
    TYPE = "finish-step"


@dataclass(frozen=True)
class FinishChunk(Chunk):
    TYPE = "finish"
    finish_reason: str | None = None
    message_metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class TextStartChunk(Chunk):
    TYPE = "text-start"
    id: str


@dataclass(frozen=True)
class TextDeltaChunk(Chunk):
    TYPE = "text-delta"
    id: str
    delta: str


@dataclass(frozen=True)
class TextEndChunk(Chunk):
    TYPE = "text-end"
    id: str


@dataclass(frozen=True)
class ReasoningStartChunk(Chunk):
    TYPE = "reasoning-start"
    id: str


@dataclass(frozen=True)
class ReasoningDeltaChunk(Chunk):
    TYPE = "reasoning-delta"
    id: str
    delta: str


@dataclass(frozen=True)
class ReasoningEndChunk(Chunk):
    TYPE = "reasoning-end"
    id: str


@dataclass(frozen=True)
class ToolInputStartChunk(Chunk):
    TYPE = "tool-input-start"
    tool_call_id: str
    tool_name: str


@dataclass(frozen=True)
class ToolInputDeltaChunk(Chunk):
    TYPE = "tool-input-delta"
    tool_call_id: str
    input_text_delta: str


@dataclass(frozen=True)
class ToolInputAvailableChunk(Chunk):
    TYPE = "tool-input-available"
    ALWAYS = frozenset({"input"})
    tool_call_id: str
    tool_name: str
    input: Any


@dataclass(frozen=True)
class ToolInputErrorChunk(Chunk):
    TYPE = "tool-input-error"
    ALWAYS = frozenset({"input"})
    tool_call_id: str
    tool_name: str
    input: Any
    error_text: str


@dataclass(frozen=True)
class ToolApprovalRequestChunk(Chunk):
    TYPE = "tool-approval-request"
    approval_id: str
    tool_call_id: str


@dataclass(frozen=True)
class ToolOutputAvailableChunk(Chunk):
    TYPE = "tool-output-available"
    ALWAYS = frozenset({"output"})
    tool_call_id: str
    output: Any


@dataclass(frozen=True)
class ToolOutputErrorChunk(Chunk):
    TYPE = "tool-output-error"
    tool_call_id: str
    error_text: str


@dataclass(frozen=True)
class ToolOutputDeniedChunk(Chunk):
    TYPE = "tool-output-denied"
    tool_call_id: str


@dataclass(frozen=True)
class DataChunk(Chunk):
    """A ``data-<name>`` chunk; parts with the same name and id update in place."""

    ALWAYS = frozenset({"data"})
    name: str
    data: Any
    id: str | None = None

    def chunk_type(self) -> str:
        return f"data-{self.name}"

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        del out["name"]
        return out


@dataclass(frozen=True)
class ErrorChunk(Chunk):
    TYPE = "error"
    error_text: str
