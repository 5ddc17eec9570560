"""Compatibility with the real ``@ag-ui/client`` 1.0.0 (``HttpAgent``) from npm.

Each test starts a real Parkway (uvicorn in a thread, or real worker processes where a
crash matters) and drives ``POST /api/agui`` with ``tests/helpers/aisdk/agui_driver.mjs``:
an ``HttpAgent`` that says things, answers its frontend tools with tool messages, and
answers interrupts with ``buildResumeArray`` over its ``pendingInterrupts``, as an
application does. Every event on the wire is validated by ``@ag-ui/core``'s zod schemas
(``schemaErrors``) and by ``ag-ui-protocol``'s pydantic types; the client's own checks
(event order, interrupt coverage, expiry) run as they do for any user.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Event
from pydantic import SecretStr, TypeAdapter
from redis.asyncio import Redis

from tests.helpers import tools as test_tools
from tests.helpers.connect_rig import TOKEN_KEY, RecordingModel
from tests.helpers.support import (
    CONNECT_EMBED,
    PUBLISH_TOOL,
    ROOT,
    Api,
    ParkwayProcess,
    ServerThread,
    agent_doc,
    call,
    server_thread,
    text,
)

pytestmark = [pytest.mark.node, pytest.mark.usefixtures("redis")]

NODE_DIR = ROOT / "tests" / "helpers" / "aisdk"
DRIVER = NODE_DIR / "agui_driver.mjs"
DRIVER_TIMEOUT_S = 60
_EVENTS: TypeAdapter[Any] = TypeAdapter(Event)

COLOR_TOOL = {
    "name": "pick_color",
    "description": "Let the user pick a color.",
    "parameters": {"type": "object", "properties": {"palette": {"type": "string"}}},
}


@pytest.fixture(scope="session")
def node() -> str:
    """The node executable, once @ag-ui/client is installed (CI fails without it)."""
    reason = None
    if shutil.which("node") is None:
        reason = "the `node` executable is not on PATH"
    elif not (NODE_DIR / "node_modules" / "@ag-ui" / "client").is_dir():
        reason = "tests/helpers/aisdk/node_modules lacks @ag-ui/client: run `make node-deps`"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"AG-UI client tests cannot run in CI: {reason}")
        pytest.skip(f"AG-UI client tests skipped: {reason}")
    return str(shutil.which("node"))


async def drive(node: str, scenario: Mapping[str, Any]) -> dict[str, Any]:
    """Run the driver over ``scenario``; its report, with every wire event also checked
    by ag-ui-protocol's types and no zod schema error."""
    proc = await asyncio.create_subprocess_exec(
        node,
        str(DRIVER),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=NODE_DIR,
    )
    out, err = await asyncio.wait_for(
        proc.communicate(json.dumps(scenario).encode()), DRIVER_TIMEOUT_S
    )
    assert proc.returncode == 0, err.decode()
    report: dict[str, Any] = json.loads(out)
    assert report["schemaErrors"] == [], report["schemaErrors"]
    assert not report["problems"], report["problems"]
    for run in report["runs"]:
        for event in run["events"]:
            _EVENTS.validate_python(event)
    return report


def scenario(
    base_url: str,
    api: Api,
    thread_id: str,
    actions: Sequence[Mapping[str, Any]],
    *,
    state: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "url": f"{base_url}/api/agui",
        "headers": {"authorization": f"Bearer {api.token}"},
        "threadId": thread_id,
        "actions": list(actions),
        "timeoutMs": 45_000,
        **extra,
    }
    if state is not None:
        out["state"] = state
    return out


def state_of(report: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "messages": report["messages"],
        "pendingInterrupts": report["pendingInterrupts"],
        "state": report["state"],
    }


def ok(run: Mapping[str, Any]) -> Mapping[str, Any]:
    assert run["error"] is None, run["error"]
    assert run["httpStatus"] == 200, run
    assert not run["runErrors"], run["runErrors"]
    return run


def said(run: Mapping[str, Any]) -> str:
    return "".join(e["delta"] for e in run["events"] if e["type"] == "TEXT_MESSAGE_CONTENT")


def results(run: Mapping[str, Any]) -> dict[str, Any]:
    return {
        e["toolCallId"]: json.loads(e["content"])
        for e in run["events"]
        if e["type"] == "TOOL_CALL_RESULT"
    }


