"""Metrics and traces (docs/operations.md): a real server is scraped over HTTP after a
scripted conversation, and the spans of a turn that parks on one worker and resumes on
another are read from a real OpenTelemetry SDK."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from parkway.runner import Runner, parse_agent_file
from parkway.runner.engine.sweeper import Sweeper
from parkway.runner.events import CallParked, RunFailed
from parkway.runner.ops import logcontext, telemetry
from tests.helpers.llm_double import ProviderDouble, Turn
from tests.helpers.model_rig import MODELS, WIRES
from tests.helpers.support import (
    PICK_TOOL,
    PUBLISH_TOOL,
    WEATHER_TOOL,
    Api,
    ParkwayProcess,
    agent_doc,
    answered,
    call,
    free_port,
    server_thread,
    sse_chunks,
    text,
)
from tests.helpers.sweeper_rig import Clock as SweepClock
from tests.helpers.sweeper_rig import deadline_ms, park
from tests.helpers.sweeper_rig import make_runner as sweeper_runner

pytestmark = pytest.mark.usefixtures("redis")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

TURNS = [
    [text("Publishing."), call("publish", {"title": "Q3"})],
    [text("Which one?"), call("pick", {"q": "colour"})],
    [call("get_weather", {"city": "Oslo"})],
    [text("Done.")],
]
TOOLS = [WEATHER_TOOL, PICK_TOOL, PUBLISH_TOOL]


def parse(exposition: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def scrape(url: str) -> Samples:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def test_metrics_count_a_conversation_that_parks_settles_and_resumes(redis_url: str) -> None:
    """Two parks (an approval, then a client tool), a settle, an answer, two resumes: each
    counted once, with its kind, outcome and source, and the latency histograms fed."""
    with server_thread(redis_url, agent_doc(TURNS, tools=TOOLS), metrics=True) as server:
        url = f"{server.base_url}/metrics"
        before = scrape(url)
        api = await Api(server.base_url).login()
        chunks = await api.say("m1", "publish it")
        approval = next(c for c in chunks if c["type"] == "tool-approval-request")
        settled = await api.settle("m1", approval["toolCallId"], {"outcome": "approved"})
        assert settled.status_code == 200, settled.text
        resumed = await api.resume("m1")
        assert resumed.status_code == 200, resumed.text
        second = sse_chunks(resumed.text)
        assert any(c["type"] == "tool-input-available" and c["toolName"] == "pick" for c in second)
        final = await api.chat("m1", answered(second, {"choice": "red"}, tool="pick"))
        assert final.status_code == 200, final.text
        assert "Done." in final.text
        await api.aclose()
        after = scrape(url)

    def grew(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    assert grew("parkway_calls_parked_total", kind="approval", tool="publish") == 1
    assert grew("parkway_calls_parked_total", kind="client", tool="pick") == 1
    assert (
        grew("parkway_calls_settled_total", kind="approval", outcome="approved", source="browser")
        == 1
    )
    assert (
        grew("parkway_calls_settled_total", kind="client", outcome="output", source="browser") == 1
    )
    assert grew("parkway_runs_total", start="turn", end="parked") == 1
    assert grew("parkway_runs_total", start="resume", end="parked") == 1
    assert grew("parkway_runs_total", start="resume", end="finished") == 1
    assert grew("parkway_model_requests_total", provider="scripted", outcome="ok") == 4
    assert grew("parkway_park_seconds_count") == 2
    assert grew("parkway_resume_seconds_count") == 2
    assert grew("parkway_event_log_write_seconds_count") >= 1
    assert after[("parkway_runs_in_progress", frozenset())] == 0
    # the responses above were read to their end: no stream is left open
    assert after[("parkway_streams_live", frozenset())] == 0
    assert after[("parkway_redis_pool_connections", frozenset({("state", "max")}))] >= 1


async def test_metrics_are_off_the_public_port_unless_switched_on(redis_url: str) -> None:
    port = free_port()
    with server_thread(redis_url, agent_doc([[text("hi")]]), metrics_port=port) as server:
        public = httpx.get(f"{server.base_url}/metrics", timeout=10)
        assert public.status_code == 404
        assert public.json()["error"]["code"] == "not_found"
        own = scrape(f"http://127.0.0.1:{port}/metrics")
        assert ("parkway_runs_in_progress", frozenset()) in own
    with pytest.raises(httpx.ConnectError):  # the metrics port closes with the server
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


async def test_model_requests_and_tokens_are_counted_by_provider(
    double: ProviderDouble, serve: Any
) -> None:
    provider = "anthropic"
    double.script(WIRES[provider], [Turn(text=["Hello", " there."])])
    server = serve(MODELS[provider], metrics=True)
    before = scrape(f"{server.base_url}/metrics")
    api = await Api(server.base_url).login()
    await api.say("t1", "hi")
    await api.aclose()
    after = scrape(f"{server.base_url}/metrics")
    model = MODELS[provider].partition(":")[2]
    assert (
        delta(before, after, "parkway_model_requests_total", provider=provider, outcome="ok") == 1
    )
    tokens = "parkway_model_tokens_total"
    assert delta(before, after, tokens, provider=provider, model=model, type="input") == 11
    assert delta(before, after, tokens, provider=provider, model=model, type="output") >= 7


# -- traces ---------------------------------------------------------------------------------


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The runner's spans, into memory (a provider of this test's own: the process's
    global provider is left alone)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "_tracer", provider.get_tracer("parkway"))
    yield exporter
    provider.shutdown()


def named(found: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


async def test_a_turn_is_one_trace_across_the_workers_that_park_and_resume_it(
    redis_url: str, spans: InMemorySpanExporter
) -> None:
    doc = agent_doc(TURNS, tools=TOOLS)
    with server_thread(redis_url, doc) as first, server_thread(redis_url, doc) as second:
        api = await Api(first.base_url).login()
        chunks = await api.say("tr1", "publish it")
        approval = next(c for c in chunks if c["type"] == "tool-approval-request")
        other = api.same_user(second.base_url)
        settled = await other.settle("tr1", approval["toolCallId"], {"outcome": "approved"})
        assert settled.status_code == 200, settled.text
        resumed = await other.resume("tr1")
        assert resumed.status_code == 200, resumed.text
        await api.aclose()
        await other.aclose()
    found = spans.get_finished_spans()
    runs = named(found, "invoke_agent agent")
    turn = next(s for s in runs if s.attributes["parkway.run.start"] == "turn")
    resume = next(s for s in runs if s.attributes["parkway.run.start"] == "resume")
    assert turn.context is not None and resume.context is not None
    # one trace: the resume (on the other worker) continues the run that parked
    assert resume.context.trace_id == turn.context.trace_id
    assert resume.parent is not None and resume.parent.span_id == turn.context.span_id
    assert turn.attributes["parkway.run.end"] == "parked"
    assert turn.attributes["gen_ai.conversation.id"] == "tr1"
    park = named(found, "parkway.park")
    assert len(park) == 2 and all(p.context.trace_id == turn.context.trace_id for p in park)
    settle = named(found, "parkway.settle")
    assert len(settle) == 1 and settle[0].context.trace_id == turn.context.trace_id
    # the model's steps, by the GenAI conventions, under their run
    chats = [s for s in found if s.name.startswith("chat ")]
    assert len(chats) == 2
    for step in chats:
        assert step.attributes["gen_ai.operation.name"] == "chat"
        assert step.attributes["gen_ai.provider.name"] == "scripted"
        assert step.parent is not None
    assert {s.parent.span_id for s in chats if s.parent} == {
        turn.context.span_id,
        resume.context.span_id,
    }
    # the approved call ran under the resume
    tool = named(found, "execute_tool publish")
    assert len(tool) == 1 and tool[0].parent is not None
    assert tool[0].parent.span_id == resume.context.span_id
    assert tool[0].attributes["gen_ai.tool.call.id"] == approval["toolCallId"]


async def test_spans_carry_no_message_text_or_tool_data(
    redis_url: str, spans: InMemorySpanExporter
) -> None:
    secret_text, secret_city = "my-secret-question-41", "Secret-City-42"
    turns = [[call("get_weather", {"city": secret_city})], [text("The weather is fine.")]]
    with server_thread(redis_url, agent_doc(turns, tools=TOOLS)) as server:
        api = await Api(server.base_url).login()
        await api.say("tr2", secret_text)
        await api.aclose()
    found = spans.get_finished_spans()
    assert named(found, "execute_tool get_weather")
    dumped = "".join(s.to_json() for s in found)
    assert secret_text not in dumped and secret_city not in dumped and "fine" not in dumped


# -- log context -----------------------------------------------------------------------------


class _Broken:
    """A model that fails the way a bug does (not a provider error)."""

    async def stream(self, request: Any) -> Any:
        raise RuntimeError("bug in a model adapter")
        yield  # an async generator


class _Context(logging.Handler):
    """Keeps, for each record, the log context bound where it was made."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, str]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.getMessage(), logcontext.current()))


