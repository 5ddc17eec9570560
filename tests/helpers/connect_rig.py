"""A connect-flow test rig: a real Parkway (uvicorn) configured with OAuth providers
against a real oidc-provider on loopback, a broken token endpoint on loopback, and a
"browser" (an httpx client keeping cookies for every host, never following redirects);
with the steps and checks the connect tests share.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from pydantic import SecretStr
from redis.asyncio import Redis

from parkway.runner.canonical import canonical_json
from parkway.runner.llm.model import ModelEvent, ModelRequest, ModelTextDelta, ModelToolCall
from parkway.runner.llm.scripted import last_tool_results, last_user_text
from parkway.widgets_api.connect.cipher import TokenCipher, generate_token_key
from parkway.widgets_api.keys import ConnectionKeys
from tests.helpers.oidc_peer import OidcPeer, login_and_consent
from tests.helpers.support import CONNECT_EMBED, ServerThread, free_port, sse_chunks, user_message

TOKEN_KEY = generate_token_key()
ACME_SECRET = "acme-client-secret-" + "z" * 24
OTHER_SECRET = "other-client-secret-" + "y" * 24
BROKEN_SECRET = "broken-client-secret-" + "w" * 24


class RecordingModel:
    """A scripted model for connect tests, keeping every request (the model's input).

    The first step of a chat asks for a connection with each provider the user's
    message names ("connect me to acme", "connect me to acme and other"); the next one
    states the results.
    """

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if request.call_index == 0:
            # "connect me to acme", or "connect me to acme and other": one call each,
            # in one step
            named = last_user_text(request).rsplit(" to ", 1)[-1]
            for provider in named.split(" and "):
                tool_input: dict[str, Any] = {"provider": provider.strip()}
                if provider.strip() == "acme":
                    tool_input["scopes"] = ["repo"]
                yield ModelToolCall(name="request_connection", input=tool_input)
            return
        text = "Connection result: " + canonical_json(last_tool_results(request))
        yield ModelTextDelta(text)

    def seen(self) -> str:
        return "\n".join(repr(r) for r in self.requests)


class BrokenTokenServer:
    """An authorization server whose authorize step answers at once with a code and
    whose token endpoint fails in the way ``mode`` says: ``error_json`` (400 invalid_grant),
    ``http_500``, ``timeout`` (answers after 3 s), ``non_json`` (200 with an HTML body)."""

    SECRET_BODY = "broken-server-body-must-not-be-logged"

    def __init__(self) -> None:
        self.mode = "error_json"
        self.token_requests = 0
        rig = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                target = (
                    query["redirect_uri"][0]
                    + "?"
                    + urlencode({"code": "broken-code", "state": query["state"][0]})
                )
                self.send_response(302)
                self.send_header("location", target)
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                self.rfile.read(length)
                rig.token_requests += 1
                mode = rig.mode
                if mode == "timeout":
                    time.sleep(3)
                if mode == "error_json":
                    self._answer(400, "application/json", json.dumps({"error": "invalid_grant"}))
                elif mode == "http_500":
                    self._answer(500, "text/plain", rig.SECRET_BODY)
                else:
                    self._answer(200, "text/html", f"<html>{rig.SECRET_BODY}</html>")

            def _answer(self, status: int, kind: str, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


CONNECT_AGENT: dict[str, Any] = {
    "template": {"instructions": "connect agent", "tools": [CONNECT_EMBED]},
    "model": {"scripted": {"turns": []}},
}


def providers_config(port: int, peer: OidcPeer, broken: BrokenTokenServer) -> str:
    del port
    return json.dumps(
        [
            {
                "name": "acme",
                "display_name": "Acme",
                "issuer": peer.issuer,
                "client_id": "parkway",
                "client_secret": ACME_SECRET,
                "scopes": ["openid", "profile", "offline_access"],
                "allowed_scopes": ["repo", "read:org"],
            },
            {
                "name": "other",
                "issuer": peer.issuer,
                "client_id": "other",
                "client_secret": OTHER_SECRET,
                "scopes": ["openid", "profile"],
            },
            {
                "name": "wrongsecret",
                "issuer": peer.issuer,
                "client_id": "parkway",
                "client_secret": "not-the-secret-" + "q" * 24,
                "scopes": ["openid"],
            },
            {
                "name": "broken",
                "discovery": False,
                "authorization_endpoint": f"{broken.url}/authorize",
                "token_endpoint": f"{broken.url}/token",
                "client_id": "broken",
                "client_secret": BROKEN_SECRET,
                "scopes": ["profile"],
            },
        ]
    )


def peer_clients(port: int) -> list[dict[str, Any]]:
    base = f"http://127.0.0.1:{port}"
    return [
        {
            "client_id": "parkway",
            "client_secret": ACME_SECRET,
            "redirect_uris": [
                f"{base}/connect/acme/callback",
                f"{base}/connect/wrongsecret/callback",
            ],
        },
        {
            "client_id": "other",
            "client_secret": OTHER_SECRET,
            "redirect_uris": [f"{base}/connect/other/callback"],
        },
    ]


@dataclass
class Browser:
    """One user's browser: a session cookie for Parkway, cookies for the provider."""

    base_url: str
    http: httpx.Client = field(init=False)
    principal: str = ""
    seen: list[str] = field(default_factory=list)  # every response body it received

    def __post_init__(self) -> None:
        self.http = httpx.Client(timeout=30, follow_redirects=False)

    def login(self) -> Browser:
        response = self.post("/api/sessions")
        assert response.status_code == 201, response.text
        self.principal = response.json()["principal"]
        return self

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        full = url if url.startswith("http") else self.base_url + url
        response = self.http.get(full, **kwargs)
        self.seen.append(response.text)
        return response

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        response = self.http.post(self.base_url + url, **kwargs)
        self.seen.append(response.text)
        return response

    def park(self, chat_id: str, provider: str = "acme") -> str:
        """Start a chat whose first step asks for a connection; the parked call's id."""
        body = {
            "id": chat_id,
            "messages": [user_message(f"connect me to {provider}")],
            "trigger": "submit-message",
        }
        response = self.post("/api/chat", json=body)
        assert response.status_code == 200, response.text
        calls = [c for c in sse_chunks(response.text) if c["type"] == "tool-input-available"]
        assert len(calls) == 1, response.text
        return str(calls[0]["toolCallId"])

    def start(
        self, provider: str, chat_id: str, call_id: str, **extra: str | None
    ) -> httpx.Response:
        """GET the start link as the widget opens it: with a fresh start token from the
        call's descriptor (when this browser can read the call), unless ``token`` is
        given (``token=None``: none at all)."""
        params: dict[str, str | None] = {"chat": chat_id, "call": call_id}
        params["token"] = self.start_token(chat_id, call_id)
        params.update(extra)
        query = urlencode({k: v for k, v in params.items() if v is not None})
        return self.get(f"/connect/{provider}/start?{query}")

    def start_token(self, chat_id: str, call_id: str) -> str | None:
        """The start token of a fresh descriptor of the call, or None when this browser
        cannot read the call (or its widget has none)."""
        view = self.http.get(f"{self.base_url}/api/chats/{chat_id}/calls/{call_id}")
        if view.status_code != 200:
            return None
        start_url = (view.json().get("widget") or {}).get("startUrl") or ""
        tokens = parse_qs(urlsplit(start_url).query).get("token")
        return tokens[0] if tokens else None

    def call(self, chat_id: str, call_id: str) -> dict[str, Any]:
        response = self.get(f"/api/chats/{chat_id}/calls/{call_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def close(self) -> None:
        self.http.close()


def page_data(response: httpx.Response) -> dict[str, Any]:
    """The callback page's data block: the message it posts and its target origin."""
    found = re.search(
        r'<script type="application/json" id="pw-result">(.*?)</script>', response.text, re.S
    )
    assert found, response.text
    return dict(json.loads(found.group(1)))


def with_param(url: str, **changes: str | None) -> str:
    """``url`` with query parameters replaced (``None`` removes one)."""
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    for key, value in changes.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    return parts._replace(query=urlencode(query)).geturl()


def stored_tokens(raw: dict[bytes, bytes], principal: str, connection_id: str) -> dict[str, Any]:
    """Decrypt a connection record's tokens the way the store does (tests only)."""
    digest = hashlib.sha256(principal.encode()).hexdigest()[:32]
    context = f"parkway.connection.v1|{digest}|{connection_id}"
    opened = TokenCipher.from_setting(TOKEN_KEY).open(raw[b"tokens"].decode(), context)
    return dict(json.loads(opened))


def connection_key(principal: str, connection_id: str) -> str:
    digest = hashlib.sha256(principal.encode()).hexdigest()[:32]
    return ConnectionKeys(digest).connection(connection_id)


@dataclass
class Rig:
    server: ServerThread
    peer: OidcPeer
    broken: BrokenTokenServer
    model: RecordingModel

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def browser(self) -> Browser:
        return Browser(self.base_url).login()


def start_rig(redis_url: str, peer_factory: Any, **settings: Any) -> Iterator[Rig]:
    port = free_port()
    broken = BrokenTokenServer()
    with peer_factory(peer_clients(port)) as peer:
        model = RecordingModel()
        server = ServerThread(
            redis_url,
            CONNECT_AGENT,
            model=model,
            port=port,
            oauth_providers=providers_config(port, peer, broken),
            token_key=SecretStr(TOKEN_KEY),
            oauth_http_timeout_s=1.0,
            **settings,
        ).start()
        try:
            yield Rig(server, peer, broken, model)
        finally:
            server.stop()
            broken.stop()


def signed_in(rig: Rig) -> Iterator[Browser]:
    """A signed-in browser for one test, the provider's and the broken server's counters
    reset first (what each connect test module's ``browser`` fixture yields)."""
    rig.peer.reset_stats()
    rig.broken.mode = "error_json"
    rig.broken.token_requests = 0
    user = rig.browser()
    try:
        yield user
    finally:
        user.close()


def code_requests(rig: Rig) -> int:
    """How many authorization codes the provider was asked to redeem."""
    return int(rig.peer.stats()["token_requests"].get("authorization_code", 0))


def authorize(browser: Browser, start: Any, decision: str = "allow") -> str:
    """Sign in and decide at the provider a start redirected to: the callback URL."""
    assert start.status_code == 303, start.text
    return login_and_consent(browser.http, start.headers["location"], decision=decision)  # type: ignore[arg-type]


def outcome_of(browser: Browser, chat: str, call: str) -> dict[str, Any] | None:
    found = browser.call(chat, call).get("outcome")
    return None if found is None else dict(found)


def on_redis(rig: Rig, work: Any) -> Any:
    """Run ``work(client)`` with a client of its own (sync tests have no loop)."""

    async def run() -> Any:
        client = Redis.from_url(rig.server.settings.redis_url or "")
        try:
            return await work(client)
        finally:
            await client.aclose()

    return asyncio.run(run())
