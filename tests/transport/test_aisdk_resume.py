"""Resume with the real ``ai`` client (protocol notes §6): ``chat.resumeStream()``.

Two situations a browser really gets into:

- The connection drops in the middle of a *continuation* (the response to the POST that
  carried a client tool's answer). The driver cuts that response body right after its
  first ``text-delta`` with a fetch ``TypeError``, which the SDK counts as a disconnect,
  then calls ``resumeStream()`` on the same ``Chat``. The replay must rebuild the whole
  assistant message (the first step's text, the answered call and the continuation),
  not only the continuation's own chunks, and must not re-fire ``onToolCall`` for the
  answered call. Resumed both while the run is still going (the GET follows it live)
  and after it has finished (the GET replays the finished message).
- A page reload while a client call is pending: a new ``Chat`` with the history from
  ``GET /api/chats/{id}`` resumes; the pending call comes back, ``onToolCall`` fires
  for it, and answering it continues the chat.

The server runs the continuation with a gated scripted model, so the test decides when
the run may go on; the driver and the test meet through files (see the driver's
``signal``, ``await`` and ``resume`` actions).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.support import (
    PICK_TOOL,
    Api,
    agent_doc,
    call,
    eventually,
    server_thread,
    sse_chunks,
    text,
    types,
)
from tests.runner.test_eventlog import GatedModel
from tests.transport import test_aisdk as aisdk

pytestmark = [pytest.mark.node, pytest.mark.usefixtures("redis")]

# The `node` fixture of the AI SDK tests: skips locally, fails in CI, when Node or the
# pinned `ai` packages are missing.
node = aisdk.node

MAJORS = ["ai6", "ai7"]
DRIVER_TIMEOUT_S = 25
HANDSHAKE_S = 15

CONTINUATION = "You picked {{last_tool_results}}, thanks for choosing so quickly."
TURNS = [
    [text("Pick one."), call("pick", {"q": "colour?"})],
    [text(CONTINUATION)],
]
AGENT = agent_doc(TURNS, tools=[PICK_TOOL])

# No call here ever reaches its deadline, so the deadline sweeper has nothing to do; a
# long interval keeps it asleep when the server stops. (A cancel that lands while it is
# inside a Redis command can be swallowed by redis-py, and the server's shutdown then
# waits for the sweeper forever: a server-side bug, reported separately.)
QUIET_SWEEPER = {"sweep_interval_s": 3600.0}


def continuation_text(choice: str) -> str:
    return CONTINUATION.replace(
        "{{last_tool_results}}", aisdk.results(("pick", {"choice": choice}))
    )


async def drive(
    node_path: str,
    base_url: str,
    api: Api,
    chat_id: str,
    major: str,
    actions: Sequence[Mapping[str, Any]],
    **extra: Any,
) -> aisdk.Report:
    """Run the driver with a scenario (``extra`` adds driver fields like ``drop``)."""
    scenario = {
        "baseUrl": base_url,
        "token": api.token,
        "chatId": chat_id,
        "ai": major,
        "actions": list(actions),
        "timeoutMs": (DRIVER_TIMEOUT_S - 5) * 1000,
        **extra,
    }
    done = await asyncio.to_thread(
        subprocess.run,
        [node_path, str(aisdk.DRIVER)],
        input=json.dumps(scenario),
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        cwd=aisdk.NODE_DIR,
        check=False,
    )
    assert done.returncode == 0, f"driver failed ({done.returncode}): {done.stderr}"
    try:
        raw = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"driver printed no report: {done.stdout!r} {done.stderr!r}")
    return aisdk.Report(chat_id, raw)


async def wait_for_file(path: Path, driving: asyncio.Task[Any]) -> None:
    """Wait (bounded) for the driver to write ``path``. If the driver ends first, or
    never writes it, return all the same: the driver's report says what went wrong."""
    deadline = time.monotonic() + HANDSHAKE_S
    while not path.exists() and not driving.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


async def is_idle(api: Api, chat_id: str) -> bool:
    return (await api.state(chat_id))["state"] == "idle"


def gets(report: aisdk.Report) -> list[dict[str, Any]]:
    return [r for r in report.raw["requests"] if r["method"] == "GET"]


