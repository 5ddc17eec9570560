"""An MCP tool's request for input, answered by the real ``@ag-ui/client`` (HttpAgent).

A real Parkway (uvicorn in a thread, real Redis) whose agent offers the shop MCP
server's tools (tests/helpers/mcp/shop.py, streamable HTTP on loopback). The scripted
model calls ``shop__ask_person``, whose first call asks for a form: the run ends with
an interrupt for the call whose ``responseSchema`` is the widget's answer schema; the
driver (tests/helpers/aisdk/agui_driver.mjs) resumes it with the responses payload
through the package's ``buildResumeArray``, and the MCP tool's real result arrives as
the call's ``TOOL_CALL_RESULT``. Every wire event is checked by ``@ag-ui/core``'s zod
schemas and ag-ui-protocol's pydantic types (``drive``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from tests.helpers.mcp import McpServerThread, shop_entry
from tests.helpers.support import Api, call, server_thread, text
from tests.transport.test_agui_client import drive, node, ok, results, said, scenario, state_of

__all__ = ["node"]  # the fixture, re-used from test_agui_client

pytestmark = [pytest.mark.node, pytest.mark.usefixtures("redis")]

NORTH = {"responses": {"where": {"action": "accept", "content": {"w": "north"}}}}
SHIPPED = {"content": [{"type": "text", "text": "pan ships from north"}]}


@pytest.fixture
def shop() -> Iterator[McpServerThread]:
    with McpServerThread() as server:
        yield server


def shop_agent(url: str) -> dict[str, Any]:
    return {
        "template": {"instructions": "shop agent", "tools": [], "mcps": [shop_entry(url)]},
        "model": {
            "scripted": {
                "turns": [
                    [text("Asking."), call("shop__ask_person", {"item": "pan"})],
                    [text("Got {{result.shop__ask_person.content}}")],
                ]
            }
        },
    }


def test_an_mcp_form_interrupt_resumed_with_the_responses_gets_the_tools_result(
    node: str, redis_url: str, shop: McpServerThread
) -> None:
    """The interrupt names the call, carries the form in its widget and the answer
    schema as its ``responseSchema`` (which the responses payload satisfies and a
    malformed one does not); resumed with the payload, the server retries the MCP call
    with the answer and its real result is the call's one ``TOOL_CALL_RESULT``."""

    async def run(url: str) -> None:
        api = await Api(url).login()
        try:
            first = await drive(node, scenario(url, api, "mcp-1", [{"type": "say", "text": "go"}]))
            parked = ok(first["runs"][0])
            assert parked["outcome"] == "interrupt"
            [interrupt] = parked["interrupts"]
            assert interrupt["reason"] == "client_tool"
            assert "ask_person" in interrupt["message"]
            widget = interrupt["metadata"]["parkway"]["widget"]
            assert widget["kind"] == "mcp-form"
            assert widget["render"]["requests"]["where"]["message"] == "Which warehouse?"
            schema = interrupt["responseSchema"]
            jsonschema.validate(NORTH, schema)
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate({"responses": {"where": {"action": "accept"}}}, schema)
            assert shop.shop.answers == []

            answer = {"status": "resolved", "payload": NORTH}
            second = await drive(
                node,
                scenario(
                    url,
                    api,
                    "mcp-1",
                    [{"type": "resume", "responses": {interrupt["id"]: answer}}],
                    state=state_of(first),
                ),
            )
            done = ok(second["runs"][0])
            assert done["outcome"] == "success" and second["pendingInterrupts"] == []
            assert results(done) == {interrupt["id"]: SHIPPED}
            assert [e["type"] for e in done["events"]].count("TOOL_CALL_RESULT") == 1
            assert "pan ships from north" in said(done)
            assert shop.shop.answers == [
                ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
            ]
        finally:
            await api.aclose()

    with server_thread(redis_url, shop_agent(shop.url)) as server:
        asyncio.run(run(server.base_url))


def test_an_mcp_form_interrupt_cancelled_tells_the_server_cancel(
    node: str, redis_url: str, shop: McpServerThread
) -> None:
    """A client that dismisses the interrupt (``status: cancelled``) settles the call
    cancelled; the server, called again, reads ``cancel`` for its request and its answer
    is the call's one result."""

    async def run(url: str) -> None:
        api = await Api(url).login()
        try:
            first = await drive(node, scenario(url, api, "mcp-2", [{"type": "say", "text": "go"}]))
            [interrupt] = ok(first["runs"][0])["interrupts"]
            second = await drive(
                node,
                scenario(
                    url,
                    api,
                    "mcp-2",
                    [{"type": "resume", "responses": {interrupt["id"]: {"status": "cancelled"}}}],
                    state=state_of(first),
                ),
            )
            done = ok(second["runs"][0])
            text_out = "not shipped: the person chose cancel"
            assert results(done) == {
                interrupt["id"]: {"content": [{"type": "text", "text": text_out}]}
            }
            assert shop.shop.answers == [("pan", {"where": {"action": "cancel"}}, "opaque-pan")]
        finally:
            await api.aclose()

    with server_thread(redis_url, shop_agent(shop.url)) as server:
        asyncio.run(run(server.base_url))
