"""A new user records a cassette from the browser: ``parkway record CASSETTE --agent
FILE`` as a child process (its defaults: embedded Redis, the local playground), the
playground page at the URL it prints, in Debian's chromium through Playwright, then
Ctrl-C (SIGINT) and ``parkway replay CASSETTE --cold``.

The chat: a message whose turn parks a client tool (answered in its generic widget),
then an approval (approved in its widget) after a reload of the page mid-chat, and the
turn's end. The recording must hold the page's chat exchanges once each, and replay
cold with every response matching, from the command line.

The page sends its next request (the chat view) on a stream's last byte, while the
stream's app call may still be unwinding: the last test holds that moment open, on the
recording middleware itself, to show that the exchange still takes its place when its
answer ended.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Request, expect
from starlette.types import Message, Receive, Scope, Send

from parkway.transport.cassettes import (
    CassetteRecording,
    CassetteWriter,
    is_recorded,
    load_cassette,
)
from tests.helpers.browser import Tab
from tests.helpers.record_rig import Recording
from tests.helpers.support import (
    CONFIRM_TOOL,
    PICK_TOOL,
    PUBLISH_TOOL,
    ROOT,
    agent_doc,
    call,
    text,
)

AGENT = agent_doc(
    [
        [text("Let me ask you. "), call("pick", {"q": "Oslo or Lisbon?"})],
        [text("Picked: {{last_tool_results}}. "), call("publish", {"title": "Trip"})],
        [text("Published: {{last_tool_results}}. Done.")],
    ],
    tools=[PICK_TOOL, CONFIRM_TOOL, PUBLISH_TOOL],
)
# What the user's shell has: no PARKWAY_* settings, and the test suite's tool module
# (tests.helpers.tools:publish) importable, as a project's own module would be.
ENV = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
ENV["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), ENV.get("PYTHONPATH")]))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The user's project folder, with its agent file."""
    (tmp_path / "agent.json").write_text(json.dumps(AGENT, indent=2))
    return tmp_path


