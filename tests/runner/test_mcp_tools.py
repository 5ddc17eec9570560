"""MCP servers' tools in a run: offered, run, approved, refused, kept as artifacts.

A real Redis, the runner, the scripted model (wrapped to note what each step was
offered), and real MCP servers built with the official SDK: the shop served over
streamable HTTP on loopback (tests/helpers/mcp/shop.py), or run over stdio as a
subprocess. Waits are on conditions, never on time.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Agent, Runner, RunnerConfig, Runtime, parse_agent_file
from parkway.runner.events import (
    Event,
    ToolFailed,
    ToolInputRejected,
    ToolSucceeded,
)
from parkway.runner.llm import Model, ModelRequest
from parkway.runner.mcp import McpTools
from tests.helpers.mcp import BIG_TEXT_BYTES, SHOP_TOOLS, McpServerThread, shop_entry, stdio_entry
from tests.helpers.runner_rig import Clock, finish, parked, said
from tests.helpers.support import WEATHER_TOOL, call, eventually, free_port, text


class Noting:
    """The scripted model, noting each request (what a step was offered)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        return self.model.stream(request)

    def offered(self, index: int = -1) -> dict[str, Any]:
        return {tool.name: tool for tool in self.requests[index].tools}


@pytest.fixture
def shop() -> Iterator[McpServerThread]:
    with McpServerThread() as server:
        yield server


@contextlib.asynccontextmanager
async def mcp_runner(
    redis: Redis,
    turns: list[list[dict[str, Any]]],
    mcps: list[dict[str, Any]],
    *,
    tools: list[Any] | None = None,
    config: RunnerConfig | None = None,
    mcp: McpTools | None = None,
) -> AsyncIterator[tuple[Runner, Noting]]:
    agent = parse_agent_file(
        {
            "template": {"instructions": "shop agent", "tools": tools or [], "mcps": mcps},
            "model": {"scripted": {"turns": turns}},
        }
    )
    model = Noting(agent.model)
    runner = Runner(redis, model, agent.template, config=config, mcp=mcp)
    try:
        yield runner, model
    finally:
        await runner.aclose()  # closes the MCP sessions (and ends stdio servers)


async def turn(runner: Runner, chat: str, message: str = "go") -> list[Event]:
    return await (await runner.start_turn(chat, "alice", message)).collect()


async def approve(runner: Runner, chat: str, call_id: str) -> list[Event]:
    await runner.settle(chat, "alice", call_id, {"outcome": "approved"})
    return await (await runner.resume(chat, "alice")).collect()


def outputs(events: list[Event]) -> list[Any]:
    return [e.output for e in events if isinstance(e, ToolSucceeded)]


def errors(events: list[Event]) -> list[str]:
    return [e.error for e in events if isinstance(e, ToolFailed | ToolInputRejected)]


async def test_tools_are_offered_as_server__tool_with_their_schemas(
    redis: Redis, shop: McpServerThread
) -> None:
    """The model sees the agent's own tools and each server tool as ``shop__<tool>``,
    with the server's description and input schema; ``include`` and ``exclude``
    narrow what a server offers."""
    mcps = [
        shop_entry(shop.url),
        shop_entry(shop.url, name="few", include=["lookup", "note"], exclude=["note"]),
    ]
    async with mcp_runner(redis, [[text("hello")]], mcps, tools=[WEATHER_TOOL]) as (runner, model):
        events = await turn(runner, "offer")
    assert said(events) == "hello"
    offered = model.offered()
    assert set(offered) == {
        "get_weather",
        *(f"shop__{tool}" for tool in SHOP_TOOLS),
        "few__lookup",
    }
    lookup = offered["shop__lookup"]
    assert lookup.description == "How many of an article are in stock."
    assert lookup.input_schema["type"] == "object"
    assert lookup.input_schema["properties"]["sku"]["type"] == "string"
    assert lookup.input_schema["required"] == ["sku"]
    assert model.requests[0].instructions == "shop agent"  # no server is down


async def test_a_read_only_tool_runs_at_once_and_gives_its_structured_content(
    redis: Redis, shop: McpServerThread
) -> None:
    """``readOnlyHint`` runs without asking; the result is the server's
    ``structuredContent``, which the model reads as the tool's output."""
    turns = [
        [call("shop__lookup", {"sku": "kettle"})],
        [text("{{result.shop__lookup.stock}} left")],
    ]
    async with mcp_runner(redis, turns, [shop_entry(shop.url)]) as (runner, _):
        events = await turn(runner, "read")
    assert outputs(events) == [{"sku": "kettle", "stock": 6}]
    assert said(events) == "6 left" and finish(events) == "stop"
    assert not parked(events)


