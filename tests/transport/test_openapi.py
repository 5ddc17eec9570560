"""``GET /openapi.json``: a valid OpenAPI 3.1 document that describes exactly the routes
the app serves, and that real answers of a real server (a whole tour of the demo agent,
the connect flow, errors) match, status by status."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate as validate_openapi
from pydantic import SecretStr
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import Route

from parkway.runner.demo import DEMO_AGENT
from parkway.transport.app import create_app
from parkway.transport.openapi import openapi_document
from parkway.transport.settings import Settings
from parkway.widgets_api.connect.oauth import DemoDispatch
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.openapi_check import ApiDocument
from tests.helpers.support import TEST_SECRET, ServerThread, answered, sse_chunks, user_message

MAX_BODY = 64 * 1024
EVIL = "https://evil.example"

# Routes the app serves that the document leaves out, each with the reason.
EXCLUDED = {
    DemoDispatch: "hands /demo-oauth/... to the demo provider's own routes "
    "(app.state.demo_router), which are compared themselves",
}


def served_routes(app: Starlette) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, with the demo provider's own routes
    in place of the endpoint that dispatches to them."""
    routes = list(app.routes)
    demo = getattr(app.state, "demo_router", None)
    if demo is not None:
        routes += demo.routes
    found = set()
    for route in routes:
        assert isinstance(route, Route), f"{route!r}: not a Route, so not compared"
        if type(route.app) in EXCLUDED or type(route.endpoint) in EXCLUDED:
            continue
        for method in route.methods or ():
            if method != "HEAD":
                found.add((method, route.path_format))
    return found


def documented_routes(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path) for path, methods in document["paths"].items() for method in methods
    }


def settings_for(redis_url: str, **extra: Any) -> Settings:
    return Settings(
        redis_url=redis_url, secret_key=SecretStr(TEST_SECRET), auth="anonymous", **extra
    )


# -- the document ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [{}, {"demo_oauth": True, "token_key": SecretStr(TOKEN_KEY), "metrics": True}],
    ids=["plain", "demo-and-metrics"],
)
def test_the_document_is_valid_openapi_3_1(extra: dict[str, Any]) -> None:
    """Tools (client generators, gateways) read it only if it is valid; each route's
    path parameters are declared, and every schema it points to is in components."""
    document = openapi_document(Settings(**extra))
    validate_openapi(document)
    assert document["openapi"].startswith("3.1")
    text = json.dumps(document)
    for name in set(re.findall(r'"#/components/schemas/([^"]+)"', text)):
        assert name in document["components"]["schemas"], name
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            declared = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"}
            assert declared == set(re.findall(r"\{(\w+)\}", path)), f"{method} {path}"


@pytest.mark.parametrize(
    "extra",
    [
        {"demo_oauth": False, "metrics": False},
        {"demo_oauth": True, "token_key": SecretStr(TOKEN_KEY), "metrics": True},
    ],
    ids=["plain", "demo-and-metrics"],
)
async def test_every_route_served_is_documented_and_every_documented_route_served(
    redis_url: str, redis: Redis, extra: dict[str, Any]
) -> None:
    """A route added without an entry in transport/openapi/_paths.py fails here, and so
    does an entry for a route the app does not serve (with these settings)."""
    del redis
    settings = settings_for(redis_url, **extra)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        served = served_routes(app)
    documented = documented_routes(openapi_document(settings))
    assert served - documented == set(), "served, not documented"
    assert documented - served == set(), "documented, not served"
    assert ("GET", "/demo-oauth/token") not in served
    assert (("POST", "/demo-oauth/token") in served) == bool(extra.get("demo_oauth"))
    assert (("GET", "/metrics") in served) == bool(extra.get("metrics"))