def assistant_text(report: Mapping[str, Any]) -> list[str]:
    return [m.get("content") or "" for m in report["messages"] if m["role"] == "assistant"]


@pytest.fixture(autouse=True)
def _clear_executions() -> None:
    test_tools.EXECUTIONS.clear()


def test_a_frontend_tool_answered_by_the_client(node: str, redis_url: str) -> None:
    agent = agent_doc(
        [[text("Which color?"), call("pick_color", {"palette": "warm"})], [text("Red it is.")]]
    )

    async def run(url: str) -> None:
        api = await Api(url).login()
        report = await drive(
            node,
            scenario(
                url,
                api,
                "fe-1",
                [{"type": "say", "text": "pick one"}, {"type": "answerTools"}],
                tools=[COLOR_TOOL],
                frontend={"pick_color": {"result": {"color": "red"}}},
            ),
        )
        first, second = (ok(r) for r in report["runs"])
        assert first["outcome"] == "success"
        [call_id] = first["pendingToolCallIds"]
        assert second["outcome"] == "success" and not second["pendingToolCallIds"]
        assert said(second) == "Red it is."
        assert assistant_text(report) == ["Which color?", "Red it is."]
        state = await api.state("fe-1")
        [parked] = state["calls"]
        assert parked["toolCallId"] == call_id
        assert parked["outcome"] == {"outcome": "output", "output": {"color": "red"}}
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(run(server.base_url))


def test_approvals_approved_denied_with_a_reason_and_edited(node: str, redis_url: str) -> None:
    editable = {**PUBLISH_TOOL, "name": "publish_editable", "allow_edits": True}
    agent = agent_doc(
        [
            [call("publish", {"title": "one"})],
            [text("first done"), call("publish", {"title": "two"})],
            [text("second refused"), call("publish_editable", {"title": "draft"})],
            [text("all done")],
        ],
        tools=[PUBLISH_TOOL, editable],
    )

    async def run(url: str) -> None:
        api = await Api(url).login()
        first = await drive(node, scenario(url, api, "ap-1", [{"type": "say", "text": "go"}]))
        [interrupt] = ok(first["runs"][0])["interrupts"]
        assert interrupt["reason"] == "tool_call"
        assert first["pendingInterrupts"] == [interrupt]
        # the client refuses a new message while an interrupt is open
        refused = await drive(
            node,
            scenario(url, api, "ap-1", [{"type": "say", "text": "hm"}], state=state_of(first)),
        )
        assert "pending interrupt" in refused["runs"][0]["error"]
        assert refused["runs"][0]["sent"] is False
        yes = {"status": "resolved", "payload": {"approved": True}}
        second = await drive(
            node,
            scenario(
                url,
                api,
                "ap-1",
                [{"type": "resume", "responses": {interrupt["id"]: yes}}],
                state=state_of(first),
            ),
        )
        approved = ok(second["runs"][0])
        assert results(approved) == {interrupt["id"]: {"published": "one"}}
        [deny_me] = approved["interrupts"]
        no = {"status": "resolved", "payload": {"approved": False, "reason": "not two"}}
        third = await drive(
            node,
            scenario(
                url,
                api,
                "ap-1",
                [{"type": "resume", "responses": {deny_me["id"]: no}}],
                state=state_of(second),
            ),
        )
        denied = ok(third["runs"][0])
        assert results(denied) == {deny_me["id"]: {"approved": False, "reason": "not two"}}
        [edit_me] = denied["interrupts"]
        assert "editedArgs" in edit_me["responseSchema"]["properties"]
        edited = {"status": "resolved", "payload": {"approved": True, "editedArgs": {"title": "T"}}}
        fourth = await drive(
            node,
            scenario(
                url,
                api,
                "ap-1",
                [{"type": "resume", "responses": {edit_me["id"]: edited}}],
                state=state_of(third),
            ),
        )
        last = ok(fourth["runs"][0])
        assert results(last) == {edit_me["id"]: {"published": "T"}}
        assert last["outcome"] == "success" and fourth["pendingInterrupts"] == []
        assert [e["input"] for e in test_tools.EXECUTIONS] == [{"title": "one"}, {"title": "T"}]
        assert assistant_text(fourth)[-1] == "all done"
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(run(server.base_url))


