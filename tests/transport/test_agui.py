"""``POST /api/agui``: the AG-UI 1.0 wire, over HTTP against a real server and Redis.

Every event each test reads is validated by ``ag-ui-protocol``'s own pydantic types (a
discriminated union over every AG-UI event), and the run's frame is checked as the AG-UI
client checks it: RUN_STARTED first with the input's ids and the protocol version, one
RUN_FINISHED or RUN_ERROR last, every text, tool call, reasoning part and step closed
before it. The real ``@ag-ui/client`` drives the same endpoint in test_agui_client.py.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.helpers import tools as test_tools
from tests.helpers.support import (
    Api,
    agent_doc,
    call,
    eventually,
    server_thread,
    text,
)

pytestmark = pytest.mark.usefixtures("redis")

_EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def agui_events(body: str) -> list[dict[str, Any]]:
    """The events of an AG-UI SSE body, each validated by ag-ui-protocol's types."""
    events = []
    for frame in body.split("\n\n"):
        data = [line[5:].strip() for line in frame.splitlines() if line.startswith("data:")]
        if not data:
            continue
        raw = json.loads("".join(data))
        _EVENTS.validate_python(raw)
        events.append(raw)
    return events


def check_frame(events: Sequence[Mapping[str, Any]], thread_id: str, run_id: str) -> None:
    """The run's frame, as @ag-ui/client verifies it."""
    assert events[0]["type"] == "RUN_STARTED"
    assert events[0]["threadId"] == thread_id and events[0]["runId"] == run_id
    assert events[0]["protocolVersion"] == "1.0"
    assert events[-1]["type"] in {"RUN_FINISHED", "RUN_ERROR"}
    assert sum(e["type"] in {"RUN_FINISHED", "RUN_ERROR"} for e in events) == 1
    if events[-1]["type"] == "RUN_FINISHED":
        assert events[-1]["threadId"] == thread_id and events[-1]["runId"] == run_id
    open_text: set[str] = set()
    open_tools: set[str] = set()
    open_steps: set[str] = set()
    for event in events:
        kind = event["type"]
        if kind == "TEXT_MESSAGE_START":
            assert event["messageId"] not in open_text
            open_text.add(event["messageId"])
        elif kind == "TEXT_MESSAGE_CONTENT":
            assert event["messageId"] in open_text
        elif kind == "TEXT_MESSAGE_END":
            open_text.remove(event["messageId"])
        elif kind == "TOOL_CALL_START":
            open_tools.add(event["toolCallId"])
        elif kind == "TOOL_CALL_ARGS":
            assert event["toolCallId"] in open_tools
        elif kind == "TOOL_CALL_END":
            open_tools.remove(event["toolCallId"])
        elif kind == "STEP_STARTED":
            open_steps.add(event["stepName"])
        elif kind == "STEP_FINISHED":
            open_steps.remove(event["stepName"])
    if events[-1]["type"] == "RUN_FINISHED":
        assert not open_text and not open_tools and not open_steps


class AguiClient:
    """A bare AG-UI client: posts RunAgentInputs, keeps the conversation it is told."""

    def __init__(self, api: Api, thread_id: str | None = None) -> None:
        self.api = api
        self.thread_id = thread_id or f"t-{uuid.uuid4().hex[:10]}"
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []

    async def post(self, **extra: Any) -> tuple[int, list[dict[str, Any]], str]:
        run_id = f"r-{uuid.uuid4().hex[:8]}"
        body = {
            "threadId": self.thread_id,
            "runId": run_id,
            "messages": self.messages,
            "tools": self.tools,
            "context": [],
            "state": {},
            "forwardedProps": {},
            **extra,
        }
        response = await self.api.http.post("/api/agui", json=body)
        if response.status_code != 200:
            return response.status_code, [], response.text
        events = agui_events(response.text)
        check_frame(events, self.thread_id, run_id)
        return 200, events, response.text

    async def run(self, **extra: Any) -> list[dict[str, Any]]:
        status, events, raw = await self.post(**extra)
        assert status == 200, raw
        self._apply(events)
        return events

    async def say(self, words: str, **extra: Any) -> list[dict[str, Any]]:
        self.messages.append({"id": f"u-{uuid.uuid4().hex[:8]}", "role": "user", "content": words})
        return await self.run(**extra)

    def _apply(self, events: Sequence[Mapping[str, Any]]) -> None:
        """What the client keeps: assistant text and tool calls, tool results."""
        by_id = {m["id"]: m for m in self.messages}
        for event in events:
            kind = event["type"]
            if kind == "MESSAGES_SNAPSHOT":
                self.messages = [dict(m) for m in event["messages"]]
                by_id = {m["id"]: m for m in self.messages}
            elif kind == "TEXT_MESSAGE_START" and event["messageId"] not in by_id:
                message = {"id": event["messageId"], "role": "assistant", "content": ""}
                self.messages.append(message)
                by_id[message["id"]] = message
            elif kind == "TEXT_MESSAGE_CONTENT":
                by_id[event["messageId"]]["content"] += event["delta"]
            elif kind == "TOOL_CALL_START":
                parent = event.get("parentMessageId") or event["toolCallId"]
                if parent not in by_id:
                    message = {"id": parent, "role": "assistant"}
                    self.messages.append(message)
                    by_id[parent] = message
                by_id[parent].setdefault("toolCalls", []).append(
                    {
                        "id": event["toolCallId"],
                        "type": "function",
                        "function": {"name": event["toolCallName"], "arguments": ""},
                    }
                )
            elif kind == "TOOL_CALL_ARGS":
                for message in self.messages:
                    for tool_call in message.get("toolCalls", ()):
                        if tool_call["id"] == event["toolCallId"]:
                            tool_call["function"]["arguments"] += event["delta"]
            elif kind == "TOOL_CALL_RESULT":
                message = {
                    "id": event["messageId"],
                    "role": "tool",
                    "toolCallId": event["toolCallId"],
                    "content": event["content"],
                }
                self.messages.append(message)
                by_id[message["id"]] = message


def outcome(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return dict(events[-1].get("outcome") or {"type": "success"})


def texts(events: Sequence[Mapping[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def results(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        e["toolCallId"]: json.loads(e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"
    }


def kinds(events: Sequence[Mapping[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


async def stream_run(client: AguiClient, opened: asyncio.Event) -> list[dict[str, Any]]:
    """A no-input AG-UI run read as it streams: ``opened`` is set once its
    MESSAGES_SNAPSHOT has arrived (the server has read the chat and chosen what to do);
    the events, validated and checked as one run, once it ends."""
    run_id = f"r-follow-{uuid.uuid4().hex[:6]}"
    body = {
        "threadId": client.thread_id,
        "runId": run_id,
        "messages": [],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    raw = ""
    async with client.api.http.stream("POST", "/api/agui", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for chunk in response.aiter_text():
            raw += chunk
            if "MESSAGES_SNAPSHOT" in raw:
                opened.set()
    events = agui_events(raw)
    check_frame(events, client.thread_id, run_id)
    return events


def same_run(events: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]]) -> bool:
    """The same events, but for the runs' own ids on RUN_FINISHED."""

    def bare(event: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in event.items() if k not in {"threadId", "runId"}}

    return [bare(e) for e in events] == [bare(e) for e in other]


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
