"""The model interface: what the run loop asks of an LLM.

A model receives a :class:`ModelRequest` (instructions, the conversation as
:data:`ModelMessage` items, the tools it may call) and streams back :data:`ModelEvent`
items: text and reasoning deltas, tool-call input as it is written, the finished tool
calls, and a closing :class:`ModelStepEnd`. Several tool calls in one response form one
parallel step. The scripted model (:mod:`parkway.runner.llm.scripted`) yields only text deltas and
tool calls; the provider adapter (:mod:`parkway.runner.llm`) yields all of them.

Whatever a provider needs back unchanged on the next request (thinking signatures,
encrypted reasoning, provider call ids) travels in :attr:`ModelStepEnd.parts` and
:attr:`ModelStepEnd.response`: plain JSON the runner stores with the step and hands back,
untouched, in :attr:`AssistantTurn.parts` and :attr:`AssistantTurn.response`.
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
    "ModelReasoningDelta",
    "ModelRequest",
    "ModelStepEnd",
    "ModelTextDelta",
    "ModelToolCall",
    "ModelToolInputDelta",
    "ModelToolInputStart",
    "ModelUsage",
    "ToolDescription",
    "ToolResult",
    "UserTurn",
]


@dataclass(frozen=True)
class ModelTextDelta:
    text: str
    kind: Literal["text-delta"] = "text-delta"


@dataclass(frozen=True)
class ModelReasoningDelta:
    """Reasoning ("thinking") text as the model writes it; shown, never sent as an answer."""

    text: str
    kind: Literal["reasoning-delta"] = "reasoning-delta"


@dataclass(frozen=True)
class ModelToolInputStart:
    """The model began writing a tool call's input. ``key`` ties it to the later
    :class:`ModelToolInputDelta` items and to the finished :class:`ModelToolCall`."""

    key: str
    name: str
    kind: Literal["tool-input-start"] = "tool-input-start"


@dataclass(frozen=True)
class ModelToolInputDelta:
    key: str
    delta: str
    kind: Literal["tool-input-delta"] = "tool-input-delta"


@dataclass(frozen=True)
class ModelToolCall:
    """A tool call the model makes. ``id`` is optional: the runner assigns one if absent.

    ``provider_id`` is the provider's own id for the call, sent back with its result;
    ``stream_key`` names the :class:`ModelToolInputStart` that streamed its input;
    ``input_error`` says why the model's input could not be read (not JSON), in which
    case ``input`` is ``{}``.
    """

    name: str
    input: Any
    id: str | None = None
    provider_id: str | None = None
    stream_key: str | None = None
    input_error: str | None = None
    kind: Literal["tool-call"] = "tool-call"


@dataclass(frozen=True)
class ModelUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True)
class ModelStepEnd:
    """The end of one model response: why it ended, what it cost, which model answered,
    and the provider's own record of it (``parts``, ``response``: plain JSON, stored with
    the step and given back unchanged on later requests).

    ``finish_reason`` is one of ``stop``, ``length``, ``content-filter``, ``tool-calls``
    or ``other``.
    """

    finish_reason: str | None = None
    usage: ModelUsage | None = None
    model: str | None = None
    parts: tuple[Mapping[str, Any], ...] = ()
    response: Mapping[str, Any] | None = None
    kind: Literal["step-end"] = "step-end"


ModelEvent = (
    ModelTextDelta
    | ModelReasoningDelta
    | ModelToolInputStart
    | ModelToolInputDelta
    | ModelToolCall
    | ModelStepEnd
)


@dataclass(frozen=True)
class UserTurn:
    text: str
    role: Literal["user"] = "user"


@dataclass(frozen=True)
class AssistantTurn:
    """One stored model step. ``parts`` and ``response`` are what the provider adapter
    stored with it (empty for the scripted model); an adapter that finds them empty, or
    written by another provider, works from ``text`` and ``tool_calls``."""

    text: str
    tool_calls: tuple[ModelToolCall, ...] = ()
    parts: tuple[Mapping[str, Any], ...] = ()
    response: Mapping[str, Any] | None = None
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
    """Anything that turns a request into a stream of :data:`ModelEvent` items.

    A model that cannot answer raises :class:`parkway.runner.errors.ModelError` (the run ends
    with its message; the chat stays usable)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...