@pytest.mark.slow
def test_a_chat_recorded_from_the_playground_replays_cold(browser: Browser, project: Path) -> None:
    """Record from the page (a client tool answered in its widget after the page polled
    it, a reload while the turn is parked at an approval, the approval approved, the
    turn's end), stop with Ctrl-C: the cassette holds each exchange the page had with
    the chat API once, in the order the page sent them, and replays cold with every
    response matching, from the command line (``parkway replay --cold``).

    Recording turns agent editing off by default, so the page's build kit is off and
    cannot be turned on, and every turn runs the agent file (no ``agentTemplate``, which
    a replay's server would refuse): what a new user does is what a replay can test."""
    server = Recording(project, "record", "cassettes/x.cassette.json", "--agent", "agent.json")
    cassette_path = project / "cassettes" / "x.cassette.json"
    sent: list[str] = []  # every request the page sent to the API, as the browser saw it

    def seen(request: Request) -> None:
        path = request.url.removeprefix(server.url.rstrip("/"))
        if path.startswith("/api/"):
            sent.append(f"{request.method} {path}")

    try:
        tab = Tab.new_context(browser, server.url.rstrip("/"))
        tab.page.on("request", seen)
        tab.open()
        toggle = tab.page.get_by_test_id("kit-toggle")
        expect(toggle).not_to_be_checked()  # what a new user finds while recording
        expect(toggle).to_be_disabled()
        tab.send("Plan my trip")
        pick = tab.widget("client")
        tab.expect_state(pick, "pending")
        expect(pick).to_contain_text("Oslo or Lisbon?")
        tab.expect_waiting()
        pick_id = Tab.call_id(pick)
        # the user takes a moment: the page asks whether someone else answered the call
        with tab.page.expect_response(lambda r: r.url.endswith(f"/calls/{pick_id}")):
            pass
        pick.get_by_label("Your answer (JSON)").fill('{"choice": "Oslo"}')
        tab.act(pick, "submit")
        tab.expect_state(pick, "answered")
        tab.expect_said('Picked: [{"result":{"choice":"Oslo"},"tool":"pick"}].')

        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        tab.expect_waiting()
        chat, approval_id = tab.chat_id, Tab.call_id(approval)
        tab.page.reload()  # parked at the approval: the page rebuilds the chat
        assert tab.chat_id == chat
        approval = tab.widget_of(approval_id)
        tab.expect_state(approval, "pending")
        tab.expect_said("Plan my trip")
        tab.act(approval, "approve")
        tab.expect_state(approval, "approved")
        tab.expect_said('Published: [{"result":{"published":"Trip"},"tool":"publish"}]. Done.')
        tab.expect_ready()
        tab.assert_clean()
        tab.context.close()  # the user closes the tab, then stops the server
        assert server.stop(signal.SIGINT) == 0, server.err.read_text()
    finally:
        server.close()

    cassette = load_cassette(cassette_path)
    lines = [e.request.line() for e in cassette.exchanges]
    print("the page sent:", *sent, "recorded:", *lines, sep="\n  ")
    assert server.lines()[-1] == f"recorded {len(lines)} exchanges to cassettes/x.cassette.json"
    assert cassette.agent_file == "../agent.json" and cassette.model == "scripted"
    # every chat request the page sent, once each, in its order (sessions, the agent
    # panel and the Decisions list are not recorded)
    assert lines == [line for line in sent if is_recorded(line.split()[1].split("?")[0])]
    polls = {f"GET /api/chats/{chat}/calls/{pick_id}", f"GET /api/chats/{chat}/calls/{approval_id}"}
    assert f"GET /api/chats/{chat}/calls/{pick_id}" in lines
    assert set(lines) - polls == {"POST /api/chat", f"GET /api/chats/{chat}"}
    assert [line for line in lines if line not in polls] == [
        "POST /api/chat",  # the message: the turn parks `pick`
        f"GET /api/chats/{chat}",  # the page catches up after the stream
        "POST /api/chat",  # the answer to `pick`: the turn parks the approval
        f"GET /api/chats/{chat}",
        f"GET /api/chats/{chat}",  # the reload rebuilds the chat
        "POST /api/chat",  # the approval: the turn finishes
        f"GET /api/chats/{chat}",
    ]
    posts = [e for e in cassette.exchanges if e.request.method == "POST"]
    assert [e.response.parks() for e in posts] == [True, True, False]
    log = server.err.read_text()
    assert "while another request ran" not in log  # one tab, one request at a time

    assert not any("agentTemplate" in (e.request.body or {}) for e in posts)
    assert "with agentTemplate" not in log
    # One cold replay, the user's next command: the Python API's replay() is what the
    # command runs (the report's last line is its summary).
    result = subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "replay", "cassettes/x.cassette.json",
         "--cold"],
        cwd=project, env=ENV, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    summary = f"replayed {len(lines)} exchanges (cold: killed and restarted 2 times)"
    assert result.stdout.splitlines()[-1] == f"{summary}: every response matches", result.stdout


# -- the page's next request, sent on a stream's last byte ------------------------------


async def test_an_exchange_takes_its_place_when_its_answer_ends_not_when_its_app_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The playground reads the chat's view as soon as a stream ends, which may be
    before the stream's app call has returned (its teardown): here the first answer's
    app holds its return open until the view has been answered. The cassette still
    lists the answer that ended first first, and the view is no overlap."""
    unwound = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        answer = b'{"said": "done"}' if scope["method"] == "POST" else b'{"state": "idle"}'
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})
        if scope["method"] == "POST":
            await unwound.wait()  # the last byte is out; the app call has not returned

    writer = CassetteWriter(tmp_path / "c.cassette.json", agent_file=None, agent=AGENT)
    recording = CassetteRecording(app, writer)

    async def request(method: str, path: str, ended: asyncio.Event) -> None:
        scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
                 "query_string": b"", "headers": []}  # fmt: skip

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                ended.set()

        await recording(scope, receive, send)

    caplog.set_level(logging.WARNING, "parkway.cassettes")
    streamed = asyncio.Event()
    post = asyncio.create_task(request("POST", "/api/chats/c/resume", streamed))
    await streamed.wait()  # the client has the whole answer: it sends its next request
    await request("GET", "/api/chats/c", asyncio.Event())
    unwound.set()
    await post
    recorded = load_cassette(writer.path).exchanges
    assert [e.request.line() for e in recorded] == ["POST /api/chats/c/resume", "GET /api/chats/c"]
    assert [e.response.body for e in recorded] == [{"said": "done"}, {"state": "idle"}]
    assert "while another request ran" not in caplog.text
