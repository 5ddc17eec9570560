"""An MCP tool's request for input, answered by the real ``ai`` npm client.

A real Parkway (uvicorn in a thread, real Redis) whose agent offers the shop MCP
server's tools (tests/helpers/mcp/shop.py, streamable HTTP on loopback); the scripted
model calls ``shop__ask_person``, whose first call asks for a form. The driver
(tests/helpers/aisdk/driver.mjs: ``AbstractChat`` + ``DefaultChatTransport`` of a pinned
``ai`` major, which parse every chunk with the package's own chunk schema) receives the
call with its ``mcp-form`` widget, answers it in ``onToolCall`` with ``addToolOutput``
(the responses object) and lets ``sendAutomaticallyWhen`` resend. The resend retries the
MCP call with the answer; the server's real result must reach the client as the call's
one output, and the model must read it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.mcp import McpServerThread, shop_entry
from tests.helpers.support import Api, call, eventually, server_thread, sse_chunks, text, types
from tests.runner.test_eventlog import GatedModel
from tests.transport.test_aisdk import ALL_MAJORS, node, parkway, step_count, text_of, tool_part
from tests.transport.test_aisdk_resume import HANDSHAKE_S, QUIET_SWEEPER, is_idle, wait_for_file
from tests.transport.test_aisdk_resume import drive as resume_drive

__all__ = ["node"]  # the fixture, re-used from test_aisdk

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
                    [text("Asking. "), call("shop__ask_person", {"item": "pan"})],
                    [text("Got {{last_tool_results}}")],
                ]
            }
        },
    }


def outputs_of(chunks: list[dict[str, Any]], call_id: str) -> list[dict[str, Any]]:
    return [
        c for c in chunks if c["type"].startswith("tool-output-") and c.get("toolCallId") == call_id
    ]


@pytest.mark.parametrize("major", ALL_MAJORS)
async def test_an_mcp_form_answered_with_add_tool_output_gets_the_tools_one_real_result(
    redis_url: str, node: str, major: str, shop: McpServerThread
) -> None:
    """The client gets the call with its ``mcp-form`` widget, answers it with the
    responses object and resends by itself, once. The continuation carries the MCP
    tool's real result as exactly one ``tool-output-available`` for the call (the
    client's part ends with the server's result, not the person's answer, and is
    neither duplicated nor in error), and the model reads that result."""
    async with parkway(redis_url, shop_agent(shop.url), node) as pw:
        report = await pw.drive(
            major,
            [{"type": "send", "text": "ship a pan"}],
            tool_outputs={"shop__ask_person": {"output": NORTH}},
        )
        report.assert_clean(posts=2)
        stored = await pw.api.state(report.chat_id)

    first = report.chunks(0)
    [widget] = [c for c in first if c["type"] == "data-parkway-widget"]
    call_id = widget["data"]["toolCallId"]
    assert widget["data"]["kind"] == "mcp-form"
    assert widget["data"]["render"]["requests"]["where"]["message"] == "Which warehouse?"
    assert outputs_of(first, call_id) == []
    assert first[-1] == {"type": "finish", "finishReason": "tool-calls"}

    resend = report.posts[1]["body"]
    answered = tool_part(resend["messages"][-1], "shop__ask_person")
    assert (answered["state"], answered["output"]) == ("output-available", NORTH)

    second = report.chunks(1)
    assert types(second)[:3] == ["start", "tool-output-available", "start-step"]
    assert outputs_of(second, call_id) == [
        {"type": "tool-output-available", "toolCallId": call_id, "output": SHIPPED}
    ]
    all_outputs = [c for p in range(2) for c in outputs_of(report.chunks(p), call_id)]
    assert len(all_outputs) == 1, all_outputs

    [assistant] = report.assistants
    assert step_count(assistant) == 2
    part = tool_part(assistant, "shop__ask_person")
    assert (part["state"], part["output"]) == ("output-available", SHIPPED)
    assert text_of(assistant).startswith("Asking. Got ")
    [seen] = json.loads(text_of(assistant).removeprefix("Asking. Got "))
    assert seen == {"tool": "shop__ask_person", "result": SHIPPED}
    assert [c["toolName"] for c in report.raw["toolCalls"]] == ["shop__ask_person"]
    assert report.raw["toolCallCounts"] == {call_id: 1}
    assert shop.shop.answers == [
        ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
    ]

    # A reload shows the same: the call's one output is the server's result.
    [reloaded] = [m for m in stored["messages"] if m["role"] == "assistant"]
    assert tool_part(reloaded, "shop__ask_person")["output"] == SHIPPED


@pytest.mark.parametrize("major", ["ai7"])
async def test_an_mcp_form_declined_by_the_client_reaches_the_server_as_a_decline(
    redis_url: str, node: str, major: str, shop: McpServerThread
) -> None:
    """A client that answers every request ``decline`` (the MCP spec's explicit no)
    gets the server's own answer to that as the call's one output."""
    declined = {"responses": {"where": {"action": "decline"}}}
    async with parkway(redis_url, shop_agent(shop.url), node) as pw:
        report = await pw.drive(
            major,
            [{"type": "send", "text": "ship a pan"}],
            tool_outputs={"shop__ask_person": {"output": declined}},
        )
        report.assert_clean(posts=2)
    call_id = report.raw["toolCalls"][0]["toolCallId"]
    not_shipped = {"content": [{"type": "text", "text": "not shipped: the person chose decline"}]}
    assert [c["output"] for c in outputs_of(report.chunks(1), call_id)] == [not_shipped]
    part = tool_part(report.assistants[0], "shop__ask_person")
    assert (part["state"], part["output"]) == ("output-available", not_shipped)
    assert shop.shop.answers == [("pan", {"where": {"action": "decline"}}, "opaque-pan")]


@pytest.mark.parametrize("mode", ["live", "finished"])
async def test_a_resumed_mcp_continuation_carries_the_calls_one_output(
    redis_url: str, node: str, mode: str, shop: McpServerThread, tmp_path: Path
) -> None:
    """The continuation's response drops after its first text delta and the client
    calls ``resumeStream()``. The replay rebuilds the message from its start: the MCP
    call must appear in it with one output, the server's result (not the person's
    answer, the responses object, followed by the result a second time), and the
    client must end with that result on the call's part. ``live``: resumed while the
    run is paused; ``finished``: after it finished."""
    agent = shop_agent(shop.url)
    model = GatedModel(agent["model"]["scripted"]["turns"], gated={1})
    chat_id = f"chat-{uuid.uuid4().hex[:12]}"
    dropped, go, resuming = tmp_path / "dropped", tmp_path / "go", tmp_path / "resuming"
    send = {"type": "send", "text": "ship a pan"}
    if mode == "live":
        actions = [send, {"type": "resume", "signalWhenStreaming": str(resuming)}]
    else:
        actions = [
            send,
            {"type": "signal", "file": str(dropped)},
            {"type": "await", "file": str(go)},
            {"type": "resume"},
        ]
    with server_thread(redis_url, agent, model=model, **QUIET_SWEEPER) as server:
        api = await Api(server.base_url).login()
        try:
            driving = asyncio.create_task(
                resume_drive(
                    node,
                    server.base_url,
                    api,
                    chat_id,
                    "ai7",
                    actions,
                    toolOutputs={"shop__ask_person": {"output": NORTH}},
                    drop={"post": 2, "after": "text-delta"},
                )
            )
            try:
                if mode == "live":
                    await wait_for_file(resuming, driving)
                    model.gate.set()
                else:
                    await wait_for_file(dropped, driving)
                    await eventually(model.started.is_set, within_s=HANDSHAKE_S)
                    model.gate.set()
                    await eventually(
                        lambda: is_idle(api, chat_id), within_s=HANDSHAKE_S, what="idle chat"
                    )
                    go.write_text("go")
            finally:
                model.gate.set()
            report = await driving
        finally:
            await api.aclose()

    raw = report.raw
    assert raw["status"] == "ready" and raw["error"] is None, raw["errors"]
    assert raw["problems"] == [] and raw["posts"] == 2, raw["problems"]
    call_id = report.raw["toolCalls"][0]["toolCallId"]
    [get] = [r for r in raw["requests"] if r["method"] == "GET"]
    assert get["status"] == 200, get
    replay = sse_chunks(get["response"])
    assert [c["output"] for c in outputs_of(replay, call_id)] == [SHIPPED], replay
    part = tool_part(report.assistants[0], "shop__ask_person")
    assert (part["state"], part["output"]) == ("output-available", SHIPPED)
    assert raw["toolCallCounts"] == {call_id: 1}


async def test_an_mcp_link_answered_finished_calls_the_tool_again(
    redis_url: str, node: str, shop: McpServerThread
) -> None:
    """A URL elicitation (-32042): the client gets the call with its ``mcp-url`` widget
    naming the host, answers ``accept`` once the person finished, and the continuation
    carries the tool's result from the original call made again."""
    agent = shop_agent(shop.url)
    agent["model"]["scripted"]["turns"] = [
        [call("shop__ask_url")],
        [text("Got {{last_tool_results}}")],
    ]
    finished = {"responses": {"e-1": {"action": "accept"}}}
    async with parkway(redis_url, agent, node) as pw:
        report = await pw.drive(
            "ai7",
            [{"type": "send", "text": "authorise"}],
            tool_outputs={"shop__ask_url": {"output": finished}},
        )
        report.assert_clean(posts=2)
    [widget] = [c for c in report.chunks(0) if c["type"] == "data-parkway-widget"]
    assert widget["data"]["kind"] == "mcp-url"
    assert widget["data"]["render"]["requests"]["e-1"]["host"] == "shop.example"
    call_id = widget["data"]["toolCallId"]
    [output] = [c["output"] for p in range(2) for c in outputs_of(report.chunks(p), call_id)]
    part = tool_part(report.assistants[0], "shop__ask_url")
    assert part["output"] == output
    assert "authorised" in json.dumps(output)
    assert shop.shop.url_calls == 2
