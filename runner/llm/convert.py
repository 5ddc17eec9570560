"""Conversion at the adapter boundary: Parkway's model messages to pydantic-ai's, and a
pydantic-ai response back to what Parkway stores.

Parkway's history stays in its own format. A provider step is stored as ``parts`` (its
text, reasoning and tool-call parts in order) and ``response`` (the response's own
record); each part keeps what the provider needs back unchanged: a thinking part's
``signature`` (Anthropic's signature, OpenAI's encrypted reasoning), a part's ``id``
(OpenAI reasoning and function-call item ids), the ``provider_name`` that produced it and
its ``provider_details`` (Gemini's thought signatures). Tool calls keep the provider's id
(``pid``). Rebuilding a :class:`ModelResponse` from them gives the provider back exactly
what it sent, after a park, a restart or on another worker.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage as PAMessage,
)
from pydantic_ai.messages import (
    ModelRequest as PARequest,
)
from pydantic_ai.messages import (
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_jsonable_python

from parkway.runner.llm.model import (
    AssistantTurn,
    ModelRequest,
    ModelStepEnd,
    ModelToolCall,
    ModelUsage,
    ToolResult,
    UserTurn,
)

__all__ = ["request_parameters", "step_end", "to_messages", "tool_calls", "tool_input"]

# History messages are rebuilt for every request; the parts' defaults would stamp each
# with the time now and a fresh usage record. Neither is sent to a provider, so they share
# one fixed timestamp and one empty usage record (never mutated for past messages).
_PAST = datetime(2000, 1, 1, tzinfo=UTC)
_NO_USAGE = RequestUsage()

FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content-filter",
    "tool_call": "tool-calls",
    "error": "other",
}


def _extras(part: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": part.get("id"),
        "provider_name": part.get("pn"),
        "provider_details": part.get("pd"),
    }


def _call_part(call: ModelToolCall, stored: Mapping[str, Any] | None) -> ToolCallPart:
    extras = _extras(stored) if stored is not None else {}
    return ToolCallPart(
        tool_name=call.name,
        args=call.input if isinstance(call.input, dict) else {},
        tool_call_id=call.provider_id or call.id or "",
        **extras,
    )


def _response(turn: AssistantTurn) -> ModelResponse:
    parts: list[ModelResponsePart] = []
    calls = iter(turn.tool_calls)
    if turn.parts:
        for stored in turn.parts:
            kind = stored.get("type")
            if kind == "text":
                parts.append(TextPart(stored.get("text", ""), **_extras(stored)))
            elif kind == "reasoning":
                parts.append(
                    ThinkingPart(
                        stored.get("text", ""), signature=stored.get("sig"), **_extras(stored)
                    )
                )
            elif kind == "call":
                call = next(calls, None)
                if call is not None:
                    parts.append(_call_part(call, stored))
    elif turn.text:
        parts.append(TextPart(turn.text))
    parts.extend(_call_part(call, None) for call in calls)
    resp = turn.response or {}
    return ModelResponse(
        parts=parts,
        usage=_NO_USAGE,
        timestamp=_PAST,
        model_name=resp.get("model"),
        provider_name=resp.get("provider"),
        provider_url=resp.get("url"),
        provider_response_id=resp.get("rid"),
        provider_details=resp.get("pd"),
    )


def to_messages(request: ModelRequest) -> list[PAMessage]:
    """The conversation as pydantic-ai messages, tool results answering the provider's
    own call ids, and the instructions on the last request."""
    out: list[PAMessage] = []
    pending: list[ModelRequestPart] = []
    provider_ids: dict[str, str] = {}

    def flush() -> None:
        if pending:
            out.append(PARequest(parts=list(pending), timestamp=_PAST))
            pending.clear()

    for message in request.messages:
        if isinstance(message, UserTurn):
            pending.append(UserPromptPart(message.text, timestamp=_PAST))
        elif isinstance(message, ToolResult):
            pending.append(
                ToolReturnPart(
                    tool_name=message.tool_name,
                    content=message.result,
                    tool_call_id=provider_ids.get(message.tool_call_id, message.tool_call_id),
                    outcome="failed" if message.is_error else "success",
                    timestamp=_PAST,
                )
            )
        elif isinstance(message, AssistantTurn):
            response = _response(message)
            if not response.parts:
                # A step stopped or cut before it said anything: providers refuse an
                # empty assistant message, and there is nothing in it to send.
                continue
            flush()
            out.append(response)
            for call in message.tool_calls:
                if call.id is not None and call.provider_id:
                    provider_ids[call.id] = call.provider_id
    flush()
    if request.instructions:
        for index in range(len(out) - 1, -1, -1):
            last = out[index]
            if isinstance(last, PARequest):
                out[index] = dataclasses.replace(last, instructions=request.instructions)
                break
    return out


def request_parameters(request: ModelRequest) -> ModelRequestParameters:
    tools = [
        ToolDefinition(
            name=tool.name,
            description=tool.description or None,
            parameters_json_schema=dict(tool.input_schema),
        )
        for tool in request.tools
    ]
    return ModelRequestParameters(function_tools=tools, allow_text_output=True)


def tool_input(args: object) -> tuple[dict[str, Any], str | None]:
    """A call's input as an object, or ``{}`` with the reason it could not be read."""
    if args is None or args == "":
        return {}, None
    if isinstance(args, dict):
        return args, None
    if not isinstance(args, str):
        return {}, "the input is not a JSON object"
    try:
        value = json.loads(args)
    except json.JSONDecodeError as exc:
        shown = args if len(args) <= 200 else args[:200] + "…"
        return {}, f"the input is not valid JSON ({exc.msg} at character {exc.pos}): {shown}"
    if not isinstance(value, dict):
        return {}, "the input must be a JSON object"
    return value, None


