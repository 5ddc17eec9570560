"""Replays as CI runs them: a user's project with its own tool module (importable from
``parkway serve``, ``parkway replay`` and the pytest fixture without ``PYTHONPATH``),
a replay killed by a CI timeout (SIGTERM, SIGINT) that leaves nothing running and no
temporary folder behind, and two replays of one cassette on one Redis at once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from parkway.runner.store.keys import owned_without_ttl
from parkway.transport.cassettes import Recorder, agent_digest, load_cassette, save_cassette
from tests.helpers.support import HOLD_TOOL_CODE, ROOT, TEST_SECRET, free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
MODULE = f"projtools_{uuid.uuid4().hex[:10]}"
AGENT = f"""{{
  "template": {{
    "instructions": "A project's own agent.",
    "tools": [
      {{"type": "function", "name": "hold", "ref": "{MODULE}:hold"}},
      {{"type": "client", "name": "pick", "description": "Pick one.",
        "input_schema": {{"type": "object"}}}}
    ]
  }},
  "model": {{"scripted": {{"turns": [
    [{{"text": "Holding. "}}, {{"tool_call": {{"name": "hold", "input": {{}}}}}},
     {{"tool_call": {{"name": "pick", "input": {{"options": ["a", "b"]}}}}}}],
    [{{"text": "Done: {{{{last_tool_results}}}}"}}]
  ]}}}}
}}
"""


def _until_the_tool_runs(replay: subprocess.Popen[str], hold: Path) -> None:
    """Wait until the replay's server is up and running the held tool (it touches
    ``hold/entered``); fail if the replay ends first or never gets there."""
    deadline = time.monotonic() + 60
    while not (hold / "entered").exists():
        assert replay.poll() is None, replay.communicate()
        assert time.monotonic() < deadline, "the replay's server never ran the tool"
        time.sleep(0.05)


def _env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no PARKWAY_* variable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PARKWAY_") and k not in {"PYTHONPATH", "HOLD_DIR"}
    }
    return {**env, **extra}


def _record(project: Path, redis_url: str) -> None:
    """Record cassettes/hold.cassette.json with the console script ``parkway serve``
    run from the project root, as a user would."""
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "parkway"), "serve", "--auth", "anonymous", "--agent", "agents/agent.json", "--port", str(port),
         "--redis-url", redis_url, "--log-level", "warning"],
        cwd=project, env=_env(PARKWAY_SECRET_KEY=TEST_SECRET), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # the startup line, or "" when it exited
        assert line.startswith("Parkway is serving"), server.stderr.read() if server.stderr else ""
        recorder = Recorder(project / "agents" / "agent.json", description="hold, then pick")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            token = client.post("/api/sessions").json()["token"]
            client.headers["authorization"] = f"Bearer {token}"
            recorder.attach(client)
            hello = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
            client.post("/api/chat", json={"id": "proj", "messages": [hello]})
            calls = client.get("/api/chats/proj").json()["calls"]
            call = next(c["toolCallId"] for c in calls if c["status"] == "pending")
            settle = {"outcome": "output", "output": {"choice": "a"}}
            client.post(f"/api/chats/proj/calls/{call}", json=settle)
            client.post("/api/chats/proj/resume")
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    save_cassette(recorder.cassette(), project / "cassettes" / "hold.cassette.json")


@pytest.fixture(scope="module")
def project(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project: its tool module at the root, its agent in agents/, a cassette
    recorded from it in cassettes/ (naming ../agents/agent.json)."""
    root = tmp_path_factory.mktemp("project")
    (root / f"{MODULE}.py").write_text(HOLD_TOOL_CODE)
    (root / "agents").mkdir()
    (root / "agents" / "agent.json").write_text(AGENT)
    (root / "cassettes").mkdir()
    client = SyncRedis.from_url(redis_url)
    client.flushdb()
    try:
        _record(root, redis_url)
        leaked = [k for k in client.scan_iter() if not owned_without_ttl(k) and client.ttl(k) < 0]
        assert not leaked, f"keys without a TTL were left behind: {leaked[:10]}"
    finally:
        client.flushdb()
        client.close()
    return root


def test_serve_imports_a_tool_module_from_the_project_root(project: Path) -> None:
    """The console script has its own folder, not the working directory, on sys.path;
    a user's module at the project root imports all the same (the recording ran it)."""
    cassette = load_cassette(project / "cassettes" / "hold.cassette.json")
    assert cassette.agent_file == "../agents/agent.json"
    first = cassette.exchanges[0].response.chunks or []
    outputs = [c["output"] for c in first if c["type"] == "tool-output-available"]
    assert outputs == [{"held": True}]
    assert [e.response.parks() for e in cassette.exchanges] == [True, False, False, False]


