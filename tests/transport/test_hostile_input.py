"""Hostile input gets a 4xx and harms nothing: deeply nested JSON, lone surrogates,
oversized and trickled bodies, trickled headers, and ids too long to be real.

The findings this answers (issue 10): nested JSON was a 500 on every JSON route; a lone
surrogate was a 500 on settle, answers, ``/connect/{p}/use``, working copies and commits
(and, in a user message, failed the run after it had started); ``/connect/{p}/use``
read a 10 MB body before checking its 4 KiB limit; nothing timed out a slow client.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from redis.asyncio import Redis

from parkway.runner.agent.agentfile import parse_agent_file
from parkway.runner.store.keys import chat_keys
from parkway.transport.api.requests import parse_json
from parkway.transport.app import create_app
from parkway.transport.errors import HTTPError
from parkway.transport.serving import PROTOCOLS, event_loop, header_timeout_protocol
from parkway.transport.settings import Settings
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.support import (
    TEST_SECRET,
    Api,
    ServerThread,
    agent_doc,
    answered,
    call,
    text,
    user_message,
)

TURNS = [
    [text("Pick."), call("pick", {"q": "colour"})],
    [text("picked")],
    [text("third")],
]
EDITOR_TOKEN = "editor-token-" + "e" * 32
# A JSON string holding a lone surrogate, as a client sends it: "\ud800" in the text.
LONE = '"\\ud800"'


# -- servers -------------------------------------------------------------------------


def _settings(**extra: Any) -> dict[str, Any]:
    return {
        "auth": "anonymous",
        "demo_oauth": True,
        "token_key": SecretStr(TOKEN_KEY),
        "editor_token": SecretStr(EDITOR_TOKEN),
        **extra,
    }


@contextlib.contextmanager
def guarded_server(
    redis_url: str, header_timeout_s: float, http: Any = "auto", **extra: Any
) -> Iterator[ServerThread]:
    """A real uvicorn serving Parkway as ``parkway serve`` does: on its protocol with the
    header read timeout (transport/serving.py), httptools' unless ``http`` names h11."""
    server = ServerThread(redis_url, agent_doc(TURNS), **_settings(**extra))
    config = uvicorn.Config(
        server.app,
        host="127.0.0.1",
        port=server.port,
        log_level="warning",
        lifespan="on",
        http=header_timeout_protocol(header_timeout_s, http),
    )
    server.server = uvicorn.Server(config)
    server.thread = threading.Thread(target=server.server.run, daemon=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(redis: Redis, redis_url: str) -> Iterator[ServerThread]:
    del redis
    running = ServerThread(redis_url, agent_doc(TURNS), **_settings(body_read_timeout_s=0.5))
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
async def api(server: ServerThread) -> AsyncIterator[Api]:
    client = await Api(server.base_url).login()
    yield client
    await client.aclose()


@contextlib.asynccontextmanager
async def in_process(redis_url: str, **extra: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Parkway in this event loop (its lifespan run), behind httpx's ASGI transport,
    which hands the app the request body one chunk per ``receive()``."""
    settings = Settings(
        redis_url=redis_url, secret_key=SecretStr(TEST_SECRET), **_settings(**extra)
    )
    app = create_app(settings, agent=parse_agent_file(agent_doc(TURNS)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://parkway") as client:
            session = await client.post("/api/sessions")
            client.headers["authorization"] = f"Bearer {session.json()['token']}"
            yield client


async def park(api: Api, chat_id: str) -> tuple[list[dict[str, Any]], str]:
    chunks = await api.say(chat_id, "hi")
    part = next(c for c in chunks if c["type"] == "tool-input-available")
    return chunks, str(part["toolCallId"])


async def dump_chat(redis: Redis, chat_id: str) -> dict[str, bytes | None]:
    """Every key of the chat, serialized (DUMP): equal dumps mean an untouched chat."""
    return {key: await redis.dump(key) for key in chat_keys(chat_id).all()}


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and isinstance(error["message"], str)
    return dict(error)


# -- the reader's rules, on their own -----------------------------------------------


def refusal(data: bytes, max_depth: int = 64) -> str:
    with pytest.raises(HTTPError) as caught:
        parse_json(data, max_depth=max_depth)
    assert caught.value.status == 400 and caught.value.code == "invalid_json"
    return caught.value.message


def test_depth_is_counted_on_brackets_outside_strings() -> None:
    """64 levels pass and 65 do not; brackets inside strings (escaped quotes included)
    are text, not nesting, so a string of a thousand ``[`` is fine."""
    assert parse_json(b"[" * 64 + b"]" * 64, max_depth=64) == parse_json(
        json.dumps(json.loads("[" * 64 + "]" * 64)).encode(), max_depth=64
    )
    assert "deeper than 64" in refusal(b"[" * 65 + b"]" * 65)
    assert "deeper than 64" in refusal(b'{"a":' * 65 + b"1" + b"}" * 65)
    stringy = json.dumps({"a": "[" * 1000 + '\\"{{{', "b": ["]]]" * 50]}).encode()
    assert parse_json(stringy, max_depth=3)["a"].startswith("[[[")
    assert "deeper than 64" in refusal(b"[" * 1_000_000)
    assert parse_json(b'{"a": "x\\\\", "b": [1]}', max_depth=2) == {"a": "x\\", "b": [1]}


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_BRACKETY = st.text(alphabet='[]{}"\\ ab', max_size=8)
_JSON = st.recursive(
    st.none() | st.integers(-5, 5) | _BRACKETY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_BRACKETY, inner, max_size=3),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans())
def test_the_depth_verdict_is_the_values_own_depth(value: Any, indented: bool) -> None:
    """However brackets, quotes and backslashes fall inside strings and keys, and however
    the text is spaced, a body passes exactly when its value nests no deeper than the
    limit."""
    data = json.dumps(value, indent=1 if indented else None).encode()
    depth = _depth(value)
    assert parse_json(data, max_depth=depth) == value
    if depth:
        assert f"deeper than {depth - 1}" in refusal(data, max_depth=depth - 1)


def test_the_depth_scan_is_linear_on_adversarial_strings() -> None:
    """Strings left open, full of escaped quotes, or ending in a backslash: a scan that
    restarted at every escaped quote took seconds for 100 KB and hours for a megabyte
    (the per-test timeout catches that); each of these is refused at once."""
    opened = b"[" * 65 + b'"'
    for tail in (b'\\"' * 500_000, b'\\"' * 500_000 + b"\\", b'"\\' * 500_000):
        assert "deeper than 64" in refusal(opened + tail)


def test_strict_text_no_lone_surrogates_no_nan() -> None:
    """What json.loads lets through and the rest of the server cannot store: lone
    surrogates (as escapes or as UTF-8-encoded bytes), NaN, Infinity, 1e999. A valid
    surrogate pair is one character and is kept."""
    assert parse_json(b'{"k": "\\ud83d\\ude00"}', max_depth=64) == {"k": "\U0001f600"}
    assert "surrogate" in refusal(b'{"k": ' + LONE.encode() + b"}")
    assert "surrogate" in refusal(b"{" + LONE.encode() + b": 1}")
    assert "surrogate" in refusal(b'[1, {"a": ["x", "\\udfff y"]}]')
    assert "surrogate" in refusal(b'"\\ude00\\ud83d"')  # a pair in the wrong order
    assert "UTF-8" in refusal(b'"\xed\xa0\x80"')
    assert "UTF-8" in refusal(b'"\xff"')
    assert "NaN" in refusal(b"[NaN]")
    assert "Infinity" in refusal(b"[-Infinity]")
    assert "finite" in refusal(b"[1e999]")
    assert "digits" in refusal(b"1" * 5000)
    assert "line 1 column 1" in refusal(b"\xef\xbb\xbf{}")  # a BOM is not JSON
    assert "empty" in refusal(b"  ")


# -- nesting and surrogates, route by route -------------------------------------------


async def test_deeply_nested_json_on_the_session_route_is_400(server: ServerThread) -> None:
    """The unauthenticated route was a 500 (RecursionError) for anyone on the network."""
    async with httpx.AsyncClient(base_url=server.base_url) as anon:
        for body in (b"[" * 100_000, b'{"a":' * 5_000 + b"1" + b"}" * 5_000):
            response = await anon.post("/api/sessions", content=body)
            error = assert_error(response, 400, "invalid_json")
            assert "deeper than 64" in error["message"]
        key = await anon.post("/api/sessions", content=b"{" + LONE.encode() + b": 1}")
        assert_error(key, 400, "invalid_json")


async def test_json_text_nested_too_deep_in_an_agui_answer_is_read_as_text(
    api: Api, redis: Redis
) -> None:
    """AG-UI carries a tool's result and a call's arguments as JSON text inside strings,
    where the reader's depth check does not look: text nested too deep to parse was a
    500 (RecursionError). It is read as text (an output that is a string, a call with
    no input): here an output the call's output_schema refuses, with nothing changed."""
    _, call_id = await park(api, "d1")
    before = await dump_chat(redis, "d1")
    deep = "[" * 5_000
    run = {
        "threadId": "d1",
        "runId": "r1",
        "messages": [
            {"id": "u1", "role": "user", "content": "hi"},
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "pick", "arguments": deep},
                    }
                ],
            },
            {"id": "t1", "role": "tool", "toolCallId": call_id, "content": deep},
        ],
    }
    assert_error(await api.http.post("/api/agui", json=run), 422, "invalid_outcome")
    assert await dump_chat(redis, "d1") == before


