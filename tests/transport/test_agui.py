"""``POST /api/agui``: the AG-UI 1.0 wire, over HTTP against a real server and Redis.

Every event each test reads is validated by ``ag-ui-protocol``'s own pydantic types (a
discriminated union over every AG-UI event), and the run's frame is checked as the AG-UI
client checks it: RUN_STARTED first with the input's ids and the protocol version, one
RUN_FINISHED or RUN_ERROR last, every text, tool call, reasoning part and step closed
before it (tests/helpers/agui.py). The real ``@ag-ui/client`` drives the same endpoint
in test_agui_client.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from parkway.transport.api.sessions import SessionAuthenticator
from tests.helpers import tools as test_tools
from tests.helpers.agui import (
    AguiClient,
    agui_events,
    check_frame,
    kinds,
    outcome,
    results,
    same_run,
    stream_run,
    texts,
)
from tests.helpers.support import (
    PICK_TOOL,
    PUBLISH_TOOL,
    TEST_SECRET,
    Api,
    agent_doc,
    call,
    eventually,
    server_thread,
    text,
)

pytestmark = pytest.mark.usefixtures("redis")


@pytest.fixture(autouse=True)
def _clear_executions() -> None:
    test_tools.EXECUTIONS.clear()


async def _login(url: str) -> Api:
    return await Api(url).login()


def test_an_approval_interrupts_the_run_and_a_resume_approves_it(redis_url: str) -> None:
    agent = agent_doc(
        [
            [text("Publishing."), call("publish", {"title": "Q3"})],
            [text("Published.")],
        ]
    )

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        first = await client.say("publish it")
        assert texts(first) == "Publishing."
        end = outcome(first)
        assert end["type"] == "interrupt"
        [interrupt] = end["interrupts"]
        starts = [e for e in first if e["type"] == "TOOL_CALL_START"]
        assert interrupt["toolCallId"] == starts[0]["toolCallId"]
        assert interrupt["reason"] == "tool_call"
        assert interrupt["responseSchema"]["required"] == ["approved"]
        assert interrupt["expiresAt"].endswith("Z")
        about = interrupt["metadata"]["parkway"]
        assert about["toolName"] == "publish" and about["input"] == {"title": "Q3"}
        assert about["widget"]
        assert not test_tools.EXECUTIONS
        second = await client.run(
            resume=[
                {
                    "interruptId": interrupt["id"],
                    "status": "resolved",
                    "payload": {"approved": True},
                }
            ]
        )
        assert outcome(second) == {"type": "success"}
        assert results(second) == {interrupt["toolCallId"]: {"published": "Q3"}}
        assert texts(second) == "Published."
        assert len(test_tools.EXECUTIONS) == 1
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_a_reload_gets_the_pending_interrupts_and_the_messages_back(redis_url: str) -> None:
    agent = agent_doc(
        [
            [text("Both."), call("publish", {"title": "A"}), call("publish", {"title": "B"})],
            [text("Done.")],
        ]
    )

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        first = await client.say("publish both")
        interrupts = outcome(first)["interrupts"]
        assert len(interrupts) == 2
        fresh = AguiClient(api, client.thread_id)  # lost everything
        again = await fresh.run()
        snapshot = next(e for e in again if e["type"] == "MESSAGES_SNAPSHOT")
        assert [m["role"] for m in snapshot["messages"]] == ["user", "assistant"]
        assert snapshot["messages"][1]["content"] == "Both."
        assert len(snapshot["messages"][1]["toolCalls"]) == 2
        assert outcome(again)["interrupts"] == interrupts
        # the snapshot names the messages as the live run did
        assert [m["id"] for m in fresh.messages] == [m["id"] for m in client.messages]
        done = await fresh.run(
            resume=[
                {
                    "interruptId": interrupts[0]["id"],
                    "status": "resolved",
                    "payload": {"approved": True},
                },
                {
                    "interruptId": interrupts[1]["id"],
                    "status": "resolved",
                    "payload": {"approved": False, "reason": "not B"},
                },
            ]
        )
        assert results(done) == {
            interrupts[0]["id"]: {"published": "A"},
            interrupts[1]["id"]: {"approved": False, "reason": "not B"},
        }
        assert texts(done) == "Done."
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_a_frontend_tool_is_answered_by_the_next_runs_tool_message(redis_url: str) -> None:
    agent = agent_doc(
        [[text("Which color?"), call("pick_color", {"palette": "warm"})], [text("Red it is.")]]
    )

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        client.tools = [
            {
                "name": "pick_color",
                "description": "Let the user pick a color.",
                "parameters": {"type": "object", "properties": {"palette": {"type": "string"}}},
            }
        ]
        first = await client.say("pick")
        end = outcome(first)
        assert end["type"] == "success"
        [call_id] = end["pendingToolCallIds"]
        client.messages.append(
            {"id": "tm-1", "role": "tool", "toolCallId": call_id, "content": '{"color":"red"}'}
        )
        second = await client.run()
        assert outcome(second) == {"type": "success"}
        assert texts(second) == "Red it is."
        assert call_id not in results(second)  # the client's own answer is not echoed
        state = await api.state(client.thread_id)
        [parked] = [c for c in state["calls"] if c["toolCallId"] == call_id]
        assert parked["outcome"] == {"outcome": "output", "output": {"color": "red"}}
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def _resolved(interrupt_id: str, payload: Any = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"interruptId": interrupt_id, "status": "resolved"}
    if payload is not None:
        entry["payload"] = payload
    return entry


def _run_error(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    assert events[-1]["type"] == "RUN_ERROR", events[-1]
    return dict(events[-1])


def test_an_approval_with_edited_arguments_runs_what_the_human_approved(redis_url: str) -> None:
    agent = agent_doc([[call("publish_editable", {"title": "draft"})], [text("ok")]])

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        [interrupt] = outcome(await client.say("go"))["interrupts"]
        assert "editedArgs" in interrupt["responseSchema"]["properties"]
        assert interrupt["metadata"]["parkway"]["allowEdits"] is True
        done = await client.run(
            resume=[
                _resolved(interrupt["id"], {"approved": True, "editedArgs": {"title": "Final"}})
            ]
        )
        assert results(done) == {interrupt["id"]: {"published": "Final"}}
        assert [e["input"] for e in test_tools.EXECUTIONS] == [{"title": "Final"}]
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_resumes_the_rules_refuse_change_nothing(redis_url: str) -> None:
    agent = agent_doc(
        [[call("publish", {"title": "A"}), call("publish", {"title": "B"})], [text("ok")]]
    )

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        first, second = outcome(await client.say("go"))["interrupts"]
        yes = {"approved": True}
        refused = {
            "unknown_interrupt": [_resolved(first["id"], yes), _resolved("nope", yes)],
            "duplicate_resume": [_resolved(first["id"], yes), _resolved(first["id"], yes)],
            "resume_incomplete": [_resolved(first["id"], yes)],
            "invalid_resume": [_resolved(first["id"], {"ok": 1}), _resolved(second["id"], yes)],
        }
        for code, resume in refused.items():
            status, events, raw = await client.post(resume=resume)
            assert status == 200, raw
            error = _run_error(events)
            assert error["code"] == code, error
            assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
        # edits where the tool allows none are refused as well
        status, events, _ = await client.post(
            resume=[
                _resolved(first["id"], {"approved": True, "editedArgs": {"title": "Z"}}),
                _resolved(second["id"], yes),
            ]
        )
        assert _run_error(events)["code"] == "invalid_resume"
        state = await api.state(client.thread_id)
        assert [c["status"] for c in state["calls"]] == ["pending", "pending"]
        assert not test_tools.EXECUTIONS
        # a bare boolean is read as {approved}
        done = await client.run(resume=[_resolved(first["id"], True), _resolved(second["id"], yes)])
        assert len(results(done)) == 2 and texts(done) == "ok"
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_a_repeated_resume_is_idempotent_and_a_different_one_is_refused(redis_url: str) -> None:
    agent = agent_doc([[call("publish", {"title": "A"})], [text("ok")]])

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        [interrupt] = outcome(await client.say("go"))["interrupts"]
        resume = [_resolved(interrupt["id"], {"approved": True})]
        assert texts(await client.run(resume=resume)) == "ok"
        again = await client.run(resume=resume)
        assert outcome(again) == {"type": "success"}
        assert not results(again) and not texts(again)
        snapshot = next(e for e in again if e["type"] == "MESSAGES_SNAPSHOT")
        assert snapshot["messages"][-1]["content"] == "ok"
        _status, events, _ = await client.post(
            resume=[_resolved(interrupt["id"], {"approved": False})]
        )
        assert _run_error(events)["code"] == "already_settled"
        cancel = await client.run(resume=[{"interruptId": interrupt["id"], "status": "cancelled"}])
        assert outcome(cancel) == {"type": "success"}
        assert len(test_tools.EXECUTIONS) == 1
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_an_expired_interrupt_can_only_be_cancelled(redis_url: str) -> None:
    quick = {**PUBLISH_TOOL, "deadline_s": 1}
    agent = agent_doc([[call("publish", {"title": "A"})], [text("after")]], tools=[quick])

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        [interrupt] = outcome(await client.say("go"))["interrupts"]
        expires = datetime.fromisoformat(interrupt["expiresAt"].replace("Z", "+00:00"))
        while datetime.now(UTC) <= expires:  # the deadline passes (a condition, not a guess)
            await asyncio.sleep(0.05)
        _status, events, _ = await client.post(
            resume=[_resolved(interrupt["id"], {"approved": True})]
        )
        error = _run_error(events)
        assert error["code"] == "interrupt_expired"
        assert "cancel it" in error["message"]
        done = await client.run(resume=[{"interruptId": interrupt["id"], "status": "cancelled"}])
        assert outcome(done) == {"type": "success"}
        [result] = results(done).values()
        assert result["approved"] is False
        assert texts(done) == "after"
        assert not test_tools.EXECUTIONS
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_a_new_message_supersedes_open_interrupts(redis_url: str) -> None:
    agent = agent_doc([[call("publish", {"title": "A"})], [text("fresh turn")]])

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        [interrupt] = outcome(await client.say("go"))["interrupts"]
        turn = await client.say("never mind")
        assert texts(turn) == "fresh turn" and outcome(turn) == {"type": "success"}
        state = await api.state(client.thread_id)
        [parked] = state["calls"]
        assert parked["toolCallId"] == interrupt["id"]
        assert parked["outcome"]["reason"] == "superseded_by_user_message"
        assert not test_tools.EXECUTIONS
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_a_settle_on_another_wire_is_the_same_one_winner_settle(redis_url: str) -> None:
    agent = agent_doc([[call("publish", {"title": "A"})], [text("ok")]])

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        [interrupt] = outcome(await client.say("go"))["interrupts"]
        settled = await api.settle(client.thread_id, interrupt["id"], {"outcome": "denied"})
        assert settled.status_code == 200, settled.text
        # the interrupt is no longer open: a reload finds none, and the run goes on
        _status, events, _ = await client.post(
            resume=[_resolved(interrupt["id"], {"approved": True})]
        )
        assert _run_error(events)["code"] == "already_settled"
        done = await client.run(resume=[{"interruptId": interrupt["id"], "status": "cancelled"}])
        assert results(done) == {interrupt["id"]: {"approved": False, "reason": "denied"}}
        assert texts(done) == "ok"
        assert not test_tools.EXECUTIONS
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_a_client_tool_no_frontend_declares_is_an_interrupt(redis_url: str) -> None:
    agent = agent_doc([[call("pick", {"q": "which?"})], [text("picked")]])

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        [interrupt] = outcome(await client.say("go"))["interrupts"]
        assert interrupt["reason"] == "client_tool"
        assert interrupt["message"] == "Pick one option."
        assert interrupt["responseSchema"] == PICK_TOOL["output_schema"]
        _status, events, _ = await client.post(resume=[_resolved(interrupt["id"], {"wrong": 1})])
        assert _run_error(events)["code"] == "invalid_resume"
        done = await client.run(resume=[_resolved(interrupt["id"], {"choice": "x"})])
        assert results(done) == {interrupt["id"]: {"choice": "x"}}
        assert texts(done) == "picked"
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_bad_inputs_get_json_errors_and_store_nothing(redis_url: str) -> None:
    agent = agent_doc([[text("hi")]])

    async def scenario(url: str) -> None:
        api = await _login(url)
        base = {"threadId": "t-bad", "runId": "r-1", "messages": []}
        user = {"id": "u1", "role": "user", "content": "hi"}
        cases: list[tuple[Any, int, str]] = [
            ([1, 2], 422, "invalid_body"),
            ({"threadId": "t-bad"}, 422, "invalid_body"),
            ({**base, "threadId": "x" * 500}, 400, "invalid_request"),
            ({**base, "runId": ""}, 400, "invalid_request"),
            (
                {**base, "messages": [{**user, "content": [{"type": "image", "source": {}}]}]},
                422,
                "",
            ),
            (
                {
                    **base,
                    "messages": [user],
                    "tools": [{"name": "get_weather", "description": "x"}],
                },
                422,
                "tool_name_taken",
            ),
            (
                {**base, "messages": [user], "tools": [{"name": "t", "description": "x"}] * 200},
                413,
                "too_many_tools",
            ),
        ]
        for body, status, code in cases:
            response = await api.http.post("/api/agui", json=body)
            assert response.status_code == status, (body, response.text)
            error = response.json()["error"]
            if code:
                assert error["code"] == code, error
        anonymous = await api.http.post(
            "/api/agui", json={**base, "messages": [user]}, headers={"authorization": ""}
        )
        assert anonymous.status_code == 401
        state = await api.http.get("/api/chats/t-bad")
        assert state.status_code == 404
        # another principal's thread reads as missing: a no-input run shows nothing of it
        owner = AguiClient(api, "t-owned")
        await owner.say("mine")
        other = await _login(url)
        status, events, _ = await AguiClient(other, "t-owned").post()
        snapshot = next(e for e in events if e["type"] == "MESSAGES_SNAPSHOT")
        assert snapshot["messages"] == []
        stolen = await AguiClient(other, "t-owned").post(messages=[user | {"id": "u9"}])
        assert stolen[0] == 404
        await api.aclose()
        await other.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_an_approval_left_to_an_approver_waits_for_them(redis_url: str) -> None:
    """A requester's AG-UI client sees the interrupt (named as an approver's), may only
    keep waiting on it (a resume without payload), and the run goes on once the approver
    decides through the settle route."""
    four_eyes = {**PUBLISH_TOOL, "approvers": "approver", "self_approval": False}
    agent = agent_doc([[call("publish", {"title": "A"})], [text("decided")]], tools=[four_eyes])
    approver_id = "usr_named-approver"

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        [interrupt] = outcome(await client.say("go"))["interrupts"]
        about = interrupt["metadata"]["parkway"]
        assert about["approvers"] == "approver" and about["selfApproval"] is False
        _, events, _ = await client.post(resume=[_resolved(interrupt["id"], {"approved": True})])
        assert _run_error(events)["code"] == "not_yours"
        waiting = await client.run(resume=[_resolved(interrupt["id"])])
        assert outcome(waiting)["interrupts"] == [interrupt]
        approver = Api(url)
        approver.principal, approver.token = SessionAuthenticator(TEST_SECRET).issue(approver_id)
        approver.http.headers["authorization"] = f"Bearer {approver.token}"
        settled = await approver.settle(client.thread_id, interrupt["id"], {"outcome": "approved"})
        assert settled.status_code == 200, settled.text
        done = await client.run(resume=[_resolved(interrupt["id"])])
        assert results(done) == {interrupt["id"]: {"published": "A"}}
        assert texts(done) == "decided"
        await api.aclose()
        await approver.aclose()

    with server_thread(redis_url, agent, approvers=(approver_id,)) as server:
        asyncio.run(scenario(server.base_url))


GATED_TOOL = {
    "type": "function",
    "name": "gated",
    "ref": "tests.helpers.tools:gated",
    "input_schema": {"type": "object"},
}


def test_a_client_that_reconnects_follows_the_run_in_progress(redis_url: str) -> None:
    """The first client goes away while the run waits in a tool; a run with no new input
    (a reload, or another tab) gets the chat so far and then the run live, to its end."""
    agent = agent_doc(
        [[text("Working."), call("gated", {})], [text("Finished.")]], tools=[GATED_TOOL]
    )

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        test_tools.GATE.clear()
        client.messages.append({"id": "u-1", "role": "user", "content": "go"})
        body = {"threadId": client.thread_id, "runId": "r-first", "messages": client.messages}
        async with api.http.stream("POST", "/api/agui", json=body) as response:
            async for line in response.aiter_lines():
                if '"TOOL_CALL_END"' in line:
                    break  # the client leaves mid-run

        async def running() -> bool:
            return (await api.state(client.thread_id))["state"] == "running"

        await eventually(running)
        again = {"threadId": client.thread_id, "runId": "r-again", "messages": []}
        lines = []
        async with api.http.stream("POST", "/api/agui", json=again) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                lines.append(line)
                if '"MESSAGES_SNAPSHOT"' in line:
                    test_tools.GATE.set()  # the run goes on once this client follows it
        events = agui_events("\n".join(lines))
        check_frame(events, client.thread_id, "r-again")
        snapshot = next(e for e in events if e["type"] == "MESSAGES_SNAPSHOT")
        # the chat before the run, with the turn's message (its step, stored before
        # the tool ran, comes from the run's log); then the run from its first event
        assert [(m["id"], m["role"]) for m in snapshot["messages"]] == [("u-1", "user")]
        assert texts(events) == "Working.Finished."
        assert results(events)  # the tool's result, from the run's log
        assert outcome(events) == {"type": "success"}
        await api.aclose()

    with server_thread(redis_url, agent) as server:
        asyncio.run(scenario(server.base_url))


def test_a_run_in_progress_is_followed_live_by_a_run_with_nothing_new(redis_url: str) -> None:
    """A no-input run while the chat's run is in progress (a client that reloaded, or a
    resume repeating an answer already recorded) follows that run live, after a snapshot
    of the chat as it was when the run began: the same events the run's own client gets,
    and the run's end, not a ``success`` at once with the rest of the run unseen."""
    gated = {"type": "function", "name": "gated", "ref": "tests.helpers.tools:gated"}
    agent = agent_doc([[text("Working."), call("gated", {})], [text("Done.")]], tools=[gated])

    async def scenario(url: str) -> None:
        api = await _login(url)
        client = AguiClient(api)
        running = asyncio.create_task(client.say("go"))
        await eventually(
            lambda: _is_running(api, client.thread_id), within_s=20, what="the run holds"
        )
        opened = asyncio.Event()
        following = asyncio.create_task(stream_run(AguiClient(api, client.thread_id), opened))
        await eventually(opened.is_set, within_s=20, what="the follower read the chat")
        test_tools.GATE.set()
        own, followed = await running, await following
        assert texts(own) == "Working.Done."
        assert kinds(followed)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
        [user] = next(e for e in followed if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
        assert user["role"] == "user" and user["content"] == "go"
        assert same_run(followed[2:], own[1:])
        await api.aclose()

    test_tools.GATE.clear()
    try:
        with server_thread(redis_url, agent) as server:
            asyncio.run(scenario(server.base_url))
    finally:
        test_tools.GATE.set()  # never leave the server's tool thread blocked
        test_tools.GATE.clear()


async def _is_running(api: Api, chat_id: str) -> bool:
    response = await api.http.get(f"/api/chats/{chat_id}")
    return response.status_code == 200 and response.json()["state"] == "running"