async def test_a_destructive_tool_parks_its_approval_and_runs_once_approved(
    redis: Redis, shop: McpServerThread
) -> None:
    """``destructiveHint`` asks: the call parks as an approval (nothing runs yet), whose
    card names the server, the tool and its annotations; approved, it runs exactly once
    with the approved input, and the model reads its result."""
    turns = [
        [call("shop__cancel_order", {"order_id": "A-7"})],
        [text("{{result.shop__cancel_order.result}}")],
    ]
    async with mcp_runner(redis, turns, [shop_entry(shop.url)]) as (runner, _):
        first = await turn(runner, "rm")
        [card] = parked(first)
        assert finish(first) == "tool-calls" and card.kind == "approval"
        assert card.render == {
            "mcp": {
                "server": "shop",
                "tool": "cancel_order",
                "annotations": {"readOnlyHint": False, "destructiveHint": True},
            }
        }
        assert shop.shop.executions == []
        resumed = await approve(runner, "rm", card.tool_call_id)
    assert shop.shop.executions == [("cancel_order", {"order_id": "A-7"})]
    assert outputs(resumed) == [{"result": "order A-7 cancelled"}]
    assert said(resumed) == "order A-7 cancelled"


async def test_the_operators_policy_overrides_the_annotations(
    redis: Redis, shop: McpServerThread
) -> None:
    """Per-tool policies win over the annotations (a read-only tool made to ask, a
    destructive one allowed), and a server-wide ``policy`` over the defaults."""
    mcps = [
        shop_entry(
            shop.url,
            tools={"lookup": {"policy": "ask"}, "cancel_order": {"policy": "allow"}},
        ),
        shop_entry(shop.url, name="strict", policy="ask"),
    ]
    turns = [
        [
            call("shop__cancel_order", {"order_id": "B-1"}),
            call("shop__lookup", {"sku": "mug"}),
            call("strict__catalogue", {"lines": 1}),
        ],
        [text("done")],
    ]
    async with mcp_runner(redis, turns, mcps) as (runner, _):
        events = await turn(runner, "policy")
    assert [(c.tool_name, c.kind) for c in parked(events)] == [
        ("shop__lookup", "approval"),
        ("strict__catalogue", "approval"),
    ]
    assert outputs(events) == [{"result": "order B-1 cancelled"}]
    assert shop.shop.executions == [("cancel_order", {"order_id": "B-1"})]


async def test_an_is_error_result_is_a_tool_error_the_model_reads(
    redis: Redis, shop: McpServerThread
) -> None:
    turns = [[call("shop__fail_order")], [text("{{result.shop__fail_order.error}}")]]
    async with mcp_runner(redis, turns, [shop_entry(shop.url, policy="allow")]) as (runner, _):
        events = await turn(runner, "err")
    assert errors(events) == ["Error executing tool fail_order: order 7 is already shipped"]
    assert said(events) == "Error executing tool fail_order: order 7 is already shipped"
    assert finish(events) == "stop"


async def test_a_large_result_is_kept_as_an_artifact(redis: Redis, shop: McpServerThread) -> None:
    """Content blocks (no structured content) are the output as JSON; over the artifact
    threshold, the model gets the artifact's reference and the artifact the whole
    output, as for any server tool."""
    lines = 40  # 40 KiB of text: over the 32 KiB threshold
    turns = [
        [call("shop__catalogue", {"lines": lines}), call("shop__catalogue", {"lines": 1})],
        [text("ok")],
    ]
    async with mcp_runner(redis, turns, [shop_entry(shop.url)]) as (runner, _):
        events = await turn(runner, "big")
        reference, small = outputs(events)
        assert small == {
            "content": [{"type": "text", "text": "00000 " + "x" * (BIG_TEXT_BYTES - 6)}]
        }
        assert reference["bytes"] > lines * BIG_TEXT_BYTES
        found = await runner.artifacts.get("big", reference["artifact_id"])
    assert found is not None
    whole = json.loads(found[1])
    assert len(whole["content"]) == lines and whole["content"][-1]["text"].startswith("00039 ")