def test_parkway_replay_imports_the_projects_tool_module(
    redis: Redis, redis_url: str, project: Path
) -> None:
    """``parkway replay`` from the project root, with no PYTHONPATH: the agent file the
    cassette names, and the tool module beside the project, load and replay cold."""
    result = subprocess.run(
        [str(BIN / "parkway"), "replay", "cassettes/hold.cassette.json", "--cold",
         "--redis-url", redis_url],
        cwd=project, env=_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(cold: killed and restarted once): every response matches" in result.stdout
    assert result.stdout.startswith(f"agent: {project / 'agents' / 'agent.json'} (")


def test_the_fixture_imports_the_projects_tool_module(redis: Redis, project: Path) -> None:
    """A user's tests in tests/ (not the project root) replay with the fixture: the
    cassette's own agent file, or ``agent=`` relative to the test file."""
    tests = project / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_hold.py").write_text(
        "def test_cold(parkway_replay):\n"
        "    parkway_replay('../cassettes/hold.cassette.json', cold=True)\n\n\n"
        "def test_given_agent(parkway_replay):\n"
        "    report = parkway_replay(\n"
        "        '../cassettes/hold.cassette.json', agent='../agents/agent.json'\n"
        "    )\n"
        "    assert report.matched\n"
    )
    result = subprocess.run(
        [str(BIN / "pytest"), "-p", "no:cacheprovider", "-q", "tests/test_hold.py"],
        cwd=project, env=_env(), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary folder: the private Redis's unix socket path must stay short."""
    folder = Path(tempfile.mkdtemp(prefix="pwt-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["TERM", "INT"]
)
def test_a_replay_stopped_by_a_signal_leaves_nothing_behind(
    project: Path, short_tmp: Path, signum: int, code: int
) -> None:
    """A CI timeout sends SIGTERM (a terminal, SIGINT) to ``parkway replay``: its server
    and its private redis-server must stop and its temporary folder go, or every
    timed-out job leaks processes and disk on the runner."""
    temp, hold = short_tmp / "tmp", short_tmp / "hold"
    temp.mkdir()
    hold.mkdir()
    (hold / "hold").touch()
    replay = subprocess.Popen(
        [str(BIN / "parkway"), "replay", "cassettes/hold.cassette.json", "--cold"],
        cwd=project, env=_env(TMPDIR=str(temp), HOLD_DIR=str(hold)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _until_the_tool_runs(replay, hold)
        children = psutil.Process(replay.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in children)
        assert "redis-server" in names and " serve " in names, names
        assert next(p.name for p in temp.iterdir()).startswith("pw-replay-")
        replay.send_signal(signum)
        out, err = replay.communicate(timeout=60)
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.communicate()
    assert replay.returncode == code, out + err
    name = signal.Signals(signum).name
    assert err == f"parkway replay: stopped by {name}; nothing left running\n"
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]
    assert list(temp.iterdir()) == []


@pytest.fixture(scope="module")
def private_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Parkway's packages where the sandbox uid cannot read them, as under a 0700 home:
    a folder for ``PYTHONPATH`` holding a copy of ``parkway``. The sandbox must then
    copy its guest files to the temporary folder (the copy these tests look for)."""
    folder = Path(tempfile.mkdtemp(prefix="pwt-private-", dir="/tmp"))  # mode 0700
    try:
        for name in ("runner", "transport", "widgets_api"):
            shutil.copytree(
                ROOT / name,
                folder / "parkway" / name,
                ignore=shutil.ignore_patterns("__pycache__", "node_modules"),
            )
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _guest_copies(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("parkway-sandbox-guest-*"))


@pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap (apt install bubblewrap)"
)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_replay_stopped_by_a_signal_leaves_no_copy_of_the_guest_files(
    project: Path, private_install: Path, short_tmp: Path, signum: int
) -> None:
    """Where the sandbox uid cannot read Parkway's own files (an install under a 0700
    home), the replay's server copies the sandbox's guest files to the temporary folder.
    A CI timeout stopping the replay must not leave that copy behind: every timed-out
    job would leak a folder on the runner. The replay stops its server with SIGTERM,
    which the server turns into its shutdown, and the shutdown removes the copy."""
    temp, hold = short_tmp / "tmp", short_tmp / "hold"
    temp.mkdir()
    temp.chmod(0o1777)  # a /tmp the sandbox uid can read the copy from, as on a host
    short_tmp.chmod(0o711)
    hold.mkdir()
    (hold / "hold").touch()
    replay = subprocess.Popen(
        [sys.executable, "-m", "parkway.transport.cli", "replay", "cassettes/hold.cassette.json"],
        cwd=project,
        env=_env(TMPDIR=str(temp), HOLD_DIR=str(hold), PYTHONPATH=str(private_install)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until_the_tool_runs(replay, hold)
        copies = _guest_copies(temp)
        assert len(copies) == 1, copies  # the server copied the guest files: the case at hand
        replay.send_signal(signum)
        out, err = replay.communicate(timeout=60)
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.communicate()
    assert replay.returncode == 128 + signum, out + err
    assert _guest_copies(temp) == []
    assert list(temp.iterdir()) == []


@pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap (apt install bubblewrap)"
)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_serve_stopped_by_a_signal_leaves_no_copy_of_the_guest_files(
    private_install: Path, short_tmp: Path, redis: Redis, redis_url: str, signum: int
) -> None:
    """``parkway serve`` (and ``parkway record``, the same server) removes its copy of
    the guest files in its shutdown, which SIGTERM and SIGINT both run: a service
    restarted by its supervisor would otherwise leave one folder per restart."""
    temp = short_tmp / "tmp"
    temp.mkdir()
    temp.chmod(0o1777)
    short_tmp.chmod(0o711)
    server = subprocess.Popen(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--auth", "anonymous", "--port", str(free_port()),
         "--redis-url", redis_url, "--log-level", "warning"],
        cwd=short_tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(TMPDIR=str(temp), PYTHONPATH=str(private_install),
                 PARKWAY_SECRET_KEY=TEST_SECRET),
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # the startup line, once it listens
        assert line.startswith("Parkway is serving"), server.communicate()
        assert len(_guest_copies(temp)) == 1
        server.send_signal(signum)
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode in (0, -signal.SIGTERM), out + err
    assert list(temp.iterdir()) == []


@pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap (apt install bubblewrap)"
)
def test_a_cold_replay_leaves_no_copy_of_the_guest_files(
    project: Path, private_install: Path, short_tmp: Path
) -> None:
    """A cold replay kills its server with SIGKILL at each park point: a killed server
    cannot remove its copy of the guest files, so the next one (and the replay, at the
    end) removes the copies of servers that are gone. A replay that runs to the end
    leaves none behind."""
    temp = short_tmp / "tmp"
    temp.mkdir()
    temp.chmod(0o1777)
    short_tmp.chmod(0o711)
    result = subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "replay",
         "cassettes/hold.cassette.json", "--cold"],
        cwd=project, env=_env(TMPDIR=str(temp), PYTHONPATH=str(private_install)),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(cold: killed and restarted once): every response matches" in result.stdout
    assert list(temp.iterdir()) == []


def test_two_replays_of_one_cassette_on_one_redis_do_not_race(redis: Redis, redis_url: str) -> None:
    """CI runs replays in parallel on one shared database (xdist workers, two jobs):
    each run's chats get an id of their own, so both match, and neither saw the other.
    The cassette is the documented example, a working proof: ``parkway replay --cold``
    names the agent it replays, kills the server at each park point and exits 0 when
    everything matches (one run is cold, the other warm: the race is the same, and a
    second cold run would prove the cold path again at four more server starts)."""
    examples = ROOT / "docs" / "examples"
    cassette = examples / "trip.cassette.json"
    agent = json.loads((examples / "trip.agent.json").read_text())
    named = (
        f"agent: {examples / 'trip.agent.json'} ({agent_digest(agent)[:19]}…), the agent recorded"
    )
    argv = [sys.executable, "-m", "parkway.transport.cli", "replay", str(cassette), "--cold"]
    runs = [
        subprocess.Popen(
            [*argv, "--redis-url", redis_url] if cold else [*argv[:-1], "--redis-url", redis_url],
            cwd=ROOT,
            env=_env(PYTHONPATH=str(ROOT)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cold in (True, False)
    ]
    results = [run.communicate(timeout=180) for run in runs]
    for run, (out, err) in zip(runs, results, strict=True):
        assert run.returncode == 0, out + err
        assert out.startswith(named + "\n"), out
    assert "(cold: killed and restarted 4 times): every response matches" in results[0][0]
    assert "every response matches" in results[1][0]
    client = SyncRedis.from_url(redis_url, decode_responses=True)
    try:
        chats = {key.split("{", 1)[1].split("}", 1)[0] for key in client.scan_iter("pw:{trip*")}
    finally:
        client.close()
    assert len(chats) == 2 and all(chat.startswith("trip.rp") for chat in chats), chats
