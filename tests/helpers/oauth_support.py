"""OAuth helpers for the connection tests: real token sets from the loopback provider
(``tests/helpers/oidc_peer.py``), the provider's own endpoints for checks (revocation,
introspection, userinfo), a tiny loopback HTTP server that plays a broken provider, and
what the connection store's tests share (providers, token sets, a Redis dump), and the
built-in demo provider served on a real uvicorn (:class:`DemoProviderServer`).

The token set comes from a real authorization code + PKCE flow driven by authlib's sync
``OAuth2Client``; the user's part is :func:`tests.helpers.oidc_peer.login_and_consent`. The
redirect URI points at a loopback port nobody listens on: the redirect is never followed,
the code is read from it.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
import uvicorn
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import OAuth2Client
from redis.asyncio import Redis
from starlette.applications import Starlette

from parkway.widgets_api.connect.connections import ConnectionStore
from parkway.widgets_api.connect.providers import (
    Provider,
    ProviderRegistry,
    ProviderSpec,
    build_provider,
    load_providers,
)
from parkway.widgets_api.demo_provider import DemoProvider
from tests.helpers.oidc_peer import OidcPeer, login_and_consent
from tests.helpers.support import free_port

__all__ = [
    "ALICE",
    "BOB",
    "DEMO_CLIENT_ID",
    "DEMO_REDIRECT",
    "DEMO_SECRET",
    "DEMO_TTL",
    "REDIRECT_URI",
    "REG",
    "SCOPE",
    "SECRET",
    "Clock",
    "DemoProviderServer",
    "LoopbackServer",
    "consent_id",
    "fake_token",
    "fetch_json",
    "introspect_active",
    "json_reply",
    "location_params",
    "needs_node",
    "obtain_token",
    "offline_provider",
    "peer_registry",
    "redis_dump",
    "refresh_directly",
    "registration",
    "revoke",
    "save_real",
    "serve_demo_provider",
    "userinfo_status",
]

REDIRECT_URI = f"http://127.0.0.1:{free_port()}/cb"
HTTP_TIMEOUT_S = 10.0


def registration(client_id: str = "parkway", secret: str = "parkway-secret") -> dict[str, Any]:
    """A client for :meth:`OidcPeer.start`, registered with :data:`REDIRECT_URI`."""
    return {"client_id": client_id, "client_secret": secret, "redirect_uris": [REDIRECT_URI]}


def _client(reg: Mapping[str, Any], scope: str | None = None) -> OAuth2Client:
    return OAuth2Client(
        client_id=reg["client_id"],
        client_secret=reg["client_secret"],
        scope=scope,
        redirect_uri=REDIRECT_URI,
        code_challenge_method="S256",
        timeout=HTTP_TIMEOUT_S,
    )


def obtain_token(
    peer: OidcPeer, reg: Mapping[str, Any], *, scope: str, login: str = "alice"
) -> dict[str, Any]:
    """A real token set: authorization code + PKCE, the user ``login`` consenting."""
    verifier = generate_token(48)
    with _client(reg, scope) as client, httpx.Client(timeout=HTTP_TIMEOUT_S) as browser:
        url, state = client.create_authorization_url(f"{peer.issuer}/auth", code_verifier=verifier)
        callback = login_and_consent(browser, url, login=login)
        token = client.fetch_token(
            f"{peer.issuer}/token",
            authorization_response=callback,
            code_verifier=verifier,
            state=state,
        )
    return dict(token)


def refresh_directly(peer: OidcPeer, reg: Mapping[str, Any], refresh_token: str) -> dict[str, Any]:
    """Refresh behind Parkway's back (rotates the refresh token at the provider)."""
    with _client(reg) as client:
        return dict(client.refresh_token(f"{peer.issuer}/token", refresh_token=refresh_token))


def revoke(peer: OidcPeer, reg: Mapping[str, Any], token: str, hint: str) -> None:
    with _client(reg) as client:
        response = client.revoke_token(
            f"{peer.issuer}/token/revocation", token=token, token_type_hint=hint
        )
    response.raise_for_status()


def introspect_active(peer: OidcPeer, reg: Mapping[str, Any], token: str) -> bool:
    """Whether the provider still considers ``token`` live."""
    with _client(reg) as client:
        answer = client.introspect_token(f"{peer.issuer}/token/introspection", token=token)
    answer.raise_for_status()
    return bool(answer.json().get("active"))


