"""Real-model chats replayed offline (docs/cassettes.md, "Real models").

A chat is recorded by ``parkway record`` on Anthropic's real SDK, talking to the
provider double on loopback: the cassette gets each model step (request and streamed
answer, thinking signature included) besides the HTTP exchanges. The replays then
run with no key and the double's queue empty: every model answer comes from the
cassette. An edited agent is reported at the step and field its request changed, and
``new_episodes`` sends just that step to the model again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from redis.asyncio import Redis

from parkway.runner.llm.model import (
    ModelReasoningDelta,
    ModelStepEnd,
    ModelTextDelta,
    ModelToolCall,
    ModelToolInputDelta,
    ModelToolInputStart,
    ModelUsage,
)
from parkway.runner.llm.tape import event_from_json, event_to_json
from parkway.transport.cassettes import (
    Cassette,
    CassetteError,
    load_cassette,
    replay,
)
from tests.helpers.llm_double import Call, ProviderDouble, Turn
from tests.helpers.model_rig import MODELS, WIRES
from tests.helpers.record_rig import Recording
from tests.helpers.support import PICK_TOOL, user_message

pytestmark = pytest.mark.timeout(180)

TOOLS_MODULE = """
def weather(tool_input):
    return {"city": tool_input["city"], "sky": "SKY"}
"""
AGENT = {
    "template": {
        "instructions": "You plan trips.",
        "tools": [
            PICK_TOOL,
            {
                "type": "function",
                "name": "weather",
                "ref": "triptools:weather",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        ],
    },
    "model": "anthropic:claude-test",
}


def _turns() -> list[Turn]:
    return [
        Turn(reasoning="Ask where to", signature="sig-ask", calls=[Call("pick", {"q": "Where?"})]),
        Turn(calls=[Call("weather", {"city": "Oslo"})]),
        Turn(text="Oslo it is: the sky is sunny."),
    ]


def _project(folder: Path, sky: str = "sunny") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "triptools.py").write_text(TOOLS_MODULE.replace("SKY", sky))
    agent = folder / "trip.agent.json"
    agent.write_text(json.dumps(AGENT, indent=2))
    return agent


def _record(agent: Path, redis_url: str, folder: Path) -> Path:
    """Drive the chat through ``parkway record``, stopped with Ctrl-C (SIGINT) as a
    developer stops it; return the cassette it wrote."""
    cassette = agent.parent / "trip.cassette.json"
    server = Recording(
        folder, "record", str(cassette), "--agent", str(agent), "--redis-url", redis_url,
        cwd=agent.parent,
    )  # fmt: skip
    try:
        with server.client() as client:
            client.post("/api/chat", json={"id": "trip", "messages": [user_message("Plan")]})
            call = client.get("/api/chats/trip").json()["calls"][0]["toolCallId"]
            client.post(
                f"/api/chats/trip/calls/{call}",
                json={"outcome": "output", "output": {"choice": "Oslo"}},
            )
            client.post("/api/chats/trip/resume")
        assert server.stop(signal.SIGINT) == 0
    finally:
        server.close()
    assert server.lines()[-1] == f"recorded 4 exchanges and 3 model steps to {cassette}"
    return cassette


PROVIDER_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key and no base URL reach a replay's server."""
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def recorded(redis: Redis, redis_url: str, double: ProviderDouble, tmp_path: Path) -> Path:
    agent = _project(tmp_path / "project")
    double.script("anthropic", _turns())
    return _record(agent, redis_url, tmp_path)


@pytest.mark.parametrize("provider", ["openai", "google", "openai-compatible"])
def test_every_provider_records_and_replays_offline_cold(
    redis: Redis,
    redis_url: str,
    double: ProviderDouble,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
) -> None:
    """The tape stores what the model interface streamed, so it is the same for every
    provider; what each provider needs back (OpenAI's encrypted reasoning, Gemini's
    thought signatures) is in the step's stored parts and replayed with it."""
    agent = _project(tmp_path / "project")
    document = json.loads(agent.read_text())
    document["model"] = MODELS[provider]
    agent.write_text(json.dumps(document))
    double.script(WIRES[provider], _turns())
    cassette = load_cassette(_record(agent, redis_url, tmp_path))
    assert cassette.model == MODELS[provider] and len(cassette.model_steps) == 3
    first = cassette.model_steps[0].events
    if provider != "openai-compatible":  # the Chat Completions wire has no reasoning
        assert any(e["kind"] == "reasoning-delta" for e in first)
        stored = json.dumps(first[-1]["parts"])  # the signature, as the SDK gave it back
        assert "sig-ask" in stored or "sig+ask=" in stored, stored
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name)
    seen = len(double.requests)
    report = replay(cassette, cold=True, redis_url=redis_url)
    assert report.matched, report.format()
    assert len(report.restarts_after) == 1 and len(double.requests) == seen


def _said(cassette: Cassette) -> str:
    return "".join(
        c.get("delta", "")
        for e in cassette.exchanges
        for c in e.response.chunks or ()
        if c["type"] == "text-delta"
    )


