"""Replay: the chunks that rebuild an assistant message from what Redis holds.

The AI SDK's ``resumeStream()`` (``GET /api/chat/{id}/stream``) expects the current
assistant message replayed from its ``start``: the client throws away what it had and
rebuilds the message from the replay. Finished tool calls are rebuilt as
``tool-input-start`` + ``tool-input-delta`` + their output, so the browser's
``onToolCall`` does not fire again for them; a still-pending client call is replayed as
``tool-input-available``, which re-fires it, as it should for a call still waiting.

A message a live run continues is rebuilt without the outputs that run sends itself:
an approved call's result, and the result of a server tool that parked asking for
input (``ToolNeedsInput``, an MCP form) and runs again with the answer. The person's
answer to such a call is not its output; replayed, it would reach the client as a
second ``tool-output-available`` for the same call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from parkway.transport.aisdk.chunks import (
    Chunk,
    DataChunk,
    FinishChunk,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
)

__all__ = ["replay_message"]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _tool_chunks(
    part: Mapping[str, Any], *, continued: bool, rerun: AbstractSet[str]
) -> Iterator[Chunk]:
    name = str(part["type"])[len("tool-") :]
    call_id = part["toolCallId"]
    state = part.get("state")
    approval = part.get("approval") or {}
    if continued and (state == "approval-responded" or call_id in rerun):
        # The run that follows sends this call's result or denial: do not ask again.
        yield ToolInputStartChunk(tool_call_id=call_id, tool_name=name)
        yield ToolInputDeltaChunk(tool_call_id=call_id, input_text_delta=_json(part["input"]))
        return
    if state in {"input-available", "approval-requested", "approval-responded"}:
        yield ToolInputAvailableChunk(tool_call_id=call_id, tool_name=name, input=part["input"])
        if approval.get("id"):
            yield ToolApprovalRequestChunk(approval_id=approval["id"], tool_call_id=call_id)
        return
    yield ToolInputStartChunk(tool_call_id=call_id, tool_name=name)
    yield ToolInputDeltaChunk(tool_call_id=call_id, input_text_delta=_json(part["input"]))
    if state == "output-available":
        yield ToolOutputAvailableChunk(tool_call_id=call_id, output=part.get("output"))
    elif state == "output-denied":
        yield ToolOutputDeniedChunk(tool_call_id=call_id)
    else:
        yield ToolOutputErrorChunk(tool_call_id=call_id, error_text=str(part.get("errorText", "")))


def replay_message(
    message: Mapping[str, Any],
    finish_reason: str | None,
    *,
    rerun: AbstractSet[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Chunks that rebuild ``message`` (a UI message) from its start, then finish it.

    With ``finish_reason=None`` the message is left open: the rebuilt parts are the
    start of a message that a live run continues (its chunks follow). ``rerun`` names
    the calls whose output that run sends (tools run again with a person's answer):
    they are rebuilt without one.
    """
    continued = finish_reason is None
    chunks: list[Chunk] = [StartChunk(message_id=message["id"])]
    open_step = False
    for index, part in enumerate(message["parts"]):
        kind = part["type"]
        if kind == "step-start":
            if open_step:
                chunks.append(FinishStepChunk())
            chunks.append(StartStepChunk())
            open_step = True
        elif kind == "text":
            text_id = f"r{index}"
            chunks += [
                TextStartChunk(id=text_id),
                TextDeltaChunk(id=text_id, delta=part["text"]),
                TextEndChunk(id=text_id),
            ]
        elif kind == "reasoning":
            reasoning_id = f"r{index}"
            chunks += [
                ReasoningStartChunk(id=reasoning_id),
                ReasoningDeltaChunk(id=reasoning_id, delta=part["text"]),
                ReasoningEndChunk(id=reasoning_id),
            ]
        elif kind.startswith("tool-"):
            chunks.extend(_tool_chunks(part, continued=continued, rerun=rerun))
        elif kind.startswith("data-"):
            chunks.append(
                DataChunk(name=kind[len("data-") :], id=part.get("id"), data=part["data"])
            )
    if open_step:
        chunks.append(FinishStepChunk())
    if finish_reason is not None:
        chunks.append(
            FinishChunk(finish_reason=finish_reason, message_metadata=message.get("metadata"))
        )
    return [chunk.to_dict() for chunk in chunks]
