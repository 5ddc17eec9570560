"""The chat history as stored in Redis: an append-only list of small JSON entries.

Entry shapes (``t`` is the tag)::

    {"t": "user", "text": str, "uid": str | null}            a user message
    {"t": "assistant", "mid": str, "text": str,
     "calls": [{"id", "name", "input", "pid"?, "bad"?}],
     "parts"?: [...], "resp"?: {...}, "usage"?: [in, out, reasoning],
     "model"?: str, "finish"?: str}                           one model step
    {"t": "result", "id": str, "name": str, "result": any,
     "status": "ok" | "error" | "denied" | "input_error",
     "outcome": str?}                                          one tool call's result

An assistant entry from a provider model also keeps what the provider needs back
unchanged (``parts``: its text, reasoning and call parts in order, with signatures and
provider ids; ``resp``: the response's own record), the provider's id for each call
(``pid``), the tokens used, the model that answered and its finish reason. ``bad`` marks
a call whose input was not JSON (its ``input`` is then ``{}``).

The model's view (:func:`to_model_messages`) is derived from these entries. A call with
no result entry when the model is asked again (its worker died while the tool ran) gets
a deterministic "result unknown" result, never a silent re-execution.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from parkway.runner.model import (
    AssistantTurn,
    ModelMessage,
    ModelStepEnd,
    ModelToolCall,
    ModelUsage,
    ToolResult,
    UserTurn,
)

__all__ = [
    "UNKNOWN_RESULT",
    "assistant_entry",
    "call_entry",
    "decode_entries",
    "dump_entry",
    "message_metadata",
    "messages_metadata",
    "result_entry",
    "to_model_messages",
    "user_entry",
]

UNKNOWN_RESULT = {
    "error": "result unknown: the worker running this tool stopped before it finished. "
    "Do not blindly retry a side-effecting call; check its effect first."
}


def user_entry(text: str, uid: str | None) -> dict[str, Any]:
    return {"t": "user", "text": text, "uid": uid}


def assistant_entry(
    message_id: str,
    text: str,
    calls: Sequence[Mapping[str, Any]],
    *,
    end: ModelStepEnd | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "t": "assistant",
        "mid": message_id,
        "text": text,
        "calls": list(calls),
    }
    if end is not None:
        if end.parts:
            entry["parts"] = [dict(p) for p in end.parts]
        if end.response:
            entry["resp"] = dict(end.response)
        if end.usage is not None:
            u = end.usage
            entry["usage"] = [u.input_tokens, u.output_tokens, u.reasoning_tokens]
        if end.model:
            entry["model"] = end.model
        if end.finish_reason:
            entry["finish"] = end.finish_reason
    return entry


def call_entry(call: ModelToolCall) -> dict[str, Any]:
    """A tool call as an assistant entry stores it (``pid`` and ``bad`` only when set)."""
    entry: dict[str, Any] = {"id": call.id, "name": call.name, "input": call.input}
    if call.provider_id and call.provider_id != call.id:
        entry["pid"] = call.provider_id
    if call.input_error is not None:
        entry["bad"] = True
    return entry


def messages_metadata(entries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a reader is told about each assistant message, by message id, in one pass:
    the model of its latest step that names one, and the tokens all its steps used.
    Messages no step says anything about (the scripted model's) are left out."""
    models: dict[str, str] = {}
    usage: dict[str, ModelUsage] = {}
    for entry in entries:
        if entry["t"] != "assistant":
            continue
        mid = entry["mid"]
        if entry.get("model"):
            models[mid] = entry["model"]
        if "usage" in entry:
            step = ModelUsage(*entry["usage"])
            usage[mid] = usage[mid] + step if mid in usage else step
    out: dict[str, dict[str, Any]] = {}
    for mid in models.keys() | usage.keys():
        about: dict[str, Any] = {}
        if mid in models:
            about["model"] = models[mid]
        if mid in usage:
            u = usage[mid]
            about["usage"] = {
                "inputTokens": u.input_tokens,
                "outputTokens": u.output_tokens,
                "reasoningTokens": u.reasoning_tokens,
                "totalTokens": u.input_tokens + u.output_tokens,
            }
        out[mid] = about
    return out


def message_metadata(
    entries: Sequence[Mapping[str, Any]], message_id: str
) -> dict[str, Any] | None:
    """:func:`messages_metadata` of one message, or None."""
    return messages_metadata(entries).get(message_id)


def result_entry(
    tool_call_id: str,
    name: str,
    result: Any,
    status: str,
    outcome: str | None = None,
    *,
    parts: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> dict[str, Any]:
    """A tool call's result. ``parts``: the data parts the tool published, kept with the
    result so that a reloaded chat shows them again (the model never reads them)."""
    entry = {"t": "result", "id": tool_call_id, "name": name, "result": result, "status": status}
    if outcome is not None:
        entry["outcome"] = outcome
    if parts:
        entry["parts"] = [{"name": part, "data": dict(data)} for part, data in parts]
    return entry


def part_ids(tool_call_id: str, names: Sequence[str]) -> list[str]:
    """The ids of the data parts a tool call published, in order: the call's id, and for
    a second part of the same name its own (a client replaces a data part of the same
    type and id)."""
    seen: dict[str, int] = {}
    ids = []
    for name in names:
        n = seen[name] = seen.get(name, -1) + 1
        ids.append(tool_call_id if n == 0 else f"{tool_call_id}:{n}")
    return ids


def dump_entry(entry: Mapping[str, Any]) -> str:
    """One entry as stored: compact JSON, UTF-8 kept as is."""
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False)


def decode_entries(raw: Sequence[str]) -> list[dict[str, Any]]:
    """Parse stored entries: each is one JSON object this runner wrote, so the list is
    parsed as one JSON array (one C-level parse, not one call per entry); if the count
    comes out different, something odd is stored and each entry is parsed alone."""
    if not raw:
        return []
    entries: list[dict[str, Any]] = json.loads("[" + ",".join(raw) + "]")
    if len(entries) != len(raw):
        entries = [json.loads(item) for item in raw]
    return entries


def to_model_messages(entries: Sequence[Mapping[str, Any]]) -> tuple[ModelMessage, ...]:
    """The conversation as the model sees it, with every tool call answered."""
    answered = {e["id"] for e in entries if e["t"] == "result"}
    messages: list[ModelMessage] = []
    open_calls: list[ModelToolCall] = []

    def close_open() -> None:
        for call in open_calls:
            if call.id not in answered:
                assert call.id is not None
                messages.append(ToolResult(call.id, call.name, UNKNOWN_RESULT, is_error=True))
        open_calls.clear()

    for entry in entries:
        tag = entry["t"]
        if tag == "user":
            close_open()
            messages.append(UserTurn(entry["text"]))
        elif tag == "assistant":
            close_open()
            calls = tuple(
                ModelToolCall(c["name"], c["input"], c["id"], provider_id=c.get("pid"))
                for c in entry["calls"]
            )
            messages.append(
                AssistantTurn(
                    entry["text"], calls, tuple(entry.get("parts", ())), entry.get("resp")
                )
            )
            open_calls.extend(calls)
        elif tag == "result":
            messages.append(
                ToolResult(
                    entry["id"],
                    entry["name"],
                    entry["result"],
                    is_error=entry["status"] in {"error", "input_error"},
                )
            )
    close_open()
    return tuple(messages)