def test_recording_keeps_each_model_step_with_its_request_and_provider_state(
    recorded: Path,
) -> None:
    cassette = load_cassette(recorded)
    assert cassette.version == 3 and cassette.model == "anthropic:claude-test"
    assert [(s.chat, s.index) for s in cassette.model_steps] == [
        ("trip", 0),
        ("trip", 1),
        ("trip", 2),
    ]
    first = cassette.model_steps[0]
    assert first.request["instructions"] == "You plan trips."
    assert [t["name"] for t in first.request["tools"]] == ["pick", "weather"]
    assert first.request["messages"] == [{"role": "user", "text": "Plan"}]
    events = [event_from_json(e) for e in first.events]
    assert [e.kind for e in events] == [
        "reasoning-delta",
        "tool-input-start",
        "tool-input-delta",
        "tool-call",
        "step-end",
    ]
    end = first.events[-1]
    assert end["usage"]["input_tokens"] == 11 and end["finish_reason"] == "tool-calls"
    assert "sig-ask" in json.dumps(end["parts"])  # the thinking signature, kept for the SDK
    # The later steps' requests carry the conversation, generated call ids labelled.
    tool_turn = cassette.model_steps[2].request["messages"]
    assert {"role": "tool", "id": "call#2", "name": "weather", "is_error": False,
            "result": {"city": "Oslo", "sky": "sunny"}} in tool_turn  # fmt: skip
    assert "Oslo it is: the sky is sunny." in _said(cassette)


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_a_real_model_chat_replays_offline_with_no_key(
    recorded: Path, double: ProviderDouble, offline: None, redis_url: str, cold: bool
) -> None:
    seen = len(double.requests)
    report = replay(load_cassette(recorded), cold=cold, redis_url=redis_url)
    assert report.matched, report.format()
    assert report.model_findings == () and report.rerecorded == () and report.cassette is None
    if cold:
        assert len(report.restarts_after) == 1
    assert len(double.requests) == seen  # not one request reached a model


def test_an_edited_agent_is_reported_at_the_step_and_field_that_changed(
    recorded: Path, offline: None, redis_url: str
) -> None:
    agent = recorded.parent / "trip.agent.json"
    edited = json.loads(agent.read_text())
    edited["template"]["instructions"] = "You plan cheap trips."
    agent.write_text(json.dumps(edited))
    report = replay(load_cassette(recorded), redis_url=redis_url)
    assert not report.matched
    assert [(f.chat, f.index) for f in report.model_findings] == [
        ("trip", 0),
        ("trip", 1),
        ("trip", 2),
    ]
    assert report.model_findings[0].fields == (
        ("instructions", "You plan trips.", "You plan cheap trips."),
    )
    text = report.format()
    assert "model step 0 of chat 'trip': the request to the model differs at instructions" in (text)
    assert 'expected: "You plan trips."' in text and 'got:      "You plan cheap trips."' in text
    # The recorded answers were served: the conversation itself still matches.
    assert report.differences == ()

    done = _cli(str(recorded))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the request to the model differs at instructions" in done.stdout


def test_new_episodes_records_only_the_steps_whose_request_changed(
    recorded: Path, double: ProviderDouble, redis_url: str
) -> None:
    """The server tool now answers otherwise: only the step after it asks the model
    something new. That step goes to the model; the two before come from the cassette."""
    _project(recorded.parent, sky="rainy")
    before = len(double.requests)
    double.script("anthropic", [Turn(text="Oslo it is: take an umbrella.")])
    report = replay(load_cassette(recorded), redis_url=redis_url, record_mode="new_episodes")
    assert len(double.requests) == before + 1
    assert report.rerecorded == (("trip", 2),)
    assert report.model_findings == ()
    assert report.cassette is not None
    again = report.cassette
    assert [s.index for s in again.model_steps] == [0, 1, 2]
    assert again.model_steps[:2] == load_cassette(recorded).model_steps[:2]
    assert "take an umbrella" in _said(again)
    assert again.chat_ids() == ["trip"]  # the replay's own chat ids mapped back
    # That the cassette so written replays offline, cold, with no key: the CLI's and the
    # fixture's new_episodes tests below replay theirs.


def test_a_step_the_cassette_lacks_fails_its_run_and_is_reported(
    recorded: Path, offline: None, redis_url: str
) -> None:
    cassette = load_cassette(recorded)
    cassette.model_steps = cassette.model_steps[:2]
    report = replay(cassette, redis_url=redis_url)
    assert not report.matched
    finding = report.model_findings[-1]
    assert (finding.chat, finding.index, finding.missing) == ("trip", 2, True)
    assert "has no recorded answer" in report.format()
    errors = [
        c
        for r in report.responses
        for c in r.chunks or ()
        if c["type"] == "error" or c.get("finishReason") == "error"
    ]
    assert errors, "the run without a recorded answer ended with an error"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    return subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "replay", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
    )


