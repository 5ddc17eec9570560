"""MCP servers that need OAuth, end to end over HTTP: a real Parkway (uvicorn), the
suite's real oidc-provider as the authorization server (RFC 8707 resource indicators on,
JWT access tokens for each MCP server's URL), and MCP servers built with the official SDK
that answer 401 with their protected resource metadata and check each token's signature,
issuer and audience.

A user without a connection to a server sees only its sign-in tool; calling it parks on a
connect card for the configured provider; the same connect flow as ``request_connection``
(start token, flow cookie, single-use state, PKCE, ``iss``) now also sends the server's
URL as ``resource``; the callback settles the call and the resume lists the server's tools
with the user's token, which the model then calls. A server that refuses a token later
parks the call again, and the resume retries that very call. The token is never in the
event log, the chat, either wire, the model's input or Redis unencrypted; one server's
token never reaches another server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from parkway.runner.canonical import canonical_json
from parkway.runner.llm.model import ModelEvent, ModelRequest, ModelTextDelta, ModelToolCall
from parkway.runner.llm.scripted import last_tool_results, last_user_text
from parkway.widgets_api.connect import TokenCipher
from tests.helpers.agui import agui_events, outcome
from tests.helpers.connect_rig import (
    ACME_SECRET,
    TOKEN_KEY,
    Browser,
    connection_key,
    outcome_of,
    stored_tokens,
)
from tests.helpers.mcp import SecureServerThread
from tests.helpers.oidc_peer import OidcPeer, login_and_consent, oidc_peer
from tests.helpers.support import (
    ParkwayProcess,
    ServerThread,
    free_port,
    server_thread,
    sse_chunks,
    user_message,
)

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(shutil.which("node") is None, reason="the `node` executable is not on PATH"),
]


class SignInModel:
    """A scripted model: "whoami on <server>" calls ``<server>__whoami`` when it is
    offered, else ``<server>__sign_in`` (once); then says what the tools answered."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        server = last_user_text(request).split()[-1]
        offered = {t.name for t in request.tools}
        results = last_tool_results(request)
        tried = {r["tool"] for r in results}
        if f"{server}__whoami" in offered and f"{server}__whoami" not in tried:
            yield ModelToolCall(name=f"{server}__whoami", input={})
            return
        if f"{server}__sign_in" in offered and not tried:
            yield ModelToolCall(name=f"{server}__sign_in", input={})
            return
        yield ModelTextDelta("Result: " + canonical_json(results))

    def seen(self) -> str:
        return "\n".join(repr(r) for r in self.requests)


@dataclass
class Rig:
    server: ServerThread
    peer: OidcPeer
    secure: SecureServerThread
    other: SecureServerThread
    rogue: SecureServerThread
    model: SignInModel
    agent: dict[str, Any]
    providers: str
    spare_port: int  # for `parkway serve` processes: its callback is registered too

    @property
    def base_url(self) -> str:
        return self.server.base_url


@pytest.fixture(scope="module")
def rig(redis_url: str) -> Iterator[Rig]:
    port, spare_port = free_port(), free_port()
    ports = {name: free_port() for name in ("secure", "other", "rogue")}
    urls = {name: f"http://127.0.0.1:{p}/mcp" for name, p in ports.items()}
    clients = [
        {
            "client_id": "parkway",
            "client_secret": ACME_SECRET,
            "redirect_uris": [
                f"http://127.0.0.1:{p}/connect/idp/callback" for p in (port, spare_port)
            ],
        }
    ]
    with oidc_peer(clients, resources=list(urls.values())) as peer:
        servers = {
            "secure": SecureServerThread(peer.issuer, port=ports["secure"], name="secure"),
            "other": SecureServerThread(peer.issuer, port=ports["other"], name="other"),
            # its metadata names an authorization server Parkway was not configured with
            "rogue": SecureServerThread(
                peer.issuer, port=ports["rogue"], name="rogue",
                authorization_server="http://127.0.0.1:9/",
            ),
        }  # fmt: skip
        for mcp in servers.values():
            mcp.start()
        auth = {"provider": "idp", "scopes": ["mcp:tools"]}
        agent = {
            "template": {
                "instructions": "mcp oauth agent",
                "tools": [],
                "mcps": [{"name": n, "url": urls[n], "auth": auth} for n in servers],
            },
            "model": {"scripted": {"turns": []}},
        }
        providers = [
            {
                "name": "idp",
                "display_name": "Identity",
                "issuer": peer.issuer,
                "client_id": "parkway",
                "client_secret": ACME_SECRET,
                "scopes": ["openid", "profile", "offline_access"],
                "allowed_scopes": ["mcp:tools"],
            }
        ]
        model = SignInModel()
        server = ServerThread(
            redis_url, agent, model=model, port=port,
            oauth_providers=json.dumps(providers), token_key=SecretStr(TOKEN_KEY),
        ).start()  # fmt: skip
        try:
            yield Rig(
                server, peer, servers["secure"], servers["other"], servers["rogue"], model,
                agent, json.dumps(providers), spare_port,
            )  # fmt: skip
        finally:
            server.stop()
            for mcp in servers.values():
                mcp.stop()


