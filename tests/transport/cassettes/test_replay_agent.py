"""Which agent a replay serves, and replays that cannot prove anything: a replay tests
the agent file as it is now (the one the cassette names, or ``--agent``), the
cassette's own copy only when asked; version-1 cassettes still replay; a cassette with
nothing to compare, or a setup that cannot run, stops with one line and exit code 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.transport.cassettes import agent_digest, load_cassette
from parkway.transport.pytest_plugin import CassetteReplayer
from tests.helpers.support import ROOT

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "docs" / "examples"
FINISHED = {
    "request": {"method": "POST", "path": "/api/chat", "json": {"id": "c", "messages": []}},
    "response": {"status": 200, "chunks": [{"type": "start"}, {"type": "finish"}]},
}


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    return subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "replay", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the example cassette and the agent file it names, free to edit."""
    shutil.copy(EXAMPLES / "trip.agent.json", tmp_path / "trip.agent.json")
    shutil.copy(EXAMPLES / "trip.cassette.json", tmp_path / "trip.cassette.json")
    return tmp_path / "trip.cassette.json"


def _edit_agent(path: Path) -> None:
    """The agent with another wording of its second turn: a regression to catch."""
    agent = json.loads(path.read_text())
    turn = agent["model"]["scripted"]["turns"][1]
    turn[0]["text"] = "Outcome: {{last_tool_results}}. "
    path.write_text(json.dumps(agent, indent=2))


def test_a_replay_serves_the_agent_file_as_it_is_now_and_says_it_changed(
    redis: Redis, redis_url: str, example: Path
) -> None:
    """The regression a replay test exists to catch is an edit to the agent file: the
    replay serves that file, not the copy in the cassette, and says it is not the agent
    recorded; the cassette's copy still matches when asked for."""
    agent_file = example.parent / "trip.agent.json"
    _edit_agent(agent_file)
    edited = agent_digest(json.loads(agent_file.read_text()))
    result = _cli(str(example), "--redis-url", redis_url)
    assert result.returncode == 1, result.stdout + result.stderr
    first, summary = result.stdout.splitlines()[:2]
    assert first.startswith(f"agent: {agent_file} ({edited[:19]}…), which differs from")
    assert summary.startswith("replayed 7 exchanges (warm): ") and "difference" in summary
    assert "Outcome: " in result.stdout

    own = _cli(str(example), "--cassette-agent", "--redis-url", redis_url)
    assert own.returncode == 0, own.stdout + own.stderr
    assert own.stdout.startswith("agent: the cassette's own copy (sha256:")
    assert ", the agent recorded\n" in own.stdout


def test_agent_names_another_agent_file_to_replay_against(
    redis: Redis, redis_url: str, example: Path, tmp_path: Path
) -> None:
    """``--agent FILE`` replays the same conversation against a different file (a
    candidate change), whatever the cassette names."""
    candidate = tmp_path / "elsewhere" / "candidate.agent.json"
    candidate.parent.mkdir()
    shutil.copy(EXAMPLES / "trip.agent.json", candidate)
    _edit_agent(candidate)
    result = _cli(str(example), "--agent", str(candidate), "--redis-url", redis_url)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"agent: {candidate} (")


def test_a_version_1_cassette_replays_its_own_copy_or_another_agent(
    redis: Redis, redis_url: str, example: Path
) -> None:
    """Cassettes recorded before version 2 keep working: read and migrated, they name no
    agent file, so they replay their own copy or the one given, never guessing."""
    document = json.loads(example.read_text())
    v1 = {k: document[k] for k in ("description", "agent", "exchanges")}
    example.write_text(json.dumps({"version": 1, **v1}))
    migrated = load_cassette(example)
    assert migrated.version == 3 and migrated.agent_file is None
    assert migrated.agent_digest == document["agent_digest"] and migrated.model == "scripted"

    refused = _cli(str(example))
    assert refused.returncode == 2 and refused.stdout == ""
    assert "the cassette names no agent file: replay it against one with --agent" in (
        refused.stderr
    )
    own = _cli(str(example), "--cassette-agent", "--redis-url", redis_url)
    assert own.returncode == 0, own.stdout + own.stderr
    agent = str(example.parent / "trip.agent.json")
    given = _cli(str(example), "--agent", agent, "--redis-url", redis_url)
    assert given.returncode == 0, given.stdout + given.stderr
    assert given.stdout.startswith(f"agent: {agent} (") and ", the agent recorded\n" in given.stdout


