"""Record the example project's cassette, docs/examples/trip-project/cassettes/trip.cassette.json.

    .venv/bin/python -m tests.helpers.record_example

A team records its cassette with a real key (the project's README.md). No real provider
is reachable where Parkway is built and tested, so this maintainer script records it
against the provider double instead: a fake Anthropic Messages API on loopback that the
real Anthropic SDK talks to (tests/helpers/llm_double). It scripts the three answers the
example's ``drive()`` needs, points ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` at
the double, and runs the example's own test with ``--record-mode=all`` in the example's
folder, exactly as a team member would with a key. Then it checks what was written: a
version 3 cassette with every model step, and that the double answered each step once.

Run it again after changing the example's agent, tools or ``drive()``, and commit the
cassette with them; tests/product/test_example_project.py replays it as a user's CI would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from parkway.transport.cassettes import load_cassette
from tests.helpers.llm_double import Call, ProviderDouble, Turn

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "trip-project"
CASSETTE = Path("cassettes") / "trip.cassette.json"  # in the project
CHAT = "weekend"

# What the model answers at each step of the chat in tests/test_trip.py's drive().
TURNS = [
    # 0. The user asked "Lisbon or Oslo?": both forecasts (the server tool), then the
    #    choice (the client tool, which parks the run). Reasoning is signed, as
    #    Anthropic's extended thinking is: the signature must go back on later steps.
    Turn(
        reasoning="The user names two cities. Check both forecasts, then let them choose.",
        signature="EqQBCkYIBxgCKkDexampleSignatureRecordedAgainstTheProviderDouble",
        text="Let me check the weekend's weather in both cities.",
        calls=[
            Call("forecast", {"city": "Lisbon"}),
            Call("forecast", {"city": "Oslo"}),
            Call(
                "choose_city",
                {
                    "question": "Lisbon is sunny (24 °C), Oslo has light rain (11 °C). Which one?",
                    "options": ["Lisbon", "Oslo"],
                },
            ),
        ],
        usage=(412, 96, 0),
    ),
    # 1. The user chose Lisbon: book two nights (the tool needs approval: the run parks).
    Turn(
        text="Lisbon it is. I will book two nights.",
        calls=[Call("book_stay", {"city": "Lisbon", "nights": 2})],
        usage=(538, 41, 0),
    ),
    # 2. Approved and booked: the final answer.
    Turn(
        text="Booked: two nights in Lisbon, reference TRIP-LIS-2N. Pack sunglasses!",
        usage=(601, 22, 0),
    ),
]


def record(project: Path = EXAMPLE) -> int:
    """Record the cassette of the example project at ``project`` (a copy, in the tests);
    0 when it was written with one model step per scripted turn."""
    with ProviderDouble() as double:
        double.script("anthropic", TURNS)
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.endswith(("_API_KEY", "_BASE_URL"))
            and not name.startswith(("PARKWAY_", "PYTEST_"))
        }
        env |= {
            "ANTHROPIC_API_KEY": "sk-ant-provider-double",
            "ANTHROPIC_BASE_URL": double.base_url,
            "PYTHONDONTWRITEBYTECODE": "1",  # leave no __pycache__ in docs/
        }
        # The example's own test, run as its team runs it; this venv's dev plugins that
        # the example does not use stay off.
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio"]
        argv += ["--record-mode=all", "tests/test_trip.py"]
        done = subprocess.run(argv, cwd=project, env=env, check=False)
        if done.returncode != 0:
            print(f"the example's test failed to record (exit {done.returncode})")
            return 1
        asked = len(double.requests_for("anthropic"))
    cassette = load_cassette(project / CASSETTE)
    steps = [(step.chat, step.index) for step in cassette.model_steps]
    if steps != [(CHAT, index) for index in range(len(TURNS))] or asked != len(TURNS):
        print(f"{project / CASSETTE}: expected {len(TURNS)} model steps of {CHAT!r}, got {steps}")
        print(f"(the double answered {asked} model request(s))")
        return 1
    print(
        f"recorded {len(cassette.exchanges)} exchanges and {len(steps)} model steps "
        f"to {project / CASSETTE}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(record())