def summary(report: aisdk.Report) -> str:
    raw = report.raw
    keys = ("status", "error", "errors", "problems", "timedOut", "posts", "drops", "finishes")
    return json.dumps({k: raw.get(k) for k in keys})


def assert_whole_message(
    report: aisdk.Report, message_id: str, call_id: str, choice: str
) -> dict[str, Any]:
    """The client's chat holds the one assistant message, complete: both steps, the
    answered call, all text done."""
    [assistant] = report.assistants
    assert assistant["id"] == message_id, assistant
    parts = [p for p in assistant["parts"] if not p["type"].startswith("data-")]
    assert [p["type"] for p in parts] == ["step-start", "text", "tool-pick", "step-start", "text"]
    assert parts[1]["text"] == "Pick one."
    pick = aisdk.tool_part(assistant, "pick")
    assert pick["toolCallId"] == call_id
    assert pick["state"] == "output-available", pick
    assert pick["output"] == {"choice": choice}
    assert parts[4]["text"] == continuation_text(choice)
    assert {p["state"] for p in parts if p["type"] == "text"} == {"done"}
    return assistant


# -- a dropped continuation, resumed on the same Chat ---------------------------------


@pytest.mark.parametrize("mode", ["live", "finished"])
@pytest.mark.parametrize("major", MAJORS)
async def test_dropped_continuation_is_rebuilt_whole_by_resume_stream(
    redis_url: str, node: str, major: str, mode: str, tmp_path: Path
) -> None:
    """Issue 3. The continuation's response drops after its first text delta (a fetch
    TypeError: a disconnect, not an abort). ``resumeStream()`` on the same Chat must end
    with the one assistant message whole, its earlier step included; the answered call
    must not re-fire ``onToolCall``. ``live``: resumed while the run is paused, which
    then goes on; ``finished``: resumed after the run has finished."""
    model = GatedModel(TURNS, gated={1})
    chat_id = f"chat-{uuid.uuid4().hex[:12]}"
    dropped, go, resuming = tmp_path / "dropped", tmp_path / "go", tmp_path / "resuming"
    send = {"type": "send", "text": "hi"}
    if mode == "live":
        actions = [send, {"type": "resume", "signalWhenStreaming": str(resuming)}]
    else:
        actions = [
            send,
            {"type": "signal", "file": str(dropped)},
            {"type": "await", "file": str(go)},
            {"type": "resume"},
        ]
    with server_thread(redis_url, AGENT, model=model, **QUIET_SWEEPER) as server:
        api = await Api(server.base_url).login()
        try:
            driving = asyncio.create_task(
                drive(
                    node,
                    server.base_url,
                    api,
                    chat_id,
                    major,
                    actions,
                    toolOutputs={"pick": {"output": {"choice": "red"}}},
                    drop={"post": 2, "after": "text-delta"},
                )
            )
            try:
                if mode == "live":
                    # The client is reading the resumed stream while the run is paused.
                    await wait_for_file(resuming, driving)
                    paused_while_resuming = not model.gate.is_set()
                    model.gate.set()
                else:
                    await wait_for_file(dropped, driving)
                    paused_while_resuming = False
                    await eventually(model.started.is_set, within_s=HANDSHAKE_S)
                    model.gate.set()
                    await eventually(
                        lambda: is_idle(api, chat_id), within_s=HANDSHAKE_S, what="idle chat"
                    )
                    go.write_text("go")
            finally:
                model.gate.set()  # never leave the server's run waiting
            report = await driving
            stored = await api.state(chat_id)
        finally:
            await api.aclose()

    info = summary(report)
    raw = report.raw
    # The drop happened where it was meant to: the 2nd POST, after its first text delta.
    assert [p.get("dropped", False) for p in report.posts] == [False, True], info
    cut = report.chunks(1)
    assert types(cut)[-1] == "text-delta", cut
    assert "finish" not in types(cut), cut
    assert raw["errors"] == ["network error"], info
    assert raw["finishes"][1]["isDisconnect"] is True, info
    if mode == "live":
        assert paused_while_resuming, "the run was not paused when the client resumed"

    # The resume: one GET, 200, replaying the message from its start.
    [get] = gets(report)
    assert get["url"] == f"{server.base_url}/api/chat/{chat_id}/stream"
    assert get["status"] == 200, get
    first = report.chunks(0)
    message_id = first[0]["messageId"]
    call_id = aisdk.only(first, "tool-input-available")["toolCallId"]
    replay = sse_chunks(get["response"])
    assert replay[0] == {"type": "start", "messageId": message_id}, replay
    assert types(replay).count("start") == 1, types(replay)
    assert "tool-input-available" not in types(replay), "the answered call would re-fire"
    assert replay[-1] == {"type": "finish", "finishReason": "stop"}, replay

    # The client ends ready, with the whole message, and never resent or re-answered.
    assert raw["status"] == "ready", info
    assert raw["error"] is None, info
    assert raw["problems"] == [], info
    assert raw["timedOut"] is False, info
    assert raw["posts"] == 2, info
    assert raw["toolCallCounts"] == {call_id: 1}, raw["toolCalls"]
    assistant = assert_whole_message(report, message_id, call_id, "red")
    assert aisdk.step_count(assistant) == 2

    # The server agrees (what a later reload shows).
    assert stored["state"] == "idle"
    [reloaded] = [m for m in stored["messages"] if m["role"] == "assistant"]
    assert reloaded["id"] == message_id
    assert aisdk.outline(reloaded) == aisdk.outline(assistant)


