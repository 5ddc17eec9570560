"""The scripted model: a real implementation of the model interface, driven by a script.

Turn ``k`` of the script answers the ``k``-th model call of the chat. A turn is a list
of parts, ``{"text": "..."}`` or ``{"tool_call": {"name": ..., "input": {...}}}``; several
tool calls in one turn are one parallel step. In text, ``{{last_tool_results}}`` becomes
the canonical JSON list ``[{"tool": name, "result": ...}]`` of the tool results in the
model's latest input (in call order), and ``{{last_user_text}}`` the latest user text.
When the script runs out, the model answers ``(end of script)``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runner.canonical import canonical_json
from runner.errors import TemplateError
from runner.model import (
    AssistantTurn,
    ModelEvent,
    ModelRequest,
    ModelTextDelta,
    ModelToolCall,
    ToolResult,
    UserTurn,
)

__all__ = ["END_OF_SCRIPT", "ScriptedModel"]

END_OF_SCRIPT = "(end of script)"
_WORDS = re.compile(r"\S+\s*|\s+")


class _ToolCallPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    input: Any = None


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    tool_call: _ToolCallPart | None = None

    @model_validator(mode="after")
    def _one_of(self) -> _Part:
        if (self.text is None) == (self.tool_call is None):
            raise ValueError("a part is either {'text': ...} or {'tool_call': {...}}")
        return self


class _Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: list[list[_Part]]


def last_tool_results(request: ModelRequest) -> list[dict[str, Any]]:
    """The tool results after the latest assistant turn, in the order of its calls."""
    messages = request.messages
    last_assistant = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AssistantTurn)),
        None,
    )
    if last_assistant is None:
        return []
    turn = messages[last_assistant]
    assert isinstance(turn, AssistantTurn)
    by_id = {m.tool_call_id: m for m in messages[last_assistant + 1 :] if isinstance(m, ToolResult)}
    ordered = [by_id[c.id] for c in turn.tool_calls if c.id in by_id]
    return [{"tool": r.tool_name, "result": r.result} for r in ordered]


def last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserTurn):
            return message.text
    return ""


class ScriptedModel:
    """Answers each model call of a chat with the next turn of a fixed script."""

    def __init__(self, turns: Sequence[Sequence[Any]]) -> None:
        try:
            script = _Script.model_validate({"turns": turns})
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise TemplateError(f"scripted model: {loc}: {first['msg']}") from None
        self._turns = script.turns

    @classmethod
    def from_config(cls, config: Any) -> ScriptedModel:
        """Build from the agent file's ``{"scripted": {"turns": [...]}}``."""
        if not isinstance(config, dict) or not isinstance(config.get("scripted"), dict):
            raise TemplateError("model: expected {'scripted': {'turns': [...]}}")
        turns = config["scripted"].get("turns")
        if not isinstance(turns, list):
            raise TemplateError("model.scripted.turns: expected a list of turns")
        return cls(turns)

    def _fill(self, text: str, request: ModelRequest) -> str:
        if "{{last_tool_results}}" in text:
            text = text.replace("{{last_tool_results}}", canonical_json(last_tool_results(request)))
        if "{{last_user_text}}" in text:
            text = text.replace("{{last_user_text}}", last_user_text(request))
        return text

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if request.call_index >= len(self._turns):
            yield ModelTextDelta(END_OF_SCRIPT)
            return
        for part in self._turns[request.call_index]:
            if part.text is not None:
                for word in _WORDS.findall(self._fill(part.text, request)):
                    yield ModelTextDelta(word)
            elif part.tool_call is not None:
                yield ModelToolCall(name=part.tool_call.name, input=part.tool_call.input)
