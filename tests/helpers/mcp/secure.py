"""An MCP server that needs OAuth (the official SDK's ``MCPServer`` with its own
authorization settings), served over streamable HTTP on loopback.

It is a resource server of the suite's oidc-provider (``tests/helpers/oidc``, started with
``--resource`` naming this server's URL): a request without a valid bearer token gets 401
with ``WWW-Authenticate: Bearer resource_metadata=...`` (the SDK's
``RequireAuthMiddleware``), its protected resource metadata (RFC 9728) names the
authorization server, and a token is valid when it is a JWT signed with the provider's
key (its JWKS), issued by it, and for this server (``aud`` is the server's URL, RFC 8707).

``authorization_server`` makes the metadata name another authorization server than the
one whose tokens it accepts (a server pointing Parkway at an issuer it was not configured
with). Tools: ``whoami()`` (read-only: the token's subject) and ``lookup(sku)``
(read-only). ``bearers`` lists the bearer token of every request, as received. While
``refuse_calls`` is set, every ``tools/call`` is answered 401 with the server's challenge
(a server that stopped accepting the tokens it had: revoked, or its keys rotated).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import uvicorn
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from tests.helpers.support import free_port

__all__ = ["SecureServerThread"]


class _JwtVerifier:
    """The SDK's ``TokenVerifier``: a JWT of ``issuer`` for ``audience``."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer = issuer
        self.audience = audience
        jwks = httpx.get(f"{issuer}/jwks", timeout=10).raise_for_status().json()
        self.keys = KeySet.import_key_set(jwks)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            decoded = jwt.decode(token, self.keys)
            jwt.JWTClaimsRegistry(
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.audience},
                exp={"essential": True},
            ).validate(decoded.claims)
        except (JoseError, ValueError):
            return None
        claims = decoded.claims
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=str(claims.get("sub", "")),
        )


class SecureServerThread:
    """The server (see the module doc) on a free loopback port, in a thread."""

    def __init__(
        self,
        issuer: str,
        *,
        port: int | None = None,
        name: str = "secure",
        authorization_server: str | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.bearers: list[str | None] = []
        self.refuse_calls = False
        self.challenge = (
            'Bearer error="invalid_token", resource_metadata="'
            f'http://127.0.0.1:{self.port}/.well-known/oauth-protected-resource/mcp"'
        )
        app: MCPServer[Any] = MCPServer(
            name,
            log_level="WARNING",
            auth=AuthSettings(
                issuer_url=authorization_server or issuer,
                resource_server_url=self.url,
                validate_token_resource=True,
            ),
            token_verifier=_JwtVerifier(issuer, self.url),
        )

        @app.tool(annotations=ToolAnnotations(read_only_hint=True))
        def whoami() -> str:
            """The signed-in user's subject."""
            token = get_access_token()
            return f"you are {token.subject if token else '(nobody)'}"

        @app.tool(annotations=ToolAnnotations(read_only_hint=True))
        def lookup(sku: str) -> str:
            """How many of an article are in stock."""
            return f"{sku}: {len(sku)} in stock"

        config = uvicorn.Config(
            self._noting(app.streamable_http_app()),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def _noting(self, app: Any) -> Any:
        async def noting(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            found = dict(scope["headers"]).get(b"authorization")
            value = None if found is None else found.decode()
            self.bearers.append(value.removeprefix("Bearer ") if value else None)
            if not (self.refuse_calls and scope["method"] == "POST"):
                await app(scope, receive, send)
                return
            body = b""
            while True:  # read the request to see its method, then hand it on
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            try:
                method = json.loads(body).get("method")
            except (ValueError, AttributeError):
                method = None
            if method == "tools/call":
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"www-authenticate", self.challenge.encode()),
                    (b"content-type", b"application/json"),
                ]})  # fmt: skip
                await send({"type": "http.response.body", "body": b'{"error":"invalid_token"}'})
                return
            sent = False

            async def replay() -> Any:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await app(scope, replay, send)

        return noting

    def start(self) -> SecureServerThread:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("secure MCP test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    def __enter__(self) -> SecureServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
