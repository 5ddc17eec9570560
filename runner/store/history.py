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

import orjson

from parkway.runner.canonical import has_long_digit_run
from parkway.runner.llm import (
    AssistantTurn,
    ModelMessage,
    ModelStepEnd,
    ModelToolCall,
    ModelUsage,
    ToolResult,
    UserTurn,
)
from parkway.runner.store.client import as_text

__all__ = [
    "UNKNOWN_RESULT",
    "ModelView",
    "assistant_entry",
    "call_entry",
    "decode_entries",
    "dump_entry",
    "is_retry",
    "message_metadata",
    "messages_metadata",
    "result_entry",
    "stored_messages",
    "to_model_messages",
    "user_entry",
    "with_turn_message",
]

UNKNOWN_RESULT = {
    "error": "result unknown: the worker running this tool stopped before it finished. "
    "Do not blindly retry a side-effecting call; check its effect first."
}


def user_entry(text: str, uid: str | None) -> dict[str, Any]:
    return {"t": "user", "text": text, "uid": uid}


def is_retry(entries: Sequence[Mapping[str, Any]], uid: str | None) -> bool:
    """Whether a turn with user message ``uid`` retries the chat's last turn: its message
    is already the history's last user entry. The claim lets the same id through only
    once the turn's run failed (which clears the duplicate guard), and the message is
    then not stored twice."""
    if not uid:
        return False
    last = next((e for e in reversed(entries) if e["t"] == "user"), None)
    return last is not None and last.get("uid") == uid


