"""The README's curl tour, run as a reader runs it: its shell block, as written, against a
real ``parkway serve`` with the demo agent, twice in a row on the same server."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from parkway.runner.agent import parse_agent_file
from parkway.runner.demo import DEMO_AGENT
from tests.helpers.support import ROOT, TEST_SECRET, free_port

pytestmark = pytest.mark.slow


def _tour() -> str:
    """The shell block that follows "The same round trip without a browser"."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split("The same round trip without a browser", 1)[1]
    found = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert found is not None, "README.md: the curl tour's ```sh block is gone"
    return found.group(1)


@pytest.fixture
def port(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[int]:
    """``parkway serve`` with the demo agent, as ``make run`` starts it, on a port of
    its own (8000 may be taken on a shared machine)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--auth", "anonymous", "--port", str(port),
         "--redis-url", redis_url, "--log-level", "warning"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT), "PARKWAY_SECRET_KEY": TEST_SECRET},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # the startup line, once it listens
        assert line.startswith("Parkway is serving"), server.communicate()
        yield port
    finally:
        server.terminate()
        server.communicate(timeout=60)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the tour needs curl")
def test_the_readme_curl_tour_runs_as_written_and_again(port: int) -> None:
    """A reader pastes the tour into a shell, and may well paste it again: each run
    parks on the client tool, answers it and resumes the same message. A second run
    gets a new session, so it must start a new chat: a fixed chat id belongs to the
    first run's session and answers ``chat_not_found``."""
    script = _tour().replace("localhost:8000", f"localhost:{port}")
    assert "localhost:8000" not in script
    for attempt in range(2):
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        out = result.stdout
        assert result.returncode == 0, (attempt, out, result.stderr)
        assert "chat_not_found" not in out, (attempt, out)
        assert '"toolName":"choose_option"' in out, (attempt, out)
        assert '"finishReason":"tool-calls"' in out, (attempt, out)
        assert '"output":{"choice":"Oslo"}' in out, (attempt, out)  # the resumed run
        starts = re.findall(r'"type":"start","messageId":"([^"]+)"', out)
        assert len(starts) == 2 and starts[0] == starts[1], (attempt, starts)  # one message


def test_the_tours_first_message_is_the_one_the_page_suggests() -> None:
    """A new user reads the README's first message and finds another one suggested on
    the page: they must agree (the demo agent's suggestion, which the empty chat offers)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A 60-second tour", 1)[1]
    said = re.search(r'Say\s+"([^"]+)"', tour)
    assert said is not None, "README.md: the tour no longer says what to type first"
    first = " ".join(said.group(1).split())
    assert first == parse_agent_file(DEMO_AGENT).suggestions[0]