@pytest.fixture
def browser(rig: Rig, redis: Redis) -> Iterator[Browser]:
    del redis  # a clean database, and the keyspace check afterwards
    rig.secure.refuse_calls = False
    user = Browser(rig.base_url).login()
    try:
        yield user
    finally:
        user.close()


def ask(browser: Browser, chat: str, server: str) -> list[dict[str, Any]]:
    body = {
        "id": chat,
        "messages": [user_message(f"whoami on {server}")],
        "trigger": "submit-message",
    }
    response = browser.post("/api/chat", json=body)
    assert response.status_code == 200, response.text
    return sse_chunks(response.text)


def parked_call(chunks: list[dict[str, Any]], tool: str) -> str:
    calls = [c for c in chunks if c["type"] == "tool-input-available" and c["toolName"] == tool]
    assert len(calls) == 1, chunks
    return str(calls[0]["toolCallId"])


def agui_body(thread: str) -> dict[str, Any]:
    """An AG-UI run with no input: the thread's messages come back as a snapshot."""
    return {
        "threadId": thread, "runId": f"r-{thread}", "messages": [], "tools": [],
        "context": [], "state": {}, "forwardedProps": {},
    }  # fmt: skip


def sign_in(browser: Browser, chat: str, call: str, *, login: str = "alice") -> str:
    """Start the call's flow as its widget does, sign in and consent; the callback URL."""
    start = browser.start("idp", chat, call)
    assert start.status_code == 303, start.text
    return login_and_consent(browser.http, start.headers["location"], login=login)


def said(chunks: list[dict[str, Any]]) -> str:
    return "".join(str(c.get("delta", "")) for c in chunks)


async def _dump_with(rig: Rig, work: Any) -> Any:
    client = Redis.from_url(rig.server.settings.redis_url or "")
    try:
        return await work(client)
    finally:
        await client.aclose()


def test_sign_in_parks_on_a_connect_card_and_the_resume_calls_the_tool_with_the_token(
    rig: Rig, browser: Browser
) -> None:
    """The round trip: no connection → the server's sign-in tool parks on a connect card
    naming the server's host and the configured provider; the flow sends the server's
    URL as the RFC 8707 resource with PKCE S256; the callback settles the call; the
    resume lists the server's tools with the user's token and the model's call of one
    is answered for that user. The token is nowhere but the Authorization header."""
    before = len(rig.secure.bearers)
    chunks = ask(browser, "m-happy", "secure")
    call = parked_call(chunks, "secure__sign_in")
    widgets = [c for c in chunks if c["type"] == "data-parkway-widget"]
    assert widgets, chunks
    card = browser.call("m-happy", call)["widget"]
    assert card["kind"] == "connect"
    assert card["provider"] == "idp"
    assert card["mcpServer"] == {"server": "secure", "host": "127.0.0.1", "tool": "sign_in"}
    assert "token=" in card["startUrl"]

    start = browser.start("idp", "m-happy", call)
    assert start.status_code == 303, start.text
    query = {k: v[0] for k, v in parse_qs(urlsplit(start.headers["location"]).query).items()}
    assert query["resource"] == rig.secure.url
    assert query["code_challenge_method"] == "S256"
    assert "mcp:tools" in query["scope"].split()
    callback = browser.get(login_and_consent(browser.http, start.headers["location"]))
    assert callback.status_code == 200, callback.text
    outcome = outcome_of(browser, "m-happy", call)
    assert outcome is not None
    assert outcome["outcome"] == "output"
    assert outcome["output"]["connected"] is True

    resumed = browser.post("/api/chats/m-happy/resume")
    assert resumed.status_code == 200, resumed.text
    text = said(sse_chunks(resumed.text))
    assert "you are alice" in text, text
    assert "'signedIn': True" in rig.model.seen()  # the sign-in's result: the tools' names

    tokens = {b for b in rig.secure.bearers[before:] if b}
    assert tokens, "the server received no token"
    history = browser.get("/api/chats/m-happy")
    assert history.status_code == 200
    agui = browser.post("/api/agui", json=agui_body("m-happy"))  # the AG-UI wire's view
    assert agui.status_code == 200, agui.text
    assert "you are alice" in agui.text
    dumped = asyncio.run(_dump_with(rig, redis_text))
    for token in tokens:
        assert token not in resumed.text
        assert token not in history.text
        assert token not in agui.text
        assert token not in "\n".join(browser.seen)
        assert token not in rig.model.seen()
        assert token not in dumped  # sealed at rest, and never in the event log
        assert token not in rig.other.bearers  # never sent to another server
        assert token not in rig.rogue.bearers