def test_an_undocumented_status_fails_the_check() -> None:
    """The check the tour relies on: a status the document does not list for the route
    is refused, as is a body that does not match its schema."""
    doc = ApiDocument(openapi_document(Settings()))
    request = httpx.Request("GET", "http://parkway/api/chats/c-1")
    with pytest.raises(AssertionError, match="not documented"):
        doc.check(
            httpx.Response(418, json={"error": {"code": "x", "message": "y"}}, request=request)
        )
    with pytest.raises(AssertionError, match=r"required"):
        doc.check(httpx.Response(200, json={"messages": []}, request=request))
    doc.check(httpx.Response(404, json={"error": {"code": "chat_not_found", "message": "no"}},
                             request=request))  # fmt: skip


# -- real answers ------------------------------------------------------------------------


@pytest.fixture
def server(redis_url: str, redis: Redis) -> Iterator[ServerThread]:
    del redis
    running = ServerThread(
        redis_url,
        DEMO_AGENT,
        demo_oauth=True,
        token_key=SecretStr(TOKEN_KEY),
        metrics=True,
        max_body_bytes=MAX_BODY,
    ).start()
    try:
        yield running
    finally:
        running.stop()


class Checked:
    """An HTTP client whose every answer is held against the document."""

    def __init__(self, base_url: str, doc: ApiDocument, seen: set[tuple[str, str, int]]) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60, follow_redirects=False)
        self.doc = doc
        self.seen = seen

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = self.http.request(method, url, **kwargs)
        self.doc.check(response)
        template = self.doc.template_of(response.request.url.path)
        self.seen.add((method, str(template), response.status_code))
        return response

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


def tool_call(chunks: list[dict[str, Any]], name: str) -> str:
    return str(
        next(
            c["toolCallId"]
            for c in chunks
            if c["type"] == "tool-input-available" and c["toolName"] == name
        )
    )


def test_a_whole_tour_answers_as_documented(server: ServerThread) -> None:
    """The demo agent end to end (park, answer over the AI SDK, settle, resume, the
    connect flow through the demo provider, an approval, an artifact, reviewed code),
    its first stops again over AG-UI, and the errors around them: every answer's status
    is documented for its route and method, and its body matches the documented schema
    (each stream chunk the UIMessageChunk union, each AG-UI event the AguiEvent one)."""
    doc = ApiDocument(httpx.get(f"{server.base_url}/openapi.json").json())
    seen: set[tuple[str, str, int]] = set()
    with contextlib.ExitStack() as stack:
        anon = Checked(server.base_url, doc, seen)
        user = Checked(server.base_url, doc, seen)
        other = Checked(server.base_url, doc, seen)
        for client in (anon, user, other):
            stack.callback(client.http.close)
        public(anon)
        assert user.post("/api/sessions").status_code == 201  # the cookie, from here on
        assert other.post("/api/sessions", json={}).status_code == 201
        assert user.post("/api/sessions", json={"principal": "me"}).status_code == 422
        refused(user, other)
        tour(user, server.base_url)
        agui(user)
        agent_and_library(user)
        demo_provider(anon)
    statuses = {status for _, _, status in seen}
    assert statuses >= {200, 201, 204, 303, 400, 401, 403, 404, 409, 413, 422}, statuses


def public(anon: Checked) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json", "/", "/favicon.svg", "/favicon.ico"):
        assert anon.get(path).status_code == 200, path
    assert anon.get("/static/playground.js").status_code == 200
    assert anon.get("/static/nothing.js").status_code == 404
    assert anon.get("/metrics").status_code == 200
    assert anon.post("/api/chat", json={}).status_code == 401
    assert anon.get("/api/agent").status_code == 401
    assert anon.get("/api/connections").status_code == 401


def refused(user: Checked, other: Checked) -> None:
    chat = {"id": "tour-x", "messages": [user_message("hi")]}
    assert user.post("/api/chat", json=chat, headers={"origin": EVIL}).status_code == 403
    assert user.post("/api/chat", content=b"{", headers={"content-type": "application/json"}).status_code == 400  # fmt: skip
    assert user.post("/api/chat", json={"id": "tour-x"}).status_code == 422
    big = {**chat, "pad": "x" * MAX_BODY}
    assert user.post("/api/chat", json=big).status_code == 413
    assert user.get("/api/chats/not!an!id").status_code == 400
    assert user.get("/api/chats/nowhere").status_code == 404
    assert user.get("/api/chat/nowhere/stream").status_code == 404
    assert user.post("/api/chats/nowhere/stop").status_code == 404
    assert other.get("/api/chats/nowhere/artifacts").status_code == 404


