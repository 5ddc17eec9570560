"""A provider double: fake LLM providers that speak their real streaming wires on loopback.

Parkway's tests fake only the outermost edge, and they fake it with a real implementation
of the interface. For LLMs that edge is the provider's HTTP API, so `ProviderDouble`
serves four documented streaming wires on 127.0.0.1:

- ``openai-chat``: OpenAI Chat Completions, ``POST /v1/chat/completions``;
- ``openai-responses``: OpenAI Responses, ``POST /v1/responses``;
- ``anthropic``: Anthropic Messages, ``POST /v1/messages``;
- ``gemini``: ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``.

The real provider SDKs (openai, anthropic, google-genai), driven through pydantic-ai's
model layer, parse what it sends, so a test exercises the same parsing, error mapping and
history replay (thinking signatures, encrypted reasoning, provider call ids) as
production. Each POST to a wire takes the next scripted reply from that wire's queue: a
`Turn` to stream, or a failure (`Fail`, `Reset`, `Hang`, `CutOff`, `StreamError`). Every
request is recorded, so a test can assert on exactly what the SDK sent. Only streaming
requests are served.

The server runs on its own event loop in a daemon thread, so sync tests and async tests
(each with a loop of its own) use it alike.
"""

from __future__ import annotations

import asyncio
import base64
import http
import itertools
import json
import os
import re
import socket
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

import h11
from sse_starlette import ServerSentEvent

Json = dict[str, Any]
WIRES = ("openai-chat", "openai-responses", "anthropic", "gemini")
_READ_TIMEOUT = 30.0  # seconds a client may take to send its request


@dataclass
class Call:
    """One tool call in a `Turn`."""

    name: str
    args: Json | str  # a str is sent as the raw arguments text, valid JSON or not
    id: str | None = None  # default: generated per wire; Gemini sends none unless given


@dataclass
class Turn:
    """One streamed model response.

    `text` and `reasoning` given as a str stream one delta per word; a list gives the
    deltas. `signature` is the Anthropic thinking signature, the Responses
    `encrypted_content` (sent only when the request's `include` asks for it, as OpenAI
    does) or the Gemini `thoughtSignature` (base64). With reasoning and no signature, an
    opaque base64 one is generated. `finish` is "auto" (the tool finish when there are
    calls, else a stop), "stop", "length" or "content_filter".
    """

    text: str | list[str] = ""
    reasoning: str | list[str] = ""
    signature: str | None = None
    calls: list[Call] = field(default_factory=list)
    finish: str = "auto"
    usage: tuple[int, int, int] = (11, 7, 0)  # input, output (reasoning included), reasoning
    model: str | None = None  # echoed model name; default: the one the request named
    pause_before_first: float = 0.0  # seconds between the response headers and the first event
    gate: threading.Event | None = None  # if set: send the first event, then wait for the gate

    def __post_init__(self) -> None:
        if self.finish not in ("auto", *_FINISHES):
            raise ValueError(f"Turn.finish={self.finish!r}: use 'auto' or one of {_FINISHES}")


@dataclass
class Fail:
    """An HTTP error reply; `body` defaults to the provider's own error JSON for `status`."""

    status: int
    body: Json | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Reset:
    """Read the request, then reset the TCP connection without sending a byte."""


@dataclass
class Hang:
    """Headers and these text deltas, then nothing until the client disconnects."""

    text: list[str] = field(default_factory=lambda: ["Thinking about it"])


@dataclass
class CutOff:
    """Headers and these text deltas, then the connection closes mid-body."""

    text: list[str] = field(default_factory=lambda: ["Partial"])


@dataclass
class StreamError:
    """Headers, these text deltas, then the wire's in-stream error event (not on Gemini)."""

    text: list[str] = field(default_factory=list)
    error_type: str = "overloaded_error"


Reply = Turn | Fail | Reset | Hang | CutOff | StreamError


@dataclass(frozen=True)
class Recorded:
    """One request the double received."""

    wire: str  # one of WIRES, or "unknown" for a path no wire serves
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Json


# --- Wire vocabulary --------------------------------------------------------------------

_FINISHES = ("stop", "length", "content_filter")
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