async def test_a_runs_log_lines_name_its_chat_and_run_and_a_settles_its_call(
    redis: Redis,
) -> None:
    agent = parse_agent_file(agent_doc([[call("pick", {"q": "a"})], [text("ok")]]))
    handler = _Context()
    logger = logging.getLogger("parkway")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        broken = Runner(redis, _Broken(), agent.template)  # type: ignore[arg-type]
        events = await (await broken.start_turn("lc1", "alice", "hi")).collect()
        assert any(isinstance(e, RunFailed) for e in events)
        runner = Runner(redis, agent.model, agent.template)
        parked = await (await runner.start_turn("lc2", "alice", "hi")).collect()
        call_id = next(e.call.tool_call_id for e in parked if isinstance(e, CallParked))

        def listener_logs(settled: Any) -> Any:
            logging.getLogger("parkway.test").info("settled in a listener")
            return _done()

        runner.settle_listeners.append(listener_logs)
        await runner.settle(
            "lc2", "alice", call_id, {"outcome": "output", "output": {"choice": "a"}}
        )
        await broken.aclose()
        await runner.aclose()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    failed = next(ctx for message, ctx in handler.seen if message.startswith("run failed"))
    assert failed["chat_id"] == "lc1" and failed["run_id"].startswith("run_")
    listened = next(ctx for message, ctx in handler.seen if message == "settled in a listener")
    assert listened == {"chat_id": "lc2", "call_id": call_id}
    assert logcontext.current() == {}  # nothing leaked into the test's own task