async def redis_text(client: Redis) -> str:
    out: list[str] = []
    async for key in client.scan_iter(count=500):
        kind = (await client.type(key)).decode()
        if kind == "string":
            out.append(repr(await client.get(key)))
        elif kind == "hash":
            out.append(repr(await client.hgetall(key)))
        elif kind == "list":
            out.append(repr(await client.lrange(key, 0, -1)))
        elif kind == "stream":
            out.append(repr(await client.xrange(key)))
        elif kind in ("zset", "set"):
            out.append(
                repr(
                    await client.zrange(key, 0, -1)
                    if kind == "zset"
                    else await client.smembers(key)
                )
            )
    return "\n".join(out)


def test_a_server_whose_metadata_names_another_authorization_server_gets_no_card(
    rig: Rig, browser: Browser
) -> None:
    """A server may not send the user to an authorization server the operator did not
    configure for it (phishing, a mix-up): its protected resource metadata must name
    the provider's issuer. Otherwise the model reads a definite error, no call parks
    and no card (no popup) is shown."""
    chunks = ask(browser, "m-rogue", "rogue")
    assert not [c for c in chunks if c["type"] == "data-parkway-widget"], chunks
    finished = [c for c in chunks if c["type"] == "finish"]
    assert finished and finished[-1].get("finishReason") != "tool-calls", chunks
    errors = [c for c in chunks if c["type"] == "tool-output-error"]
    assert len(errors) == 1, chunks
    assert "not the configured provider 'idp'" in errors[0]["errorText"]
    assert "Parkway will not ask the user to sign in" in said(chunks)
    view = browser.get("/api/chats/m-rogue").json()
    assert not view.get("calls"), view


def test_a_token_for_one_server_is_never_sent_to_another(rig: Rig, browser: Browser) -> None:
    """Tokens are issued for one resource (RFC 8707) and looked up by it: signed in to
    'secure', the user still has to sign in to 'other', whose requests carry no token
    at all, and whose card asks for its own resource."""
    call = parked_call(ask(browser, "m-a", "secure"), "secure__sign_in")
    browser.get(sign_in(browser, "m-a", call))
    assert browser.post("/api/chats/m-a/resume").status_code == 200
    secure_tokens = {b for b in rig.secure.bearers if b}
    assert secure_tokens
    before = len(rig.other.bearers)

    chunks = ask(browser, "m-b", "other")
    other_call = parked_call(chunks, "other__sign_in")  # no whoami offered: no token
    assert rig.other.bearers[before:], "the other server was asked for its challenge"
    assert all(b is None for b in rig.other.bearers[before:])
    start = browser.start("idp", "m-b", other_call)
    query = parse_qs(urlsplit(start.headers["location"]).query)
    assert query["resource"] == [rig.other.url]
    assert not secure_tokens & set(rig.other.bearers)