def tour(user: Checked, base_url: str) -> None:
    parked = user.post("/api/chat", json={"id": "tour", "messages": [user_message("hi")]})
    assert parked.status_code == 200, parked.text
    chunks = sse_chunks(parked.text)
    choose = tool_call(chunks, "choose_option")
    assert user.get("/api/chats/tour").status_code == 200
    assert user.get(f"/api/chats/tour/calls/{choose}").status_code == 200
    assert user.get("/api/chats/tour/calls/nothing").status_code == 404
    assert user.get("/api/chat/tour/stream").status_code == 200
    assert user.post("/api/chats/tour/resume").status_code == 409  # still pending
    assert user.post("/api/chats/tour/stop").status_code == 409  # not running
    settle = f"/api/chats/tour/calls/{choose}"
    assert user.post(settle, json={"outcome": 5}).status_code == 422
    # the AI SDK's way: the answer in the history, and the run resumes in the response
    resumed = user.post("/api/chat", json={"id": "tour", "messages": answered(chunks, {"choice": "Oslo"}, tool="choose_option")})  # fmt: skip
    assert resumed.status_code == 200, resumed.text
    again = user.post(settle, json={"outcome": "output", "output": {"choice": "Paris"}})
    assert again.status_code == 409 and again.json()["error"]["outcome"]
    connect = tool_call(sse_chunks(resumed.text), "request_connection")
    connect_flow(user, base_url, connect)
    resumed = user.post("/api/chats/tour/resume")
    assert resumed.status_code == 200, resumed.text
    publish = tool_call(sse_chunks(resumed.text), "publish_report")
    assert user.post(f"/api/chats/tour/calls/{publish}", json={"outcome": "approved"}).status_code == 200  # fmt: skip
    resumed = user.post("/api/chats/tour/resume")
    assert resumed.status_code == 200, resumed.text
    code = tool_call(sse_chunks(resumed.text), "execute_code")
    [artifact] = user.get("/api/chats/tour/artifacts").json()["artifacts"]
    assert user.get(f"/api/chats/tour/artifacts/{artifact['artifact_id']}").status_code == 200
    assert user.get("/api/chats/tour/artifacts/nothing").status_code == 404
    assert user.post(f"/api/chats/tour/calls/{code}", json={"outcome": "approved"}).status_code == 200  # fmt: skip
    finished = user.post("/api/chats/tour/resume")
    assert finished.status_code == 200, finished.text
    assert user.get("/api/chat/tour/stream").status_code in (200, 204)
    assert user.get("/api/chats/tour").json()["state"] != "parked"


def agui(user: Checked) -> None:
    """The demo agent's first two stops over AG-UI: a turn that parks (an interrupt), the
    chat again (a run with nothing new), a resume the rules refuse (RUN_ERROR), a resume
    that continues to the connection's interrupt; and bodies the route refuses."""
    run = {
        "threadId": "tour-agui",
        "runId": "run-1",
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": None,
    }
    parked = user.post("/api/agui", json=run)
    assert parked.status_code == 200, parked.text
    [choose] = sse_chunks(parked.text)[-1]["outcome"]["interrupts"]
    assert choose["reason"] == "client_tool"
    again = user.post("/api/agui", json={**run, "runId": "run-2"})
    assert [e["type"] for e in sse_chunks(again.text)][1] == "MESSAGES_SNAPSHOT"
    nope = [{"interruptId": "nope", "status": "resolved", "payload": {"choice": "Oslo"}}]
    refused = user.post("/api/agui", json={**run, "runId": "run-3", "resume": nope})
    assert sse_chunks(refused.text)[-1]["code"] == "unknown_interrupt"
    answer = [{"interruptId": choose["id"], "status": "resolved", "payload": {"choice": "Oslo"}}]
    resumed = user.post("/api/agui", json={**run, "runId": "run-4", "resume": answer})
    assert resumed.status_code == 200, resumed.text
    [connect] = sse_chunks(resumed.text)[-1]["outcome"]["interrupts"]
    assert connect["reason"] == "connection"
    assert connect["metadata"]["parkway"]["widget"]["startUrl"]
    taken = [{"name": "get_weather", "description": "not the agent's"}]
    turn = [*run["messages"], {"id": "u2", "role": "user", "content": "again"}]
    assert user.post("/api/agui", json={**run, "messages": turn, "tools": taken}).status_code == 422
    assert user.post("/api/agui", json={**run, "threadId": "not!an!id"}).status_code == 400
    assert user.post("/api/agui", json={"threadId": "tour-agui"}).status_code == 422