def with_turn_message(
    meta: Mapping[str, Any], entries: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``entries`` as a reader should see them while a turn runs: with the turn's user
    message, which the run stores with its first commit, taken from where its claim put
    it (``turn_user``) until then. A page reloaded, or a client following the run, while
    the model's first step streams would otherwise show the run without the message it
    answers. Nothing is added once the run stored the message (it is in the entries since
    the run began, at ``run_hist``) or when the turn retries the history's last message."""
    raw = meta.get("turn_user")
    if not raw or meta.get("state") != "running":
        return entries
    message = json.loads(raw)
    began = min(int(meta.get("run_hist") or 0), len(entries))
    if any(e.get("t") == "user" for e in entries[began:]) or is_retry(
        entries[:began], message.get("uid")
    ):
        return entries
    return [*entries, message]


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
    """:func:`messages_metadata` of one message, or None. A message's entries are the
    last ones when it ends, so only those are read (not the whole history)."""
    start = len(entries)
    while start > 0:
        entry = entries[start - 1]
        if entry["t"] == "user" or (entry["t"] == "assistant" and entry["mid"] != message_id):
            break
        start -= 1
    return messages_metadata(entries[start:]).get(message_id)


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


def decode_entries(raw: Sequence[bytes | str]) -> list[dict[str, Any]]:
    """Parse stored entries (as Redis returned them, bytes or text): each is one JSON
    object this runner wrote, so the list is parsed as one JSON array (one C-level
    parse, by orjson, not one call per entry); if the count comes out different,
    something odd is stored and each entry is parsed alone. What orjson refuses and
    Python's parser reads exactly (``NaN``; a run of 19 or more digits, which may be an
    integer beyond 64 bits that orjson would turn into a float) is parsed by the latter."""
    if not raw:
        return []
    if all(isinstance(item, bytes) for item in raw):
        joined: bytes | str = b"[" + b",".join(raw) + b"]"  # type: ignore[arg-type]
    else:
        joined = "[" + ",".join(as_text(item) for item in raw) + "]"
    entries: list[dict[str, Any]]
    if isinstance(joined, bytes) and not has_long_digit_run(joined):
        try:
            entries = orjson.loads(joined)
        except orjson.JSONDecodeError:
            entries = json.loads(joined)
    else:  # orjson reads an integer past 64 bits as a float: Python's parser keeps it
        entries = json.loads(joined)
    if len(entries) != len(raw):
        entries = [json.loads(item) for item in raw]
    return entries


def to_model_messages(entries: Sequence[Mapping[str, Any]]) -> tuple[ModelMessage, ...]:
    """The conversation as the model sees it, with every tool call answered."""
    return ModelView().update(entries)


def stored_messages(entries: Sequence[Mapping[str, Any]]) -> tuple[ModelMessage, ...]:
    """The conversation as it is stored, in model messages: unlike
    :func:`to_model_messages`, a call with no result yet (it is parked) stays without
    one, rather than being answered "result unknown"."""
    out: list[ModelMessage] = []
    for entry in entries:
        tag = entry["t"]
        if tag == "user":
            out.append(UserTurn(entry["text"]))
        elif tag == "assistant":
            out.append(_assistant_turn(entry))
        elif tag == "result":
            out.append(_tool_result(entry))
    return tuple(out)


def _assistant_turn(entry: Mapping[str, Any]) -> AssistantTurn:
    calls = tuple(
        ModelToolCall(c["name"], c["input"], c["id"], provider_id=c.get("pid"))
        for c in entry["calls"]
    )
    return AssistantTurn(entry["text"], calls, tuple(entry.get("parts", ())), entry.get("resp"))


def _tool_result(entry: Mapping[str, Any]) -> ToolResult:
    return ToolResult(
        entry["id"],
        entry["name"],
        entry["result"],
        is_error=entry["status"] in {"error", "input_error"},
    )


class ModelView:
    """:func:`to_model_messages` of a run's entries, kept as they grow.

    A run asks the model once per step with the whole conversation; the view turns each
    entry into its model message once, when it first sees it, instead of rebuilding
    every message at every step. The entries handed to :meth:`update` must be the same
    list as before plus new ones at the end (a run's history only grows); anything else
    (checked by the identity of the last entry seen) is converted from scratch.

    A call with no result when the next user or assistant entry comes is answered
    "result unknown" there. If its result turns up later after all (never written by
    this runner, but the stored form allows it), the view is rebuilt, so it is always
    exactly what a conversion of the whole list gives.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._seen = 0
        self._last: Mapping[str, Any] | None = None
        self._messages: list[ModelMessage] = []
        self._open: list[ModelToolCall] = []  # calls of the last assistant entry
        self._answered: set[str] = set()
        self._unknown: set[str] = set()  # calls closed with "result unknown"

    def copy(self) -> ModelView:
        """An independent view in the same state (it goes on from the same entries)."""
        other = ModelView.__new__(ModelView)
        other._seen, other._last = self._seen, self._last
        other._messages, other._open = list(self._messages), list(self._open)
        other._answered, other._unknown = set(self._answered), set(self._unknown)
        return other

    def update(self, entries: Sequence[Mapping[str, Any]]) -> tuple[ModelMessage, ...]:
        """The model's view of ``entries``."""
        seen = self._seen
        if seen and (len(entries) < seen or entries[seen - 1] is not self._last):
            self._reset()
            seen = 0
        fresh = entries[seen:]
        late = any(e["t"] == "result" and e["id"] in self._unknown for e in fresh)
        if late:
            # A result after its call was closed as unknown: the whole list, once more.
            self._reset()
            fresh = entries
        # (a result anywhere in what is new answers its call, also one closed before it)
        self._answered.update(e["id"] for e in fresh if e["t"] == "result")
        messages = self._messages
        for entry in fresh:
            tag = entry["t"]
            if tag == "result":
                messages.append(_tool_result(entry))
            elif tag in {"user", "assistant"}:
                self._close()
                if tag == "user":
                    messages.append(UserTurn(entry["text"]))
                else:
                    turn = _assistant_turn(entry)
                    messages.append(turn)
                    self._open = list(turn.tool_calls)
        self._seen = len(entries)
        self._last = entries[-1] if entries else None
        unanswered = [
            ToolResult(c.id or "", c.name, UNKNOWN_RESULT, is_error=True)
            for c in self._open
            if c.id not in self._answered
        ]
        return (*messages, *unanswered)

    def _close(self) -> None:
        """The last assistant entry's calls are done: those with no result are unknown."""
        for call in self._open:
            if call.id not in self._answered:
                assert call.id is not None
                self._messages.append(ToolResult(call.id, call.name, UNKNOWN_RESULT, is_error=True))
                self._unknown.add(call.id)
        self._open = []