def _cassette(exchanges: list[Any]) -> dict[str, Any]:
    agent = json.loads((EXAMPLES / "trip.agent.json").read_text())
    return {
        "version": 2,
        "agent_file": "trip.agent.json",
        "agent_digest": agent_digest(agent),
        "model": "scripted",
        "exchanges": exchanges,
    }


def _without_finish() -> list[Any]:
    exchange = json.loads(json.dumps(FINISHED))
    exchange["response"]["chunks"] = [{"type": "start"}, {"type": "start-step"}]
    return [exchange]


@pytest.mark.parametrize(
    ("exchanges", "args", "message"),
    [
        ([], (), "the cassette has no exchanges: there is nothing to replay"),
        (_without_finish(), (), "no exchange of the cassette reaches the end of a turn"),
        ([FINISHED, FINISHED], ("--cold",), "a cold replay needs a park point"),
    ],
    ids=["no-exchanges", "no-finish", "cold-without-park-point"],
)
def test_a_cassette_that_proves_nothing_fails_with_exit_2(
    example: Path, exchanges: list[Any], args: tuple[str, ...], message: str
) -> None:
    """A replay that compares nothing must never pass: an empty cassette, a recording
    that never ends a turn, or a cold replay with nowhere to kill the server."""
    example.write_text(json.dumps(_cassette(exchanges)))
    result = _cli(str(example), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"parkway replay: {message}")
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_the_fixture_fails_a_cassette_that_proves_nothing(
    example: Path, parkway_replay: CassetteReplayer
) -> None:
    """The fixture says the same as the CLI: a failure, never a pass."""
    example.write_text(json.dumps(_cassette([FINISHED])))
    with pytest.raises(pytest.fail.Exception, match="needs a park point"):
        parkway_replay(example, cold=True)
    example.write_text(json.dumps(_cassette([])))
    with pytest.raises(pytest.fail.Exception, match="has no exchanges"):
        parkway_replay(example)


def _bad_agent(folder: Path, content: str) -> Path:
    path = folder / "bad.agent.json"
    path.write_text(content)
    return path


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: ("--redis-url", "notaurl://x"), "is not a Redis URL"),
        (lambda d: ("--redis-url", "redis://127.0.0.1:1/0"), "cannot reach Redis at"),
        (lambda d: ("--agent", str(d / "missing.json")), "cannot read agent file"),
        (lambda d: ("--agent", str(_bad_agent(d, "{nope"))), "is not valid JSON"),
        (
            lambda d: (
                "--agent",
                str(
                    _bad_agent(
                        d,
                        json.dumps(
                            {
                                "template": {
                                    "tools": [
                                        {"type": "function", "name": "f", "ref": "no_such_mod:f"}
                                    ]
                                },
                                "model": {"scripted": {"turns": []}},
                            }
                        ),
                    )
                ),
            ),
            "module 'no_such_mod' cannot be imported",
        ),
    ],
    ids=["malformed-redis-url", "unreachable-redis", "missing-agent", "invalid-agent", "no-module"],
)
def test_a_setup_error_is_one_line_and_exit_2(
    example: Path, tmp_path: Path, setup: Any, message: str
) -> None:
    """Exit 1 means "replayed, with differences"; a setup that cannot run is not that,
    and CI logs need the reason, not a traceback."""
    result = _cli(str(example), *setup(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_a_fixture_error_is_printed_once(tmp_path: Path) -> None:
    """A failure raised while handling the error it reports carries that error along,
    and pytest printed the message twice; the message is enough."""
    (tmp_path / "test_broken.py").write_text(
        "def test_broken(parkway_replay):\n    parkway_replay('nope.cassette.json')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_broken.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    message = f"cannot read cassette '{tmp_path / 'nope.cassette.json'}': No such file or directory"
    assert result.stdout.splitlines().count(message) == 1, result.stdout
    assert "During handling of the above exception" not in result.stdout
