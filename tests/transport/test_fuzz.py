"""A schema-driven fuzz of every route: no 5xx, every error in its shape, and a parked
chat that comes through byte for byte and still resumes.

The routes and their body schemas come from the app's OpenAPI document (/openapi.json,
which tests/transport/test_openapi.py holds equal to the router), so a new route is fuzzed without
anyone adding it here. Bodies follow the routes' own models (their JSON Schemas) with a
vocabulary of the wire's real names and ids, then go wrong: wrong types, deep nesting, lone
surrogates, bad UTF-8, NaN, huge strings, oversized bodies. Path ids are real, random,
huge or percent-encoded garbage. Three callers send them: the chat's owner (only bodies
the reader must refuse, so nothing it sends could legitimately change the chat), another
principal (anything), and nobody (anything). Every answer of the route it was sent to
is one the document lists for that route and method, with a body of its schema.

The run is reproducible (derandomized, no example database) and bounded to a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from redis.asyncio import Redis
from starlette.routing import Route

from parkway.runner.agent.agentfile import parse_agent_file
from parkway.runner.store.keys import chat_keys
from parkway.transport.app import create_app
from parkway.transport.openapi import openapi_document
from parkway.transport.settings import Settings
from parkway.widgets_api.connect.oauth import DemoDispatch
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.openapi_check import ApiDocument, template_regex
from tests.helpers.support import TEST_SECRET, agent_doc, call, sse_chunks, text, user_message
from tests.helpers.topologies import assert_keyspace_clean

TURNS = [[text("Pick."), call("pick", {"q": "colour"})], [text("picked")]]
CHAT = "fuzz-parked"  # the owner's: nothing may change it
OWN = "fuzz-own"  # the stranger's: its calls are the stranger's to settle, with anything
MAX_BODY = 32 * 1024  # small, so bodies past the limit are cheap to make
MAX_DEPTH = 64
EDITOR_TOKEN = "fuzz-editor-" + "e" * 32
LONE_SURROGATES = ["\ud800", "a\udbffb", "\udc00", "\udfff\ud800"]
WIRE_NAMES = [
    "id", "role", "parts", "type", "text", "toolCallId", "toolName", "state", "input",
    "output", "errorText", "approval", "approved", "reason", "outcome", "message",
    "template", "expectedVersion", "summary", "chatId", "connectionId", "messages",
    "trigger", "messageId", "agentTemplate", "instructions", "tools", "name",
    "threadId", "runId", "interruptId", "payload", "editedArgs", "connected", "choice",
]  # fmt: skip
WIRE_VALUES = [
    "user", "assistant", "system", "text", "step-start", "tool-pick", "dynamic-tool",
    "output-available", "output-error", "approval-responded", "output-denied",
    "output", "declined", "cancelled", "approved", "denied", "error", "timeout",
    "submit-message", "regenerate-message", "demo", CHAT, OWN, "",
    "tool", "resolved", "pick", "get_weather",
]  # fmt: skip
# The routes that start runs (fuzzed a second time, with the stranger's plausible bodies).
RUN_ROUTES = {("POST", "/api/chat"), ("POST", "/api/agui")}
# Error bodies are short: nothing a client sent is echoed back at length.
MAX_ERROR_BYTES = 2048


@dataclass
class Target:
    """One documented route and method."""

    method: str
    path: str  # the documented path, e.g. /api/chats/{chat_id}
    params: list[str]  # its path parameters
    body: dict[str, Any]  # the JSON Schema of its body ({}: any JSON)

    @property
    def json_api(self) -> bool:
        """Routes whose errors are ``{"error": {"code", "message"}}``; the rest are pages
        (HTML) and the demo OAuth provider (RFC 6749 errors)."""
        return self.path.startswith(("/api/", "/healthz")) or self.path.endswith("/use")


def targets(document: Mapping[str, Any]) -> list[Target]:
    """Every route and method the document describes, with its body schema."""
    found = []
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            found.append(
                Target(
                    method.upper(),
                    path,
                    [p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"],
                    {} if body is None else body["schema"],
                )
            )
    return found


# -- strategies ------------------------------------------------------------------------


def mostly(
    usual: st.SearchStrategy[Any], *rare: st.SearchStrategy[Any], one_in: int = 20
) -> st.SearchStrategy[Any]:
    """``usual``, except once in ``one_in`` draws one of ``rare``: a body has many
    strings, and most bodies should stay plausible enough to get past the reader to the
    routes' own checks."""
    return st.integers(1, one_in).flatmap(lambda i: st.one_of(*rare) if i == 1 else usual)


