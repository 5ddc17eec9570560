"""The four wires: each provider's documented SSE frames for a scripted reply, and its
error bodies."""

from __future__ import annotations

import base64
import http
import itertools
import json
import os
import re
import time
import uuid
from typing import Any

from sse_starlette import ServerSentEvent

from tests.helpers.llm_double.replies import (
    _FINISHES,
    CutOff,
    Hang,
    Json,
    Turn,
)

# --- Wire vocabulary --------------------------------------------------------------------

# Turn.finish → each wire's reason: (tool calls, stop, length, content_filter). For
# Responses it is `incomplete_details.reason`; "" means the response completed.
_FINISH_NAMES = {
    "openai-chat": ("tool_calls", "stop", "length", "content_filter"),
    "openai-responses": ("", "", "max_output_tokens", "content_filter"),
    "anthropic": ("tool_use", "end_turn", "max_tokens", "refusal"),
    "gemini": ("STOP", "STOP", "MAX_TOKENS", "SAFETY"),
}
# HTTP status → (OpenAI error type, OpenAI code, Anthropic error type, Gemini status)
_ERRORS: dict[int, tuple[str, str | None, str, str]] = {
    400: ("invalid_request_error", None, "invalid_request_error", "INVALID_ARGUMENT"),
    401: ("invalid_request_error", "invalid_api_key", "authentication_error", "UNAUTHENTICATED"),
    403: ("invalid_request_error", None, "permission_error", "PERMISSION_DENIED"),
    404: ("invalid_request_error", "model_not_found", "not_found_error", "NOT_FOUND"),
    413: ("invalid_request_error", None, "request_too_large", "INVALID_ARGUMENT"),
    429: ("requests", "rate_limit_exceeded", "rate_limit_error", "RESOURCE_EXHAUSTED"),
    500: ("server_error", None, "api_error", "INTERNAL"),
    503: ("server_error", None, "api_error", "UNAVAILABLE"),
    504: ("server_error", None, "timeout_error", "DEADLINE_EXCEEDED"),
    529: ("server_error", None, "overloaded_error", "UNAVAILABLE"),
}


def _error_body(wire: str, status: int, message: str | None = None) -> Json:
    """The error JSON each provider documents for an HTTP error status."""
    phrases = {status.value: status.phrase for status in http.HTTPStatus}
    text = message or phrases.get(status, "Error")
    kind, code, anthropic, gemini = _ERRORS.get(status, ("server_error", None, "api_error", ""))
    if wire == "anthropic":
        error = {"type": anthropic, "message": text}
        return {"type": "error", "error": error, "request_id": _ident("req_")}
    if wire == "gemini":
        return {"error": {"code": status, "message": text, "status": gemini or "UNKNOWN"}}
    return {"error": {"message": text, "type": kind, "param": None, "code": code}}


