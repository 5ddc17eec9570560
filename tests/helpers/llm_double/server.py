"""The double's HTTP server (h11 on an asyncio loop in a thread) and its test API."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

import h11

from tests.helpers.llm_double.replies import (
    _READ_TIMEOUT,
    WIRES,
    Fail,
    Json,
    Recorded,
    Reply,
    Reset,
    StreamError,
    Turn,
)
from tests.helpers.llm_double.wires import (
    _ENCODERS,
    _ENDINGS,
    _error_body,
    _ident,
    _stream_error,
)


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