def _route(method: str, path: str, body: Json) -> tuple[str, str] | None:
    """The wire and the requested model for a request, or None when no wire serves it."""
    paths = {"/v1/chat/completions": "openai-chat", "/v1/responses": "openai-responses"}
    if method != "POST":
        return None
    if wire := {**paths, "/v1/messages": "anthropic"}.get(path):
        return wire, str(body.get("model", ""))
    if match := re.fullmatch(r"/v1beta/models/([^/:]+):streamGenerateContent", path):
        return "gemini", match.group(1)
    return None


# --- The server -------------------------------------------------------------------------


@dataclass
class _Client:
    """One client connection: h11's HTTP/1.1 framing over asyncio streams."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    conn: h11.Connection = field(default_factory=lambda: h11.Connection(h11.SERVER))
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, *events: h11.Event) -> None:
        self.writer.write(b"".join(self.conn.send(event) or b"" for event in events))
        await self.writer.drain()

    async def reply_json(self, status: int, payload: Json, headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        fields = {"content-type": "application/json", "content-length": str(len(data))}
        fields |= {"connection": "close", **headers}
        response = h11.Response(status_code=status, headers=list(fields.items()))
        await self.send(response, h11.Data(data=data), h11.EndOfMessage())

    async def read_request(self) -> tuple[h11.Request, bytes] | None:
        request, body = None, bytearray()
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(await self.reader.read(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                return request, bytes(body)
            else:
                return None

    async def watch(self) -> None:
        """Set `gone` when the client closes its end; it sends nothing while a reply streams."""
        with suppress(ConnectionError):
            while await self.reader.read(65536):
                pass
        self.gone.set()

    async def hold(self, seconds: float | None = None, gate: threading.Event | None = None) -> bool:
        """Wait `seconds`, or for `gate`, or (with neither) for ever; False if the client left."""
        if gate is None:
            with suppress(TimeoutError):
                await asyncio.wait_for(self.gone.wait(), seconds)
        while gate is not None and not gate.is_set() and not self.gone.is_set():
            await asyncio.sleep(0.01)  # a threading.Event has no awaitable form
        return not self.gone.is_set()


class ProviderDouble:
    """Serves the four wires on 127.0.0.1 from scripted replies, recording each request.

    Why not Starlette on uvicorn: a double must also reset a connection before any
    response byte and cut one mid-body, which ASGI gives an app no way to do. Every reply
    says `Connection: close`, so no pooled connection outlives a test's event loop or the
    double itself.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Reply]] = {wire: deque() for wire in WIRES}
        self._requests: list[Recorded] = []
        self._disconnects = 0
        self._disconnected = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._base_url: str | None = None

    def __enter__(self) -> ProviderDouble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start serving (idempotent); returns the base URL, ``http://127.0.0.1:PORT``."""
        if self._base_url is not None:
            return self._base_url
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        opening = asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._server = asyncio.run_coroutine_threadsafe(opening, loop).result(timeout=10)
        self._base_url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self._base_url

    def stop(self) -> None:
        """Close the server and every open connection, and end the loop thread."""
        loop, server, thread = self._loop, self._server, self._thread
        if loop is None or server is None or thread is None:
            return

        async def shutdown() -> None:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._server = self._thread = self._base_url = None

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("ProviderDouble is not started: call start() first")
        return self._base_url

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    def script(self, wire: str, replies: Iterable[Reply]) -> None:
        """Append replies to `wire`'s queue; each request to the wire takes the next one."""
        if wire not in WIRES:
            raise ValueError(f"unknown wire {wire!r}: use one of {WIRES}")
        replies = list(replies)
        for reply in replies if wire == "gemini" else ():
            if isinstance(reply, StreamError):
                raise ValueError("Gemini documents no in-stream error: script Fail or CutOff")
            for call in reply.calls if isinstance(reply, Turn) else ():
                if isinstance(call.args, str) and not isinstance(json.loads(call.args), dict):
                    raise ValueError(f"Gemini call args must be a JSON object: {call.args!r}")
        with self._lock:
            self._queues[wire].extend(replies)

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, wire: str) -> list[Recorded]:
        return [request for request in self.requests if request.wire == wire]

    @property
    def disconnected(self) -> int:
        """How many streams the client closed before the reply ended."""
        with self._lock:
            return self._disconnects

    async def wait_disconnect(self, timeout: float = 5.0) -> bool:
        """True once a client has closed a stream mid-reply; False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self._disconnected.is_set():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)  # polls a flag the double's own thread sets
        return True

    def wait_disconnect_sync(self, timeout: float = 5.0) -> bool:
        return self._disconnected.wait(timeout)

    def reset(self) -> None:
        """Forget scripted replies, recorded requests and disconnects."""
        with self._lock:
            for queue in self._queues.values():
                queue.clear()
            self._requests.clear()
            self._disconnects = 0
            self._disconnected.clear()

    def _count_disconnect(self) -> None:
        with self._lock:
            self._disconnects += 1
        self._disconnected.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._exchange(_Client(reader, writer))
        except (ConnectionError, TimeoutError, h11.ProtocolError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()

    async def _exchange(self, client: _Client) -> None:
        received = await asyncio.wait_for(client.read_request(), _READ_TIMEOUT)
        if received is None:
            return
        request, raw = received
        method, (path, _, query) = request.method.decode(), request.target.decode().partition("?")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_unparsed": raw.decode(errors="replace")}
        wire, model = _route(method, unquote(path), body) or ("unknown", "")
        headers = {name.decode().lower(): value.decode() for name, value in request.headers}
        with self._lock:
            self._requests.append(Recorded(wire, path, dict(parse_qsl(query)), headers, body))
            queue = self._queues.get(wire)
            reply = queue.popleft() if queue else None
        if wire == "unknown":
            error = {"message": f"provider double: no wire serves {method} {path}"}
            await client.reply_json(404, {"error": error}, {})
        elif reply is None:
            message = f"provider double: the script for {wire!r} ran out of replies"
            await client.reply_json(500, _error_body(wire, 500, message), {})
        elif isinstance(reply, Fail):
            payload = reply.body if reply.body is not None else _error_body(wire, reply.status)
            await client.reply_json(reply.status, payload, reply.headers)
        elif isinstance(reply, Reset):
            # A zero linger turns close into a TCP RST: the client sees a reset, not an end.
            sock = client.writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.writer.transport.abort()
        elif isinstance(reply, Turn):
            frames = _ENCODERS[wire](reply, body, reply.model or model, partial=False)
            await self._stream(client, frames, "end", reply)
        else:
            frames = _ENCODERS[wire](Turn(text=list(reply.text)), body, model, partial=True)
            if isinstance(reply, StreamError):
                _stream_error(wire, frames, reply.error_type)
            await self._stream(client, frames, _ENDINGS.get(type(reply), "end"), Turn())

    async def _stream(self, client: _Client, frames: list[bytes], end: str, turn: Turn) -> None:
        """Send `frames` as an SSE body, then end it, hang until the client leaves, or cut it."""
        watcher = asyncio.create_task(client.watch())
        headers = [("content-type", "text/event-stream; charset=utf-8"), ("connection", "close")]
        headers += [("cache-control", "no-cache"), ("x-request-id", _ident("req_"))]
        ended = False
        try:
            await client.send(h11.Response(status_code=200, headers=headers))
            if turn.pause_before_first and not await client.hold(seconds=turn.pause_before_first):
                raise ConnectionResetError
            for number, frame in enumerate(frames, start=1):
                if client.gone.is_set():
                    raise ConnectionResetError
                last = number == len(frames) and end == "end"
                await client.send(h11.Data(data=frame), *([h11.EndOfMessage()] if last else []))
                ended = last
                if number == 1 and turn.gate is not None and not await client.hold(gate=turn.gate):
                    raise ConnectionResetError
            if end == "end" and not ended:
                await client.send(h11.EndOfMessage())
            elif end == "hang":
                await client.hold()
                raise ConnectionResetError
            # "cut": return without the body's end; closing the connection then cuts it mid-body.
        except ConnectionError:
            if not ended:
                self._count_disconnect()
        finally:
            watcher.cancel()
            await asyncio.wait([watcher])
