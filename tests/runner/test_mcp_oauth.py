"""What an MCP server's 401 may make Parkway do (runner/mcp/oauth.py): its protected
resource metadata (RFC 9728) is read from the server's own origin only, and must name
the server's own URL and the configured provider's issuer before any card is shown.

The servers here are plain HTTP servers on loopback answering as a protected MCP server
does (401 with a ``WWW-Authenticate`` challenge, metadata at the well-known location),
so each test can make them say what a misconfigured or hostile server would.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from parkway.runner.agent import load_template
from parkway.runner.errors import ToolError
from parkway.runner.mcp import check_challenge

ISSUER = "https://id.example.test"


class Protected:
    """A loopback server: POST → 401 with ``challenge``; GET of any path → ``metadata``
    (as JSON); ``paths`` lists what was asked, by method and path."""

    def __init__(self) -> None:
        self.metadata: Any = {}
        self.challenge = ""
        self.paths: list[str] = []
        rig = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                rig.paths.append(f"POST {self.path}")
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(401)
                self.send_header("www-authenticate", rig.challenge)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                rig.paths.append(f"GET {self.path}")
                body = json.dumps(rig.metadata).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Protected, Protected]]:
    mcp, elsewhere = Protected(), Protected()
    try:
        yield mcp, elsewhere
    finally:
        mcp.stop()
        elsewhere.stop()


def entry(url: str) -> Any:
    (server,) = load_template(
        {
            "instructions": "",
            "tools": [],
            "mcps": [{"name": "crm", "url": url, "auth": {"provider": "idp"}}],
        }
    ).mcps
    return server


def test_metadata_naming_the_server_and_the_providers_issuer_is_accepted(
    servers: tuple[Protected, Protected],
) -> None:
    """The good case: the challenge names metadata on the server's own origin, which
    names the server's URL and the configured issuer; asked without a token first when
    no challenge is known yet."""
    mcp, _ = servers
    mcp.challenge = f'Bearer resource_metadata="{mcp.url.replace("/mcp", "")}/prm"'
    mcp.metadata = {"resource": mcp.url, "authorization_servers": [ISSUER + "/"]}
    asyncio.run(check_challenge(entry(mcp.url), ISSUER, None))
    assert mcp.paths == ["POST /mcp", "GET /prm"]


def test_metadata_for_another_resource_or_issuer_is_refused(
    servers: tuple[Protected, Protected],
) -> None:
    """A server describing another resource, naming another authorization server, or
    linked to a provider this Parkway does not have: the model reads why, and no card is
    shown (check_challenge raises before anything parks)."""
    mcp, _ = servers
    mcp.metadata = {"resource": "https://other.example/mcp", "authorization_servers": [ISSUER]}
    with pytest.raises(ToolError, match="describes another resource"):
        asyncio.run(check_challenge(entry(mcp.url), ISSUER, "Bearer"))
    mcp.metadata = {"resource": mcp.url, "authorization_servers": ["https://evil.example"]}
    with pytest.raises(ToolError, match="not the configured provider 'idp'"):
        asyncio.run(check_challenge(entry(mcp.url), ISSUER, "Bearer"))
    with pytest.raises(ToolError, match="which this Parkway has not configured"):
        asyncio.run(check_challenge(entry(mcp.url), None, "Bearer"))
    mcp.metadata = ["not", "an", "object"]
    with pytest.raises(ToolError, match="describes another resource"):
        asyncio.run(check_challenge(entry(mcp.url), ISSUER, "Bearer"))


def test_a_challenge_pointing_elsewhere_is_not_followed(
    servers: tuple[Protected, Protected],
) -> None:
    """SSRF: a ``resource_metadata`` URL on another origin is never fetched; the worker
    reads the well-known location on the server's own origin instead."""
    mcp, elsewhere = servers
    elsewhere.metadata = {"resource": mcp.url, "authorization_servers": [ISSUER]}
    mcp.metadata = {"resource": mcp.url, "authorization_servers": [ISSUER]}
    challenge = f'Bearer error="invalid_token", resource_metadata="{elsewhere.url}"'
    asyncio.run(check_challenge(entry(mcp.url), ISSUER, challenge))
    assert elsewhere.paths == []
    assert mcp.paths == ["GET /.well-known/oauth-protected-resource/mcp"]
