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

import pytest

from tests.helpers import tools as test_tools
from tests.helpers.agui import AguiClient, outcome, results, texts
from tests.helpers.support import (
    Api,
    agent_doc,
    call,
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
