"""The chat history as stored in Redis: an append-only list of small JSON entries.

Entry shapes (``t`` is the tag)::

    {"t": "user", "text": str, "uid": str | null}            a user message
    {"t": "assistant", "mid": str, "text": str,
     "calls": [{"id", "name", "input"}]}                       one model step
    {"t": "result", "id": str, "name": str, "result": any,
     "status": "ok" | "error" | "denied" | "input_error",
     "outcome": str?}                                          one tool call's result

The model's view (:func:`to_model_messages`) is derived from these entries. A call with
no result entry when the model is asked again (its worker died while the tool ran) gets
a deterministic "result unknown" result, never a silent re-execution.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from runner.model import AssistantTurn, ModelMessage, ModelToolCall, ToolResult, UserTurn

__all__ = [
    "UNKNOWN_RESULT",
    "assistant_entry",
    "decode_entries",
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
    message_id: str, text: str, calls: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    return {"t": "assistant", "mid": message_id, "text": text, "calls": list(calls)}


def result_entry(
    tool_call_id: str, name: str, result: Any, status: str, outcome: str | None = None
) -> dict[str, Any]:
    entry = {"t": "result", "id": tool_call_id, "name": name, "result": result, "status": status}
    if outcome is not None:
        entry["outcome"] = outcome
    return entry


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
            calls = tuple(ModelToolCall(c["name"], c["input"], c["id"]) for c in entry["calls"])
            messages.append(AssistantTurn(entry["text"], calls))
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