def test_two_interrupts_of_one_step_answered_in_one_resume(node: str, redis_url: str) -> None:
    agent = agent_doc(
        [[call("publish", {"title": "A"}), call("publish", {"title": "B"})], [text("both")]]
    )

    async def run(url: str) -> None:
        api = await Api(url).login()
        first = await drive(node, scenario(url, api, "two-1", [{"type": "say", "text": "go"}]))
        a, b = ok(first["runs"][0])["interrupts"]
        assert a["id"] != b["id"]
        responses = {
            a["id"]: {"status": "resolved", "payload": {"approved": True}},
            b["id"]: {"status": "cancelled"},
        }
        second = await drive(
            node,
            scenario(
                url,
                api,
                "two-1",
                [{"type": "resume", "responses": responses}],
                state=state_of(first),
            ),
        )
        done = ok(second["runs"][0])
        assert results(done) == {
            a["id"]: {"published": "A"},
            b["id"]: {"approved": False, "reason": "cancelled"},
        }
        assert said(done) == "both"
        assert [e["input"] for e in test_tools.EXECUTIONS] == [{"title": "A"}]
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(run(server.base_url))


def test_an_expired_interrupt_must_be_cancelled(node: str, redis_url: str) -> None:
    quick = {**PUBLISH_TOOL, "deadline_s": 1}
    agent = agent_doc([[call("publish", {"title": "A"})], [text("moved on")]], tools=[quick])

    async def run(url: str) -> None:
        api = await Api(url).login()
        first = await drive(node, scenario(url, api, "ex-1", [{"type": "say", "text": "go"}]))
        [interrupt] = ok(first["runs"][0])["interrupts"]
        expires = datetime.fromisoformat(interrupt["expiresAt"].replace("Z", "+00:00"))
        while datetime.now(UTC) <= expires:  # the deadline passes: a condition
            await asyncio.sleep(0.05)
        yes = {"status": "resolved", "payload": {"approved": True}}
        late = await drive(
            node,
            scenario(
                url,
                api,
                "ex-1",
                [
                    {"type": "resume", "responses": {interrupt["id"]: yes}},
                    {"type": "resume", "responses": {interrupt["id"]: {"status": "cancelled"}}},
                ],
                state=state_of(first),
            ),
        )
        refused, cancelled = late["runs"]
        assert "expired" in refused["error"]  # the client's own check, before sending
        assert refused["sent"] is False
        # a client that lost its state and sends it anyway: the server refuses it too
        forced = await drive(
            node,
            scenario(
                url,
                api,
                "ex-1",
                [{"type": "resumeRaw", "resume": [{"interruptId": interrupt["id"], **yes}]}],
            ),
        )
        [error] = forced["runs"][0]["runErrors"]
        assert error["code"] in {"interrupt_expired", "already_settled"}
        ok(cancelled)
        assert said(cancelled) == "moved on"
        assert not test_tools.EXECUTIONS
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(run(server.base_url))


def test_a_reload_recovers_the_pending_interrupts(node: str, redis_url: str) -> None:
    agent = agent_doc([[text("Checking."), call("publish", {"title": "A"})], [text("done")]])

    async def run(url: str) -> None:
        api = await Api(url).login()
        first = await drive(node, scenario(url, api, "rl-1", [{"type": "say", "text": "go"}]))
        [interrupt] = ok(first["runs"][0])["interrupts"]
        # a fresh agent (the page reloaded, nothing kept): a run with no input
        reloaded = await drive(node, scenario(url, api, "rl-1", [{"type": "run"}]))
        again = ok(reloaded["runs"][0])
        assert again["outcome"] == "interrupt" and again["interrupts"] == [interrupt]
        assert reloaded["pendingInterrupts"] == [interrupt]
        assert [(m["id"], m["role"]) for m in reloaded["messages"]] == [
            (m["id"], m["role"]) for m in first["messages"]
        ]
        yes = {"status": "resolved", "payload": {"approved": True}}
        done = await drive(
            node,
            scenario(
                url,
                api,
                "rl-1",
                [{"type": "resume", "responses": {interrupt["id"]: yes}}],
                state=state_of(reloaded),
            ),
        )
        assert said(ok(done["runs"][0])) == "done"
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(run(server.base_url))


