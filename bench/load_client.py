"""The load benchmark's HTTP client: thousands of concurrent SSE responses, cheaply.

``make load`` holds 10,000 ``GET /api/chat/{id}/stream`` responses open from one Python
process, next to the server on a 2-CPU machine. A client per connection built on httpx
costs several objects, a pool and a task group per response, and would compete with the
server for the same CPUs; here each connection is one asyncio stream pair, one
:class:`h11.Connection` (HTTP/1.1 framing: status line, headers, chunked bodies) and one
:class:`~parkway.transport.sse.SseDecoder` (fed bytes, it hands out each event's ``data``, what
an AI SDK client reads), and one task reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import h11

from parkway.transport.sse import SseDecoder

__all__ = [
    "Connection",
    "Endpoint",
    "Follower",
    "HttpFailure",
    "Reply",
    "SseDecoder",
    "Stream",
    "open_stream",
]

READ_SIZE = 65536


class HttpFailure(Exception):
    """The connection failed, timed out or broke the protocol before a response ended.
    ``kind`` is a short label to count failures by (``"connect ConnectionRefusedError"``,
    ``"timeout"``, ``"protocol"``...)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


@dataclass(frozen=True)
class Endpoint:
    """Where the server listens."""

    host: str
    port: int

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"


class _Exchange:
    """One HTTP/1.1 connection driven through h11."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.http = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, endpoint: Endpoint, timeout_s: float) -> _Exchange:
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(
                    endpoint.host, endpoint.port, limit=READ_SIZE
                )
        except (OSError, TimeoutError) as exc:
            raise HttpFailure(f"connect {type(exc).__name__}", str(exc)) from None
        return cls(reader, writer)

    async def send(
        self,
        endpoint: Endpoint,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        keep_alive: bool,
    ) -> None:
        fields = [("host", endpoint.authority), *headers.items()]
        if body or method == "POST":
            fields.append(("content-length", str(len(body))))
        if not keep_alive:
            fields.append(("connection", "close"))
        data = self.http.send(h11.Request(method=method, target=target, headers=fields)) or b""
        if body:
            data += self.http.send(h11.Data(data=body)) or b""
        data += self.http.send(h11.EndOfMessage()) or b""
        try:
            self.writer.write(data)
            await self.writer.drain()
        except OSError as exc:
            raise HttpFailure(f"send {type(exc).__name__}", str(exc)) from None

    async def next_event(self) -> Any:
        """The next h11 event, reading from the socket as needed."""
        while True:
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as exc:
                raise HttpFailure("protocol", str(exc)) from None
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.reader.read(READ_SIZE)
            except OSError as exc:
                raise HttpFailure(f"read {type(exc).__name__}", str(exc)) from None
            self.http.receive_data(data)  # b"" tells h11 the peer closed

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def _headers(response: h11.Response) -> dict[str, str]:
    return {bytes(k).decode("latin-1"): bytes(v).decode("latin-1") for k, v in response.headers}


@dataclass
class Reply:
    """A whole (non-streaming) response."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Connection:
    """A keep-alive connection for small requests (``/healthz``, sessions); it reconnects
    when the server closes it."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 30.0) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._exchange: _Exchange | None = None
        self.reconnects = 0

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> Reply:
        """Send one request and read its whole response (``timeout_s`` at most)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._request(method, target, headers or {}, body)
        except TimeoutError:
            self.close()
            raise HttpFailure("timeout", f"{method} {target}: {self.timeout_s:g} s") from None
        except HttpFailure:
            self.close()
            raise

    async def _request(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> Reply:
        exchange = self._exchange
        if exchange is None or exchange.http.our_state is not h11.IDLE:
            if exchange is not None:
                exchange.close()
                self.reconnects += 1
            exchange = self._exchange = await _Exchange.open(self.endpoint, self.timeout_s)
        await exchange.send(self.endpoint, method, target, headers, body, keep_alive=True)
        response = await exchange.next_event()
        if not isinstance(response, h11.Response):
            raise HttpFailure("no response", f"{method} {target}: {type(response).__name__}")
        chunks: list[bytes] = []
        while True:
            event = await exchange.next_event()
            if isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise HttpFailure("cut off", f"{method} {target}")
        if exchange.http.our_state is h11.DONE and exchange.http.their_state is h11.DONE:
            exchange.http.start_next_cycle()
        else:
            exchange.close()
            self._exchange = None
        return Reply(response.status_code, _headers(response), b"".join(chunks))

    def close(self) -> None:
        if self._exchange is not None:
            self._exchange.close()
            self._exchange = None


class Stream:
    """A response whose body is read incrementally; its connection is its own."""

    def __init__(self, exchange: _Exchange, response: h11.Response) -> None:
        self._exchange = exchange
        self.status = response.status_code
        self.headers = _headers(response)

    async def payloads(self) -> AsyncIterator[str]:
        """The SSE ``data`` payloads until the response ends (``[DONE]`` included)."""
        decoder = SseDecoder()
        while True:
            event = await self._exchange.next_event()
            if isinstance(event, h11.Data):
                for payload in decoder.feed(bytes(event.data)):
                    yield payload
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return
            else:
                raise HttpFailure("protocol", f"{type(event).__name__} in a response body")

    async def body(self) -> bytes:
        """The rest of the body, whatever its type (an error response's JSON)."""
        chunks: list[bytes] = []
        while True:
            event = await self._exchange.next_event()
            if not isinstance(event, h11.Data):
                return b"".join(chunks)
            chunks.append(bytes(event.data))

    def close(self) -> None:
        """Drop the connection (a disconnect, as a browser closing the tab)."""
        self._exchange.close()


async def open_stream(
    endpoint: Endpoint,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes = b"",
    *,
    timeout_s: float,
) -> Stream:
    """Open a connection, send one request and wait for the response's status and
    headers (``timeout_s`` at most for both); the body is then the caller's to read."""
    exchange = await _Exchange.open(endpoint, timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            await exchange.send(endpoint, method, target, headers, body, keep_alive=False)
            response = await exchange.next_event()
    except TimeoutError:
        exchange.close()
        raise HttpFailure("timeout", f"{method} {target}: {timeout_s:g} s") from None
    except HttpFailure:
        exchange.close()
        raise
    if not isinstance(response, h11.Response):
        exchange.close()
        raise HttpFailure("no response", f"{method} {target}: {type(response).__name__}")
    return Stream(exchange, response)


@dataclass
class Follower:
    """One AI SDK ``resumeStream()`` client: ``GET /api/chat/{id}/stream``, read to the end.

    Timestamps are ``time.perf_counter()`` values; 0 means "not reached". ``ready`` is
    resolved once the follower is established (its first chunk arrived) or has failed,
    so a ramp can wait for a batch before opening the next.
    """

    chat_id: str
    token: str
    status: int = 0
    failure: str = ""
    established_at: float = 0.0
    ended_at: float = 0.0
    chunks: int = 0
    error_chunks: int = 0
    error_at: float = 0.0
    error_text: str = ""
    finished: bool = False
    done: bool = False
    ready: asyncio.Future[None] = field(default_factory=lambda: _loop().create_future())

    async def run(self, endpoint: Endpoint, timeout_s: float) -> None:
        """Follow the chat's stream until it ends, the connection breaks, or the task is
        cancelled (``timeout_s`` bounds connecting and the response's headers)."""
        stream: Stream | None = None
        try:
            stream = await open_stream(
                endpoint,
                "GET",
                f"/api/chat/{self.chat_id}/stream",
                {"authorization": f"Bearer {self.token}", "accept": "text/event-stream"},
                timeout_s=timeout_s,
            )
            self.status = stream.status
            if stream.status != 200:
                self.failure = f"status {stream.status}"
                return
            async for payload in stream.payloads():
                self._take(payload)
        except HttpFailure as exc:
            self.failure = exc.kind
        finally:
            self.ended_at = time.perf_counter()
            if stream is not None:
                stream.close()
            if not self.ready.done():
                self.ready.set_result(None)

    def _take(self, payload: str) -> None:
        if not self.chunks:
            self.established_at = time.perf_counter()
            if not self.ready.done():
                self.ready.set_result(None)
        self.chunks += 1
        if payload == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(payload)
            kind = chunk.get("type")
        except (ValueError, AttributeError):
            return
        if kind == "error":
            self.error_chunks += 1
            if not self.error_at:
                self.error_at = time.perf_counter()
                self.error_text = str(chunk.get("errorText", ""))[:120]
        elif kind == "finish":
            self.finished = True