async def test_a_lone_surrogate_is_400_on_every_route_and_the_chat_is_untouched(
    api: Api, redis: Redis
) -> None:
    """Settle, AI SDK answers, a new user message, a working copy, a commit and
    ``/connect/{p}/use``: each refuses the surrogate before doing anything, and the
    parked chat they name is byte for byte what it was."""
    chunks, call_id = await park(api, "s1")
    before = await dump_chat(redis, "s1")
    bad = json.loads(LONE)  # the one-character string "\ud800"

    def post_json(path: str, value: Any, **headers: str) -> Any:
        # json.dumps writes "\ud800" as the escape a client would send
        return api.http.post(
            path,
            content=json.dumps(value).encode(),
            headers={"content-type": "application/json", **headers},
        )

    attempts = {
        "settle": post_json(
            f"/api/chats/s1/calls/{call_id}", {"outcome": "output", "output": {"choice": bad}}
        ),
        "answer": post_json(
            "/api/chat",
            {"id": "s1", "messages": answered(chunks, {"choice": bad}), "trigger": "submit"},
        ),
        "user message": post_json(
            "/api/chat", {"id": "s1", "messages": [user_message(f"hello {bad}", "u2")]}
        ),
        "working copy": post_json(
            "/api/chat",
            {
                "id": "s1",
                "messages": [user_message("hello", "u3")],
                "agentTemplate": {"instructions": bad, "tools": []},
            },
        ),
        "commit": post_json(
            "/api/agent/commit",
            {"template": {"instructions": bad}, "expectedVersion": 1},
            **{"x-parkway-editor-token": EDITOR_TOKEN},
        ),
        "connect use": post_json(
            "/connect/demo/use", {"chatId": "s1", "toolCallId": call_id, "connectionId": bad}
        ),
        "surrogate key": post_json(f"/api/chats/s1/calls/{call_id}", {"outcome": "output", bad: 1}),
    }
    for name, attempt in attempts.items():
        response = await attempt
        assert response.status_code == 400, (name, response.text)
        assert response.json()["error"]["code"] == "invalid_json", name
    assert await dump_chat(redis, "s1") == before
    state = await api.state("s1")
    assert state["state"] == "parked" and state["calls"][0]["status"] == "pending"
    settled = await api.settle("s1", call_id, {"outcome": "output", "output": {"choice": "red"}})
    assert settled.status_code == 200, settled.text
    resumed = await api.resume("s1")
    assert resumed.status_code == 200 and "picked" in resumed.text


