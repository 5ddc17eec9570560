"""MCP servers that need OAuth: the server's challenge checked, the call parked on a
connect card, and the user's token sent to that server only (docs/mcp.md, "Servers that
need OAuth").

An entry with ``auth: {"provider": ...}`` names a configured connect provider. When the
server answers 401 (``WWW-Authenticate: Bearer resource_metadata=...``, the MCP
authorization spec), :func:`check_challenge` reads its protected resource metadata (RFC
9728) from the server's own origin, and requires that its ``resource`` is the server's
canonical URL and that its ``authorization_servers`` name the configured provider's
issuer. Nothing else is fetched: the authorization server's endpoints are the
configured provider's (discovered from its issuer, RFC 8414 / OpenID discovery, when the
worker started), never a URL the MCP server chose, so a server cannot point Parkway's
requests (or the user's sign-in) anywhere else. A refusal is a definite error for the
model, and no card is shown.

:func:`park_for_connection` parks the call as a connection call for that provider
(``result_style: "connection"``): the same connect card, start token, flow cookie,
single-use ``state`` and callback as ``request_connection``, with the server's canonical
URL as the RFC 8707 ``resource`` of the authorization and token requests. The callback
settles it with the connection's reference; the resume (on any worker) runs the call
again, fetching the token from the connection store there.

:class:`BearerAuth` puts the token on the requests of one session (one per server and
connection, so two users' sessions never share a token) and notes a 401.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Mapping
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx2

from parkway.runner.agent import McpServer, ToolContext, canonical_resource
from parkway.runner.errors import ToolError, ToolNeedsInput

__all__ = [
    "SIGN_IN_TOOL",
    "BearerAuth",
    "McpAuthRequired",
    "check_challenge",
    "connection_answer",
    "park_for_connection",
]

log = logging.getLogger(__name__)

# The tool an OAuth server offers a user who has not signed in to it yet (its real tools
# are listed with the user's token, so they are unknown until then).
SIGN_IN_TOOL = "sign_in"
# Protected resource metadata is small: a bigger answer is refused.
_PRM_MAX_BYTES = 64 * 1024
_CONNECT_DEADLINE_S = 600.0


class McpAuthRequired(Exception):
    """The server answered 401: ``challenge`` is its ``WWW-Authenticate`` header."""

    def __init__(self, challenge: str | None) -> None:
        super().__init__("the MCP server asks for authorization")
        self.challenge = challenge


class BearerAuth(httpx2.Auth):
    """The bearer token of one session's requests (set before each use: a refresh may
    have replaced it), and the last 401's challenge."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.challenge: str | None = None
        self.refused = False

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response]:
        if self.token is not None:
            request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            self.refused = True
            self.challenge = response.headers.get("www-authenticate")


