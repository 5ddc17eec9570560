"""Recording cassettes without writing a recorder: ``parkway serve --record`` keeps every
chat exchange any client has with it (saved after each one, so a kill leaves a valid
cassette), ``parkway record`` says what it wrote, and the ``parkway_record`` fixture
records on the first run and replays afterwards, by ``--record-mode``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from redis.asyncio import Redis

from parkway.transport.cassettes import (
    Cassette,
    Recorder,
    agent_digest,
    load_cassette,
    replay,
)
from parkway.transport.pytest_plugin import record_action
from parkway.transport.settings import Settings
from tests.helpers.record_rig import Recording
from tests.helpers.support import HOLD_TOOL_CODE

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

MODULE = f"rectools_{uuid.uuid4().hex[:10]}"
AGENT = {
    "template": {
        "instructions": "An agent that holds, then asks the user to pick.",
        "tools": [
            {"type": "function", "name": "hold", "ref": f"{MODULE}:hold"},
            {
                "type": "client",
                "name": "pick",
                "description": "Pick one.",
                "input_schema": {"type": "object"},
            },
        ],
    },
    "model": {
        "scripted": {
            "turns": [
                [
                    {"text": "Holding. "},
                    {"tool_call": {"name": "hold", "input": {}}},
                    {"tool_call": {"name": "pick", "input": {"options": ["a", "b"]}}},
                ],
                [{"text": "Done: {{last_tool_results}}"}],
            ]
        }
    },
}
# The inner test's drive(): a turn that parks `pick`, the chat view, the settle, the
# resume (as the serve test drives it).
DRIVE = """
def drive(client):
    hello = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    client.post("/api/chat", json={"id": "rec", "messages": [hello]})
    calls = client.get("/api/chats/rec").json()["calls"]
    call = next(c["toolCallId"] for c in calls if c["status"] == "pending")
    settle = {"outcome": "output", "output": {"choice": "a"}}
    client.post(f"/api/chats/rec/calls/{call}", json=settle)
    client.post("/api/chats/rec/resume")