def _ident(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _opaque() -> str:
    """An opaque base64 token, standing in for a signature or encrypted reasoning.

    Free of "+", "/" and padding, so it reads the same in base64url, which google-genai
    uses when it sends a Gemini thought signature back.
    """
    return base64.b64encode(os.urandom(24)).decode().replace("+", "A").replace("/", "B")


def _words(value: str | list[str]) -> list[str]:
    if isinstance(value, list):
        return [piece for piece in value if piece]
    return re.findall(r"\s*\S+|\s+$", value)


def _thirds(args: Json | str) -> list[str]:
    """A call's arguments text, in about three pieces as the wires stream it."""
    text = args if isinstance(args, str) else json.dumps(args, separators=(",", ":"))
    size = max(1, -(-len(text) // 3))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _finish(turn: Turn, wire: str) -> str:
    key = ("tool" if turn.calls else "stop") if turn.finish == "auto" else turn.finish
    return _FINISH_NAMES[wire][("tool", *_FINISHES).index(key)]


class _Frames(list[bytes]):
    """SSE frames of one reply; sse-starlette does the framing."""

    def __init__(self, *, numbered: bool = False) -> None:
        super().__init__()
        self._numbers = itertools.count() if numbered else None

    def data(self, payload: Json | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self.append(ServerSentEvent(data=text).encode())

    def event(self, kind: str, **fields: Any) -> None:
        payload = {"type": kind, **fields}
        if self._numbers is not None:
            payload["sequence_number"] = next(self._numbers)
        self.append(ServerSentEvent(data=json.dumps(payload), event=kind).encode())


# --- The four wires ---------------------------------------------------------------------
# Each encoder turns a Turn into the SSE frames of one response. With `partial`, it stops
# after the last text delta, before anything that closes the text or the response.


def _openai_chat(turn: Turn, body: Json, model: str, *, partial: bool) -> _Frames:
    frames, created = _Frames(), int(time.time())
    head = {"id": _ident("chatcmpl-"), "object": "chat.completion.chunk", "created": created}
    head |= {"model": model, "system_fingerprint": "fp_double"}
    with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if with_usage:  # then every chunk carries `usage`, null until the last one
        head["usage"] = None

    def chunk(delta: Json, finish: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        frames.data({**head, "choices": [choice]})

    chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in _words(turn.reasoning):  # as DeepSeek-style compatible servers send it
        chunk({"reasoning_content": piece})
    for piece in _words(turn.text):
        chunk({"content": piece})
    if partial:
        return frames
    for index, call in enumerate(turn.calls):
        start = {"index": index, "id": call.id or _ident("call_"), "type": "function"}
        chunk({"tool_calls": [start | {"function": {"name": call.name, "arguments": ""}}]})
        for piece in _thirds(call.args):
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    chunk({}, _finish(turn, "openai-chat"))
    if with_usage:
        inputs, outputs, reasoning = turn.usage
        usage: Json = {"prompt_tokens": inputs, "completion_tokens": outputs}
        usage |= {"total_tokens": inputs + outputs, "prompt_tokens_details": {"cached_tokens": 0}}
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        frames.data({**head, "choices": [], "usage": usage})
    frames.data("[DONE]")
    return frames


def _openai_responses(turn: Turn, body: Json, model: str, *, partial: bool) -> _Frames:
    frames, output = _Frames(numbered=True), list[Json]()
    head = {"id": _ident("resp_"), "object": "response", "created_at": int(time.time())}
    head |= {"model": model, "error": None, "background": False, "user": None}
    for key in ("instructions", "max_output_tokens", "previous_response_id", "reasoning"):
        head[key] = body.get(key)
    for key in ("temperature", "top_p", "text", "metadata", "truncation"):
        head[key] = body.get(key)
    head |= {"tools": body.get("tools", []), "tool_choice": body.get("tool_choice", "auto")}
    head |= {"parallel_tool_calls": body.get("parallel_tool_calls", True)}
    head["store"] = body.get("store", True)

    def response(status: str, usage: Json | None = None, reason: str = "") -> Json:
        state = {"status": status, "output": list(output), "usage": usage}
        return head | state | {"incomplete_details": {"reason": reason} if reason else None}

    frames.event("response.created", response=response("in_progress"))
    frames.event("response.in_progress", response=response("in_progress"))
    thoughts, texts = _words(turn.reasoning), _words(turn.text)
    if (thoughts or turn.signature is not None) and not partial:
        item: Json = {"id": _ident("rs_"), "type": "reasoning", "summary": []}
        at = {"item_id": item["id"], "output_index": len(output), "summary_index": 0}
        frames.event("response.output_item.added", output_index=len(output), item=item)
        if thoughts:
            summary = {"type": "summary_text", "text": "".join(thoughts)}
            part: Json = {"type": "summary_text", "text": ""}
            frames.event("response.reasoning_summary_part.added", **at, part=part)
            for piece in thoughts:
                frames.event("response.reasoning_summary_text.delta", **at, delta=piece)
            frames.event("response.reasoning_summary_text.done", **at, text=summary["text"])
            frames.event("response.reasoning_summary_part.done", **at, part=summary)
            item = {**item, "summary": [summary]}
        if "reasoning.encrypted_content" in (body.get("include") or []):
            item["encrypted_content"] = turn.signature or _opaque()
        frames.event("response.output_item.done", output_index=len(output), item=item)
        output.append(item)
    if texts or partial:
        item = {"id": _ident("msg_"), "type": "message", "status": "in_progress"}
        item |= {"role": "assistant", "content": []}
        at = {"item_id": item["id"], "output_index": len(output), "content_index": 0}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        frames.event("response.output_item.added", output_index=len(output), item=item)
        frames.event("response.content_part.added", **at, part=part)
        for piece in texts:
            frames.event("response.output_text.delta", **at, delta=piece, logprobs=[])
        if partial:
            return frames
        part = {**part, "text": "".join(texts)}
        frames.event("response.output_text.done", **at, text=part["text"], logprobs=[])
        frames.event("response.content_part.done", **at, part=part)
        item = {**item, "status": "completed", "content": [part]}
        frames.event("response.output_item.done", output_index=len(output), item=item)
        output.append(item)
    for call in turn.calls:
        item = {"id": _ident("fc_"), "type": "function_call", "status": "in_progress"}
        item |= {"arguments": "", "call_id": call.id or _ident("call_"), "name": call.name}
        at = {"item_id": item["id"], "output_index": len(output)}
        frames.event("response.output_item.added", output_index=len(output), item=item)
        pieces = _thirds(call.args)
        for piece in pieces:
            frames.event("response.function_call_arguments.delta", **at, delta=piece)
        arguments = "".join(pieces)
        frames.event("response.function_call_arguments.done", **at, arguments=arguments)
        item = {**item, "status": "completed", "arguments": arguments}
        frames.event("response.output_item.done", output_index=len(output), item=item)
        output.append(item)
    inputs, outputs, reasoning = turn.usage
    usage = {"input_tokens": inputs, "input_tokens_details": {"cached_tokens": 0}}
    usage |= {"output_tokens": outputs, "output_tokens_details": {"reasoning_tokens": reasoning}}
    usage["total_tokens"] = inputs + outputs
    if reason := _finish(turn, "openai-responses"):
        frames.event("response.incomplete", response=response("incomplete", usage, reason))
    else:
        frames.event("response.completed", response=response("completed", usage))
    return frames


def _anthropic(turn: Turn, body: Json, model: str, *, partial: bool) -> _Frames:
    frames, blocks = _Frames(), itertools.count()
    inputs, outputs, reasoning = turn.usage
    usage: Json = {"input_tokens": inputs, "cache_creation_input_tokens": 0}
    usage["cache_read_input_tokens"] = 0
    message: Json = {"id": _ident("msg_"), "type": "message", "role": "assistant", "model": model}
    message |= {"content": [], "stop_reason": None, "stop_sequence": None}
    frames.event("message_start", message={**message, "usage": {**usage, "output_tokens": 1}})
    frames.event("ping")
    thoughts, texts = _words(turn.reasoning), _words(turn.text)
    if (thoughts or turn.signature is not None) and not partial:
        index, thinking = next(blocks), {"type": "thinking", "thinking": "", "signature": ""}
        frames.event("content_block_start", index=index, content_block=thinking)
        for piece in thoughts:
            delta = {"type": "thinking_delta", "thinking": piece}
            frames.event("content_block_delta", index=index, delta=delta)
        delta = {"type": "signature_delta", "signature": turn.signature or _opaque()}
        frames.event("content_block_delta", index=index, delta=delta)
        frames.event("content_block_stop", index=index)
    if texts or partial:
        index = next(blocks)
        frames.event("content_block_start", index=index, content_block={"type": "text", "text": ""})
        for piece in texts:
            delta = {"type": "text_delta", "text": piece}
            frames.event("content_block_delta", index=index, delta=delta)
        if partial:
            return frames
        frames.event("content_block_stop", index=index)
    for call in turn.calls:
        index, call_id = next(blocks), call.id or _ident("toolu_")
        block = {"type": "tool_use", "id": call_id, "name": call.name, "input": {}}
        frames.event("content_block_start", index=index, content_block=block)
        for piece in _thirds(call.args):
            delta = {"type": "input_json_delta", "partial_json": piece}
            frames.event("content_block_delta", index=index, delta=delta)
        frames.event("content_block_stop", index=index)
    usage["output_tokens"] = outputs
    if reasoning:
        usage["output_tokens_details"] = {"thinking_tokens": reasoning}
    stop: Json = {"stop_reason": _finish(turn, "anthropic"), "stop_sequence": None}
    frames.event("message_delta", delta=stop, usage=usage)
    frames.event("message_stop")
    return frames


def _gemini(turn: Turn, body: Json, model: str, *, partial: bool) -> _Frames:
    thoughts, texts = _words(turn.reasoning), _words(turn.text)
    chunks: list[list[Json]] = [[{"text": piece}] for piece in texts]
    if not partial:
        chunks = [[{"text": piece, "thought": True}] for piece in thoughts] + chunks
        calls: list[Json] = []
        for call in turn.calls:  # Gemini sends function calls whole, never in pieces
            args = call.args if isinstance(call.args, dict) else json.loads(call.args)
            calls.append({"functionCall": {"name": call.name, "args": args}})
            calls[-1]["functionCall"] |= {"id": call.id} if call.id else {}
        chunks += [calls] if calls else []
        if signature := turn.signature or (_opaque() if thoughts else None):
            if calls or texts:  # on the first call, else on the last text part
                chunks[-1][0]["thoughtSignature"] = signature
            else:  # Gemini then sends it on an empty text part
                chunks.append([{"text": "", "thoughtSignature": signature}])
        chunks = chunks or [[{"text": ""}]]
    frames, inputs = _Frames(), turn.usage[0]
    head = {"modelVersion": model, "responseId": base64.urlsafe_b64encode(os.urandom(15)).decode()}
    for number, parts in enumerate(chunks, start=1):
        candidate: Json = {"content": {"parts": parts, "role": "model"}, "index": 0}
        usage: Json = {"promptTokenCount": inputs, "totalTokenCount": inputs}
        if number == len(chunks) and not partial:
            candidate["finishReason"] = _finish(turn, "gemini")
            usage |= _gemini_usage(turn)
        frames.data({"candidates": [candidate], "usageMetadata": usage, **head})
    return frames


def _gemini_usage(turn: Turn) -> Json:
    # Gemini counts thoughts apart from candidates; Turn.usage's output includes them.
    inputs, outputs, reasoning = turn.usage
    usage = {"candidatesTokenCount": max(outputs - reasoning, 0)}
    usage["totalTokenCount"] = inputs + outputs
    return usage | ({"thoughtsTokenCount": reasoning} if reasoning else {})


def _stream_error(wire: str, frames: _Frames, error_type: str) -> None:
    message = error_type.replace("_", " ").removesuffix(" error").capitalize()
    if wire == "anthropic":
        frames.event("error", error={"type": error_type, "message": message})
    elif wire == "openai-responses":
        frames.event("error", code=error_type, message=message, param=None)
    else:
        frames.data({"error": {"message": message, "type": error_type, "code": error_type}})


_ENDINGS = {Hang: "hang", CutOff: "cut"}  # how a failure reply's stream ends
_ENCODERS = {
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
}