# The parked calls' ids join the vocabulary once the calls are parked (hence deferred).
LIVE_IDS: list[str] = []
strings = mostly(
    st.one_of(st.deferred(lambda: st.sampled_from(WIRE_VALUES + LIVE_IDS)), st.text(max_size=30)),
    st.sampled_from(LONE_SURROGATES),
    st.integers(200, 3 * MAX_BODY).map(lambda n: "x" * n),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)
keys = mostly(
    st.sampled_from(WIRE_NAMES),
    st.text(max_size=12),
    st.sampled_from(LONE_SURROGATES),
    st.integers(200, 5000).map(lambda n: "k" * n),
)
# Properties that name a chat or a call take real ones half the time, so that bodies
# reach the chats (the owner's, the stranger's) and their parked calls.
KNOWN_VALUES: dict[str, Callable[[], list[str]]] = {
    "threadId": lambda: [CHAT, OWN],
    "chatId": lambda: [CHAT, OWN],
    "interruptId": lambda: LIVE_IDS,
    "toolCallId": lambda: LIVE_IDS,
}
any_json = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
# What a plausible body holds (:func:`from_schema` with ``wild`` off): the wire's names and
# ids, short text, small numbers; nothing the reader refuses.
plain_strings = st.one_of(
    st.deferred(lambda: st.sampled_from(WIRE_VALUES + LIVE_IDS)), st.text(max_size=30)
)
plain_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), plain_strings),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(WIRE_NAMES), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def from_schema(
    draw: st.DrawFn, schema: dict[str, Any], defs: dict[str, Any], wild: bool = True
) -> Any:
    """A value shaped by ``schema`` (the JSON Schema subset pydantic writes; ``defs``:
    the schemas its refs name), now and then of another type, with required keys
    dropped and unknown keys added; with ``wild`` off, a plausible one (of the right
    types, with its required keys, its strings and free values ``plain_*``)."""
    if wild and draw(st.integers(0, 19)) == 0:
        return draw(any_json)  # a wrong type, anywhere
    if "$ref" in schema:
        return draw(from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, wild))
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return draw(from_schema(draw(st.sampled_from(schema[union])), defs, wild))
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "object":
        out: dict[str, Any] = {}
        for name, sub in schema.get("properties", {}).items():
            # a constant is a union's tag (a message's role): there, as a required key is
            tagged = name in schema.get("required", ()) or "const" in sub
            wanted = tagged or draw(st.booleans())
            if wanted and (not wild or draw(st.integers(0, 19))):  # else missing, 1 in 20
                known = KNOWN_VALUES.get(name)
                if known is not None and draw(st.booleans()):  # a real chat or call, 1 in 2
                    out[name] = draw(st.sampled_from(known()))
                else:
                    out[name] = draw(from_schema(sub, defs, wild))
        if wild and draw(st.integers(0, 3)) == 0:  # an unknown key, 1 in 4
            extra = draw(st.dictionaries(keys, any_json, min_size=1, max_size=2))
            out.update({k: v for k, v in extra.items() if k not in out})
        return out
    if kind == "array":
        items = from_schema(schema.get("items", {}), defs, wild)
        return draw(st.lists(items, min_size=0, max_size=3))
    if kind == "string":
        return draw(strings if wild else plain_strings)
    if kind == "integer":
        return draw(st.integers(-5, 5) | st.integers(-(2**70), 2**70))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "null":
        return None
    return draw(any_json if wild else plain_json)


def encode(value: Any, style: int) -> bytes:
    """``value`` as JSON bytes: escaped (lone surrogates as ``\\ud800``), or raw UTF-8
    with surrogates passed through as bytes (which strict UTF-8 refuses)."""
    if style == 0:
        return json.dumps(value).encode()
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def hostile(draw: st.DrawFn, value: Any) -> bytes:
    """``value`` serialized, then broken in a way the reader must refuse."""
    body = encode(value, draw(st.integers(0, 1)))
    how = draw(st.sampled_from(["deep", "surrogate", "raw surrogate", "bad utf-8", "nan", "big"]))
    if how == "deep":
        depth = draw(st.integers(MAX_DEPTH + 1, 20_000))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        return opener * depth + body + closer * depth
    if how == "surrogate":
        return (
            b'{"' + draw(st.sampled_from([b"k", b"\\udfff"])) + b'": "\\ud800", "v": ' + body + b"}"
        )
    if how == "raw surrogate":
        return b'["\xed\xa0\x80", ' + body + b"]"
    if how == "bad utf-8":
        return b'["\xff\xfe", ' + body + b"]"
    if how == "nan":
        return b"[" + body + b", " + draw(st.sampled_from([b"NaN", b"Infinity", b"1e999"])) + b"]"
    return b"[" + body + b"," + b" " * (MAX_BODY + 1) + b"0]"


