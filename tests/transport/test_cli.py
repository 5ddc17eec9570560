"""``parkway`` as users run it: a real process, its exit code and what it prints."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from parkway.runner.ops.heap import YOUNG_THRESHOLD
from parkway.transport.settings import Settings, SettingsError
from tests.helpers.support import ROOT, TEST_SECRET, agent_doc, text


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _parkway(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", *args],
        cwd=cwd, env=_environment(**env), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_an_unreachable_redis_stops_serve_with_one_line_and_exit_2(tmp_path: Path) -> None:
    """docs/operations.md promises one line naming the setting and exit code 2 for a bad
    setting; a Redis URL nothing answers on is one, found only when the server connects.
    Nothing may claim to be serving."""
    result = _parkway(
        "serve", "--auth", "anonymous", "--redis-url", "redis://127.0.0.1:1/0", "--port", "0",
        "--data-dir", str(tmp_path), PARKWAY_SECRET_KEY=TEST_SECRET,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("parkway: redis_url (--redis-url, PARKWAY_REDIS_URL): ")
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in lines[0]
    assert "serving" not in result.stdout


@pytest.mark.slow
def test_an_unreachable_redis_is_said_before_the_settings_an_external_redis_needs(
    tmp_path: Path,
) -> None:
    """A user who points ``--redis-url`` at the wrong place and has set nothing else
    used to be told first that auth, then that the secret key, is required, and about
    the Redis they had mistyped only once both were set: the Redis comes first."""
    result = _parkway(
        "serve", "--redis-url", "redis://127.0.0.1:1/0", "--port", "0", "--data-dir",
        str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("parkway: redis_url (--redis-url, PARKWAY_REDIS_URL): cannot reach")
    assert result.stdout == ""


@pytest.mark.slow
def test_a_port_in_use_stops_serve_with_one_line_before_serving(tmp_path: Path) -> None:
    """A port another process listens on is refused before anything starts, in one line
    naming the setting, and the startup line (which says the server is up) never
    appears."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _parkway("serve", "--port", str(port), "--data-dir", str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"parkway: port (--port, PARKWAY_PORT): 127.0.0.1:{port} is already in use; stop "
        "what listens there or choose another port"
    )
    assert result.stdout == ""


def test_only_from_sources_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests and embedders build ``Settings(...)`` from keyword values; a ``PARKWAY_*``
    variable of the process running them must not change what they built."""
    monkeypatch.setenv("PARKWAY_PORT", "9999")
    monkeypatch.setenv("PARKWAY_REDIS_URL", "redis://elsewhere:6379/0")
    assert Settings().port == 8000 and Settings().embedded
    assert Settings(port=8100).port == 8100
    read = Settings.from_sources()
    assert read.port == 9999 and read.redis_url == "redis://elsewhere:6379/0"
    assert Settings.from_sources({"port": 8200}).port == 8200


def test_an_invalid_secret_is_refused_without_repeating_it() -> None:
    """The message names the setting and the rule, never the value: startup errors
    end up in terminals and CI logs."""
    for name in ("SECRET_KEY", "EDITOR_TOKEN", "TOKEN_KEY"):
        with pytest.raises(SettingsError, match=f"PARKWAY_{name}") as refused:
            Settings.from_sources(environ={f"PARKWAY_{name}": "hunter2"})
        assert "hunter2" not in str(refused.value)
    with pytest.raises(SettingsError, match=r"max_body_bytes \(PARKWAY_MAX_BODY_BYTES\)"):
        Settings(max_body_bytes=0)


def test_help_is_plain_text() -> None:
    """``parkway --help`` is read in a terminal: no reST markup from docstrings."""
    result = _parkway("--help")
    assert result.returncode == 0, result.stderr
    assert "parkway serve" in result.stdout
    for markup in ("``", ":func:", ":mod:", ":class:", ":meth:"):
        assert markup not in result.stdout


# What `parkway --help` must not import: the runtime (the engine, the MCP SDK, the model
# layer), the web stack, Redis's client. The console script's module lives in
# parkway.transport, whose face once imported all of it (3.7 s on a loaded machine).
HEAVY = ("parkway.runner", "parkway.widgets_api", "parkway.transport.app", "mcp",
         "pydantic_ai", "pydantic", "starlette", "uvicorn", "redis", "httpx")  # fmt: skip


def test_help_imports_nothing_of_the_runtime() -> None:
    """The installed console script, run as a user runs it, under ``-X importtime``
    (which lists every module imported): ``parkway --help`` imports the standard
    library and the CLI's own module, none of the runtime."""
    script = Path(sys.executable).with_name("parkway")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(script), "--help"],
        cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "parkway serve" in done.stdout
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "parkway.transport.cli" in imported  # what is read is what ran
    heavy = sorted(m for m in imported if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not heavy, heavy


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_installed_distributions_version(flag: str) -> None:
    """Bug reports and upgrade checks start with ``parkway --version``: it names the
    installed distribution's version (its metadata, as pip installed it) and exits 0,
    without a subcommand."""
    result = _parkway(flag)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"parkway {importlib.metadata.version('parkway')}\n"


@pytest.mark.slow
def test_serve_imports_tool_modules_kept_next_to_the_agent_file(tmp_path: Path) -> None:
    """Users keep their tool code beside their agent file and name it in ``ref``; the
    agent file's folder is importable without PYTHONPATH, from any working directory.
    A ref that does not import stops startup, so serving proves it imported."""
    module = f"beside_{uuid.uuid4().hex[:12]}"
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / f"{module}.py").write_text(
        'def lookup(data):\n    """Look a thing up."""\n    return {"found": data}\n'
    )
    tool = {"type": "function", "name": "lookup", "ref": f"{module}:lookup"}
    agent = folder / "agent.json"
    agent.write_text(json.dumps(agent_doc([[text("hi")]], tools=[tool])))
    proc = subprocess.Popen(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--agent", str(agent),
         "--port", "0", "--data-dir", "d", "--log-level", "warning"],
        cwd=tmp_path, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the startup line, or "" when it exited
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert line.startswith(f"Parkway is serving {agent}"), err


# A `parkway serve` whose startup line reports the collector's state, then stops itself.
_REPORTING_SERVE = """
import gc, os, signal, sys
from parkway.transport import cli
serve = cli._serve
def reporting(app, config, sock, announce, farewell):
    def announced():
        print(gc.get_freeze_count(), gc.get_threshold()[0], len(gc.get_objects()), flush=True)
        os.kill(os.getpid(), signal.SIGINT)
    serve(app, config, sock, announced, farewell)
cli._serve = reporting
sys.exit(cli.main(["serve", "--auth", "anonymous", "--redis-url", sys.argv[1], "--port", "0", "--log-level", "warning"]))
"""


@pytest.mark.slow
def test_serve_keeps_what_startup_built_out_of_later_collections(redis_url: str) -> None:
    """By the time it says it is serving, the startup heap (modules, the app, its clients)
    is frozen, so no later collection walks it, and the youngest generation holds what a
    request allocates (runner/ops/heap.py)."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORTING_SERVE, redis_url],
        cwd=ROOT, env=_environment(PARKWAY_SECRET_KEY=TEST_SECRET), capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frozen, young, tracked = map(int, done.stdout.split())
    assert frozen > 50_000  # the imported modules alone
    assert tracked < frozen // 10
    assert young == YOUNG_THRESHOLD
