"""A model tape: each step of a real model recorded with the request that produced it, and
served back offline (no key, no network, the same answer every time).

A cassette of a chat with a real model keeps, besides the HTTP exchanges, each model step:
which chat and which of its model calls (``call_index``, stored with the chat, so the same
across park, resume and restart), the request as the model saw it (instructions, tools,
the conversation; normalised, below), and every event the model streamed back (text,
reasoning, tool calls, and the closing :class:`~parkway.runner.llm.model.ModelStepEnd` with the
provider's parts such as thinking signatures, the model's name and usage).

:meth:`ModelTape.wrap` puts a tape in front of a provider model. What it does with a
request depends on the tape's mode:

- ``replay``: serve the recorded step of this chat and index. A request that differs from
  the recorded one is still served the recorded answer (so the rest of the replay is
  still compared), and the difference is reported: which step, which field. A step the
  tape does not have fails the run with a :class:`ModelError` naming it. The real model
  is never built, so no key is needed.
- ``new``: serve the recorded steps whose request is the same; send the others (changed
  or not on the tape) to the real model and record them. This re-records exactly the
  steps an edit to the agent changed.
- ``all``: send every step to the real model and record it.

Normalisation makes a request comparable across runs: the tool-call ids the runner
generates are labelled in order of first appearance (``call#1``), and a chat id the
replay suffixed for its own run is mapped back to the recorded one, wherever they occur.

The tape reports through ``sink``: one plain-JSON object per event (``used``,
``recorded``, ``differs``, ``missing``), which the transport writes where the process
that drives the replay reads it. This module knows nothing of files or HTTP.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from parkway.runner.errors import ModelError
from parkway.runner.llm.model import (
    AssistantTurn,
    Model,
    ModelEvent,
    ModelReasoningDelta,
    ModelRequest,
    ModelStepEnd,
    ModelTextDelta,
    ModelToolCall,
    ModelToolInputDelta,
    ModelToolInputStart,
    ModelUsage,
    ToolResult,
    UserTurn,
)

__all__ = [
    "TAPE_MODES",
    "ModelTape",
    "TapeMode",
    "TapeStep",
    "event_from_json",
    "event_to_json",
    "first_differences",
    "request_json",
]

TapeMode = Literal["replay", "new", "all"]
TAPE_MODES: tuple[TapeMode, ...] = ("replay", "new", "all")
Sink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class TapeStep:
    """One recorded model step: chat ``chat``'s model call number ``index``, the request
    (normalised, :func:`request_json`) and the events the model streamed."""

    chat: str
    index: int
    request: Mapping[str, Any]
    events: tuple[Mapping[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "chat": self.chat,
            "index": self.index,
            "request": dict(self.request),
            "events": [dict(e) for e in self.events],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TapeStep:
        return cls(
            chat=str(data["chat"]),
            index=int(data["index"]),
            request=dict(data["request"]),
            events=tuple(dict(e) for e in data["events"]),
        )


# -- events as plain JSON ---------------------------------------------------------------


def event_to_json(event: ModelEvent) -> dict[str, Any]:
    """A model event as plain JSON, leaving out empty optional fields."""
    if isinstance(event, ModelTextDelta | ModelReasoningDelta):
        return {"kind": event.kind, "text": event.text}
    if isinstance(event, ModelToolInputStart):
        return {"kind": event.kind, "key": event.key, "name": event.name}
    if isinstance(event, ModelToolInputDelta):
        return {"kind": event.kind, "key": event.key, "delta": event.delta}
    if isinstance(event, ModelToolCall):
        out: dict[str, Any] = {"kind": event.kind, "name": event.name, "input": event.input}
        for field in ("id", "provider_id", "stream_key", "input_error"):
            value = getattr(event, field)
            if value is not None:
                out[field] = value
        return out
    out = {"kind": event.kind}
    if event.finish_reason is not None:
        out["finish_reason"] = event.finish_reason
    if event.usage is not None:
        usage = event.usage
        out["usage"] = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
        }
    if event.model is not None:
        out["model"] = event.model
    if event.parts:
        out["parts"] = [dict(p) for p in event.parts]
    if event.response is not None:
        out["response"] = dict(event.response)
    return out


def event_from_json(data: Mapping[str, Any]) -> ModelEvent:
    """The event :func:`event_to_json` wrote. Raises ``ValueError`` naming the problem
    for an unknown kind, a missing field or a field of the wrong shape."""
    try:
        return _event(data)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"model event {str(data.get('kind'))!r} is malformed: {type(exc).__name__} {exc}"
        ) from None


def _event(data: Mapping[str, Any]) -> ModelEvent:
    kind = data.get("kind")
    if kind == "text-delta":
        return ModelTextDelta(_text(data, "text"))
    if kind == "reasoning-delta":
        return ModelReasoningDelta(_text(data, "text"))
    if kind == "tool-input-start":
        return ModelToolInputStart(_text(data, "key"), _text(data, "name"))
    if kind == "tool-input-delta":
        return ModelToolInputDelta(_text(data, "key"), _text(data, "delta"))
    if kind == "tool-call":
        return ModelToolCall(
            _text(data, "name"),
            data.get("input"),
            id=_text(data, "id", None),
            provider_id=_text(data, "provider_id", None),
            stream_key=_text(data, "stream_key", None),
            input_error=_text(data, "input_error", None),
        )
    if kind == "step-end":
        usage, parts, response = data.get("usage"), data.get("parts", []), data.get("response")
        if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
            raise TypeError("'parts' must be a list of objects")
        if response is not None and not isinstance(response, dict):
            raise TypeError("'response' must be an object")
        return ModelStepEnd(
            finish_reason=_text(data, "finish_reason", None),
            usage=_usage(usage) if usage is not None else None,
            model=_text(data, "model", None),
            parts=tuple(parts),
            response=response,
        )
    raise ValueError(f"unknown model event kind {kind!r}")


_REQUIRED: Any = object()


def _text(data: Mapping[str, Any], key: str, default: Any = _REQUIRED) -> Any:
    """``data[key]``, which must be a string (or absent, given a ``default``)."""
    if key not in data and default is not _REQUIRED:
        return default
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"{key!r} must be a string")
    return value


def _usage(data: Mapping[str, Any]) -> ModelUsage:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in data.values()):
        raise TypeError(f"token counts must be integers, not {dict(data)!r}")
    return ModelUsage(**data)


def _merge_deltas(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive deltas of one text, reasoning or tool input joined into one: a tape
    keeps what the model said, not how the network split it."""
    out: list[dict[str, Any]] = []
    for event in events:
        last = out[-1] if out else None
        kind = event["kind"]
        if last is not None and last["kind"] == kind:
            if kind in {"text-delta", "reasoning-delta"}:
                last["text"] += event["text"]
                continue
            if kind == "tool-input-delta" and last["key"] == event["key"]:
                last["delta"] += event["delta"]
                continue
        out.append(dict(event))
    return out