def test_a_forged_or_replayed_state_is_refused(rig: Rig, browser: Browser) -> None:
    """The MCP card's flow is the connect flow: a state nobody issued is refused before
    any token request, and the callback URL used a second time (a reload, a leaked
    URL) is refused and changes nothing."""
    call = parked_call(ask(browser, "m-replay", "secure"), "secure__sign_in")
    callback = sign_in(browser, "m-replay", call)
    forged = browser.get(callback.replace("state=", "state=forged"))
    assert forged.status_code == 400
    assert outcome_of(browser, "m-replay", call) is None
    assert browser.get(callback).status_code == 200
    settled = outcome_of(browser, "m-replay", call)
    assert settled is not None
    replayed = browser.get(callback)
    assert replayed.status_code == 400
    assert outcome_of(browser, "m-replay", call) == settled
    # and the browser cannot claim the connection itself
    claim = browser.post(
        f"/api/chats/m-replay/calls/{call}",
        json={"outcome": "output", "output": {"connected": True, "connection_id": "x"}},
    )
    assert claim.status_code in (403, 409), claim.text


def test_a_refused_token_parks_the_call_again_and_the_resume_retries_it(
    rig: Rig, browser: Browser
) -> None:
    """A server that stops accepting the user's token (revoked, keys rotated) answers
    the call 401: the call itself parks on a connect card again (no error for the
    model), and once the user signed in again the resume makes that very call with the
    new token."""
    call = parked_call(ask(browser, "m-first", "secure"), "secure__sign_in")
    browser.get(sign_in(browser, "m-first", call))
    first = browser.post("/api/chats/m-first/resume")
    assert "you are alice" in said(sse_chunks(first.text))

    rig.secure.refuse_calls = True
    chunks = ask(browser, "m-again", "secure")
    again = parked_call(chunks, "secure__whoami")  # the tool call parks, not sign_in
    card = browser.call("m-again", again)["widget"]
    assert card["kind"] == "connect"
    assert card["mcpServer"]["tool"] == "whoami"
    rig.secure.refuse_calls = False
    before = len(rig.secure.bearers)
    browser.get(sign_in(browser, "m-again", again, login="alice"))
    resumed = browser.post("/api/chats/m-again/resume")
    assert resumed.status_code == 200, resumed.text
    text = said(sse_chunks(resumed.text))
    assert "you are alice" in text, text
    assert any(b for b in rig.secure.bearers[before:])


def test_a_declined_card_tells_the_model_and_the_server_is_not_called(
    rig: Rig, browser: Browser
) -> None:
    """Not now on the card settles the call declined: the resume does not call the
    server and the model reads that the user did not sign in."""
    call = parked_call(ask(browser, "m-no", "secure"), "secure__sign_in")
    declined = browser.post(
        f"/api/chats/m-no/calls/{call}",
        json={"outcome": "output", "output": {"connected": False, "reason": "declined"}},
    )
    assert declined.status_code == 200, declined.text
    before = len(rig.secure.bearers)
    resumed = browser.post("/api/chats/m-no/resume")
    text = said(sse_chunks(resumed.text))
    assert "did not sign in to MCP server 'secure' (declined)" in text, text
    assert not any(rig.secure.bearers[before:])


def test_a_worker_killed_after_parking_leaves_the_sign_in_to_another(
    rig: Rig, browser: Browser, tmp_path: Path
) -> None:
    """Nothing of the sign-in lives in a worker's memory: `parkway serve` parks the call
    and is killed with SIGKILL; a new process on the same Redis takes the provider's
    callback, settles the call, and its resume reads the token from Redis (decrypted
    there) and calls the server with it."""
    del browser  # the fixture's clean database; this test's browser talks to processes
    agent = {
        "template": {**rig.agent["template"], "mcps": rig.agent["template"]["mcps"][:1]},
        "model": {"scripted": {"turns": [
            [{"tool_call": {"name": "secure__sign_in", "input": {}}}],
            [{"tool_call": {"name": "secure__whoami", "input": {}}}],
            [{"text": "done"}],
        ]}},
    }  # fmt: skip
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps(agent))
    env = {"PARKWAY_OAUTH_PROVIDERS": rig.providers, "PARKWAY_TOKEN_KEY": TOKEN_KEY}
    redis_url = rig.server.settings.redis_url or ""
    first = ParkwayProcess(redis_url, agent_file, port=rig.spare_port, env=env).start()
    user = Browser(first.base_url).login()
    try:
        call = parked_call(ask(user, "m-kill", "secure"), "secure__sign_in")
        callback = sign_in(user, "m-kill", call, login="bob")
    finally:
        first.kill()
    second = ParkwayProcess(redis_url, agent_file, port=rig.spare_port, env=env).start()
    try:
        assert user.get(callback).status_code == 200
        resumed = user.post("/api/chats/m-kill/resume")
    finally:
        second.stop()
        user.close()
    assert resumed.status_code == 200, resumed.text
    outputs = [c for c in sse_chunks(resumed.text) if c["type"] == "tool-output-available"]
    assert any("you are bob" in json.dumps(c["output"]) for c in outputs), resumed.text