@st.composite
def any_body(draw: st.DrawFn, value: Any) -> bytes:
    """``value`` serialized as is, broken, or replaced by bytes that are not JSON."""
    choice = draw(st.integers(0, 5))
    if choice <= 2:
        return encode(value, draw(st.integers(0, 1)))
    if choice == 3:
        return draw(hostile(value))
    if choice == 4:
        return encode(value, 0)[: draw(st.integers(0, 40))]
    return draw(st.binary(max_size=64))


# -- the harness -------------------------------------------------------------------------


@dataclass
class Harness:
    """Parkway in one event loop, its clients, and the parked chat to protect."""

    app: Any
    redis: Redis
    owner: httpx.AsyncClient
    stranger: httpx.AsyncClient
    anonymous: httpx.AsyncClient
    call_id: str
    doc: ApiDocument
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def dump(self) -> dict[str, bytes | None]:
        return {key: await self.redis.dump(key) for key in chat_keys(CHAT).all()}


async def open_client(stack: contextlib.AsyncExitStack, app: Any) -> httpx.AsyncClient:
    """An in-process client; a 500 comes back as a response, for :func:`check` to report."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return await stack.enter_async_context(
        httpx.AsyncClient(transport=transport, base_url="http://parkway", timeout=30)
    )


async def login(stack: contextlib.AsyncExitStack, app: Any) -> httpx.AsyncClient:
    client = await open_client(stack, app)
    response = await client.post("/api/sessions")
    client.headers["authorization"] = f"Bearer {response.json()['token']}"
    return client


async def start(redis_url: str) -> Harness:
    redis = Redis.from_url(redis_url)
    await redis.flushdb()
    app = create_app(
        Settings(
            redis_url=redis_url,
            secret_key=SecretStr(TEST_SECRET),
            auth="anonymous",
            max_body_bytes=MAX_BODY,
            max_json_depth=MAX_DEPTH,
            demo_oauth=True,
            token_key=SecretStr(TOKEN_KEY),
            agent_editing=True,
            editor_token=SecretStr(EDITOR_TOKEN),
        ),
        agent=parse_agent_file(agent_doc(TURNS)),
    )
    stack = contextlib.AsyncExitStack()
    await stack.enter_async_context(app.router.lifespan_context(app))
    owner = await login(stack, app)
    stranger = await login(stack, app)
    anonymous = await open_client(stack, app)
    LIVE_IDS[:] = [await park(owner, CHAT), await park(stranger, OWN)]
    document = (await anonymous.get("/openapi.json")).json()
    assert document == openapi_document(app.state.settings)
    doc = ApiDocument(document)
    return Harness(app, redis, owner, stranger, anonymous, LIVE_IDS[0], doc, stack)


async def park(client: httpx.AsyncClient, chat_id: str) -> str:
    parked = await client.post("/api/chat", json={"id": chat_id, "messages": [user_message("hi")]})
    chunks = sse_chunks(parked.text)
    return str(next(c["toolCallId"] for c in chunks if c["type"] == "tool-input-available"))


async def stop(harness: Harness) -> None:
    try:
        await harness.stack.aclose()
        await assert_keyspace_clean([harness.redis], harness.redis)
    finally:
        await harness.redis.flushdb()
        await harness.redis.aclose()


def check(doc: ApiDocument, target: Target, path: str, response: httpx.Response) -> None:
    where = f"{target.method} {path[:200]} -> {response.status_code}: {response.text[:300]}"
    assert response.status_code < 500, where
    # A path whose values hold a '/' (or '..') reaches another route, or none (404, 405):
    # the document speaks for the answer only when the request reached the target.
    if template_regex(target.path).fullmatch(unquote(response.request.url.path)):
        doc.check(response, target.path)
    if response.status_code < 400:
        return
    ctype = response.headers.get("content-type", "")
    if target.json_api or ctype.startswith("application/json"):
        assert ctype.startswith("application/json"), where
        assert len(response.content) <= MAX_ERROR_BYTES, where
        error = response.json()["error"]
        if isinstance(error, str):  # RFC 6749, the demo provider's OAuth endpoints only
            assert path.startswith("/demo-oauth/"), where
            return
        assert isinstance(error["code"], str) and isinstance(error["message"], str), where
    else:
        assert ctype.startswith("text/html"), where


async def send(harness: Harness, target: Target, who: str, path: str, body: bytes) -> None:
    client = {"owner": harness.owner, "stranger": harness.stranger}.get(who, harness.anonymous)
    headers = {"content-type": "application/json"}
    if target.path == "/api/agent/commit" and who != "anonymous":
        headers["x-parkway-editor-token"] = EDITOR_TOKEN
    response = await client.request(
        target.method, path, content=body if target.method != "GET" else None, headers=headers
    )
    client.cookies.clear()  # a session cookie would turn "anonymous" into a principal
    check(harness.doc, target, path, response)


# -- the test ----------------------------------------------------------------------------


def ids_for(name: str) -> st.SearchStrategy[str]:
    """Percent-encoded path values for the parameter ``name``."""
    known = {"chat_id": [CHAT, OWN], "call_id": LIVE_IDS, "provider": ["demo"]}.get(name, [])
    return mostly(
        st.sampled_from(known or ["x"]).map(lambda v: quote(v, safe="")),
        st.text(min_size=1, max_size=40).map(lambda v: quote(v, safe="")),
        st.integers(129, 20_000).map(lambda n: "a" * n),
        st.sampled_from(["%ED%A0%80", "%FF%FE", "%00", "..", "%2e%2e%2f", "a%0Ab"]),
        one_in=3,
    )


def path_of(target: Target, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], target.path)


def test_no_route_answers_5xx_or_touches_a_parked_chat(redis_url: str) -> None:
    """Every route of the router, swept with each kind of hostile body and then fuzzed
    for 1,500 requests, and the routes that start runs for 300 more of the stranger's:
    never a 5xx, every error a short one in its shape; the owner's parked chat is
    byte-identical in Redis afterwards, and settling it and resuming still works."""
    with asyncio.Runner() as loop:
        harness = loop.run(start(redis_url))
        try:
            before = loop.run(harness.dump())
            found = targets(harness.doc.document)
            served = {
                (m, r.path_format)
                for r in harness.app.routes
                if isinstance(r, Route) and not isinstance(r.app, DemoDispatch)
                for m in r.methods or ()
                if m != "HEAD"
            }
            assert served <= {(t.method, t.path) for t in found}, "a route is not fuzzed"

            # a sweep: every route, method and caller, with each kind of hostile body
            for target in found:
                values = {
                    n: quote(CHAT if n == "chat_id" else harness.call_id) for n in target.params
                }
                values["provider"] = "demo"
                for who in ("owner", "stranger", "anonymous"):
                    for body in (b"[" * 10_000, b'{"k": "\\ud800"}', b" " * (MAX_BODY + 1)):
                        loop.run(send(harness, target, who, path_of(target, values), body))

            # routes that read a body are drawn three times as often
            weighted = [t for t in found for _ in range(3 if t.method == "POST" else 1)]

            @settings(
                max_examples=1500,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(st.data())
            def fuzz(data: st.DataObject) -> None:
                target = data.draw(st.sampled_from(weighted), label="route")
                values = {name: data.draw(ids_for(name), label=name) for name in target.params}
                schemas = harness.doc.document["components"]["schemas"]
                value = data.draw(from_schema(target.body, schemas), label="value")
                who = data.draw(st.sampled_from(["owner", "stranger", "anonymous"]), label="who")
                # the owner sends only what the reader must refuse: anything else could be
                # a legitimate change of its own chat
                body = data.draw(hostile(value) if who == "owner" else any_body(value))
                loop.run(send(harness, target, who, path_of(target, values), body))

            fuzz()

            # The routes that start runs take the deepest bodies (a conversation, answers,
            # resumes, tools), which the draws above rarely get past the reader and the
            # body's model: the stranger sends them a few hundred plausible ones more,
            # aimed at both chats and their calls.
            runs = [t for t in found if (t.method, t.path) in RUN_ROUTES]
            assert len(runs) == len(RUN_ROUTES), "a run route is not documented"

            @settings(
                max_examples=300,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(st.data())
            def fuzz_runs(data: st.DataObject) -> None:
                target = data.draw(st.sampled_from(runs), label="route")
                schemas = harness.doc.document["components"]["schemas"]
                value = data.draw(from_schema(target.body, schemas, wild=False), label="value")
                loop.run(send(harness, target, "stranger", target.path, encode(value, 0)))

            fuzz_runs()
            assert loop.run(harness.dump()) == before
            loop.run(resumes(harness))
        finally:
            loop.run(stop(harness))


async def resumes(harness: Harness) -> None:
    settled = await harness.owner.post(
        f"/api/chats/{CHAT}/calls/{harness.call_id}",
        json={"outcome": "output", "output": {"choice": "red"}},
    )
    assert settled.status_code == 200, settled.text
    resumed = await harness.owner.post(f"/api/chats/{CHAT}/resume")
    assert resumed.status_code == 200, resumed.text
    assert "picked" in resumed.text