async def test_a_user_message_with_a_surrogate_never_starts_a_run(api: Api, redis: Redis) -> None:
    """It used to start the run, fail it, and leave the chat ``running`` for a lease."""
    body = json.dumps({"id": "s2", "messages": [user_message("x" + json.loads(LONE))]})
    response = await api.http.post(
        "/api/chat", content=body, headers={"content-type": "application/json"}
    )
    assert_error(response, 400, "invalid_json")
    assert (await api.http.get("/api/chats/s2")).status_code == 404
    assert await redis.exists(*chat_keys("s2").all()) == 0


# -- sizes -----------------------------------------------------------------------------


class CountingBody:
    """A request body of ``total`` bytes in 64 KiB chunks that counts what was read."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total = total
        self.chunk = chunk
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < self.total:
            piece = b" " * min(self.chunk, self.total - self.sent)
            self.sent += len(piece)
            yield piece


async def test_connect_use_refuses_10_mb_without_reading_them(redis: Redis, redis_url: str) -> None:
    """The 4 KiB limit of ``/connect/{p}/use`` holds while reading: with no
    Content-Length the reader stops after the first 64 KiB chunk, and a declared length
    over the limit is refused before a byte is read."""
    del redis
    async with in_process(redis_url) as client:
        streamed = CountingBody(10 * 1024 * 1024)
        response = await client.post("/connect/demo/use", content=streamed)
        assert_error(response, 413, "body_too_large")
        assert streamed.sent <= 64 * 1024
        declared = CountingBody(10 * 1024 * 1024)
        response = await client.post(
            "/connect/demo/use", content=declared, headers={"content-length": str(declared.total)}
        )
        assert_error(response, 413, "body_too_large")
        assert declared.sent == 0
        # the same reader guards every route, with the server's limit
        big = CountingBody(10 * 1024 * 1024)
        response = await client.post("/api/chats/c/calls/x", content=big)
        assert_error(response, 413, "body_too_large")
        assert big.sent <= 1024 * 1024 + 64 * 1024


async def test_the_demo_providers_forms_have_the_same_limit(redis: Redis, redis_url: str) -> None:
    """The demo provider's token endpoint and consent form read through the same reader
    (16 KiB), so a huge form is refused before it is all read."""
    del redis
    async with in_process(redis_url) as client:
        for path in ("/demo-oauth/token", "/demo-oauth/authorize"):
            streamed = CountingBody(10 * 1024 * 1024)
            response = await client.post(
                path,
                content=streamed,
                headers={"content-type": "application/x-www-form-urlencoded"},
            )
            assert_error(response, 413, "body_too_large")
            assert streamed.sent <= 64 * 1024


# -- long ids ------------------------------------------------------------------------


async def test_long_ids_are_refused_without_being_echoed(api: Api) -> None:
    """A 10,000-character id in a path or a body gets a short 4xx that does not quote
    it: error bodies cannot be used to amplify or reflect input."""
    chunks, call_id = await park(api, "ids")
    huge = "a" * 10_000
    responses = {
        "chat path": await api.http.get(f"/api/chats/{huge}"),
        "call path": await api.http.get(f"/api/chats/ids/calls/{huge}"),
        "settle path": await api.settle("ids", huge, {"outcome": "declined"}),
        "provider": await api.http.post(
            f"/connect/{huge}/use", json={"chatId": "ids", "toolCallId": call_id}
        ),
        "connection": await api.http.delete(f"/api/connections/{huge}"),
        "body chat id": await api.chat(huge, [user_message("hi")]),
        "message id": await api.chat("ids", [user_message("hi", huge)]),
        "answer call id": await api.chat(
            "ids",
            [
                *answered(chunks, {"choice": "red"})[:1],
                {
                    "id": chunks[0]["messageId"],
                    "role": "assistant",
                    "parts": [
                        {
                            "type": "tool-pick",
                            "toolCallId": huge,
                            "state": "output-available",
                            "input": {"q": "colour"},
                            "output": {"choice": "red"},
                        },
                    ],
                },
            ],
        ),
        "unknown key": await api.settle("ids", call_id, {"outcome": "declined", huge: 1}),
    }
    for name, response in responses.items():
        assert 400 <= response.status_code < 500, (name, response.status_code)
        assert "error" in response.json(), name
        assert len(response.content) < 600 and "a" * 100 not in response.text, (name, response.text)
    assert (await api.state("ids"))["calls"][0]["status"] == "pending"


# -- slow clients (real uvicorn) -------------------------------------------------------


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)  # a server that never closes fails the test here
    return sock


def read_until_closed(sock: socket.socket, first: threading.Event | None = None) -> bytes:
    """What the server sends until it closes the connection."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
            if first is not None:
                first.set()
    return received