def test_an_expired_token_is_refreshed_for_the_same_resource(rig: Rig, browser: Browser) -> None:
    """A connection whose access token has expired is refreshed (once, under the
    connection's lock) with the server's URL as the resource again: the server accepts
    the new token (its audience is still the server) and the user is not asked to sign
    in again."""
    call = parked_call(ask(browser, "m-r1", "secure"), "secure__sign_in")
    browser.get(sign_in(browser, "m-r1", call))
    assert "you are alice" in said(sse_chunks(browser.post("/api/chats/m-r1/resume").text))
    (listed,) = browser.get("/api/connections?provider=idp").json()["connections"]
    assert listed["resource"] == rig.secure.url
    assert "token" not in json.dumps(listed).lower()
    old = str(stored_connection(rig, browser, listed["id"])["access_token"])
    rewrite_tokens(rig, browser, listed["id"], expires_at=time.time() - 3600)
    rig.peer.reset_stats()
    before = len(rig.secure.bearers)
    chunks = ask(browser, "m-r2", "secure")
    assert "you are alice" in json.dumps(chunks), chunks
    assert rig.peer.stats()["token_requests"].get("refresh_token") == 1
    sent = {b for b in rig.secure.bearers[before:] if b}
    assert sent
    assert old not in sent


def stored_connection(rig: Rig, browser: Browser, connection_id: str) -> dict[str, Any]:
    """A stored connection's tokens, decrypted as the store does (tests only)."""
    key = connection_key(browser.principal, connection_id)

    async def work(client: Redis) -> dict[str, Any]:
        return stored_tokens(await client.hgetall(key), browser.principal, connection_id)

    return dict(asyncio.run(_dump_with(rig, work)))


def rewrite_tokens(rig: Rig, browser: Browser, connection_id: str, **changes: Any) -> None:
    """Change a stored connection's sealed tokens (tests only)."""
    key = connection_key(browser.principal, connection_id)

    async def work(client: Redis) -> None:
        tokens = stored_tokens(await client.hgetall(key), browser.principal, connection_id)
        tokens.update(changes)
        digest = hashlib.sha256(browser.principal.encode()).hexdigest()[:32]
        context = f"parkway.connection.v1|{digest}|{connection_id}"
        sealed = TokenCipher.from_setting(TOKEN_KEY).seal(json.dumps(tokens).encode(), context)
        await client.hset(key, "tokens", sealed)

    asyncio.run(_dump_with(rig, work))


def test_a_refused_refresh_asks_the_user_to_sign_in_again(rig: Rig, browser: Browser) -> None:
    """A refresh the provider refuses (invalid_grant) marks the connection as needing a
    reconnect, with no retry loop: the next step offers the sign-in tool again, whose
    card parks, and the expired token is never sent."""
    call = parked_call(ask(browser, "m-g1", "secure"), "secure__sign_in")
    browser.get(sign_in(browser, "m-g1", call))
    browser.post("/api/chats/m-g1/resume")
    (listed,) = browser.get("/api/connections?provider=idp").json()["connections"]
    rewrite_tokens(rig, browser, listed["id"], expires_at=time.time() - 3600,
                   refresh_token="not-a-refresh-token")  # fmt: skip
    rig.peer.reset_stats()
    again = parked_call(ask(browser, "m-g2", "secure"), "secure__sign_in")
    assert rig.peer.stats()["token_requests"].get("refresh_token") == 1
    (after,) = browser.get("/api/connections?provider=idp").json()["connections"]
    assert after["status"] == "needs_reconnect"
    assert browser.call("m-g2", again)["widget"]["kind"] == "connect"


