"""Code Mode at the runner: artifacts for large results, execute_code reviewed and run in
the real sandbox (bubblewrap), brokered tool calls, the agent's function library, and
what happens when isolation is unavailable. The sandbox's own escape tests are in
tests/runner/sandbox/; the HTTP routes and widgets in tests/transport/test_code_routes.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from parkway.runner import Runner, parse_agent_file
from parkway.runner.agent.revisions import AgentStore
from parkway.runner.canonical import canonical_json
from parkway.runner.codemode.library import FunctionLibrary, check_function
from parkway.runner.codemode.prompt import DESCRIPTION
from parkway.runner.codemode.runtime import HARD_LIMITS, CodeMode
from parkway.runner.demo import SALES_SUMMARY_CODE, get_sales
from parkway.runner.events import DataPublished, Event, ToolSucceeded
from parkway.runner.sandbox.bwrap import BwrapProvider
from parkway.runner.sandbox.provider import Limits
from parkway.transport.aisdk.uimessages import chat_messages
from tests.helpers.runner_rig import parked, said, turn
from tests.helpers.support import (
    PICK_TOOL,
    PUBLISH_TOOL,
    WEATHER_TOOL,
    Api,
    ParkwayProcess,
    agent_doc,
    call,
    eventually,
    sse_chunks,
    text,
    turn_once_the_lease_lapses,
)

GUEST = Path(__file__).resolve().parents[2] / "runner" / "sandbox" / "guest"

SALES_TOOL = {"type": "function", "name": "get_sales", "ref": "parkway.runner.demo:get_sales"}
CODE_TOOL = {"type": "platform", "op": "execute_code"}
LIBRARY_TOOLS = [
    {"type": "platform", "op": "save_function"},
    {"type": "platform", "op": "list_functions"},
]


def sandbox_missing() -> str | None:
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    return None


needs_sandbox = pytest.mark.skipif(
    sandbox_missing() is not None and os.environ.get("PARKWAY_REQUIRE_SANDBOX") != "1",
    reason=f"SANDBOX TESTS DID NOT RUN: {sandbox_missing()}",
)


async def code_runner(
    redis: Redis,
    turns: list[list[dict[str, Any]]],
    *,
    tools: list[Any],
    provider: Any = None,
    agents: bool = False,
) -> Runner:
    doc = {
        "template": {"instructions": "code agent", "tools": tools},
        "model": {"scripted": {"turns": turns}},
    }
    agent = parse_agent_file(doc)
    code = CodeMode(BwrapProvider() if provider is None else provider)
    await code.start()
    store = None
    if agents:
        store = AgentStore(redis, "code-agent", dict(agent.template.raw))
        await store.ensure_seeded()
    return Runner(redis, agent.model, agent.template, code=code, agents=store)


async def approve(runner: Runner, chat: str, events: list[Event], **outcome: Any) -> list[Event]:
    [pending] = parked(events)
    await runner.settle(chat, "alice", pending.tool_call_id, {"outcome": "approved", **outcome})
    run = await runner.resume(chat, "alice")
    return await run.collect()


def output_of(events: list[Event]) -> Any:
    return next(e.output for e in events if isinstance(e, ToolSucceeded))


async def test_a_large_server_tool_result_is_kept_as_an_artifact(redis: Redis) -> None:
    """The model sees a reference (id, size, preview); the artifact holds the whole
    result, byte for byte the JSON the tool returned; a small result stays inline."""
    runner = await code_runner(
        redis,
        [[call("get_sales", {"month": "2026-10"}), call("get_weather", {"city": "Oslo"})]],
        tools=[SALES_TOOL, WEATHER_TOOL],
        provider=BwrapProvider(bwrap="/nonexistent/bwrap"),
    )
    events = await turn(runner, "art-1")
    outputs = {e.tool_call_id: e.output for e in events if isinstance(e, ToolSucceeded)}
    reference, weather = outputs.values()
    assert weather == {"city": "Oslo", "temperature_c": 4, "sky": "snow"}
    whole = canonical_json(get_sales({"month": "2026-10"})).encode()
    assert len(whole) > 32 * 1024
    assert reference["bytes"] == len(whole) and reference["media_type"] == "application/json"
    assert reference["preview"].startswith('{"currency":"EUR"') and len(reference["preview"]) < 1100
    found = await runner.artifacts.get("art-1", reference["artifact_id"])
    assert found is not None and found[1] == whole
    # the model's next request carries the reference, not 60 KB
    record = await runner.chat("art-1", "alice")
    stored = json.dumps(list(record.entries))
    assert reference["artifact_id"] in stored and '"order": "2026-10-0599"' not in stored


async def test_a_large_client_answer_reaches_the_model_as_an_artifact(redis: Redis) -> None:
    runner = await code_runner(
        redis,
        [[call("pick", {"q": "which?"})], [text("got {{result.pick.bytes}} bytes")]],
        tools=[PICK_TOOL],
        provider=BwrapProvider(bwrap="/nonexistent/bwrap"),
    )
    first = await turn(runner, "art-client")
    [pending] = parked(first)
    answer = {"choice": "x" * 40_000}
    await runner.settle(
        "art-client", "alice", pending.tool_call_id, {"outcome": "output", "output": answer}
    )
    after = await (await runner.resume("art-client", "alice")).collect()
    assert said(after) == f"got {len(canonical_json(answer))} bytes"
    [stored] = await runner.artifacts.list("art-client")
    assert stored.source == "pick" and stored.tool_call_id == pending.tool_call_id


@needs_sandbox
async def test_execute_code_waits_for_approval_then_summarises_the_artifact(redis: Redis) -> None:
    """The demo's round trip: a large result becomes an artifact, the model asks to run
    code on it, nothing runs before the human approves, and the approved program's
    result reaches the model."""
    runner = await code_runner(
        redis,
        [
            [call("get_sales", {"month": "2026-10"})],
            [
                call(
                    "execute_code",
                    {"code": SALES_SUMMARY_CODE, "inputs": ["{{result.get_sales.artifact_id}}"]},
                )
            ],
            [text("top: {{result.execute_code.result.top_city}}")],
        ],
        tools=[SALES_TOOL, CODE_TOOL],
    )
    first = await turn(runner, "code-1")
    [approval] = parked(first)
    assert approval.kind == "approval" and approval.tool_name == "execute_code"
    assert approval.input["inputs"][0].startswith("art_")
    after = await approve(runner, "code-1", first)
    output = output_of(after)
    orders = get_sales({})["orders"]
    totals: dict[str, float] = {}
    for order in orders:
        totals[order["city"]] = totals.get(order["city"], 0) + order["amount_eur"]
    top = max(totals, key=lambda city: totals[city])
    assert output["status"] == "ok", output
    assert output["result"] == {
        "orders": 600,
        "top_city": top,
        "top_total_eur": round(totals[top], 2),
    }
    assert output["wall_ms"] > 0 and output["stderr"] == ""


@needs_sandbox
async def test_the_edited_program_is_what_runs(redis: Redis) -> None:
    runner = await code_runner(
        redis,
        [[call("execute_code", {"code": "result(1 + 1)"})], [text("done")]],
        tools=[CODE_TOOL],
    )
    first = await turn(runner, "code-edit")
    after = await approve(runner, "code-edit", first, input={"code": "print('edited')\n40 + 2"})
    output = output_of(after)
    assert output["status"] == "ok" and output["stdout"] == "edited\n" and output["result"] == 42


@needs_sandbox
async def test_code_calls_allowed_tools_through_the_host_and_never_approval_ones(
    redis: Redis,
) -> None:
    """tools.call runs a server tool whose policy is allow, on the host with the chat's
    context, and shows the call on the stream; a tool that needs approval is refused."""
    program = (
        "weather = tools.call('get_weather', {'city': 'Paris'})\n"
        "try:\n"
        "    tools.call('publish', {'title': 'sneaky'})\n"
        "    refused = None\n"
        "except Exception as exc:\n"
        "    refused = str(exc)\n"
        "result({'sky': weather['sky'], 'refused': refused})\n"
    )
    runner = await code_runner(
        redis,
        [[call("execute_code", {"code": program})], [text("done")]],
        tools=[CODE_TOOL, WEATHER_TOOL, PUBLISH_TOOL],
    )
    first = await turn(runner, "code-broker")
    after = await approve(runner, "code-broker", first)
    output = output_of(after)
    assert output["status"] == "ok", output
    assert output["result"]["sky"] == "cloudy"
    assert "asks a human first" in output["result"]["refused"]
    [code_call] = parked(first)
    published = [e for e in after if isinstance(e, DataPublished) and e.name == "code-tool-call"]
    # each brokered call its own part (a client replaces parts of one type and id)
    assert [e.part_id for e in published] == [code_call.tool_call_id, f"{code_call.tool_call_id}:1"]
    shown = [e.data for e in published]
    assert shown[0] == {
        "toolCallId": code_call.tool_call_id,
        "name": "get_weather",
        "input": {"city": "Paris"},
        "output": {"city": "Paris", "temperature_c": 14, "sky": "cloudy"},
    }
    assert shown[1]["name"] == "publish" and "asks a human first" in shown[1]["error"]
    # kept with the result, so a reloaded chat lists them again, with the same part ids
    record = await runner.chat("code-broker", "alice")
    [message] = [m for m in chat_messages(record, lambda c: {}) if m["role"] == "assistant"]
    kept = [p for p in message["parts"] if p["type"] == "data-code-tool-call"]
    assert [(p["id"], p["data"]) for p in kept] == [(e.part_id, e.data) for e in published]


@needs_sandbox
async def test_a_saved_function_is_importable_by_later_code(redis: Redis) -> None:
    """save_function (approved) makes version 1; code imports it from ``library``;
    list_functions shows it with its signature."""
    saved = "def shout(text, times=1):\n    return (text.upper() + '!') * times\n"
    runner = await code_runner(
        redis,
        [
            [call("save_function", {"name": "shout", "code": saved, "description": "Loud."})],
            [call("list_functions", {})],
            [call("execute_code", {"code": "from library import shout\nshout('hi', 2)"})],
            [text("done")],
        ],
        tools=[CODE_TOOL, *LIBRARY_TOOLS],
        agents=True,
    )
    first = await turn(runner, "code-lib")
    after = await approve(runner, "code-lib", first)
    outputs = [e.output for e in after if isinstance(e, ToolSucceeded)]
    assert outputs[0] == {"saved": True, "name": "shout", "version": 1}
    assert outputs[1]["functions"][0]["signature"] == "shout(text, times=1)"
    ran = await approve(runner, "code-lib", after)
    assert output_of(ran)["result"] == "HI!HI!"


async def test_library_versions_are_kept_and_each_agent_has_its_own(redis: Redis) -> None:
    one = FunctionLibrary(redis, "agent-one")
    other = FunctionLibrary(redis, "agent-two")
    await one.save("f", "def f():\n    return 1\n", "first", by="agent:alice")
    await one.save("f", "def f():\n    return 2\n", "second", by="agent:bob")
    versions = await one.versions("f")
    assert [(v.version, v.description, v.by) for v in versions] == [
        (1, "first", "agent:alice"),
        (2, "second", "agent:bob"),
    ]
    assert (await one.modules()) == {"f": "def f():\n    return 2\n"}
    assert await other.heads() == []


@pytest.mark.parametrize(
    ("name", "code", "problem"),
    [
        ("Bad-Name", "def f(): pass", "identifier"),
        ("class", "def f(): pass", "identifier"),
        ("f", "def f(:", "does not parse"),
        ("f", "def g():\n    return 1\n", "must define a function named 'f'"),
    ],
)
def test_a_function_must_parse_and_define_its_name(name: str, code: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_function(name, code)


async def test_without_isolation_code_never_runs_and_the_answer_says_why(
    redis: Redis, tmp_path: Path
) -> None:
    """A missing bwrap: the op answers ``unavailable`` with the fix and runs nothing
    (the program would have created a file on the host)."""
    marker = tmp_path / "ran"
    runner = await code_runner(
        redis,
        [[call("execute_code", {"code": f"open({str(marker)!r}, 'w').write('x')"})], [text("ok")]],
        tools=[CODE_TOOL],
        provider=BwrapProvider(bwrap="/nonexistent/bwrap"),
    )
    assert runner.code is not None and not runner.code.available
    assert "apt-get install bubblewrap" in (runner.code.reason or "")
    first = await turn(runner, "code-off")
    after = await approve(runner, "code-off", first)
    output = output_of(after)
    assert output["status"] == "unavailable"
    assert "apt-get install bubblewrap" in output["message"]
    assert not marker.exists()


def test_limits_go_down_on_request_and_up_only_when_the_operator_allows() -> None:
    strict = CodeMode(None, limits=Limits(wall_s=10))
    template = {"permissions": {"max_runtime_s": 30, "filesystem": "none"}}
    limits = strict.limits_for(template, {"timeout_s": 45, "memory_mb": 128})
    assert limits.wall_s == 30  # the template's runtime; the call may not go past it
    assert limits.memory_bytes == 128 * 2**20 and limits.disk_bytes == 2**20
    assert strict.limits_for(None, {"timeout_s": 5}).wall_s == 5
    assert strict.limits_for(None, {"memory_mb": 4096}).memory_bytes == 512 * 2**20
    generous = dataclasses.replace(strict, allow_raise=True)
    assert generous.limits_for(None, {"memory_mb": 4096}).memory_bytes == HARD_LIMITS.memory_bytes
    assert generous.limits_for({"permissions": {"max_runtime_s": 600}}, None).wall_s == 60


def test_the_description_names_only_helpers_the_sandbox_has() -> None:
    """The model is told of `pw.<name>` helpers: each must exist in the guest module."""
    import ast
    import re

    source = (GUEST / "pw.py").read_text()
    defined = {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    promised = set(re.findall(r"pw\.([a-z_]+)", DESCRIPTION))
    assert promised and promised <= defined, promised - defined


@needs_sandbox
@pytest.mark.slow
async def test_a_worker_killed_while_code_runs_leaves_result_unknown_never_a_rerun(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """kill -9 of the worker whose sandbox runs approved code: the sandbox dies with it
    (no survivor), and the next turn, on another worker, tells the model the result is
    unknown; the program ran exactly once."""
    marker = tmp_path / "marker.txt"
    note_tool = {"type": "function", "name": "note", "ref": "tests.helpers.tools:note"}
    program = (
        f"tools.call('note', {{'path': {str(marker)!r}, 'line': 'started'}})\n"
        "import time\n"
        "time.sleep(30)\n"
    )
    agent = tmp_path / "agent.json"
    agent.write_text(
        json.dumps(
            agent_doc(
                [[call("execute_code", {"code": program})], [text("{{last_tool_results}}")]],
                tools=[CODE_TOOL, note_tool],
            )
        )
    )
    before = sandbox_processes()
    first = ParkwayProcess(redis_url, agent, env={"PARKWAY_LEASE_S": "1"}).start()
    assert first.proc is not None
    first_pid = first.proc.pid
    api = await Api(first.base_url).login()
    try:
        chunks = await api.say("code-crash", "go", "u1")
        assert any(c["type"] == "tool-approval-request" for c in chunks)
        [call_part] = [c for c in chunks if c["type"] == "tool-input-available"]
        settled = await api.settle("code-crash", call_part["toolCallId"], {"outcome": "approved"})
        assert settled.status_code == 200, settled.text
        resuming = asyncio.create_task(api.resume("code-crash"))
        await eventually(lambda: marker.exists() and marker.read_text() == "started\n", within_s=30)
        first.kill()
        with contextlib.suppress(httpx.HTTPError):
            await resuming
    finally:
        first.kill()
        await api.aclose()
    # the sandbox died with its worker (bwrap --die-with-parent, the pid namespace)
    await eventually(lambda: sandbox_processes() <= before, within_s=10, what="no survivor")

    second = ParkwayProcess(redis_url, agent, env={"PARKWAY_LEASE_S": "1"}).start()
    try:
        response = await turn_once_the_lease_lapses(
            api, second.base_url, "code-crash", "again", "u2"
        )
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    said_text = "".join(c.get("delta", "") for c in sse_chunks(response.text))
    [result] = json.loads(said_text)
    assert result["tool"] == "execute_code"
    assert result["result"]["error"].startswith("result unknown")
    assert marker.read_text() == "started\n"  # ran exactly once
    # the dead worker's workspace is removed when the next worker starts its sandbox
    assert not list(Path(tempfile.gettempdir()).glob(f"parkway-code-{first_pid}-*"))


def sandbox_processes() -> set[int]:
    """Pids of processes running as the sandbox uid (65534)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == 65534:
                    found.add(int(entry.name))
            except OSError:
                continue
    return found