async def test_an_unreachable_server_leaves_its_tools_out_and_the_run_completes(
    redis: Redis, shop: McpServerThread
) -> None:
    """A server nobody answers for offers no tools; the model's instructions say so,
    a call of its tools is refused naming it, the reachable server's tools run, and the
    run completes."""
    down = f"http://127.0.0.1:{free_port()}/mcp"
    mcps = [shop_entry(down, name="dead", connect_timeout_s=5), shop_entry(shop.url)]
    turns = [
        [call("dead__lookup", {"sku": "x"}), call("shop__lookup", {"sku": "ab"})],
        [text("finished")],
    ]
    async with mcp_runner(redis, turns, mcps) as (runner, model):
        events = await turn(runner, "down")
        status = {s.server: s for s in await runner.mcp.status(runner.template.mcps)}
    assert "dead__lookup" not in model.offered(0) and "shop__lookup" in model.offered(0)
    note = "MCP server 'dead' is unreachable (connection refused): its tools (dead__...)"
    assert note in model.requests[0].instructions
    assert errors(events) == [
        "MCP server 'dead' is unreachable (connection refused): its tools are unavailable right now"
    ]
    assert outputs(events) == [{"sku": "ab", "stock": 2}]
    assert said(events) == "finished" and finish(events) == "stop"
    assert (status["dead"].reachable, status["dead"].reason) == (False, "connection refused")
    assert status["shop"].reachable is True


async def test_a_call_is_bounded_by_the_entrys_timeout(redis: Redis, shop: McpServerThread) -> None:
    """A tool that does not answer within its entry's ``timeout_s`` ends with a timeout
    error the model reads; the session (shared with the entry that has the default
    timeout) stays usable for the next call."""
    mcps = [
        shop_entry(shop.url, name="slow", timeout_s=0.2, include=["hold"]),
        shop_entry(shop.url),
    ]
    turns = [
        [call("slow__hold")],
        [call("shop__lookup", {"sku": "cup"})],
        [text("{{result.slow__hold.error}}")],
    ]
    try:
        async with mcp_runner(redis, turns, mcps) as (runner, _):
            events = await turn(runner, "slow")
            slow, default = runner.template.mcps
            assert runner.mcp.connection(slow) is runner.mcp.connection(default)
    finally:
        shop.shop.release.set()
    assert errors(events) == ["MCP tool 'slow__hold' did not answer within 0.2 s"]
    assert outputs(events) == [{"sku": "cup", "stock": 3}]
    assert said(events) == "MCP tool 'slow__hold' did not answer within 0.2 s"


async def test_an_approved_call_whose_server_went_away_ends_with_a_clear_error(
    redis: Redis, shop: McpServerThread
) -> None:
    """Approved while its server is down, the call does not run and the model reads
    that the server is unreachable; the run completes."""
    turns = [
        [call("shop__cancel_order", {"order_id": "F-6"})],
        [text("{{result.shop__cancel_order.error}}")],
    ]
    async with mcp_runner(redis, turns, [shop_entry(shop.url)]) as (runner, _):
        [card] = parked(await turn(runner, "gone"))
        shop.stop(abruptly=True)
        resumed = await approve(runner, "gone", card.tool_call_id)
    unreachable = (
        "MCP server 'shop' is unreachable (connection refused): its tools are unavailable right now"
    )
    assert errors(resumed) == [unreachable] and said(resumed) == unreachable
    assert finish(resumed) == "stop" and shop.shop.executions == []