def read_response(replies: Any) -> int:
    """One whole response (by its Content-Length) from a socket's file; its status."""
    status = int(replies.readline().split()[1])
    length = 0
    while (line := replies.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    replies.read(length)
    return status


def trickle(sock: socket.socket, data: bytes, stop: threading.Event) -> threading.Thread:
    """Send ``data`` a few bytes at a time, until ``stop`` or the connection ends."""

    def run() -> None:
        for index in range(0, len(data), 2):
            if stop.wait(0.05):
                return
            try:
                sock.send(data[index : index + 2])
            except OSError:
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_trickled_body_gets_408_and_the_connection_is_closed(server: ServerThread) -> None:
    """The whole body must arrive within ``body_read_timeout_s`` (0.5 s here): a client
    sending two bytes every 50 ms is answered 408 and disconnected, however steadily it
    keeps sending."""
    sock = connect(server.port)
    stop = threading.Event()
    try:
        sock.sendall(
            b"POST /api/sessions HTTP/1.1\r\nHost: parkway\r\n"
            b"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{"
        )
        sender = trickle(sock, b" " * 3999, stop)
        answer = read_until_closed(sock, first=stop)
        sender.join(5)
    finally:
        stop.set()
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    assert b"connection: close" in head.lower()
    assert json.loads(body)["error"]["code"] == "body_timeout"


@pytest.mark.parametrize("http", sorted(PROTOCOLS))
def test_headers_that_never_complete_get_the_connection_closed(
    redis: Redis, redis_url: str, http: str
) -> None:
    """uvicorn itself waits for ever for a request's headers (its keep-alive timer is
    armed only after a response, and any byte cancels it). With Parkway's protocol a
    connection is closed, unanswered, once its headers are late: whether the client
    sends nothing or trickles header lines. (On httptools and on h11 alike.)"""
    del redis
    with guarded_server(redis_url, header_timeout_s=0.3, http=http) as server:
        silent = connect(server.port)
        try:
            assert read_until_closed(silent) == b""
        finally:
            silent.close()
        slow = connect(server.port)
        stop = threading.Event()
        try:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: parkway\r\n")
            sender = trickle(slow, b"X-Slow: 1\r\n" * 2000, stop)
            assert read_until_closed(slow) == b""
            sender.join(5)
        finally:
            stop.set()
            slow.close()


@pytest.mark.parametrize("http", sorted(PROTOCOLS))
def test_the_header_timeout_spares_a_request_once_its_headers_are_in(
    redis: Redis, redis_url: str, http: str
) -> None:
    """The timer stops when the headers are complete: a body slower than the header
    timeout (but within the body timeout) is served, and the connection is reused."""
    del redis
    with guarded_server(
        redis_url, header_timeout_s=0.3, http=http, body_read_timeout_s=10
    ) as server:
        sock = connect(server.port)
        stop = threading.Event()
        try:
            sock.sendall(
                b"POST /api/sessions HTTP/1.1\r\nHost: parkway\r\n"
                b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
            )
            # 20 sends 50 ms apart: about a second, more than three header timeouts
            trickle(sock, b"{" + b" " * 38 + b"}", stop).join(10)
            replies = sock.makefile("rb")
            assert read_response(replies) == 201
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: parkway\r\n\r\n")
            assert read_response(replies) == 200
        finally:
            stop.set()
            sock.close()


def test_parkway_serve_runs_uvicorn_with_the_header_timeout(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """``parkway serve`` hands uvicorn the guarded protocol with the configured timeout:
    httptools' when it is installed (it is a dependency), on uvloop where that is."""
    from parkway.transport import cli

    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "_serve", lambda app, config, *_: seen.update(config=config))
    monkeypatch.setenv("PARKWAY_SECRET_KEY", TEST_SECRET)
    monkeypatch.setenv("PARKWAY_HEADER_READ_TIMEOUT_S", "3.5")
    monkeypatch.setenv("PARKWAY_DEMO_OAUTH", "0")
    assert cli.main(["serve", "--auth", "anonymous", "--redis-url", redis_url, "--port", "0"]) == 0
    protocol = seen["config"].http
    assert issubclass(protocol, PROTOCOLS["httptools"])
    assert protocol.header_read_timeout_s == 3.5
    assert seen["config"].loop == event_loop()
