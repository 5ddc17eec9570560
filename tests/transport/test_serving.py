"""How ``parkway serve`` serves: the socket, the HTTP protocol and loop, and how a
stream's chunks are written (transport/cli.py, transport/serving.py,
transport/aisdk/streaming.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import uvicorn
from pydantic import SecretStr
from starlette.types import Message

from parkway.transport import cli
from parkway.transport.aisdk import streaming
from parkway.transport.serving import PROTOCOLS, event_loop, header_timeout_protocol
from parkway.transport.settings import Settings
from parkway.transport.sse import sse_data
from tests.helpers.support import TEST_SECRET, free_port

# -- the socket ------------------------------------------------------------------------


def _loops() -> list[Callable[[], asyncio.AbstractEventLoop]]:
    loops: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]
    with contextlib.suppress(ImportError):
        import uvloop

        loops.append(uvloop.new_event_loop)
    return loops


@pytest.mark.parametrize("new_loop", _loops(), ids=lambda f: f.__module__.split(".")[0])
def test_the_served_connections_send_small_writes_at_once(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """``parkway serve`` binds its own socket. asyncio sets TCP_NODELAY only on
    connections of a socket whose protocol says TCP; on one made with protocol 0,
    Nagle's algorithm held each response's body behind its head until the client's
    delayed ACK: 40 ms on every request."""
    settings = Settings(secret_key=SecretStr(TEST_SECRET), host="127.0.0.1", port=free_port())
    accepted: list[asyncio.BaseTransport] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(transport)

    async def accept_one(sock: socket.socket) -> int:
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", settings.port)
            for _ in range(100):
                if accepted:
                    break
                await asyncio.sleep(0.01)
            served = accepted[0].get_extra_info("socket")
            option = served.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            accepted[0].close()
            writer.close()
            await writer.wait_closed()
            return int(option)

    sock = cli._bind(settings)
    loop = new_loop()
    try:
        assert loop.run_until_complete(accept_one(sock)) != 0
    finally:
        loop.close()
        sock.close()


# -- the protocol and the loop ------------------------------------------------------------


def test_the_fast_protocol_and_loop_are_used_where_installed() -> None:
    """httptools is a dependency and uvloop one wherever it has wheels: ``parkway
    serve`` takes both; h11 and asyncio's loop remain for an installation without."""
    assert "httptools" in PROTOCOLS and "h11" in PROTOCOLS
    assert issubclass(header_timeout_protocol(1.0), PROTOCOLS["httptools"])
    assert issubclass(header_timeout_protocol(1.0, "h11"), PROTOCOLS["h11"])
    try:
        import uvloop  # noqa: F401
    except ImportError:
        assert event_loop() == "asyncio"
    else:
        assert event_loop() == "uvloop"


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    if scope["path"] == "/stream":  # a response under way until the client leaves
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        return
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.contextmanager
def _bare_server(http: str) -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=port, log_level="error", http=header_timeout_protocol(5, http)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def _exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` (as far as the server reads it), then what it answers until it
    closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.settimeout(10)
        with contextlib.suppress(ConnectionError):
            sock.sendall(data)
        received = b""
        with contextlib.suppress(ConnectionError):
            while chunk := sock.recv(65536):
                received += chunk
        return received


@pytest.mark.parametrize("http", sorted(PROTOCOLS))
def test_a_request_head_past_16_kib_is_refused_on_either_protocol(http: str) -> None:
    """h11 stops buffering a request head at 16 KiB; httptools buffers any size, so a
    fast client could fill the worker's memory with one endless header line within
    the header timeout. Parkway's httptools protocol stops at the same size, and a
    head just under it is served."""
    head = b"GET / HTTP/1.1\r\nHost: parkway\r\nX-Big: "
    with _bare_server(http) as port:
        # (just past the limit: a server that closes with bytes unread resets the
        # connection, and the client may lose the answer)
        answer = _exchange(port, head + b"a" * 17 * 1024)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert b"connection: close" in answer.lower()
        fits = head + b"a" * 15_000 + b"\r\nConnection: close\r\n\r\n"
        assert _exchange(port, fits).startswith(b"HTTP/1.1 200 ")


def test_a_pipelined_head_past_16_kib_closes_a_stream_without_a_400_inside_it() -> None:
    """httptools parses a pipelined request while a response (a stream) is still under
    way: a head past the limit then closes the connection, rather than wait, unbounded,
    or write a 400 into the middle of the stream."""
    with (
        _bare_server("httptools") as port,
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: parkway\r\n\r\n")
        answer = b""
        while b"first" not in answer:
            answer += sock.recv(65536)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: parkway\r\nX-Big: " + b"a" * 17 * 1024)
        with contextlib.suppress(ConnectionError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"400" not in answer


# -- the stream's writes -----------------------------------------------------------------


async def _body_messages(response: Any) -> list[Message]:
    """The ASGI messages ``response`` sends, served to a client that never leaves."""
    sent: list[Message] = []
    disconnect = asyncio.Event()

    async def receive() -> Message:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/api/chat", "headers": []}
    await response(scope, receive, send)
    disconnect.set()
    return [m for m in sent if m["type"] == "http.response.body"]


async def test_the_chunks_ready_together_go_out_in_one_write() -> None:
    """A run logs its events in batches (often a whole turn in one); each batch reaches
    the client in one write, and ``[DONE]`` goes with a run's last chunk. The bytes are
    those of one event per chunk, in order."""

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "start", "messageId": "m"}
        yield {"type": "start-step"}
        await asyncio.sleep(0.01)  # the next log entry
        yield {"type": "text-delta", "id": "t", "delta": "hi"}
        yield {"type": "finish", "finishReason": "stop"}
        await asyncio.sleep(60)  # a run's stream is over at its finish: never reached

    response = streaming._sse(chunks(), run=True)
    messages = await _body_messages(response)
    bodies = [m["body"] for m in messages if m["body"]]
    assert [sse_data(body) for body in bodies] == [
        ['{"type":"start","messageId":"m"}', '{"type":"start-step"}'],
        [
            '{"type":"text-delta","id":"t","delta":"hi"}',
            '{"type":"finish","finishReason":"stop"}',
            "[DONE]",
        ],
    ]
    assert bodies[0].startswith(b'data: {"type":"start"') and bodies[0].endswith(b"\r\n\r\n")
    assert messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_run_stream_ends_before_its_follower_is_wound_up() -> None:
    """Winding up a log follower costs a round trip (it unsubscribes): ``[DONE]`` is
    sent first, and the response ends once the follower is closed."""
    order: list[str] = []

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"type": "finish", "finishReason": "tool-calls"}
            await asyncio.sleep(60)
        finally:
            order.append("closing")
            await asyncio.sleep(0.01)
            order.append("closed")

    async def send_recorder() -> list[str]:
        response = streaming._sse(chunks(), run=True)

        async def receive() -> Message:
            await asyncio.sleep(60)
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body":
                if b"[DONE]" in message["body"]:
                    order.append("done sent")
                if not message.get("more_body"):
                    order.append("response ended")

        await response({"type": "http", "method": "POST", "headers": []}, receive, send)
        return order

    order = await send_recorder()
    assert order.index("done sent") < order.index("closed") < order.index("response ended")


async def test_a_client_that_leaves_closes_the_source() -> None:
    """A disconnect stops the view (its encoder and the follower behind it), never
    leaving a task that keeps reading the log."""
    closed = asyncio.Event()

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"type": "start", "messageId": "m"}
            await asyncio.sleep(60)
            yield {"type": "finish", "finishReason": "stop"}
        finally:
            closed.set()

    response = streaming._sse(chunks(), run=True)
    left = asyncio.Event()

    async def receive() -> Message:
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and message["body"]:
            left.set()

    await asyncio.wait_for(
        response({"type": "http", "method": "POST", "headers": []}, receive, send), 5
    )
    await asyncio.wait_for(closed.wait(), 5)
