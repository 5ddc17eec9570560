"""Record docs/examples/trip.cassette.json: a chat with the trip agent, driven the way an
AI SDK front end drives it, captured by a cassette Recorder.

    parkway serve --agent docs/examples/trip.agent.json --data-dir /tmp/pw-trip &
    python docs/examples/record_trip.py http://127.0.0.1:8000 docs/examples/trip.cassette.json

The chat: a first message parks a client tool (``choose_option``), answered by posting
the whole history with the tool part's output (what ``addToolOutput`` and
``sendAutomaticallyWhen`` do); the next turn parks an approval, answered the same way
(``addToolApprovalResponse``); a reload asks for the stream and the chat view; the third
turn's connection request is declined through the settle endpoint and the chat resumed.
The test suite records with this script too (tests/transport/cassettes/test_cassettes.py).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx

from parkway.transport.cassettes import Cassette, Recorder, save_cassette
from parkway.transport.sse import sse_chunks

CHAT = "trip"
DESCRIPTION = (
    "The trip agent: a client tool answered through POST /api/chat, an approval, a reload, "
    "a connection declined through the settle endpoint, a resume."
)
HELLO = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Plan my trip"}]}


def apply(message: dict[str, Any], chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold stream chunks into an assistant UI message, as the AI SDK's useChat does."""
    parts: list[dict[str, Any]] = message.setdefault("parts", [])
    tools = {p["toolCallId"]: p for p in parts if "toolCallId" in p}
    for chunk in chunks:
        kind = chunk["type"]
        if kind == "start":
            message["id"] = chunk["messageId"]
        elif kind == "start-step":
            parts.append({"type": "step-start"})
        elif kind == "text-start":
            parts.append({"type": "text", "text": "", "state": "streaming"})
        elif kind == "text-delta":
            parts[-1]["text"] += chunk["delta"]
        elif kind == "text-end":
            parts[-1]["state"] = "done"
        elif kind == "tool-input-available":
            part = {
                "type": f"tool-{chunk['toolName']}",
                "toolCallId": chunk["toolCallId"],
                "state": "input-available",
                "input": chunk["input"],
            }
            tools[chunk["toolCallId"]] = part
            parts.append(part)
        elif kind == "tool-approval-request":
            tools[chunk["toolCallId"]]["state"] = "approval-requested"
            tools[chunk["toolCallId"]]["approval"] = {"id": chunk["approvalId"]}
        elif kind == "tool-output-available":
            tools[chunk["toolCallId"]].update(state="output-available", output=chunk["output"])
        elif kind.startswith("data-"):
            parts.append({"type": kind, "id": chunk.get("id"), "data": chunk["data"]})
    return message


def tool_part(message: dict[str, Any], tool: str) -> dict[str, Any]:
    return next(p for p in reversed(message["parts"]) if p["type"] == f"tool-{tool}")


async def record_trip(base_url: str, agent: Path | dict[str, Any]) -> Cassette:
    """Drive the trip chat on the server at ``base_url`` and return its cassette.
    ``agent`` is the agent file the server serves (the cassette names it) or its
    document (the cassette then names no file)."""
    recorder = Recorder(agent, description=DESCRIPTION)
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        session = (await client.post("/api/sessions")).json()
        client.headers["authorization"] = f"Bearer {session['token']}"
        recorder.attach(client)
        assistant: dict[str, Any] = {"id": "", "role": "assistant", "parts": []}

        async def post_chat() -> None:
            body = {"id": CHAT, "messages": [HELLO, assistant], "trigger": "submit-message"}
            apply(assistant, sse_chunks((await client.post("/api/chat", json=body)).text))

        # 1. The first turn runs get_weather and parks choose_option.
        first = {"id": CHAT, "messages": [HELLO], "trigger": "submit-message"}
        apply(assistant, sse_chunks((await client.post("/api/chat", json=first)).text))
        # 2. The browser answers the client tool: addToolOutput, then the whole history.
        tool_part(assistant, "choose_option").update(
            state="output-available", output={"choice": "Lisbon"}
        )
        await post_chat()  # the next turn parks an approval for publish_report
        # 3. The human approves: addToolApprovalResponse, then the whole history.
        approval = tool_part(assistant, "publish_report")
        approval["state"] = "approval-responded"
        approval["approval"] = {**approval["approval"], "approved": True}
        await post_chat()  # publish_report runs; the next turn asks for a connection
        # 4. A reload: the AI SDK's resumeStream, and the chat view with its parked call.
        await client.get(f"/api/chat/{CHAT}/stream")
        view = (await client.get(f"/api/chats/{CHAT}")).json()
        pending = next(c for c in view["calls"] if c["status"] == "pending")
        # 5. The human declines the connection in the widget; then the chat resumes.
        await client.post(
            f"/api/chats/{CHAT}/calls/{pending['toolCallId']}", json={"outcome": "declined"}
        )
        await client.post(f"/api/chats/{CHAT}/resume")
    return recorder.cassette()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    base_url, out = argv
    cassette = asyncio.run(record_trip(base_url, Path(__file__).parent / "trip.agent.json"))
    save_cassette(cassette, out)
    print(f"recorded {len(cassette.exchanges)} exchanges to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
