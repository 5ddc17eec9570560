"""``parkway serve --agent module:attr`` and ``parkway agent export``: an agent defined in
Python, served and exported by the console script the way a user runs it.

The project lives in a folder outside the repository and the command runs from its root
with no ``PYTHONPATH`` (the environment a user's shell has, tests/helpers/user_install.py),
so the agent's module imports because the project root is importable, as it is for an
agent file's refs. A real turn goes through the server: a typed tool runs, a per-call
approval parks, the approval resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from parkway.transport.sse import sse_chunks
from tests.helpers.support import free_port, user_message
from tests.helpers.user_install import user_environment

PARKWAY = Path(sys.executable).with_name("parkway")

# A user's project: the package `trips`, its agent in trips/agent.py, scripted so that no
# key is needed: a forecast (typed argument and result), then a booking over 3 nights,
# which its needs_approval function sends to a human.
AGENT_MODULE = '''
from typing import Annotated

from pydantic import BaseModel, Field

from parkway.runner import Agent, ToolContext

SCRIPT = {"scripted": {"turns": [
    [{"tool_call": {"name": "forecast", "input": {"city": "Oslo"}}},
     {"tool_call": {"name": "book_stay", "input": {"city": "Oslo", "nights": 5}}}],
    [{"text": "Done: {{last_tool_results}}"}],
]}}

agent = Agent(
    "trips",
    instructions="You plan weekend trips.",
    model=SCRIPT,
    suggestions=["Plan my weekend"],
)


class Forecast(BaseModel):
    city: str
    sky: str


def long_stays(nights: int) -> bool:
    return nights > 3


@agent.tool
def forecast(city: str) -> Forecast:
    """The weekend's forecast for a city.

    Args:
        city: The city, in English.
    """
    return Forecast(city=city, sky="sunny")


@agent.tool(needs_approval=long_stays)
async def book_stay(ctx: ToolContext, city: str, nights: Annotated[int, Field(ge=1)]) -> dict:
    """Book a stay.

    Args:
        city: Where.
        nights: How many nights.
    """
    return {"booked": city, "nights": nights, "for": ctx.principal[:4]}
'''


@pytest.fixture
def project() -> Iterator[Path]:
    # A short folder of its own, not pytest's tmp_path: `parkway serve` keeps its embedded
    # Redis's socket in the project's .parkway/, and a unix socket's path is short-limited
    # (pytest-xdist's workers nest tmp_path a level deeper).
    with tempfile.TemporaryDirectory(prefix="pw-") as folder:
        root = Path(folder) / "trip-app"
        (root / "trips").mkdir(parents=True)
        (root / "trips" / "__init__.py").write_text("")
        (root / "trips" / "agent.py").write_text(textwrap.dedent(AGENT_MODULE))
        yield root


def _parkway(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PARKWAY), *args], cwd=project, env=user_environment(),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_export_prints_the_template_and_the_agent_file(project: Path) -> None:
    """The exported template is what is stored and committed: refs name the decorated
    functions, the rule is the policy per_call; the agent-file form adds the model and
    loads as any agent file does."""
    result = _parkway(project, "agent", "export", "trips.agent:agent")
    assert result.returncode == 0, result.stderr
    template = json.loads(result.stdout)
    forecast, book = template["tools"]
    assert forecast["ref"] == "trips.agent:forecast"
    assert forecast["input_schema"]["properties"]["city"]["description"] == "The city, in English."
    assert (book["ref"], book["needs_approval"]) == ("trips.agent:book_stay", "per_call")
    assert "ctx" not in book["input_schema"]["properties"]
    full = _parkway(project, "agent", "export", "trips.agent:agent", "--agent-file")
    assert full.returncode == 0, full.stderr
    document = json.loads(full.stdout)
    assert document["template"] == template
    assert document["model"]["scripted"]["turns"][0][0]["tool_call"]["name"] == "forecast"
    assert document["suggestions"] == ["Plan my weekend"]


def test_export_of_what_is_not_an_agent_is_one_line_and_exit_2(project: Path) -> None:
    for target, says in (
        ("trips.agent:Forecast", "not a parkway Agent"),
        ("trips.nowhere:agent", "No module named 'trips.nowhere'"),
        ("agent.json", "not module:attribute"),
    ):
        result = _parkway(project, "agent", "export", target)
        assert result.returncode == 2, (target, result.stdout)
        assert result.stdout == ""
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("parkway agent export: ") and says in line, line


@pytest.mark.slow
def test_serve_a_python_agent_by_module_and_attribute(project: Path) -> None:
    """``parkway serve --agent trips.agent:agent`` from the project's root serves the
    agent: the typed tool runs, the per-call approval parks the 5-night booking as an
    ordinary approval, and approving it runs the booking."""
    port = free_port()
    proc = subprocess.Popen(
        [str(PARKWAY), "serve", "--agent", "trips.agent:agent", "--port", str(port),
         "--log-level", "warning"],
        cwd=project, env=user_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("Parkway is serving trips.agent:agent at "):
            proc.kill()  # it said nothing, or something else: show what it wrote instead
            _, errors = proc.communicate(timeout=30)
            raise AssertionError(f"serve printed {line!r}; its stderr:\n{errors}")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            session = client.post("/api/sessions")
            assert session.status_code == 201, session.text
            client.headers["authorization"] = f"Bearer {session.json()['token']}"
            client.cookies.clear()
            agent = client.get("/api/agent").json()
            names = [t.get("name") for t in agent["template"]["tools"]]
            assert names == ["forecast", "book_stay"], agent
            # its first revision says where it came from (it once said "the agent file")
            assert agent["summary"] == "from the Python agent trips.agent:agent"
            body = {"id": "py-serve", "messages": [user_message("hi")],
                    "trigger": "submit-message"}  # fmt: skip
            response = client.post("/api/chat", json=body)
            assert response.status_code == 200, response.text
            chunks = sse_chunks(response.text)
            outputs = [c["output"] for c in chunks if c["type"] == "tool-output-available"]
            assert outputs == [{"city": "Oslo", "sky": "sunny"}]
            [request] = [c for c in chunks if c["type"] == "tool-approval-request"]
            assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
            settled = client.post(
                f"/api/chats/py-serve/calls/{request['toolCallId']}",
                json={"outcome": "approved"},
            )
            assert settled.status_code == 200, settled.text
            resumed = client.post("/api/chats/py-serve/resume")
            assert resumed.status_code == 200, resumed.text
            after = sse_chunks(resumed.text)
        booked = [c["output"] for c in after if c["type"] == "tool-output-available"]
        assert booked == [{"booked": "Oslo", "nights": 5, "for": "usr_"}]
        said = "".join(c["delta"] for c in after if c["type"] == "text-delta")
        assert '"booked":"Oslo"' in said, said
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err


# -- what a new user gets wrong, said plainly ---------------------------------------------

BROKEN_MODULES = {
    # a third-party package the project forgot to install
    "needs_package.py": "import parkway_test_no_such_package\n",
    "typo.py": "from parkway.runner import Agent\n\nagent = Agent('typo',\n",
}


def test_serve_a_python_file_names_the_agents_it_defines(project: Path) -> None:
    """``--agent trips/agent.py`` is the first thing a user types for an agent in
    Python: the one line names what to write instead, ``trips.agent:agent`` (the
    Agent the module defines), not that the file is invalid JSON."""
    result = _parkway(project, "serve", "--agent", "trips/agent.py", "--port", "0")
    assert result.returncode == 2, result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line == (
        "parkway: agent 'trips/agent.py' is a Python file: name its Agent as trips.agent:agent"
    )
    exported = _parkway(project, "agent", "export", "trips/agent.py")
    assert exported.returncode == 2 and "name its Agent as trips.agent:agent" in exported.stderr


def test_a_module_whose_own_import_fails_shows_that_error_not_the_folder_hint(
    project: Path,
) -> None:
    """A module that is found but fails to import (a missing third-party package, a
    syntax error) used to be told to "run from the project's root folder", which it
    was: the line now says what failed, where. A module that is not there still gets
    the folder hint."""
    for name, source in BROKEN_MODULES.items():
        (project / "trips" / name).write_text(source)
    missing = _parkway(project, "serve", "--agent", "trips.needs_package:agent", "--port", "0")
    assert missing.returncode == 2
    [line] = missing.stderr.strip().splitlines()
    assert line.startswith(
        "parkway: agent 'trips.needs_package:agent': importing 'trips.needs_package' failed "
        "at trips/needs_package.py, line 1: ModuleNotFoundError: No module named "
        "'parkway_test_no_such_package'; install it where parkway runs"
    ), line
    assert "root folder" not in line
    typo = _parkway(project, "agent", "export", "trips.typo:agent")
    assert typo.returncode == 2
    [line] = typo.stderr.strip().splitlines()
    assert line.startswith(
        "parkway agent export: agent 'trips.typo:agent': importing 'trips.typo' failed: "
        "SyntaxError at trips/typo.py, line 3: "
    ), line
    assert "root folder" not in line
    absent = _parkway(project, "serve", "--agent", "trips.absent:agent", "--port", "0")
    assert "run from the project's root folder" in absent.stderr


def test_export_into_a_reader_that_stopped_ends_quietly(project: Path) -> None:
    """``parkway agent export ... | head`` used to end in a BrokenPipeError traceback
    once head had what it wanted. Here the reader is gone before anything is written
    (the read end of the pipe is closed), so every run meets the broken pipe: nothing
    on stderr, exit code 1, as Python's own EPIPE exit."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [str(PARKWAY), "agent", "export", "trips.agent:agent"], cwd=project,
            env=user_environment(), stdout=write, stderr=subprocess.PIPE, text=True,
            timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 1