def test_a_cold_resume_after_a_sigkill_of_the_worker(
    node: str, redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    del redis
    path = tmp_path / "agent.json"
    turns = [[text("Parking."), call("publish", {"title": "cold"})], [text("after the crash")]]
    path.write_text(json.dumps(agent_doc(turns)))

    async def run() -> None:
        first = ParkwayProcess(redis_url, path).start()
        try:
            api = await Api(first.base_url).login()
            parked = await drive(
                node, scenario(first.base_url, api, "cold-1", [{"type": "say", "text": "go"}])
            )
        finally:
            first.kill()  # SIGKILL: nothing of the run is left in any process
        [interrupt] = ok(parked["runs"][0])["interrupts"]
        second = ParkwayProcess(redis_url, path).start()
        try:
            yes = {"status": "resolved", "payload": {"approved": True}}
            resumed = await drive(
                node,
                scenario(
                    second.base_url,
                    api,
                    "cold-1",
                    [{"type": "resume", "responses": {interrupt["id"]: yes}}],
                    state=state_of(parked),
                ),
            )
            done = ok(resumed["runs"][0])
            [result] = results(done).values()
            assert result == {"published": "cold"}
            assert said(done) == "after the crash"
            # the same assistant message goes on: its next step's id follows the first's
            first_step = next(m["id"] for m in parked["messages"] if m["role"] == "assistant")
            started = [e for e in done["events"] if e["type"] == "TEXT_MESSAGE_START"]
            assert started[0]["messageId"] == f"{first_step}-1"
            # once: a repeat of the resume runs nothing again
            again = await drive(
                node,
                scenario(
                    second.base_url,
                    api,
                    "cold-1",
                    [{"type": "resumeRaw", "resume": [{"interruptId": interrupt["id"], **yes}]}],
                ),
            )
            assert ok(again["runs"][0])["outcome"] == "success"
            assert not results(again["runs"][0])
        finally:
            second.stop()
        await api.aclose()

    asyncio.run(run())


@pytest.fixture
def demo_server(redis_url: str) -> Any:
    agent = {
        "template": {"instructions": "demo connect", "tools": [CONNECT_EMBED]},
        "model": {"scripted": {"turns": []}},
    }
    running = ServerThread(
        redis_url,
        agent,
        model=RecordingModel(),
        demo_oauth=True,
        token_key=SecretStr(TOKEN_KEY),
    ).start()
    try:
        yield running
    finally:
        running.stop()


def test_a_request_connection_completed_through_the_demo_provider(
    node: str, demo_server: ServerThread
) -> None:
    from tests.helpers.connect_rig import Browser
    from tests.widgets_api.test_demo_oauth import consent

    url = demo_server.base_url
    browser = Browser(url).login()
    try:
        cookie = "; ".join(f"{k}={v}" for k, v in browser.http.cookies.items())
        headers = {"cookie": cookie, "origin": url}

        async def first() -> dict[str, Any]:
            return await drive(
                node,
                {
                    "url": f"{url}/api/agui",
                    "headers": headers,
                    "threadId": "conn-1",
                    "actions": [{"type": "say", "text": "connect me to demo"}],
                },
            )

        parked = asyncio.run(first())
        [interrupt] = ok(parked["runs"][0])["interrupts"]
        assert interrupt["reason"] == "connection"
        widget = interrupt["metadata"]["parkway"]["widget"]
        assert widget["providerName"] == "Demo account"
        # the person signs in through the widget's popup (the same start URL the
        # connect card opens), and the server's callback settles the call
        start = browser.get(widget["startUrl"])
        assert start.status_code == 303, start.text
        page = browser.get(consent(browser, start.headers["location"], "allow"))
        assert page.status_code == 200, page.text

        async def resume() -> dict[str, Any]:
            return await drive(
                node,
                {
                    "url": f"{url}/api/agui",
                    "headers": headers,
                    "threadId": "conn-1",
                    "state": state_of(parked),
                    "actions": [
                        {"type": "resume", "responses": {interrupt["id"]: {"status": "resolved"}}}
                    ],
                },
            )

        resumed = ok(asyncio.run(resume())["runs"][0])
        [result] = results(resumed).values()
        assert result["connected"] is True and result["account"] == "demo-user"
        assert "token" not in json.dumps(resumed["events"]).lower().replace("tokens", "")
    finally:
        browser.close()
