"""The scripted model: a real implementation of the model interface, driven by a script.

Turn ``k`` of the script answers the ``k``-th model call of the chat. A turn is a list
of parts, ``{"text": "..."}`` or ``{"tool_call": {"name": ..., "input": {...}}}``; several
tool calls in one turn are one parallel step. When the script runs out, the model
answers :data:`END_OF_SCRIPT`: the script is done, and how to start over or go on with
a real model.

Placeholders, filled from the model's input (the chat so far) each time a turn is used:

``{{last_tool_results}}``
    the canonical JSON list ``[{"tool": name, "result": ...}]`` of the tool results
    that follow the latest assistant turn, in the order of that turn's calls.
``{{last_user_text}}``
    the latest user message's text.
``{{result.<tool>.<path>}}``
    the value at ``<path>`` in the most recent result of tool ``<tool>`` anywhere in the
    model's input (an error result counts: it is the tool's most recent result).
    ``<path>`` is dot-separated object keys (letters, digits, ``_``, ``-``); a segment
    of digits also indexes a list. With no path (``{{result.<tool>}}``) it is the whole
    result. The value is rendered as plain text: a string as-is, a number or boolean as
    its JSON form (``21``, ``true``), an object or list as canonical JSON.
``{{result.<tool>.<path>|<fallback>}}``
    the same, but ``<fallback>`` (any text without braces) when the value is missing.

A value is *missing* when the tool has no result in the input, the path does not lead
anywhere, or the value there is ``null``. A missing value with no fallback renders as
the empty string, so a script never prints ``null`` or a stray placeholder.

Placeholders are filled in one pass, so text they insert (a user's message, a tool
result) is never itself read as a placeholder. Anything else in double braces is left
as written.

In a tool call, every string value of ``input`` is filled, at any depth (object keys
are not). A string that is exactly one placeholder becomes the value itself, keeping
its JSON type (``{"n": "{{result.count.total}}"}`` gives ``{"n": 3}``); a missing value
there becomes the fallback or ``""`` as in text.

Conditions: a part may carry ``"if": "result.<tool>.<path>"`` and/or
``"unless": "result.<tool>.<path>"``. The part is used only when the value there is
truthy (for ``if``) and not truthy (for ``unless``). Truthiness is JSON's: a missing
value, ``null``, ``false``, ``0``, ``""``, ``[]`` and ``{}`` are falsy, anything else is
truthy. A turn whose parts are all left out answers nothing.

The script is checked when it is loaded: unknown keys, a part that is not exactly one of
``text`` and ``tool_call``, a malformed condition, and a malformed ``{{result...}}``
placeholder are refused with :class:`TemplateError`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from parkway.runner.canonical import canonical_json
from parkway.runner.errors import TemplateError
from parkway.runner.llm.model import (
    AssistantTurn,
    ModelEvent,
    ModelRequest,
    ModelTextDelta,
    ModelToolCall,
    ToolResult,
    UserTurn,
)
from parkway.runner.validation import describe_first_error

__all__ = ["END_OF_SCRIPT", "ScriptedModel"]

# Past its script a scripted agent (the demo's included) says so, and how to go on: the
# person reading it may not know the answers were scripted.
END_OF_SCRIPT = (
    "This agent's script is done: a scripted agent says only what its script holds. "
    "Start a new chat (New chat) to run it again, or serve it on a real model to go on: "
    "parkway serve --model NAME (make run MODEL=NAME)."
)
_WORDS = re.compile(r"\S+\s*|\s+")
# ``result.<tool>[.<path>]``: a tool name as templates allow it, then key segments.
_RESULT_PATH = r"result\.(?P<tool>[A-Za-z][A-Za-z0-9_-]*)(?P<path>(?:\.[A-Za-z0-9_-]+)*)"
_CONDITION = re.compile(_RESULT_PATH)
_PLACEHOLDER = re.compile(
    r"\{\{(?:(?P<named>last_tool_results|last_user_text)"
    rf"|{_RESULT_PATH}(?:\|(?P<fallback>[^{{}}]*))?)\}}\}}"
)
# Anything in double braces that starts like a result placeholder; each must be a
# whole, well-formed one, so that a typo fails at load instead of printing verbatim.
_RESULT_LIKE = re.compile(r"\{\{\s*result\b[^{}]*\}\}")
_MISSING = object()
_T = TypeVar("_T")


def _check_placeholders(value: _T) -> _T:
    for text in _strings(value):
        for found in _RESULT_LIKE.finditer(text):
            if not _PLACEHOLDER.fullmatch(found.group()):
                raise ValueError(
                    f"malformed placeholder {found.group()!r}: expected "
                    "{{result.<tool>.<path>}} or {{result.<tool>.<path>|fallback}}"
                )
    return value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


class _ToolCallPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    input: Any = None

    @field_validator("input")
    @classmethod
    def _placeholders(cls, value: Any) -> Any:
        return _check_placeholders(value)


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    tool_call: _ToolCallPart | None = None
    if_: str | None = Field(default=None, alias="if")
    unless: str | None = None

    @field_validator("text")
    @classmethod
    def _placeholders(cls, value: str | None) -> str | None:
        return _check_placeholders(value)

    @field_validator("if_", "unless")
    @classmethod
    def _condition(cls, value: str | None) -> str | None:
        if value is not None and not _CONDITION.fullmatch(value):
            raise ValueError(
                f"condition {value!r} must be result.<tool>.<path>, "
                "for example result.request_connection.connected"
            )
        return value

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


def result_at(request: ModelRequest, tool: str, path: Sequence[str]) -> Any:
    """The value at ``path`` in the most recent result of ``tool`` in the model's input,
    or ``None`` when it is missing (no result, no such path, or ``null``)."""
    latest = next(
        (
            m
            for m in reversed(request.messages)
            if isinstance(m, ToolResult) and m.tool_name == tool
        ),
        None,
    )
    value: Any = _MISSING if latest is None else latest.result
    for segment in path:
        if isinstance(value, dict):
            value = value.get(segment, _MISSING)
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            value = _MISSING
    return None if value is _MISSING else value


def _split(dotted: str) -> list[str]:
    return [s for s in dotted.split(".") if s]


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


class _Filler:
    """Fills the placeholders of one turn from one request."""

    def __init__(self, request: ModelRequest) -> None:
        self._request = request

    def value(self, found: re.Match[str]) -> Any:
        """A placeholder's value, keeping its JSON type (a fallback is text)."""
        named = found.group("named")
        if named == "last_tool_results":
            return last_tool_results(self._request)
        if named == "last_user_text":
            return last_user_text(self._request)
        value = result_at(self._request, found["tool"], _split(found["path"]))
        if value is None:
            return found.group("fallback") or ""
        return value

    def text(self, text: str) -> str:
        return _PLACEHOLDER.sub(lambda found: _as_text(self.value(found)), text)

    def input(self, value: Any) -> Any:
        if isinstance(value, str):
            whole = _PLACEHOLDER.fullmatch(value)
            return copy.deepcopy(self.value(whole)) if whole else self.text(value)
        if isinstance(value, list):
            return [self.input(item) for item in value]
        if isinstance(value, dict):
            return {key: self.input(item) for key, item in value.items()}
        return value

    def holds(self, part: _Part) -> bool:
        """Whether the part's ``if`` and ``unless`` conditions let it be used."""
        if part.if_ is not None and not self._truthy(part.if_):
            return False
        return part.unless is None or not self._truthy(part.unless)

    def _truthy(self, condition: str) -> bool:
        found = _CONDITION.fullmatch(condition)
        assert found is not None  # checked when the script was loaded
        return bool(result_at(self._request, found["tool"], _split(found["path"])))


class ScriptedModel:
    """Answers each model call of a chat with the next turn of a fixed script."""

    def __init__(self, turns: Sequence[Sequence[Any]]) -> None:
        try:
            script = _Script.model_validate({"turns": turns})
        except ValidationError as exc:
            raise TemplateError(f"scripted model: {describe_first_error(exc)}") from None
        self._turns = script.turns

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if request.call_index >= len(self._turns):
            yield ModelTextDelta(END_OF_SCRIPT)
            return
        fill = _Filler(request)
        for part in self._turns[request.call_index]:
            if not fill.holds(part):
                continue
            if part.text is not None:
                for word in _WORDS.findall(fill.text(part.text)):
                    yield ModelTextDelta(word)
            elif part.tool_call is not None:
                yield ModelToolCall(
                    name=part.tool_call.name, input=fill.input(part.tool_call.input)
                )
