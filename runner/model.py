"""The model interface: what the run loop asks of an LLM.

A model receives a :class:`ModelRequest` (instructions, the conversation as
:data:`ModelMessage` items, the tools it may call) and streams back text deltas and tool
calls. Several tool calls in one response form one parallel step. The scripted model
(:mod:`runner.scripted`) is the first implementation; a provider adapter is another.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "AssistantTurn",
    "Model",
    "ModelEvent",
    "ModelMessage",
    "ModelRequest",
    "ModelTextDelta",
    "ModelToolCall",
    "ToolDescription",
    "ToolResult",
    "UserTurn",
]


@dataclass(frozen=True)
class ModelTextDelta:
    text: str
    kind: Literal["text-delta"] = "text-delta"


@dataclass(frozen=True)
class ModelToolCall:
    """A tool call the model makes. ``id`` is optional: the runner assigns one if absent."""

    name: str
    input: Any
    id: str | None = None
    kind: Literal["tool-call"] = "tool-call"


ModelEvent = ModelTextDelta | ModelToolCall


@dataclass(frozen=True)
class UserTurn:
    text: str
    role: Literal["user"] = "user"


@dataclass(frozen=True)
class AssistantTurn:
    text: str
    tool_calls: tuple[ModelToolCall, ...] = ()
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True)
class ToolResult:
    tool_call_id: str
    tool_name: str
    result: Any
    is_error: bool = False
    role: Literal["tool"] = "tool"


ModelMessage = UserTurn | AssistantTurn | ToolResult


@dataclass(frozen=True)
class ToolDescription:
    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    """Everything a model needs for one step.

    ``call_index`` counts the model calls made so far in the chat (0 for the first); it
    survives park, resume and restart, because it is stored with the chat.
    """

    chat_id: str
    call_index: int
    instructions: str
    messages: tuple[ModelMessage, ...]
    tools: tuple[ToolDescription, ...]


class Model(Protocol):
    """Anything that turns a request into a stream of text deltas and tool calls."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...
