"""MCP servers over HTTP: the approval card, /readyz, what only the operator may write,
and an MCP approval that cold-resumes on a new process after SIGKILL.

Real uvicorn (Parkway in a thread, or ``parkway serve`` as a process), a real Redis, and
the shop MCP server (tests/helpers/mcp/shop.py) on loopback in this process, so the
test sees every execution it ran, whichever worker called it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from parkway.transport.openapi import openapi_document
from parkway.transport.settings import Settings
from tests.helpers.mcp import SHOP_TOOLS, McpServerThread, shop_entry, stdio_entry
from tests.helpers.openapi_check import ApiDocument
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    call,
    free_port,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

CANCEL = [[call("shop__cancel_order", {"order_id": "D-4"})], [text("{{last_tool_results}}")]]


def agent(turns: list[list[dict[str, Any]]], mcps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "template": {"instructions": "shop agent", "tools": [], "mcps": mcps},
        "model": {"scripted": {"turns": turns}},
    }


def checked(response: httpx.Response) -> dict[str, Any]:
    ApiDocument(openapi_document(Settings())).check(response)
    body: dict[str, Any] = response.json()
    return body


def widget(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    part = next(c for c in chunks if c["type"] == "data-parkway-widget")
    data: dict[str, Any] = part["data"]
    return data


def said(chunks: list[dict[str, Any]]) -> str:
    return "".join(c.get("delta", "") for c in chunks if c["type"] == "text-delta")


@pytest.fixture
def shop() -> Iterator[McpServerThread]:
    with McpServerThread() as server:
        yield server


async def test_an_mcp_approval_card_names_the_server_tool_and_hints(
    redis_url: str, redis: Redis, shop: McpServerThread
) -> None:
    """The widget of an MCP tool's approval names the server and the tool, and gives
    its annotations as the server's hints, marked unverified; approved over HTTP, the
    tool runs once and its result reaches the stream."""
    del redis
    with server_thread(redis_url, agent(CANCEL, [shop_entry(shop.url)])) as server:
        api = await Api(server.base_url).login()
        try:
            chunks = await api.say("card", "cancel it")
            card = widget(chunks)
            assert card["kind"] == "approval" and card["tool"] == "shop__cancel_order"
            assert card["mcp"] == {
                "server": "shop",
                "tool": "cancel_order",
                "hints": {"readOnlyHint": False, "destructiveHint": True},
                "hintsVerified": False,
            }
            assert card["description"] == "Cancel an order."
            assert "render" not in card
            settled = await api.settle("card", card["toolCallId"], {"outcome": "approved"})
            assert settled.status_code == 200, settled.text
            resumed = await api.resume("card")
        finally:
            await api.aclose()
    assert resumed.status_code == 200, resumed.text
    assert json.loads(said(sse_chunks(resumed.text))) == [
        {"tool": "shop__cancel_order", "result": {"result": "order D-4 cancelled"}}
    ]
    assert shop.shop.executions == [("cancel_order", {"order_id": "D-4"})]


async def test_readyz_names_an_unreachable_server_and_stays_ready(
    redis_url: str, redis: Redis, shop: McpServerThread
) -> None:
    """/readyz lists the agent's MCP servers, reachable or not (with why, naming no
    address); one that cannot be reached marks the check degraded, and the worker
    stays ready: its runs go on without that server's tools."""
    del redis
    down = f"http://127.0.0.1:{free_port()}/mcp"
    mcps = [shop_entry(shop.url), shop_entry(down, name="dead")]
    with server_thread(redis_url, agent([[text("ok")]], mcps)) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            response = await client.get("/readyz")
            api = await Api(server.base_url).login()
            try:
                chunks = await api.say("still", "hi")
            finally:
                await api.aclose()
    assert response.status_code == 200
    body = checked(response)
    assert body["status"] == "ready"
    mcp = body["checks"]["mcp"]
    assert mcp["ok"] is True and mcp["degraded"] is True
    assert mcp["servers"] == [
        {"name": "shop", "transport": "http", "reachable": True, "tools": len(SHOP_TOOLS)},
        {"name": "dead", "transport": "http", "reachable": False, "reason": "connection refused"},
    ]
    assert "dead" in mcp["reason"] and down not in response.text
    assert said(chunks) == "ok" and chunks[-1] == {"type": "finish", "finishReason": "stop"}