def test_the_cli_records_changed_steps_again_and_the_result_replays_with_no_key(
    recorded: Path, double: ProviderDouble, redis_url: str
) -> None:
    _project(recorded.parent, sky="rainy")
    stale = _cli(str(recorded), "--redis-url", redis_url, "--record-mode", "none")
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "model step 2 of chat 'trip': the request to the model differs at " in stale.stdout
    assert "messages[4].result.sky" in stale.stdout and '"sunny"' in stale.stdout

    double.script("anthropic", [Turn(text="Oslo it is: take an umbrella.")])
    again = _cli(str(recorded), "--redis-url", redis_url, "--record-mode", "new_episodes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"recorded anew: chat 'trip' step 2; wrote {recorded}" in again.stdout
    assert "take an umbrella" in _said(load_cassette(recorded))

    no_key = dict.fromkeys(PROVIDER_VARIABLES, "")
    check = _cli(str(recorded), "--cold", "--redis-url", redis_url, env=no_key)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "every response matches" in check.stdout


# -- the pytest fixture, as a project uses it -------------------------------------------

pytest_plugins = ["pytester"]

INNER_TEST = """
def drive(client):
    hello = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Plan"}]}
    client.post("/api/chat", json={"id": "trip", "messages": [hello]})
    call = client.get("/api/chats/trip").json()["calls"][0]["toolCallId"]
    answer = {"outcome": "output", "output": {"choice": "Oslo"}}
    client.post(f"/api/chats/trip/calls/{call}", json=answer)
    client.post("/api/chats/trip/resume")


def test_trip(parkway_record):
    parkway_record("trip.cassette.json", drive, agent="trip.agent.json", cold=True)
"""


def test_the_fixture_records_a_real_model_then_replays_and_re_records_it_offline(
    pytester: pytest.Pytester, double: ProviderDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team's workflow: the first run records with the model (here the double), after
    a change only the changed step goes to the model again (record mode new_episodes),
    and CI replays the cassette so written cold with no key. (That the first recording
    also replays offline cold is test_a_real_model_chat_replays_offline_with_no_key.)"""
    _project(pytester.path)
    pytester.makepyfile(test_trip=INNER_TEST)
    cassette = pytester.path / "trip.cassette.json"

    def run(*args: str) -> None:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=240)
        assert result.ret == 0, "\n".join(result.outlines + result.errlines)

    double.script("anthropic", _turns())
    run()  # once: no cassette yet, so the model answers and the cassette is written
    assert [s.index for s in load_cassette(cassette).model_steps] == [0, 1, 2]
    assert len(double.requests) == 3

    (pytester.path / "triptools.py").write_text(TOOLS_MODULE.replace("SKY", "rainy"))
    double.script("anthropic", [Turn(text="Oslo it is: take an umbrella.")])
    run("--record-mode=new_episodes")
    assert len(double.requests) == 4  # just the step after the changed tool output
    assert "take an umbrella" in _said(load_cassette(cassette))
    with monkeypatch.context() as ci:
        for name in PROVIDER_VARIABLES:
            ci.delenv(name)
        run("--record-mode=none")  # CI: no key, cold
    assert len(double.requests) == 4  # not one request reached a model


# -- the stored form ----------------------------------------------------------------------


def test_every_model_event_round_trips_through_its_stored_form() -> None:
    events = [
        ModelReasoningDelta("think"),
        ModelTextDelta("hi"),
        ModelToolInputStart("0", "pick"),
        ModelToolInputDelta("0", '{"q":'),
        ModelToolCall("pick", {"q": 1}, provider_id="toolu_1", stream_key="0"),
        ModelToolCall("pick", {}, input_error="not JSON"),
        ModelStepEnd(
            finish_reason="tool-calls",
            usage=ModelUsage(3, 4, 1),
            model="m",
            parts=({"type": "reasoning", "sig": "s"},),
            response={"rid": "r"},
        ),
        ModelStepEnd(),
    ]
    assert [event_from_json(event_to_json(e)) for e in events] == events


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"kind": "nope"}, "unknown model event kind 'nope'"),
        ({"kind": "text-delta"}, "model event 'text-delta' is malformed: KeyError 'text'"),
        ({"kind": "tool-call", "name": "x", "id": 5}, "'id' must be a string"),
        ({"kind": "step-end", "usage": {"input_tokens": "9"}}, "token counts must be integers"),
        ({"kind": "step-end", "usage": {"bogus": 1}}, "unexpected keyword argument 'bogus'"),
        ({"kind": "step-end", "parts": [[1]]}, "'parts' must be a list of objects"),
    ],
)
def test_a_malformed_model_step_is_refused_when_the_cassette_loads(
    tmp_path: Path, event: dict[str, object], problem: str
) -> None:
    document = {
        "version": 3,
        "agent_digest": "sha256:" + "0" * 64,
        "model": "anthropic:claude-test",
        "exchanges": [],
        "model_steps": [{"chat": "c", "index": 0, "request": {}, "events": [event]}],
    }
    path = tmp_path / "bad.cassette.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CassetteError, match=re.escape(problem)):
        load_cassette(path)
    done = _cli(str(path), "--agent", str(_project(tmp_path / "p")))
    assert done.returncode == 2 and problem in done.stderr and "Traceback" not in done.stderr