# -- requests as comparable JSON --------------------------------------------------------


def _message_json(message: Any) -> dict[str, Any]:
    if isinstance(message, UserTurn):
        return {"role": "user", "text": message.text}
    if isinstance(message, AssistantTurn):
        out: dict[str, Any] = {"role": "assistant", "text": message.text}
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "name": c.name, "input": c.input} for c in message.tool_calls
            ]
        return out
    assert isinstance(message, ToolResult)
    return {
        "role": "tool",
        "id": message.tool_call_id,
        "name": message.tool_name,
        "result": message.result,
        "is_error": message.is_error,
    }


def _replace_strings(value: Any, sub: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return sub(value)
    if isinstance(value, dict):
        return {k: _replace_strings(v, sub) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_strings(v, sub) for v in value]
    return value


def request_json(
    request: ModelRequest, model: str, chats: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``request`` as the tape compares it: the model's name, instructions, tools and the
    conversation, with generated tool-call ids labelled by first appearance and the
    served chat ids in ``chats`` mapped back to the recorded ones."""
    messages = [_message_json(m) for m in request.messages]
    ids: dict[str, str] = {}
    for message in request.messages:
        calls = message.tool_calls if isinstance(message, AssistantTurn) else ()
        for call_id in [c.id for c in calls] + [
            message.tool_call_id if isinstance(message, ToolResult) else None
        ]:
            if call_id and call_id not in ids:
                ids[call_id] = f"call#{len(ids) + 1}"
    names = {**ids, **(chats or {})}
    document = {
        "model": model,
        "instructions": request.instructions,
        "tools": [
            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
            for t in request.tools
        ],
        "messages": messages,
    }
    if not names:
        return document
    pattern = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
    return dict(_replace_strings(document, lambda s: pattern.sub(lambda m: names[m[0]], s)))


def first_differences(
    expected: Any, got: Any, path: str = "", limit: int = 5
) -> list[tuple[str, Any, Any]]:
    """Where two JSON values differ: up to ``limit`` (path, expected, got), in document
    order. A path is ``messages[3].text``; a value absent on one side is ``<absent>``."""
    found: list[tuple[str, Any, Any]] = []

    def walk(e: Any, g: Any, where: str) -> None:
        if len(found) >= limit or e == g:
            return
        if isinstance(e, dict) and isinstance(g, dict):
            for key in list(e) + [k for k in g if k not in e]:
                walk(e.get(key, "<absent>"), g.get(key, "<absent>"), f"{where}.{key}")
            return
        if isinstance(e, list) and isinstance(g, list):
            for i in range(max(len(e), len(g))):
                walk(
                    e[i] if i < len(e) else "<absent>",
                    g[i] if i < len(g) else "<absent>",
                    f"{where}[{i}]",
                )
            return
        found.append((where.lstrip("."), e, g))

    walk(expected, got, path)
    return found


# -- the tape ---------------------------------------------------------------------------


class ModelTape:
    """Recorded model steps by (chat, index), and the mode that says how to use them (see
    the module doc). ``chats`` maps served chat ids to recorded ones (a replay's
    per-run namespace); ``sink`` receives the tape's reports as plain JSON."""

    def __init__(
        self,
        steps: Iterable[TapeStep],
        mode: TapeMode = "replay",
        *,
        chats: Mapping[str, str] | None = None,
        sink: Sink | None = None,
    ) -> None:
        if mode not in TAPE_MODES:
            raise ValueError(f"unknown tape mode {mode!r} (one of {', '.join(TAPE_MODES)})")
        self.steps: dict[tuple[str, int], TapeStep] = {(s.chat, s.index): s for s in steps}
        self.mode: TapeMode = mode
        self.chats = dict(chats or {})
        self._sink = sink or (lambda _report: None)

    @property
    def needs_model(self) -> bool:
        """Whether a real model may be called (and so needs its key)."""
        return self.mode != "replay"

    def wrap(self, name: str, build: Callable[[], Model]) -> Model:
        """The model ``name`` (``provider:model``) behind this tape. ``build`` makes the
        real model, and is called only when a step goes to it."""
        return _TapedModel(self, name, build)

    def _report(self, event: str, about: TapeStep, **fields: Any) -> None:
        self._sink({"event": event, "chat": about.chat, "index": about.index, **fields})


class _TapedModel:
    def __init__(self, tape: ModelTape, name: str, build: Callable[[], Model]) -> None:
        self.tape, self.name, self._build = tape, name, build
        self._real: Model | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        tape = self.tape
        chat = tape.chats.get(request.chat_id, request.chat_id)
        wanted = request_json(request, self.name, tape.chats)
        recorded = tape.steps.get((chat, request.call_index))
        if recorded is not None and tape.mode != "all":
            differences = first_differences(recorded.request, wanted)
            if not differences or tape.mode == "replay":
                if differences:
                    tape._report("differs", recorded, fields=[list(d) for d in differences])
                tape._report("used", recorded)
                for data in recorded.events:
                    yield event_from_json(data)
                return
        step = TapeStep(chat, request.call_index, wanted, ())
        if tape.mode == "replay":
            tape._report("missing", step, request=wanted)
            raise ModelError(
                f"the cassette has no recorded answer for model step {request.call_index} "
                f"of chat {chat!r}: the agent now asks the model more than when it was "
                "recorded (re-record with record mode new_episodes)"
            )
        if self._real is None:
            self._real = self._build()
        events: list[dict[str, Any]] = []
        async for event in self._real.stream(request):
            events.append(event_to_json(event))
            yield event
        step = TapeStep(chat, request.call_index, wanted, tuple(_merge_deltas(events)))
        tape.steps[(chat, request.call_index)] = step
        tape._report("recorded", step, step=step.to_json())

    async def aclose(self) -> None:
        close = getattr(self._real, "aclose", None)
        if close is not None:
            await close()
