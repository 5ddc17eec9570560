"""The example project (docs/examples/trip-project/), used the way its users would use it.

A team keeps an agent, its server tools and a committed cassette in a project of its own,
installs Parkway from a package with no dev extras, and runs ``pytest
--record-mode=none`` in CI with no provider key. These tests do exactly that: a fresh
venv (``python -m venv``, then ``pip install`` of Parkway, not editable, and pytest) runs
the example's tests in a copy of the example, in an environment with no ``*_API_KEY``,
``*_BASE_URL`` or ``PARKWAY_*`` variable. The cassette passes; an edited agent, a tool
that now answers otherwise and a missing cassette fail, each saying what is wrong.

The venv is built once for the test session (pip's cache keeps it quick after the first
run: the ``user_install`` fixture, tests/helpers/user_install.py), and shared with the tests that
serve the installed playground. The committed cassette is recorded by ``python -m
tests.helpers.record_example``, against the provider double; the last test records it again in a
copy, so the script keeps working as the example changes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from parkway.transport.cassettes import load_cassette
from tests.helpers.record_example import record
from tests.helpers.user_install import UserInstall, user_environment

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "trip-project"

# Building the venv downloads Parkway's dependencies on a cold pip cache.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def user_python(user_install: UserInstall) -> Path:
    """The python of the session's user venv: Parkway's wheel installed as a user installs
    it (not editable, no extras) with pytest (tests/helpers/user_install.py)."""
    return user_install.python


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the example project, for one test to run (and perhaps edit)."""
    copy = tmp_path / "trip-project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return copy


def _pytest(python: Path, project: Path) -> subprocess.CompletedProcess[str]:
    """Run the project's tests from its root, as its CI does: ``pytest
    --record-mode=none``, with no key in the environment."""
    return subprocess.run(
        [str(python), "-m", "pytest", "--record-mode=none"],
        cwd=project,
        env=user_environment(),
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_committed_cassette_replays_cold_with_no_key(user_python: Path, project: Path) -> None:
    cassette = json.loads((project / "cassettes" / "trip.cassette.json").read_text())
    assert cassette["model"] == "anthropic:claude-sonnet-4-5"
    assert cassette["model_steps"], "the cassette has no model steps to replay offline"
    run = _pytest(user_python, project)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    # Parkway came from the venv, installed (not the checkout through a path).
    where = subprocess.run(
        [str(user_python), "-c", "import parkway.transport as t; print(t.__file__)"],
        cwd=project,
        env=user_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert "site-packages" in where.stdout, where.stdout


def test_the_agent_file_is_the_python_agent_exported(user_python: Path, project: Path) -> None:
    """The agent is written in Python (trip_project/agent.py); agents/trip.agent.json, which
    the cassette replays, is exactly its export by the installed ``parkway`` command."""
    parkway = user_python.parent / "parkway"
    exported = subprocess.run(
        [str(parkway), "agent", "export", "trip_project.agent:agent", "--agent-file"],
        cwd=project,
        env=user_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    committed = json.loads((project / "agents" / "trip.agent.json").read_text())
    assert json.loads(exported.stdout) == committed
    kinds = {tool["name"]: tool["type"] for tool in committed["template"]["tools"]}
    assert kinds == {"forecast": "function", "book_stay": "function", "choose_city": "client"}


def test_edited_instructions_fail_naming_the_model_step_and_field(
    user_python: Path, project: Path
) -> None:
    agent_file = project / "agents" / "trip.agent.json"
    agent = json.loads(agent_file.read_text())
    agent["template"]["instructions"] = "You plan cheap weekend trips."
    agent_file.write_text(json.dumps(agent, indent=2))
    run = _pytest(user_python, project)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "differs from the agent recorded" in run.stdout
    assert (
        "model step 0 of chat 'weekend': the request to the model differs at instructions"
        in run.stdout
    )
    assert 'got:      "You plan cheap weekend trips."' in run.stdout


def test_a_server_tool_that_answers_otherwise_fails_naming_the_exchange_and_the_step(
    user_python: Path, project: Path
) -> None:
    tools = project / "trip_project" / "tools.py"
    source = tools.read_text()
    assert '"high_c": 24' in source
    tools.write_text(source.replace('"high_c": 24', '"high_c": 27'))
    run = _pytest(user_python, project)
    assert run.returncode == 1, run.stdout + run.stderr
    # The tool's output streamed in the first exchange, and the model's next request
    # carries it: both are named.
    assert (
        "model step 1 of chat 'weekend': the request to the model differs at "
        "messages[2].result.high_c" in run.stdout
    )
    assert "exchange 0 (POST /api/chat): chunk" in run.stdout
    assert "at output.high_c" in run.stdout
    assert "likely cause: the tool `forecast` returned another output" in run.stdout


def test_no_cassette_and_record_mode_none_fails_saying_so(user_python: Path, project: Path) -> None:
    cassette = project / "cassettes" / "trip.cassette.json"
    cassette.unlink()
    run = _pytest(user_python, project)
    assert run.returncode == 1, run.stdout + run.stderr
    # The fixture names the path as the test gave it, from the test file's folder.
    assert "no cassette at " in run.stdout
    assert "cassettes/trip.cassette.json and --record-mode=none" in run.stdout
    assert not cassette.exists()  # none never records


def test_the_maintainer_script_records_a_cassette_the_user_replays(
    user_python: Path, project: Path
) -> None:
    cassette = project / "cassettes" / "trip.cassette.json"
    cassette.unlink()
    assert record(project) == 0
    steps = load_cassette(cassette).model_steps
    assert [(step.chat, step.index) for step in steps] == [
        ("weekend", 0),
        ("weekend", 1),
        ("weekend", 2),
    ]
    run = _pytest(user_python, project)
    assert run.returncode == 0, run.stdout + run.stderr