# -- a reload while a client call is pending ------------------------------------------


@pytest.mark.parametrize("major", MAJORS)
async def test_reload_resumes_a_parked_chat_and_its_pending_call_can_be_answered(
    redis_url: str, node: str, major: str
) -> None:
    """The page is reloaded before the browser answered a client call: a new Chat with
    the server's history calls ``resumeStream()`` on mount. The replay brings the
    pending call back, ``onToolCall`` fires for it (right: it is still pending), and
    the answer continues the same assistant message."""
    chat_id = f"chat-{uuid.uuid4().hex[:12]}"
    with server_thread(redis_url, AGENT, **QUIET_SWEEPER) as server:
        api = await Api(server.base_url).login()
        try:
            before = await drive(
                node, server.base_url, api, chat_id, major, [{"type": "send", "text": "hi"}]
            )
            parked = await api.state(chat_id)
            after = await drive(
                node,
                server.base_url,
                api,
                chat_id,
                major,
                [{"type": "resume"}],
                toolOutputs={"pick": {"output": {"choice": "blue"}}},
                loadMessages=True,
            )
            stored = await api.state(chat_id)
        finally:
            await api.aclose()

    # Before the reload: the call reached the browser, which did not answer it.
    before.assert_clean(posts=1)
    message_id = before.chunks(0)[0]["messageId"]
    call_id = aisdk.only(before.chunks(0), "tool-input-available")["toolCallId"]
    assert before.raw["toolCallCounts"] == {call_id: 1}
    assert parked["state"] == "parked"
    assert [(c["toolCallId"], c["status"]) for c in parked["calls"]] == [(call_id, "pending")]

    # The reload: the GET replays the parked message, the pending call included.
    info = summary(after)
    [get] = gets(after)
    assert get["status"] == 200, get
    replay = sse_chunks(get["response"])
    assert replay[0] == {"type": "start", "messageId": message_id}, replay
    assert aisdk.only(replay, "tool-input-available")["toolCallId"] == call_id
    assert replay[-1] == {"type": "finish", "finishReason": "tool-calls"}, replay
    assert after.raw["toolCallCounts"] == {call_id: 1}, after.raw["toolCalls"]

    # Answering it continues the chat: one POST, the same message, a second step.
    after.assert_clean(posts=1)
    resend = after.posts[0]["body"]
    assert resend["trigger"] == "submit-message"
    assert resend["messageId"] == message_id
    answered = aisdk.tool_part(resend["messages"][-1], "pick")
    assert (answered["state"], answered["output"]) == ("output-available", {"choice": "blue"})
    continued = after.chunks(0)
    assert continued[0] == {"type": "start", "messageId": message_id}
    assert continued[-1] == {"type": "finish", "finishReason": "stop"}
    assert [m["role"] for m in after.messages] == ["user", "assistant"], info
    assistant = assert_whole_message(after, message_id, call_id, "blue")

    assert stored["state"] == "idle"
    [reloaded] = [m for m in stored["messages"] if m["role"] == "assistant"]
    assert reloaded["id"] == message_id
    assert aisdk.outline(reloaded) == aisdk.outline(assistant)
