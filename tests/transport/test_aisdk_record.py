"""A chat the real ``ai`` client has with ``parkway record`` replays cold.

The AI SDK's own traffic is what most front ends send: each answer goes back as the
whole history (the tool part's output, an approval response) with ``trigger`` and
``messageId``, and a reloaded page asks for the stream with ``resumeStream()``. Recorded
by the server itself and replayed with the server killed at every park, it must match:
the generated ids in those bodies are rewritten for the replay, the chat id is
namespaced, and nothing the client sent depends on the process that answered it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest

from parkway.transport.cassettes import load_cassette, replay
from tests.helpers.record_rig import Recording
from tests.helpers.support import (
    PICK_TOOL,
    PUBLISH_TOOL,
    ROOT,
    agent_doc,
    call,
    text,
)
from tests.transport import test_aisdk as aisdk

pytestmark = [pytest.mark.node, pytest.mark.slow, pytest.mark.timeout(240)]

node = aisdk.node

AGENT = agent_doc(
    [
        [text("Pick one."), call("pick", {"q": "Oslo or Lisbon?"})],
        [text("Publishing. "), call("publish", {"title": "Trip"})],
        [text("Done: {{last_tool_results}}")],
    ],
    tools=[PICK_TOOL, PUBLISH_TOOL],
)


def _drive(node_path: str, scenario: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [node_path, str(aisdk.DRIVER)],
        input=json.dumps(scenario),
        capture_output=True,
        text=True,
        timeout=aisdk.DRIVER_TIMEOUT_S,
        cwd=aisdk.NODE_DIR,
        check=False,
    )
    assert done.returncode == 0, f"driver failed ({done.returncode}): {done.stderr}"
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["status"] == "ready" and report["error"] is None, report
    return report


@pytest.mark.parametrize("major", aisdk.APPROVAL_MAJORS)
def test_a_chat_the_ai_sdk_had_while_recording_replays_cold(
    redis_url: str, node: str, major: str, tmp_path: Path
) -> None:
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(AGENT))
    cassette = tmp_path / "ai.cassette.json"
    chat_id = f"chat-{uuid.uuid4().hex[:12]}"
    server = Recording(
        tmp_path, "record", str(cassette), "--agent", str(agent), "--redis-url", redis_url,
        cwd=ROOT,
    )  # fmt: skip
    try:
        token = httpx2.post(f"{server.base_url}/api/sessions").json()["token"]
        scenario = {"baseUrl": server.base_url, "token": token, "chatId": chat_id, "ai": major}
        # The message; onToolCall answers `pick`, sendAutomaticallyWhen resends; the
        # approval is answered with addToolApprovalResponse, and resent the same way.
        first = _drive(
            node,
            {
                **scenario,
                "toolOutputs": {"pick": {"output": {"choice": "Oslo"}}},
                "actions": [
                    {"type": "send", "text": "Plan my trip"},
                    {"type": "approve", "tool": "publish", "approved": True},
                ],
            },
        )
        assert first["posts"] == 3, first["requests"]
        # A reload: a new Chat from the server's history asks for the stream (none runs).
        _drive(node, {**scenario, "loadMessages": True, "actions": [{"type": "resume"}]})
        assert server.stop(signal.SIGINT) == 0
    finally:
        server.close()

    recorded = load_cassette(cassette)
    lines = [e.request.line() for e in recorded.exchanges]
    assert lines == [
        "POST /api/chat",  # the message: parks `pick`
        "POST /api/chat",  # pick's output, the whole history: parks the approval
        "POST /api/chat",  # the approval response: the turn finishes
        f"GET /api/chats/{chat_id}",  # the reload's history
        f"GET /api/chat/{chat_id}/stream",  # resumeStream(): nothing running, 204
    ], lines
    bodies = [e.request.body for e in recorded.exchanges[:3]]
    assert [b["trigger"] for b in bodies] == ["submit-message"] * 3
    assert all(b["id"] == chat_id for b in bodies)
    report = replay(recorded, cold=True, redis_url=redis_url)
    assert report.matched, report.format()
    assert report.restarts_after == (0, 1)
    # The replay wrote its own ids into the AI SDK's bodies (the parked call's id in
    # the resent tool part) and its own chat id.
    resent = report.requests[1].body
    assert resent["id"].startswith(f"{chat_id}.rp") and resent["id"] != chat_id
    recorded_call = aisdk.tool_part(bodies[1]["messages"][-1], "pick")["toolCallId"]
    replayed_call = aisdk.tool_part(resent["messages"][-1], "pick")["toolCallId"]
    assert replayed_call != recorded_call and recorded_call not in json.dumps(resent)
