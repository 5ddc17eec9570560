"""OAuth helpers for the connection tests: real token sets from the loopback provider
(``tests/oidc_peer.py``), the provider's own endpoints for checks (revocation,
introspection, userinfo), and a tiny loopback HTTP server that plays a broken provider.

The token set comes from a real authorization code + PKCE flow driven by authlib's sync
``OAuth2Client``; the user's part is :func:`tests.oidc_peer.login_and_consent`. The
redirect URI points at a loopback port nobody listens on: the redirect is never followed,
the code is read from it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import httpx2
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import OAuth2Client

from tests.oidc_peer import OidcPeer, login_and_consent
from tests.support import free_port

__all__ = [
    "REDIRECT_URI",
    "Clock",
    "LoopbackServer",
    "fetch_json",
    "introspect_active",
    "json_reply",
    "obtain_token",
    "refresh_directly",
    "registration",
    "revoke",
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
    """The ``fetch`` that :func:`widgets_api.providers.discover` takes (404 means absent)."""
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