def connect_flow(user: Checked, base_url: str, call_id: str) -> None:
    """Through the demo provider: start (303), consent (the provider's page), callback
    (the result page), then the connection's list and delete."""
    widget = user.get(f"/api/chats/tour/calls/{call_id}").json()["widget"]
    start = user.get(widget["startUrl"])
    assert start.status_code == 303, start.text
    assert user.get(widget["startUrl"]).status_code == 403  # its start token is spent
    consent_url = start.headers["location"].removeprefix(base_url)
    page = user.get(consent_url)
    assert page.status_code == 200
    form = re.search(r'name="consent" value="([^"]+)"', page.text)
    assert form, page.text
    answer = user.post(
        consent_url.split("?", maxsplit=1)[0],
        data={"consent": form.group(1), "account": "tourist", "decision": "allow"},
    )
    assert answer.status_code == 303, answer.text
    callback = user.get(answer.headers["location"].removeprefix(base_url))
    assert callback.status_code == 200, callback.text
    assert user.get("/connect/demo/callback?state=spent").status_code == 400
    assert user.get("/connect/nobody/start?chat=tour&call=x").status_code == 404
    [connection] = user.get("/api/connections").json()["connections"]
    use = {"chatId": "tour", "toolCallId": call_id, "connectionId": connection["id"]}
    assert user.post("/connect/demo/use", json=use).status_code == 200  # the same outcome
    assert user.post("/connect/demo/use", json={"chatId": "tour"}).status_code == 422
    assert user.request("DELETE", f"/api/connections/{connection['id']}").status_code == 204
    assert user.request("DELETE", f"/api/connections/{connection['id']}").status_code == 404


def agent_and_library(user: Checked) -> None:
    agent = user.get("/api/agent").json()
    commit = {"template": agent["template"], "expectedVersion": agent["version"] + 5}
    assert user.post("/api/agent/commit", json=commit).status_code == 409
    assert user.post("/api/agent/commit", json={"template": {}}).status_code == 422
    assert user.get("/api/agent/library").status_code == 200
    assert user.get("/api/agent/library/nothing_here").status_code == 404


def demo_provider(anon: Checked) -> None:
    for path in (
        "/demo-oauth/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/demo-oauth",
    ):
        assert anon.get(path).status_code == 200
    assert anon.get("/demo-oauth/authorize").status_code == 400
    assert anon.post("/demo-oauth/token", data={"grant_type": "authorization_code"}).status_code in (400, 401)  # fmt: skip
    assert anon.post("/demo-oauth/revoke", data={"token": "x"}).status_code in (200, 400, 401)
    assert anon.get("/demo-oauth/userinfo").status_code == 401


async def test_the_document_is_public_and_built_once_per_app(redis_url: str) -> None:
    """It needs no session, and is built on the first request and then served as the
    same bytes, whoever asks."""
    app = create_app(settings_for(redis_url))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://parkway") as client,
    ):
        first = await client.get("/openapi.json")
        built = app.state.openapi
        second = await client.get("/openapi.json", headers={"authorization": "Bearer x"})
    assert first.status_code == 200, first.text
    assert first.headers["content-type"].startswith("application/json")
    assert second.content == first.content and app.state.openapi is built
    assert first.json() == openapi_document(app.state.settings)
