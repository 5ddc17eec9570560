"""A trusted proxy's identity headers arrive once or not at all (docs/security.md,
"Identities").

Threat: a proxy that appends its header to the client's instead of replacing it
forwards both; joined, they let a client add ``approver`` to its own roles and answer
another user's approval. Real parts: a real uvicorn and Redis; the repeated headers are
written on a raw socket, so they reach the server as two header lines whatever an HTTP
client library would make of them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.helpers.support import (
    PUBLISH_TOOL,
    ServerThread,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

USER = "x-forwarded-user"
ROLES = "x-forwarded-roles"
FOUR_EYES = {**PUBLISH_TOOL, "approvers": "approver", "self_approval": False}
AGENT = agent_doc(
    [[call("publish", {"title": "Hello"})], [text("Result: {{last_tool_results}}")]],
    tools=[FOUR_EYES],
)


@pytest.fixture
async def proxied(redis: Redis, redis_url: str) -> AsyncIterator[ServerThread]:
    """A server behind a proxy on loopback that names users and their roles."""
    del redis
    with server_thread(
        redis_url,
        AGENT,
        auth="header",
        auth_header="X-Forwarded-User",
        auth_roles_header="X-Forwarded-Roles",
        trusted_proxies="127.0.0.1",
        editors=(),
    ) as server:
        yield server


async def raw(
    server: ServerThread,
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """One HTTP/1.1 request written byte for byte (each header line as given, repeats
    included), and its status and JSON body."""
    content = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", f"host: 127.0.0.1:{server.port}", "connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None:
        lines += ["content-type: application/json", f"content-length: {len(content)}"]
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + content)
        answer = await reader.read()  # to the server's close
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


async def park(server: ServerThread, user: str, chat_id: str) -> str:
    """``user`` asks for a publish that someone else must approve; its call id."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        body = {"id": chat_id, "messages": [user_message("go")], "trigger": "submit-message"}
        answer = await http.post("/api/chat", json=body, headers={USER: user})
        assert answer.status_code == 200, answer.text
    [request] = [c for c in sse_chunks(answer.text) if c["type"] == "tool-approval-request"]
    return str(request["toolCallId"])


async def test_a_repeated_roles_header_is_refused_so_a_client_cannot_make_itself_approver(
    proxied: ServerThread,
) -> None:
    """The red team's case: a client sends ``X-Forwarded-Roles: approver`` and the proxy
    appends its own line. The request is 401 on the approvals queue and on the settle
    route, and the call stays pending; the same role sent once (the proxy's own line,
    one name or a list) is believed, so the refusal is the repeat's."""
    call_id = await park(proxied, "carol", "four-eyes")
    appended = [(USER, "mallory"), (ROLES, "approver"), (ROLES, "viewer")]
    status, body = await raw(proxied, "GET", "/api/approvals", appended)
    assert status == 401, body
    assert body["error"]["code"] == "unauthenticated"
    status, body = await raw(
        proxied, "POST", f"/api/chats/four-eyes/calls/{call_id}", appended, {"outcome": "approved"}
    )
    assert status == 401, body
    assert body["error"]["code"] == "unauthenticated"

    for roles in ("approver", "viewer, approver"):
        status, body = await raw(proxied, "GET", "/api/approvals", [(USER, "dora"), (ROLES, roles)])
        assert status == 200, body
        assert [item["toolCallId"] for item in body["approvals"]] == [call_id]
    status, body = await raw(proxied, "GET", "/api/chats/four-eyes", [(USER, "carol")])
    assert status == 200 and body["calls"][0]["status"] == "pending"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(USER, "carol")], 200),
        ([(USER, "carol"), (ROLES, "editor")], 200),
        ([(USER, "carol"), (USER, "carol")], 401),
        ([(USER, "carol"), (USER, "mallory")], 401),
        ([(USER, "carol"), (ROLES, "editor"), (ROLES, "editor")], 401),
        ([(USER, "carol"), (ROLES, ""), (ROLES, "editor")], 401),
    ],
    ids=["user", "user+roles", "user twice", "two users", "roles twice", "empty roles+roles"],
)
async def test_every_identity_header_is_refused_when_it_arrives_twice(
    proxied: ServerThread, headers: list[tuple[str, str]], expected: int
) -> None:
    """Both headers the proxy vouches with (the user's and the roles') are refused when
    repeated, even with equal values: which line the proxy wrote cannot be told."""
    status, body = await raw(proxied, "GET", "/api/agent", headers)
    assert status == expected, body
    if expected == 401:
        assert body["error"]["code"] == "unauthenticated"
        assert "proxy" in body["error"]["message"]