def test_two_users_each_reach_the_server_as_themselves(rig: Rig, browser: Browser) -> None:
    """Sessions are per (server, connection): two users signed in to one server on one
    worker each call it with their own token, never the other's."""
    call = parked_call(ask(browser, "m-alice", "secure"), "secure__sign_in")
    browser.get(sign_in(browser, "m-alice", call, login="alice"))
    browser.post("/api/chats/m-alice/resume")
    bob = Browser(rig.base_url).login()
    try:
        call = parked_call(ask(bob, "m-bob", "secure"), "secure__sign_in")
        bob.get(sign_in(bob, "m-bob", call, login="bob"))
        assert "you are bob" in said(sse_chunks(bob.post("/api/chats/m-bob/resume").text))
        again = ask(browser, "m-alice-2", "secure")
        assert "you are alice" in json.dumps(again), again
        assert "you are bob" not in json.dumps(again)
        later = ask(bob, "m-bob-2", "secure")
        assert "you are bob" in json.dumps(later), later
    finally:
        bob.close()


def test_the_connection_store_reaches_server_tools_and_mcp_sessions(rig: Rig) -> None:
    """The connect flow starts after the runner is built and hands it the connection
    store: both server tools (``ctx.access_token``) and the MCP sessions must get it."""
    app = rig.server.app
    store = app.state.oauth.connections
    assert app.state.runner.credentials is store
    assert app.state.runner.executor.credentials is store
    assert app.state.runner.mcp.credentials is store


def test_over_ag_ui_the_card_is_a_connection_interrupt_and_the_resume_calls_the_server(
    rig: Rig, browser: Browser
) -> None:
    """The same round trip on the AG-UI wire: the run ends with one `connection`
    interrupt whose widget names the server's host; after the sign-in, a run resuming
    the interrupt gets the server's answer, and no token is on the wire."""
    first = browser.post("/api/agui", json={
        **agui_body("m-agui"),
        "messages": [{"id": "u1", "role": "user", "content": "whoami on secure"}],
    })  # fmt: skip
    assert first.status_code == 200, first.text
    [interrupt] = outcome(agui_events(first.text))["interrupts"]
    assert interrupt["reason"] == "connection"
    widget = interrupt["metadata"]["parkway"]["widget"]
    assert widget["mcpServer"]["host"] == "127.0.0.1"
    start = browser.get(widget["startUrl"])
    assert start.status_code == 303, start.text
    assert (
        browser.get(login_and_consent(browser.http, start.headers["location"])).status_code == 200
    )
    before = len(rig.secure.bearers)
    second = browser.post("/api/agui", json={
        **agui_body("m-agui"), "runId": "r-m-agui-2",
        "resume": [{"interruptId": interrupt["id"], "status": "resolved"}],
    })  # fmt: skip
    assert second.status_code == 200, second.text
    events = agui_events(second.text)
    assert outcome(events) == {"type": "success"}
    assert "you are alice" in json.dumps(events)
    tokens = {b for b in rig.secure.bearers[before:] if b}
    assert tokens
    for token in tokens:
        assert token not in first.text
        assert token not in second.text


def test_readyz_probes_servers_that_need_oauth_without_a_token(rig: Rig, redis_url: str) -> None:
    """/readyz cannot list such a server's tools (each user's token lists them), so it
    opens a session with no token: the server's 401 says it is there. One that does not
    answer is named unreachable, as any server is, with no address in the reason."""
    response = httpx.get(f"{rig.base_url}/readyz", timeout=30)
    down = f"http://127.0.0.1:{free_port()}/mcp"
    agent = {**rig.agent, "template": {**rig.agent["template"], "mcps": [
        {"name": "gone", "url": down, "auth": {"provider": "idp"}}]}}  # fmt: skip
    with server_thread(redis_url, agent, oauth_providers=rig.providers,
                       token_key=SecretStr(TOKEN_KEY)) as other:  # fmt: skip
        gone = httpx.get(f"{other.base_url}/readyz", timeout=30)
    servers = response.json()["checks"]["mcp"]["servers"]
    assert servers == [
        {"name": name, "transport": "http", "reachable": True}
        for name in ("secure", "other", "rogue")
    ]
    check = gone.json()["checks"]["mcp"]
    assert check["servers"] == [
        {"name": "gone", "transport": "http", "reachable": False, "reason": "connection refused"}
    ]
    assert check["degraded"] is True and down not in gone.text
    assert gone.status_code == 200
