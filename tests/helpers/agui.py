"""An AG-UI client for the tests (tests/transport/test_agui.py, the AG-UI cassettes):
the events of an SSE body validated by ``ag-ui-protocol``'s own types, the run's frame
checked as ``@ag-ui/client`` checks it, and a bare client that keeps the conversation
it is told."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.helpers.support import Api

__all__ = [
    "AguiClient",
    "agui_events",
    "check_frame",
    "kinds",
    "outcome",
    "results",
    "same_run",
    "stream_run",
    "texts",
]

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
