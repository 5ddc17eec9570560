"""The function model: a model whose answers a Python function decides.

A test (or a demo) steers the agent from Python instead of a script: the function
receives the conversation so far and what the request carries besides (the tools, the
instructions, the chat), and returns what the model says this step: text, a tool call,
or a list of both (several calls in one step are one parallel step)::

    def reply(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
        if info.results_since_user():          # the tools answered: sum up
            return f"done: {info.results_since_user()[-1].result}"
        return ToolCall("pick_file", {"folder": "/reports"})

    agent = AgentFile(template, model=FunctionModel(reply))

The function may be ``async``. It keeps no state between steps on purpose: a parked run
resumes from Redis, perhaps in another process, where the conversation is all there is
(``info.call_index`` counts the chat's model calls so far, through parks and restarts).
Text is streamed word by word, as a provider streams it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from parkway.runner.llm.model import (
    AssistantTurn,
    ModelEvent,
    ModelMessage,
    ModelRequest,
    ModelStepEnd,
    ModelTextDelta,
    ModelToolCall,
    ToolDescription,
    ToolResult,
    UserTurn,
)

__all__ = ["FunctionInfo", "FunctionModel", "Reply", "ReplyFunction", "ToolCall"]

_WORDS = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class ToolCall:
    """A tool call a function model makes: the tool's name and its input (a JSON
    object). The runner gives the call its id (``result.parked[i].id`` once it parks)."""

    name: str
    input: Any = field(default_factory=dict)


Reply: TypeAlias = str | ToolCall | Sequence[str | ToolCall]
"""What a reply function returns for one model step: text, a tool call, or a list of
both in the order the model says them (an empty string or list: an empty answer)."""


@dataclass(frozen=True)
class FunctionInfo:
    """What a reply function is told besides the messages.

    ``call_index`` counts the chat's model calls before this one (0 for the first); it
    survives parks and restarts. ``tools`` are the tools the agent offers this step.
    """

    chat_id: str
    call_index: int
    instructions: str
    tools: tuple[ToolDescription, ...]
    messages: tuple[ModelMessage, ...]

    def tool(self, name: str) -> ToolDescription:
        """The offered tool called ``name``; :class:`KeyError` if there is none."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"no tool {name!r} is offered (offered: {self.tool_names()})")

    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools]

    @property
    def last_user_text(self) -> str:
        """The latest user message's text ("" before any)."""
        for message in reversed(self.messages):
            if isinstance(message, UserTurn):
                return message.text
        return ""

    def results_since_user(self) -> list[ToolResult]:
        """The tool results that came after the latest user message, in order: what the
        tools of this turn answered so far (a parked call's outcome among them)."""
        out: list[ToolResult] = []
        for message in reversed(self.messages):
            if isinstance(message, UserTurn):
                break
            if isinstance(message, ToolResult):
                out.append(message)
        return out[::-1]

    def calls_since_user(self) -> list[ModelToolCall]:
        """The tool calls the model made since the latest user message, in order."""
        out: list[ModelToolCall] = []
        for message in reversed(self.messages):
            if isinstance(message, UserTurn):
                break
            if isinstance(message, AssistantTurn):
                out[:0] = message.tool_calls
        return out


ReplyFunction: TypeAlias = Callable[
    [tuple[ModelMessage, ...], FunctionInfo], Reply | Awaitable[Reply]
]
"""``fn(messages, info)``, plain or ``async``, returning a :data:`Reply`."""


class FunctionModel:
    """A model that answers each step with what ``fn(messages, info)`` returns.

    ``name`` labels the model in the message metadata and metrics (default: the
    function's name)."""

    def __init__(self, fn: ReplyFunction, *, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionModel needs a function, not {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "function")

    def __repr__(self) -> str:
        return f"FunctionModel({self.name})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        info = FunctionInfo(
            chat_id=request.chat_id,
            call_index=request.call_index,
            instructions=request.instructions,
            tools=request.tools,
            messages=request.messages,
        )
        reply = self.fn(request.messages, info)
        if inspect.isawaitable(reply):
            reply = await reply
        for event in reply_events(reply):
            yield event
        yield ModelStepEnd(model=f"function:{self.name}")


def reply_events(reply: Reply) -> list[ModelEvent]:
    """The model events of a :data:`Reply`: text as word deltas, then or between them the
    tool calls. Raises :class:`TypeError` naming what is not a reply."""
    parts: Sequence[Any] = [reply] if isinstance(reply, str | ToolCall) else reply
    if not isinstance(parts, Sequence):
        raise TypeError(
            f"a reply is text, a ToolCall or a list of them, not {type(reply).__name__}"
        )
    events: list[ModelEvent] = []
    for part in parts:
        if isinstance(part, str):
            events += [ModelTextDelta(word) for word in _WORDS.findall(part)]
        elif isinstance(part, ToolCall):
            events.append(ModelToolCall(name=part.name, input=part.input))
        else:
            raise TypeError(
                f"a reply is text, a ToolCall or a list of them; got a {type(part).__name__}"
            )
    return events