def userinfo_status(peer: OidcPeer, access_token: str) -> int:
    """The status the provider's userinfo endpoint answers for ``access_token``."""
    response = httpx.get(
        f"{peer.issuer}/me",
        headers={"authorization": f"Bearer {access_token}"},
        timeout=HTTP_TIMEOUT_S,
    )
    return response.status_code


async def fetch_json(url: str) -> Any:
    """The ``fetch`` that :func:`parkway.widgets_api.connect.providers.discover` takes (404 means absent)."""
    async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT_S, follow_redirects=False) as client:
        response = await client.get(url, headers={"accept": "application/json"})
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return response.json()


class Clock:
    """An injectable clock: starts at the real time, moves only when told."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


Reply = tuple[int, str, bytes]  # status, content type, body


@dataclass
class LoopbackServer:
    """A tiny HTTP server on 127.0.0.1 whose answer is ``respond(method, path)``.

    ``received`` is set when a request arrives; when ``gate`` is given, the answer waits
    until it is set (so a test can act while a request is in flight, without timing).
    """

    respond: Callable[[str, str], Reply]
    gate: threading.Event | None = None
    requests: list[tuple[str, str]] = field(default_factory=list)
    received: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    @contextlib.contextmanager
    def running(self) -> Iterator[LoopbackServer]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                owner.requests.append((self.command, self.path))
                owner.received.set()
                if owner.gate is not None:
                    owner.gate.wait(HTTP_TIMEOUT_S * 3)
                status, content_type, body = owner.respond(self.command, self.path)
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self
        finally:
            if self.gate is not None:
                self.gate.set()
            server.shutdown()
            server.server_close()
            thread.join(HTTP_TIMEOUT_S)


def json_reply(data: Any, status: int = 200) -> Reply:
    return status, "application/json", json.dumps(data).encode()


# -- what the connection store's tests share ---------------------------------------------

NODE_MISSING = shutil.which("node") is None


def needs_node(test: Callable[..., Any]) -> Callable[..., Any]:
    """Runs against the oidc-provider peer: skipped only when ``node`` is missing."""
    marked = pytest.mark.skipif(NODE_MISSING, reason="the `node` executable is not on PATH")(test)
    return pytest.mark.node(marked)


REG = registration()
SCOPE = "openid offline_access profile repo"
ALICE = "user:alice"
BOB = "user:bob"
SECRET = "acme-client-secret-never-shown"  # the offline provider's client secret


async def peer_registry(peer: OidcPeer) -> ProviderRegistry:
    """The provider ``acme`` as discovered from the running peer (client :data:`REG`)."""
    spec = ProviderSpec(
        name="acme",
        issuer=peer.issuer,
        client_id=REG["client_id"],
        client_secret=REG["client_secret"],
        scopes=SCOPE.split(),
    )
    return await load_providers([spec], fetch=fetch_json, environ={})


def offline_provider(
    token_endpoint: str = "https://id.acme.example/token", **extra: Any
) -> Provider:
    """A provider with explicit endpoints and no revocation endpoint (nothing fetched)."""
    spec = ProviderSpec(
        name="acme",
        authorization_endpoint="https://id.acme.example/authorize",
        token_endpoint=token_endpoint,
        client_id="acme-client",
        client_secret=SECRET,
        scopes=["profile"],
        **extra,
    )
    return build_provider(spec, metadata=None, environ={})


def fake_token(expires_in: int = 3600) -> dict[str, Any]:
    return {
        "access_token": f"at-{secrets.token_urlsafe(24)}",
        "refresh_token": f"rt-{secrets.token_urlsafe(24)}",
        "token_type": "Bearer",
        "expires_in": expires_in,
    }


async def redis_dump(redis: Redis) -> dict[bytes, Any]:
    """Every key and its whole value (hashes, sets, strings) and TTL presence."""
    out: dict[bytes, Any] = {}
    async for key in redis.scan_iter(count=1000):
        kind = (await redis.type(key)).decode()
        if kind == "hash":
            out[key] = await redis.hgetall(key)
        elif kind == "set":
            out[key] = await redis.smembers(key)
        elif kind == "string":
            out[key] = await redis.get(key)
        else:
            out[key] = kind
    return out


async def save_real(
    store: ConnectionStore, peer: OidcPeer, *, login: str = "alice", principal: str = ALICE
) -> tuple[str, dict[str, Any]]:
    """A real grant of ``login`` at ``peer``, stored for ``principal``: the connection id
    and the token set the provider issued."""
    token = obtain_token(peer, REG, scope=SCOPE, login=login)
    provider = store.providers.get("acme")
    assert provider is not None
    connection = await store.save(
        principal,
        provider,
        token,
        account=login,
        subject=login,
        scopes=str(token["scope"]).split(),
    )
    return connection.id, token


# -- the built-in demo provider (tests/widgets_api/demo_provider/) ---------------------------

DEMO_CLIENT_ID = "parkway-demo"
DEMO_SECRET = "s3cret-" + "x" * 24
DEMO_REDIRECT = "http://127.0.0.1:9/connect/demo/callback"
DEMO_TTL = 3600  # its access tokens' lifetime


class DemoProviderServer:
    """A :class:`DemoProvider` on a real uvicorn in a background thread, with the
    client's and the browser's steps against it."""

    def __init__(self, redis_url: str, clock: Clock, client_id: str = DEMO_CLIENT_ID) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.issuer = f"{self.base}/demo-oauth"
        self.provider = DemoProvider(
            redis_url=redis_url,
            issuer=self.issuer,
            client_id=client_id,
            client_secret=DEMO_SECRET,
            redirect_uris=[DEMO_REDIRECT],
            access_token_ttl_s=DEMO_TTL,
            clock=clock,
        )
        self.meta = self.provider.metadata()
        app = Starlette(routes=self.provider.routes())
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.clock = clock
        self.clients: list[OAuth2Client] = []

    def start(self) -> DemoProviderServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.provider.close()
        for client in self.clients:
            client.close()

    def client(self, scope: str = "profile repo") -> OAuth2Client:
        client = OAuth2Client(
            DEMO_CLIENT_ID,
            DEMO_SECRET,
            scope=scope,
            redirect_uri=DEMO_REDIRECT,
            code_challenge_method="S256",
            token_endpoint=self.meta["token_endpoint"],
            transport=httpx2.HTTPTransport(),
            timeout=10,
        )
        self.clients.append(client)
        return client

    def consent_page(self, browser: httpx.Client, **params: str) -> httpx.Response:
        return browser.get(self.meta["authorization_endpoint"], params=params)

    def start_flow(self, browser: httpx.Client, client: OAuth2Client) -> tuple[str, str, str]:
        """Open the consent page as a client would send the browser there: returns the
        page's consent id, the state and the PKCE verifier."""
        verifier = secrets.token_urlsafe(48)
        url, state = client.create_authorization_url(
            self.meta["authorization_endpoint"], code_verifier=verifier
        )
        page = browser.get(url)
        assert page.status_code == 200, page.text
        return consent_id(page), state, verifier

    def decide(
        self,
        browser: httpx.Client,
        consent: str,
        decision: str = "allow",
        account: str = "demo-user",
    ) -> httpx.Response:
        form = {"consent": consent, "account": account, "decision": decision}
        return browser.post(self.meta["authorization_endpoint"], data=form)

    def connect(
        self, browser: httpx.Client, client: OAuth2Client, account: str = "demo-user"
    ) -> dict[str, Any]:
        """The whole flow, Allow included: returns the token response."""
        consent, state, verifier = self.start_flow(browser, client)
        answer = self.decide(browser, consent, account=account)
        assert answer.status_code == 303, answer.text
        return dict(
            client.fetch_token(
                self.meta["token_endpoint"],
                authorization_response=answer.headers["location"],
                code_verifier=verifier,
                state=state,
            )
        )

    def userinfo(self, access_token: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {access_token}"}
        return httpx.get(self.meta["userinfo_endpoint"], headers=headers)

    def refresh(self, refresh_token: str, **extra: str) -> httpx.Response:
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token, **extra}
        return httpx.post(
            self.meta["token_endpoint"], data=data, auth=(DEMO_CLIENT_ID, DEMO_SECRET)
        )


def consent_id(page: httpx.Response) -> str:
    """The consent form's id on the provider's consent page."""
    found = re.search(r'name="consent" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def location_params(location: str) -> dict[str, str]:
    """The query parameters of a redirect's ``location``."""
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


@contextlib.contextmanager
def serve_demo_provider(
    redis_url: str, clock: Clock | None = None, **kwargs: Any
) -> Iterator[DemoProviderServer]:
    provider = DemoProviderServer(redis_url, clock or Clock(), **kwargs).start()
    try:
        yield provider
    finally:
        provider.stop()