async def test_a_restarted_server_is_used_again_and_still_heard(redis: Redis) -> None:
    """The server goes away and comes back at the same address: its tools run again
    (the session is reopened when it is found dropped), and a change of its tools is
    heard (the listen stream is opened again, and a list read before it was open is
    not trusted)."""
    first = McpServerThread().start()
    port = first.port
    turns = [
        [call("shop__lookup", {"sku": "a"})],
        [text("one")],
        [call("shop__lookup", {"sku": "abc"}), call("shop__add_tool", {"name": "restock"})],
        [text("two")],
    ]
    second: McpServerThread | None = None
    try:
        async with mcp_runner(redis, turns, [shop_entry(first.url, tools_ttl_s=3600)]) as (
            runner,
            _,
        ):
            assert outputs(await turn(runner, "back")) == [{"sku": "a", "stock": 1}]
            first.stop(abruptly=True)
            second = McpServerThread(port=port).start()

            events = await turn(runner, "back", "again")
            assert outputs(events) == [{"sku": "abc", "stock": 3}, {"result": "added restock"}]

            async def heard() -> bool:
                offer = await runner.mcp.offer(runner.template)
                return "shop__restock" in offer.template.tools

            await eventually(heard, what="list_changed from the restarted server")
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def test_a_missing_header_variable_makes_the_server_unreachable_without_naming_it(
    redis: Redis, shop: McpServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header reads its value from the environment when the worker connects; unset,
    the server is unavailable, and what the model reads names neither the variable
    nor the url. Set, every request carries it (after the pause a failed connect
    earns, on the clock the worker's MCP sessions are given)."""
    monkeypatch.delenv("PARKWAY_TEST_SHOP_TOKEN", raising=False)
    secret = {"env": "PARKWAY_TEST_SHOP_TOKEN", "prefix": "Bearer "}
    entry = shop_entry(shop.url, headers={"Authorization": secret})
    clock = Clock()
    tools = McpTools(clock=clock, retry_s=5)
    async with mcp_runner(redis, [[text("ok")]], [entry], mcp=tools) as (runner, model):
        await turn(runner, "env")
        monkeypatch.setenv("PARKWAY_TEST_SHOP_TOKEN", "t0ken")
        still = await runner.mcp.offer(runner.template)  # a failed connect rests a while
        clock.now += 5
        offered = await runner.mcp.offer(runner.template)
    assert "shop" in still.unavailable
    instructions = model.requests[0].instructions
    assert "an environment variable it reads is not set on this worker" in instructions
    assert "PARKWAY_TEST_SHOP_TOKEN" not in instructions and shop.url not in instructions
    assert "shop__lookup" in offered.template.tools and not offered.unavailable
    assert shop.authorizations and set(shop.authorizations) == {"Bearer t0ken"}


async def test_a_changed_tool_list_is_offered_on_the_next_step(
    redis: Redis, shop: McpServerThread
) -> None:
    """The tool list is kept for ``tools_ttl_s`` (an hour here), but the server's
    ``list_changed`` drops it: the tool ``add_tool`` adds is offered next time."""
    turns = [
        [call("shop__add_tool", {"name": "restock"})],
        [text("added")],
        [call("shop__restock", {"sku": "tea"})],
        [text("{{result.shop__restock.result}}")],
    ]
    async with mcp_runner(redis, turns, [shop_entry(shop.url, tools_ttl_s=3600)]) as (
        runner,
        model,
    ):
        await turn(runner, "grow")
        assert "shop__restock" not in model.offered(0)

        async def offered() -> bool:
            return "shop__restock" in (await runner.mcp.offer(runner.template)).template.tools

        await eventually(offered, what="the list_changed notification")
        events = await turn(runner, "grow", "again")
    assert "shop__restock" in model.offered(-2)
    assert said(events) == "restocked tea"


async def test_the_tool_list_is_kept_for_its_ttl_on_the_sessions_clock(
    redis: Redis, shop: McpServerThread
) -> None:
    """Without a notification, a tool the server added is offered once the list is
    older than ``tools_ttl_s``, and not before: a step does not list the tools again."""
    clock = Clock()
    mcps = [shop_entry(shop.url, tools_ttl_s=60)]
    async with mcp_runner(redis, [[text("ok")]], mcps, mcp=McpTools(clock=clock)) as (runner, _):
        before = await runner.mcp.offer(runner.template)
        shop.shop.app.add_tool(lambda: "quiet", name="quietly_added")
        clock.now += 59
        cached = await runner.mcp.offer(runner.template)
        clock.now += 1
        listed = await runner.mcp.offer(runner.template)
    assert "shop__quietly_added" not in before.template.tools
    assert "shop__quietly_added" not in cached.template.tools
    assert "shop__quietly_added" in listed.template.tools


async def test_a_server_of_the_initialize_era_is_reached_by_negotiation_and_its_tools_work(
    redis: Redis,
) -> None:
    """A 2025-11-25 server answers ``server/discover`` with "Method not found": the
    session falls back to the ``initialize`` handshake at that revision, lists the tools
    and calls them as on a 2026-07-28 server (a read-only one runs, a destructive one
    parks and runs once approved)."""
    turns = [
        [call("old__lookup", {"sku": "kettle"}), call("old__cancel_order", {"order_id": "O-1"})],
        [text("{{result.old__cancel_order.result}}")],
    ]
    with McpServerThread(legacy=True) as old:
        async with mcp_runner(redis, turns, [shop_entry(old.url, name="old")]) as (runner, model):
            first = await turn(runner, "legacy")
            [card] = parked(first)
            resumed = await approve(runner, "legacy", card.tool_call_id)
            [server] = runner.template.mcps
            client = await runner.mcp.connection(server).client()
            negotiated = client.protocol_version
    assert negotiated == "2025-11-25"
    assert old.shop.methods[:2] == ["server/discover", "initialize"]
    assert "initialize" in old.shop.methods and "tools/list" in old.shop.methods
    assert "old__lookup" in model.offered(0)
    assert outputs(first) == [{"sku": "kettle", "stock": 6}]
    assert said(resumed) == "order O-1 cancelled"
    assert old.shop.executions == [("cancel_order", {"order_id": "O-1"})]


async def test_a_stdio_server_runs_and_asks_as_an_http_one(redis: Redis, tmp_path: Path) -> None:
    """The same server run as a subprocess over stdio: read-only runs, destructive
    parks and runs once approved; the session is shared, and ends with the runner."""
    calls = tmp_path / "calls.txt"
    turns = [
        [call("local__lookup", {"sku": "pan"}), call("local__cancel_order", {"order_id": "C-3"})],
        [text("{{result.local__cancel_order.result}}")],
    ]
    async with mcp_runner(redis, turns, [stdio_entry(calls_file=calls)]) as (runner, model):
        first = await turn(runner, "stdio")
        assert outputs(first) == [{"sku": "pan", "stock": 3}]
        [card] = parked(first)
        assert card.tool_name == "local__cancel_order" and not calls.exists()
        resumed = await approve(runner, "stdio", card.tool_call_id)
        assert "local__note" in model.offered(0)
    assert said(resumed) == "order C-3 cancelled"
    assert calls.read_text() == "cancel_order [('order_id', 'C-3')]\n"


async def test_a_request_for_sampling_ends_the_call_with_a_definite_error(
    redis: Redis, shop: McpServerThread
) -> None:
    """A request for sampling is refused as not provided (forms and links park: see
    test_mcp_input.py)."""
    async with mcp_runner(
        redis, [[call("shop__ask_model")], [text("ok")]], [shop_entry(shop.url)]
    ) as (
        runner,
        _,
    ):
        events = await turn(runner, "input")
    [error] = errors(events)
    assert "asked Parkway for model sampling, which Parkway does not provide" in error
    assert finish(events) == "stop"


async def test_a_python_agent_brings_its_stdio_server_to_a_runtime(
    redis_url: str, redis: Redis, tmp_path: Path
) -> None:
    """A Python agent is the operator's, as an agent file is: its ``mcps`` may run a
    stdio server, whose env references are read from the runtime's ``environ``; the
    destructive call parks and runs once approved, with no HTTP at all."""
    del redis
    calls = tmp_path / "calls.txt"
    entry = stdio_entry(calls_file=calls)
    entry["env"]["SHOP_MOOD"] = {"env": "PARKWAY_TEST_MOOD"}
    shop_agent = Agent(
        "shop",
        instructions="shop agent",
        model={
            "scripted": {
                "turns": [
                    [call("local__cancel_order", {"order_id": "E-5"})],
                    [text("{{result.local__cancel_order.result}}")],
                ]
            }
        },
        mcps=[entry],
    )
    assert shop_agent.to_template()["mcps"] == [entry]
    async with Runtime(
        shop_agent, redis_url=redis_url, environ={"PARKWAY_TEST_MOOD": "calm"}
    ) as rt:
        first = await rt.send("py", "cancel E-5")
        [gate] = first.parked
        assert gate.tool == "local__cancel_order" and not calls.exists()
        done = await rt.approve("py", gate.id, resume=True)
    assert done.text == "order E-5 cancelled"
    assert calls.read_text() == "cancel_order [('order_id', 'E-5')] mood=calm\n"


# The check runs in a fresh interpreter: this one has long imported the SDK.
_NO_SDK_UNTIL_A_SERVER = r"""
import asyncio, sys

def sdk_loaded():
    return sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types"))

import parkway.transport.app
from parkway.runner import Runtime, parse_agent_file
from parkway.runner.demo import DEMO_AGENT

async def main(url):
    async with Runtime(parse_agent_file(DEMO_AGENT), redis_url=url) as rt:
        await rt.send("lazy-sdk", "hello")
    assert sdk_loaded() == [], sdk_loaded()
    from parkway.runner.mcp import McpStatus  # a name whose module needs the SDK
    assert "mcp" in sdk_loaded(), sdk_loaded()

asyncio.run(main(sys.argv[1]))
print("ok")
"""


def test_a_worker_whose_agents_name_no_mcp_server_never_loads_the_sdk(
    redis: Redis, redis_url: str
) -> None:
    """The ``mcp`` SDK is the largest import of all (about 40% of a server's start):
    the app, the runner and a turn on an agent without ``mcps`` run without it, and the
    MCP face still hands out every name once asked."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _NO_SDK_UNTIL_A_SERVER, redis_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