async def _done() -> None:
    return None


def test_a_principal_is_logged_as_a_digest_only() -> None:
    with logcontext.bound(principal="usr_secret-principal"):
        seen = logcontext.current()
    assert seen["principal"] == logcontext.principal_hash("usr_secret-principal")
    assert "secret" not in seen["principal"] and len(seen["principal"]) == 12
    assert logcontext.current() == {}


async def test_a_sweep_counts_its_timeouts_and_how_late_it_came(redis: Redis) -> None:
    clock = SweepClock()
    runner = sweeper_runner(redis, [[call("pick", {"q": "a"})], [text("late")]], clock)
    [pending] = await park(runner, "sw1")
    counted = (
        "parkway_calls_settled_total",
        {"kind": "unknown", "outcome": "timeout", "source": "sweeper"},
    )
    before = REGISTRY.get_sample_value(*counted) or 0.0
    await Sweeper(runner).sweep_once()
    assert REGISTRY.get_sample_value("parkway_sweeper_lag_seconds") == 0.0  # nothing due yet
    assert REGISTRY.get_sample_value("parkway_calls_waiting") == 1
    clock.at_ms(deadline_ms(pending) + 2500)
    report = await Sweeper(runner).sweep_once()
    assert report.settled == 1
    assert (REGISTRY.get_sample_value(*counted) or 0.0) - before == 1
    assert REGISTRY.get_sample_value("parkway_sweeper_lag_seconds") == 2.5
    await Sweeper(runner).sweep_once()
    assert REGISTRY.get_sample_value("parkway_calls_waiting") == 0
    await runner.aclose()


async def test_serve_exports_spans_and_serves_metrics_when_asked(
    redis_url: str, tmp_path: Path
) -> None:
    """``parkway serve`` as a real process, with ``PARKWAY_TRACING=console`` and
    ``PARKWAY_METRICS=on``: the turn's spans reach the exporter, the metrics the port."""
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps(agent_doc(TURNS, tools=TOOLS)))
    env = {"PARKWAY_TRACING": "console", "PARKWAY_METRICS": "on"}
    server = ParkwayProcess(redis_url, agent_file, env=env).start()
    try:
        api = await Api(server.base_url).login()
        chunks = await api.say("sp1", "publish it")
        assert any(c["type"] == "tool-approval-request" for c in chunks)
        await api.aclose()
        metrics = scrape(f"{server.base_url}/metrics")
        parked = (
            "parkway_calls_parked_total",
            frozenset({("kind", "approval"), ("tool", "publish")}),
        )
        assert metrics[parked] == 1
        assert server.proc is not None and server.proc.stderr is not None
        server.proc.terminate()  # a clean exit flushes the batched spans
        server.proc.wait(15)
        logged = server.proc.stderr.read().decode()
    finally:
        server.stop()
    assert '"name": "invoke_agent agent"' in logged
    assert '"name": "parkway.park"' in logged
    assert '"service.name": "parkway"' in logged


async def test_two_processes_in_multiprocess_mode_are_scraped_as_one(
    redis_url: str, tmp_path: Path
) -> None:
    """prometheus-client's multi-process mode (``PROMETHEUS_MULTIPROC_DIR``), as a server
    run as several processes uses it: a scrape of either process counts both."""
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps(agent_doc(TURNS, tools=TOOLS)))
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(shared), "PARKWAY_METRICS": "on"}
    first = ParkwayProcess(redis_url, agent_file, env=env).start()
    second = ParkwayProcess(redis_url, agent_file, env=env).start()
    try:
        for server, chat in ((first, "mp1"), (second, "mp2")):
            api = await Api(server.base_url).login()
            chunks = await api.say(chat, "publish it")
            assert any(c["type"] == "tool-approval-request" for c in chunks)
            await api.aclose()
        parked = (
            "parkway_calls_parked_total",
            frozenset({("kind", "approval"), ("tool", "publish")}),
        )
        for server in (first, second):
            metrics = scrape(f"{server.base_url}/metrics")
            assert metrics[parked] == 2
            assert metrics[("parkway_runs_in_progress", frozenset())] == 0
    finally:
        first.stop()
        second.stop()