def _stored(part: ThinkingPart | TextPart | ToolCallPart, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind}
    if isinstance(part, TextPart | ThinkingPart):
        out["text"] = part.content
    if isinstance(part, ThinkingPart) and part.signature is not None:
        out["sig"] = part.signature
    if part.id is not None:
        out["id"] = part.id
    if part.provider_name is not None:
        out["pn"] = part.provider_name
    if part.provider_details:
        out["pd"] = to_jsonable_python(part.provider_details)
    return out


def tool_calls(response: ModelResponse) -> Iterator[ModelToolCall]:
    for index, part in enumerate(response.parts):
        if isinstance(part, ToolCallPart):
            value, problem = tool_input(part.args)
            yield ModelToolCall(
                part.tool_name,
                value,
                provider_id=part.tool_call_id,
                stream_key=str(index),
                input_error=problem,
            )


def step_end(response: ModelResponse, provider: str) -> ModelStepEnd:
    parts: list[dict[str, Any]] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            parts.append(_stored(part, "text"))
        elif isinstance(part, ThinkingPart):
            parts.append(_stored(part, "reasoning"))
        elif isinstance(part, ToolCallPart):
            parts.append(_stored(part, "call"))
    record: dict[str, Any] = {}
    for key, value in (
        ("provider", response.provider_name),
        ("model", response.model_name),
        ("url", response.provider_url),
        ("rid", response.provider_response_id),
        ("pd", response.provider_details),
    ):
        if value:
            # Plain JSON, as pydantic-ai's own message serializer makes it (a datetime
            # becomes its ISO text).
            record[key] = to_jsonable_python(value)
    usage = response.usage
    details = usage.details or {}
    reasoning = int(details.get("reasoning_tokens", 0) or details.get("thoughts_tokens", 0) or 0)
    output = usage.output_tokens
    if "thoughts_tokens" in details:  # Gemini counts thoughts apart from the answer
        output += reasoning
    return ModelStepEnd(
        finish_reason=FINISH_REASONS.get(response.finish_reason or ""),
        usage=ModelUsage(usage.input_tokens, output, reasoning),
        model=f"{provider}:{response.model_name}" if response.model_name else None,
        parts=tuple(parts),
        response=record or None,
    )