"""
HELLO = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}


def _project(folder: Path) -> Path:
    """The agent file and its tool module in ``folder``; returns the agent file."""
    (folder / f"{MODULE}.py").write_text(HOLD_TOOL_CODE)
    agent = folder / "agent.json"
    agent.write_text(json.dumps(AGENT, indent=2))
    return agent


@pytest.fixture
def recordings(tmp_path: Path) -> Iterator[list[Recording]]:
    """Recording servers a test starts, killed at its end whatever happened."""
    started: list[Recording] = []
    yield started
    for each in started:
        each.close()


def _wait_for_exchanges(path: Path, count: int) -> Cassette:
    """The cassette once it holds ``count`` exchanges (it is saved just after each)."""
    deadline = time.monotonic() + 10
    while True:
        if path.exists():
            cassette = load_cassette(path)
            if len(cassette.exchanges) >= count:
                return cassette
        assert time.monotonic() < deadline, f"{path} never held {count} exchange(s)"
        time.sleep(0.02)


def _imported_httpx(stderr: str) -> list[str]:
    """The httpx modules a ``-X importtime`` log shows (httpx2 is not one)."""
    names = [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()]
    return [n for n in names if n == "httpx" or n.startswith("httpx.")]


# -- parkway serve --record -----------------------------------------------------------


async def test_serve_records_any_clients_chat_and_it_replays_cold(
    redis: Redis, redis_url: str, tmp_path: Path, recordings: list[Recording]
) -> None:
    """A chat driven by any client (here a plain httpx2 client) is recorded by the server
    itself: only the chat exchanges, in order, saved after each one, naming the agent
    file; it replays cold, equals what a client-side Recorder saw, and recording loads
    no httpx."""
    agent = _project(tmp_path)
    target = tmp_path / "cassettes" / "chat.cassette.json"
    server = Recording(
        tmp_path, "serve", "--auth", "anonymous", "--record", str(target), "--agent", str(agent),
        "--redis-url", redis_url, python=("-X", "importtime"),
    )  # fmt: skip
    recordings.append(server)
    recorder = Recorder(agent)
    with server.client() as client:
        for path in ("/", "/healthz", "/readyz", "/api/agent", "/openapi.json"):
            client.get(path)  # none of these is part of the chat
        recorder.attach(client)
        client.post("/api/chat", json={"id": "rec", "messages": [HELLO]})
        assert len(_wait_for_exchanges(target, 1).exchanges) == 1  # saved at once
        calls = client.get("/api/chats/rec").json()["calls"]
        call = next(c["toolCallId"] for c in calls if c["status"] == "pending")
        client.post(f"/api/chats/rec/calls/{call}", json={"outcome": "output", "output": {}})
        client.post("/api/chats/rec/resume")
        headers = {"authorization": client.headers["authorization"]}
        bad = httpx2.post(f"{server.base_url}/api/chat", content=b"nope", headers=headers)
        assert bad.status_code == 400  # answered, but a replay could not send it as JSON
    assert server.stop() == -signal.SIGTERM  # after saying what it recorded
    assert server.lines()[-1] == f"recorded 4 exchanges to {target}"
    cassette = load_cassette(target)
    assert [e.request.line() for e in cassette.exchanges] == [
        "POST /api/chat",
        "GET /api/chats/rec",
        f"POST /api/chats/rec/calls/{call}",
        "POST /api/chats/rec/resume",
    ]
    assert cassette.agent_file == "../agent.json"
    assert cassette.agent_digest == agent_digest(AGENT) and cassette.model == "scripted"
    assert cassette.exchanges == recorder.cassette().exchanges  # httpx2 works with Recorder
    assert [e.response.parks() for e in cassette.exchanges] == [True, False, False, False]
    report = replay(cassette, cold=True, redis_url=redis_url)
    assert report.matched, report.format()
    assert report.restarts_after == (0,)
    log = server.err.read_text()
    assert "not recorded: POST /api/chat (the body is not JSON)" in log
    assert "import time:" in log and _imported_httpx(log) == []


async def test_a_stream_passes_at_once_and_sigkill_leaves_a_valid_cassette(
    redis: Redis, redis_url: str, tmp_path: Path, recordings: list[Recording]
) -> None:
    """The recorder copies a stream's bytes as they pass: the client reads the first
    chunk while the turn still runs (its tool holds). SIGKILL then leaves the cassette
    of the exchanges that completed, valid JSON."""
    agent = _project(tmp_path)
    holding = tmp_path / "hold"
    holding.mkdir()
    target = tmp_path / "chat.cassette.json"
    server = Recording(
        tmp_path, "serve", "--auth", "anonymous", "--record", str(target), "--agent", str(agent),
        "--redis-url", redis_url, env={"HOLD_DIR": str(holding)},
    )  # fmt: skip
    recordings.append(server)
    with server.client() as client:
        client.post("/api/chat", json={"id": "first", "messages": [HELLO]})
        _wait_for_exchanges(target, 1)
        (holding / "entered").unlink()
        (holding / "hold").touch()
        body = {"id": "second", "messages": [HELLO]}
        with client.stream("POST", "/api/chat", json=body) as stream:
            first = next(line for line in stream.iter_lines() if line.startswith("data:"))
            assert json.loads(first.removeprefix("data:"))["type"] == "start"
            deadline = time.monotonic() + 10
            while not (holding / "entered").exists():  # the turn reached its tool...
                assert time.monotonic() < deadline, "the tool never ran"
                time.sleep(0.02)
            assert (holding / "hold").exists()  # ...and cannot end: it holds
            assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    cassette = load_cassette(target)
    assert [e.request.body["id"] for e in cassette.exchanges] == ["first"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    ("values", "editing"),
    [
        ({}, True),  # a local playground on the embedded Redis
        ({"record": "x.cassette.json"}, False),  # recording: turns run the agent file
        ({"record": "x.cassette.json", "agent_editing": "on"}, True),  # said so
        ({"redis_url": "redis://127.0.0.1:1/0"}, False),
    ],
)
def test_recording_turns_agent_editing_off_unless_told(
    values: dict[str, str], editing: bool
) -> None:
    """A cassette names the agent file, and its replay refuses a turn on a working copy:
    so while recording, the playground runs the agent file unless agent editing is
    asked for."""
    assert Settings(**values).agent_editing_enabled is editing


def test_once_refuses_an_existing_cassette(tmp_path: Path) -> None:
    """The default mode never overwrites a cassette: one line, exit 2, file untouched."""
    agent = _project(tmp_path)
    target = tmp_path / "chat.cassette.json"
    target.write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--auth", "anonymous", "--record", str(target),
         "--agent", str(agent)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"parkway: record (--record, PARKWAY_RECORD): {target} exists; replay it with "
        f"`parkway replay {target}`, or pass --record-mode all to record it again"
    ]
    assert target.read_text() == "{}"


async def test_parkway_record_all_overwrites_and_says_what_it_wrote_on_ctrl_c(
    redis: Redis, redis_url: str, tmp_path: Path, recordings: list[Recording]
) -> None:
    """``parkway record --record-mode all`` replaces an existing cassette, prints where
    it serves, and on SIGINT the count it recorded."""
    agent = _project(tmp_path)
    target = tmp_path / "chat.cassette.json"
    target.write_text("{}")
    server = Recording(
        tmp_path, "record", str(target), "--agent", str(agent),
        "--record-mode", "all", "--redis-url", redis_url,
    )  # fmt: skip
    recordings.append(server)
    assert server.lines()[0].startswith(f"Parkway is serving {agent} at {server.base_url}/")
    assert server.lines()[0].endswith(f", recording to {target}")
    with server.client() as client:
        client.post("/api/chat", json={"id": "rec", "messages": [HELLO]})
    assert server.stop(signal.SIGINT) == 0
    assert server.lines()[-1] == f"recorded 1 exchange to {target}"
    assert [e.request.line() for e in load_cassette(target).exchanges] == ["POST /api/chat"]


# -- the parkway_record fixture -------------------------------------------------------

INNER_TEST = (
    "import sys\nfrom pathlib import Path\n"
    + DRIVE
    + """
    (Path(__file__).parent / "drove").open("a").write("x")