async def test_readyz_without_mcp_servers_has_nothing_to_say(redis_url: str, redis: Redis) -> None:
    del redis
    with server_thread(redis_url, agent([[text("ok")]], [])) as server:
        response = httpx.get(f"{server.base_url}/readyz", timeout=10)
    assert checked(response)["checks"]["mcp"] == {"ok": True, "servers": []}


async def test_a_stdio_command_is_the_operators_alone(
    redis_url: str, redis: Redis, tmp_path: Path
) -> None:
    """An editor's working copy or commit may not add a stdio server, nor change the
    command (or env) of the agent file's: it runs a program on the server. They may
    keep it, and change its policies. Refused as a function tool added by an editor
    is (422 invalid_template); for someone who is not an editor, any change to the MCP
    servers is 403 not_an_editor, as before."""
    del redis
    seed = stdio_entry(calls_file=tmp_path / "calls.txt")
    with server_thread(redis_url, agent([[text("ok")]] * 4, [seed])) as server:
        api = await Api(server.base_url).login()
        try:
            head = (await api.http.get("/api/agent")).json()
            template = head["template"]
            added = {**template, "mcps": [seed, stdio_entry("other")]}
            changed = {
                **template,
                "mcps": [{**seed, "command": ["sh", "-c", "echo pwned"]}],
            }
            env = {**template, "mcps": [{**seed, "env": {**seed["env"], "EXTRA": "1"}}]}
            for index, document in enumerate((added, changed, env)):
                refused = await api.chat(
                    f"wc-{index}", [user_message("hi")], agentTemplate=document
                )
                assert refused.status_code == 422, refused.text
                assert refused.json()["error"]["code"] == "invalid_template"
                assert "only the agent file can add or change" in refused.text
                commit = await api.http.post(
                    "/api/agent/commit",
                    json={"template": document, "expectedVersion": head["version"]},
                )
                assert commit.status_code == 422, commit.text
            kept = {**template, "mcps": [{**seed, "policy": "ask"}]}
            ok = await api.chat("wc-kept", [user_message("hi")], agentTemplate=kept)
            assert ok.status_code == 200, ok.text
            assert (await api.http.get("/api/agent")).json()["version"] == head["version"]
        finally:
            await api.aclose()


@pytest.mark.slow
async def test_an_mcp_approval_cold_resumes_on_a_new_process_after_sigkill(
    redis_url: str, redis: Redis, shop: McpServerThread, tmp_path: Path
) -> None:
    """Nothing about an MCP call lives in a session: process A parks the approval of a
    destructive MCP tool and is killed with SIGKILL; process B, with its own session to
    the server, takes the approval and runs the tool exactly once."""
    del redis
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent(CANCEL, [shop_entry(shop.url)])))
    first = ParkwayProcess(redis_url, path).start()
    try:
        api = await Api(first.base_url).login()
        chunks = await api.say("cold-mcp", "cancel it")
        await api.aclose()
    finally:
        first.kill()
    card = widget(chunks)
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
    assert card["mcp"]["tool"] == "cancel_order" and shop.shop.executions == []

    second = ParkwayProcess(redis_url, path).start()
    try:
        other = api.same_user(second.base_url)
        settled = await other.settle("cold-mcp", card["toolCallId"], {"outcome": "approved"})
        resumed = await other.resume("cold-mcp")
        await other.aclose()
    finally:
        second.stop()
    assert settled.status_code == 200, settled.text
    assert resumed.status_code == 200, resumed.text
    continued = sse_chunks(resumed.text)
    assert continued[0] == {"type": "start", "messageId": chunks[0]["messageId"]}
    assert json.loads(said(continued)) == [
        {"tool": "shop__cancel_order", "result": {"result": "order D-4 cancelled"}}
    ]
    assert shop.shop.executions == [("cancel_order", {"order_id": "D-4"})]