def _resource_metadata_url(challenge: str | None) -> str | None:
    """The ``resource_metadata`` parameter of a Bearer challenge (RFC 9728 §5.1)."""
    if not challenge:
        return None
    for part in challenge.replace(",", " ").split():
        name, sep, value = part.partition("=")
        if sep and name.strip().lower() == "resource_metadata":
            return value.strip().strip('"') or None
    return None


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _well_known(url: str) -> str:
    """RFC 9728 §3.1: the metadata of ``https://host/path`` is at
    ``https://host/.well-known/oauth-protected-resource/path``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{path}"


async def _challenge_of(server: McpServer) -> str | None:
    """Ask the server without a token (a ``ping`` it must refuse) for its challenge."""
    assert server.url is not None
    body = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=server.connect_timeout_s) as http:
        response = await http.post(server.url, json=body, headers=headers)
    if response.status_code != 401:
        return None
    return response.headers.get("www-authenticate") or ""


async def check_challenge(server: McpServer, issuer: str | None, challenge: str | None) -> None:
    """Check that ``server`` may send the user to the configured provider (module doc):
    its protected resource metadata names ``issuer`` and the server's own URL. Raises
    :class:`ToolError` (what the model reads) otherwise."""
    assert server.url is not None
    assert server.auth is not None
    name, provider = server.name, server.auth.provider
    if issuer is None:
        log.warning("MCP server %s: its auth provider %r is not configured", name, provider)
        raise ToolError(
            f"MCP server {name!r} needs a sign-in with the provider {provider!r}, which "
            "this Parkway has not configured"
        )
    try:
        if challenge is None:
            challenge = await _challenge_of(server)
            if challenge is None:
                raise ToolError(
                    f"MCP server {name!r} did not ask for a sign-in (no 401 without a token), "
                    "yet the user has no connection it accepts"
                )
        found = _resource_metadata_url(challenge)
        # Only from the server's own origin: a challenge must not make the worker fetch
        # another address (SSRF); the well-known location otherwise.
        url = found if found and _origin(found) == _origin(server.url) else _well_known(server.url)
        async with httpx2.AsyncClient(timeout=server.connect_timeout_s) as http:
            response = await http.get(url, headers={"accept": "application/json"})
        if response.status_code != 200 or len(response.content) > _PRM_MAX_BYTES:
            raise ValueError(f"HTTP {response.status_code}")
        metadata = json.loads(response.content)
    except ToolError:
        raise
    except Exception as exc:
        log.warning("MCP server %s: no protected resource metadata (%r)", name, exc)
        raise ToolError(
            f"MCP server {name!r} needs a sign-in but does not say where (no readable "
            "protected resource metadata)"
        ) from None
    resource = metadata.get("resource") if isinstance(metadata, Mapping) else None
    servers = metadata.get("authorization_servers") if isinstance(metadata, Mapping) else None
    if not isinstance(resource, str) or canonical_resource(resource) != server.resource:
        log.warning("MCP server %s: its metadata names another resource; refused", name)
        raise ToolError(
            f"MCP server {name!r} needs a sign-in, but its metadata describes another "
            "resource than the server's address: Parkway will not ask the user to sign in"
        )
    issuers = [s.rstrip("/") for s in servers if isinstance(s, str)] if servers else []
    if issuer.rstrip("/") not in issuers:
        log.warning(
            "MCP server %s: its authorization servers are not the provider %r's issuer; refused",
            name, provider,
        )  # fmt: skip
        raise ToolError(
            f"MCP server {name!r} needs a sign-in with an authorization server that is not "
            f"the configured provider {provider!r}: Parkway will not ask the user to sign in"
        )


def park_for_connection(server: McpServer, tool: str, name: str, arguments: Any) -> NoReturn:
    """Park the call on a connect card for ``server``'s provider (module doc)."""
    assert server.auth is not None
    assert server.url is not None
    host = urlsplit(server.url).hostname or ""
    render = {
        "kind": "connect",
        "provider": server.auth.provider,
        "scopes": list(server.auth.scopes),
        "mcpServer": {"server": server.name, "host": host, "tool": tool},
    }
    continuation = {
        "mcp": {
            "kind": "oauth",
            "server": server.name,
            "tool": tool,
            "name": name,
            "provider": server.auth.provider,
            "scopes": list(server.auth.scopes),
            "resource": server.resource,
        }
    }
    raise ToolNeedsInput(
        render=render,
        output_schema={"type": "object"},
        continuation=continuation,
        description=f"MCP server {server.name!r} ({host}) needs you to sign in",
        deadline_s=_CONNECT_DEADLINE_S,
        result_style="connection",
    )


def connection_answer(ctx: ToolContext, server: McpServer) -> str | None:
    """The connection id a resumed call's connect card was settled with, None when the
    call was not parked on one. Raises :class:`ToolError` when the person did not
    connect (the model reads why; the server is not called)."""
    mcp = (ctx.continuation or {}).get("mcp")
    if not isinstance(mcp, Mapping) or mcp.get("kind") != "oauth":
        return None
    answer = ctx.answer or {}
    output = answer.get("output")
    if (
        answer.get("outcome") == "output"
        and isinstance(output, Mapping)
        and output.get("connected")
    ):
        found = output.get("connection_id")
        if isinstance(found, str) and found:
            return found
    reason = str(answer.get("outcome") or "error")
    raise ToolError(
        f"the user did not sign in to MCP server {server.name!r} ({reason}); the tool was not run"
    )