def test_chat(parkway_record):
    report = parkway_record("cassettes/chat.cassette.json", drive, agent="agent.json")
    outcome = "recorded" if report is None else "replayed"
    httpx = "httpx" in sys.modules
    (Path(__file__).parent / "outcome").write_text(f"{outcome} httpx={httpx}")
"""
)


@pytest.mark.parametrize(
    ("mode", "exists", "action"),
    [
        ("once", False, "record"),
        ("once", True, "replay"),
        ("new_episodes", False, "record"),
        ("new_episodes", True, "replay-new-episodes"),
        ("none", False, "missing"),
        ("none", True, "replay"),
        ("all", False, "record"),
        ("all", True, "record"),
    ],
)
def test_each_record_mode_records_or_replays(mode: str, exists: bool, action: str) -> None:
    """The fixture's choice, mode by mode: none never records (a missing cassette fails
    the test); once and new_episodes record a missing cassette and replay an existing
    one (new_episodes sending the changed model steps to the model); all always
    records. The test below runs the fixture itself in a pytest subprocess."""
    assert record_action(mode, exists) == action


def test_an_unknown_record_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="record mode 'sometimes' is not one of once, "):
        record_action("sometimes", exists=True)


@pytest.mark.timeout(600)
def test_the_fixture_records_or_replays_by_record_mode(pytester: pytest.Pytester) -> None:
    """``parkway_record`` in a pytest subprocess (the plugin's entry point): none fails
    on a missing cassette; the default (once) records a missing one; ``--record-mode``
    wins over the ini option ``parkway_record_mode``, which the fixture reads when no
    option is given; a replay that differs fails the test with the diff. Which mode
    replays and which records is checked case by case above, in-process; the replay of
    an existing cassette in modes none and new_episodes also runs in a subprocess in
    tests/runner/test_model_tapes.py."""
    _project(pytester.path)
    pytester.makepyfile(test_chat=INNER_TEST)
    cassette = pytester.path / "cassettes" / "chat.cassette.json"
    outcome, drove = pytester.path / "outcome", pytester.path / "drove"

    def run(*args: str, passed: bool = True) -> str:
        for each in (outcome, drove):
            each.unlink(missing_ok=True)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=180)
        output = "\n".join(result.outlines + result.errlines)
        assert result.ret == (0 if passed else 1), output
        return output

    output = run("--record-mode=none", passed=False)
    assert f"no cassette at {cassette} and --record-mode=none" in output
    assert not cassette.exists() and not drove.exists()

    run()  # once, by default: missing, so recorded
    assert outcome.read_text() == "recorded httpx=False"
    assert drove.read_text() == "x" and len(load_cassette(cassette).exchanges) == 4
    recorded = cassette.read_text()

    ini = pytester.makeini("[pytest]\nparkway_record_mode = all\n")
    run("--record-mode=once")  # the option wins over the ini's all: replayed
    assert outcome.read_text() == "replayed httpx=False"
    assert not drove.exists() and cassette.read_text() == recorded

    run()  # the ini's all: recorded again
    assert outcome.read_text() == "recorded httpx=False" and drove.exists()

    ini.unlink()
    changed = json.loads((pytester.path / "agent.json").read_text())
    changed["model"]["scripted"]["turns"][1][0]["text"] = "Finished: {{last_tool_results}}"
    (pytester.path / "agent.json").write_text(json.dumps(changed))
    output = run(passed=False)  # once, by default: the cassette exists, so replayed
    assert "differs from the agent recorded" in output and "Finished: " in output
    assert not drove.exists()
