"""AG-UI cassettes: a chat over ``POST /api/agui`` recorded by the server and by a client
``Recorder`` (its streams kept as ``events``), replayed warm and cold (kill -9 after
every run that ends in an interrupt or with frontend tool calls pending) against a fresh
server, with the new interrupt ids, tool call ids and message ids written into the
requests; and a replay against an agent whose approval now denies, or whose tool now
answers otherwise, reported as differences."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from parkway.transport.cassettes import (
    Cassette,
    IdTable,
    Recorder,
    ResponseRecord,
    ServerProcess,
    compare_response,
    load_cassette,
    replay,
    save_cassette,
)
from parkway.transport.cassettes._ids import translate
from tests.helpers.agui import AguiClient, agui_events, outcome, results, texts
from tests.helpers.record_rig import Recording
from tests.helpers.support import PUBLISH_TOOL, Api, agent_doc, call, text

pytestmark = pytest.mark.slow

FRONTEND = {
    "name": "pick_color",
    "description": "Let the user pick a color.",
    "parameters": {"type": "object", "properties": {"palette": {"type": "string"}}},
}
AGENT = agent_doc(
    [
        [text("Publishing."), call("publish", {"title": "Q3"})],
        [text("Published: {{last_tool_results}}")],
        [call("pick_color", {"palette": "warm"})],  # its message only a parentMessageId
        [text("Picked: {{last_tool_results}}")],
        [text("Both."), call("publish", {"title": "A"}), call("publish", {"title": "B"})],
        [text("Done: {{last_tool_results}}")],
    ],
    tools=[PUBLISH_TOOL],
)

# ``publish`` as it answers after an edit (no docstring: the widget's description stays).
PUBLISH_AGAIN = """
def publish(tool_input):
    return {"published": tool_input["title"].lower(), "edition": 2}
"""


def _approve(interrupt: dict[str, Any], approved: bool = True, **extra: Any) -> dict[str, Any]:
    payload = {"approved": approved, **extra}
    return {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}


async def _drive(api: Api, recorder: Recorder) -> None:
    """The chat: an approval interrupt resumed with an approval; a frontend tool answered
    by a tool message; two interrupts, a reload by a client that lost its state (a
    messages snapshot), and both interrupts answered in one resume (approved, denied)."""
    recorder.attach(api.http)
    client = AguiClient(api)
    client.tools = [FRONTEND]
    first = await client.say("publish it")
    [interrupt] = outcome(first)["interrupts"]
    second = await client.run(resume=[_approve(interrupt)])
    assert results(second) == {interrupt["id"]: {"published": "Q3"}}
    third = await client.say("pick a color")
    [pending] = outcome(third)["pendingToolCallIds"]
    client.messages.append(
        {"id": "tm-1", "role": "tool", "toolCallId": pending, "content": '{"color":"red"}'}
    )
    fourth = await client.run()
    assert texts(fourth).startswith("Picked: ")
    fifth = await client.say("publish both")
    both = outcome(fifth)["interrupts"]
    assert len(both) == 2
    # a client that lost its state: the messages as a snapshot, the interrupts again
    fresh = AguiClient(api, client.thread_id)
    fresh.tools = [FRONTEND]
    again = await fresh.run()
    assert outcome(again)["interrupts"] == both
    # the snapshot names the messages as the live runs did, except the client's own
    # tool message: the server keeps its answer, named after its call
    named = [f"{pending}-result" if m["id"] == "tm-1" else m["id"] for m in client.messages]
    assert [m["id"] for m in fresh.messages] == named
    seventh = await fresh.run(
        resume=[_approve(both[0]), _approve(both[1], approved=False, reason="not B")]
    )
    assert outcome(seventh) == {"type": "success"}
    assert texts(seventh).startswith("Done: ")


@pytest.fixture(scope="module")
def recorded(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Cassette:
    """The AG-UI chat, recorded once per module by ``parkway serve --record`` and by a
    client ``Recorder`` at the same time: the two must agree; the server's is used."""
    folder = tmp_path_factory.mktemp("agui")
    agent_file = folder / "agent.json"
    agent_file.write_text(json.dumps(AGENT))
    target = folder / "agui.cassette.json"
    client = SyncRedis.from_url(redis_url)
    client.flushdb()
    server = Recording(
        folder, "serve", "--record", str(target), "--agent", str(agent_file),
        "--redis-url", redis_url,
    )  # fmt: skip
    recorder = Recorder(agent_file)

    async def record() -> None:
        api = await Api(server.base_url).login()
        try:
            await _drive(api, recorder)
        finally:
            await api.aclose()

    try:
        asyncio.run(record())
        assert server.stop() == -signal.SIGTERM
        assert server.lines()[-1] == f"recorded 7 exchanges to {target}"
    finally:
        server.close()
        client.flushdb()
        client.close()
    cassette = load_cassette(target)
    assert cassette.exchanges == recorder.cassette().exchanges
    return cassette


# -- recording ------------------------------------------------------------------------


def test_an_agui_chat_is_recorded_with_its_events(recorded: Cassette, tmp_path: Path) -> None:
    """Every AG-UI run is kept: its input as sent, its SSE body as the parsed events
    (each a valid AG-UI event), one event a line in the file; the runs that end in an
    interrupt or with a frontend call pending are the park points."""
    assert [e.request.line() for e in recorded.exchanges] == ["POST /api/agui"] * 7
    assert [e.response.status for e in recorded.exchanges] == [200] * 7
    for exchange in recorded.exchanges:
        events = exchange.response.events
        assert events is not None and exchange.response.chunks is None
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        assert events[0]["threadId"] == exchange.request.body["threadId"]
        assert events[0]["runId"] == exchange.request.body["runId"]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
        assert agui_events(body) == events  # each one validated by ag-ui-protocol
    # the reload (5) shows the pending interrupts again: a park point too
    assert [e.response.parks() for e in recorded.exchanges] == [True, False] * 2 + [
        True,
        True,
        False,
    ]
    snapshot = (recorded.exchanges[5].response.events or [])[1]
    assert snapshot["type"] == "MESSAGES_SNAPSHOT"
    assert all(e.response.finishes() for e in recorded.exchanges)
    # the ids the server generated come back in later inputs, in their new places
    first = recorded.exchanges[0].response.events or []
    [interrupt] = first[-1]["outcome"]["interrupts"]
    resume = recorded.exchanges[1].request.body
    assert resume["resume"][0]["interruptId"] == interrupt["id"]
    assert interrupt["id"].startswith("call_") and interrupt["expiresAt"].endswith("Z")
    posted = json.dumps(recorded.exchanges[3].request.body)
    pending = (recorded.exchanges[2].response.events or [])[-1]["outcome"]["pendingToolCallIds"]
    assert f'"toolCallId": "{pending[0]}"' in posted

    path = tmp_path / "agui.cassette.json"
    save_cassette(recorded, path)
    assert load_cassette(path).exchanges == recorded.exchanges
    assert '          {"type":"RUN_STARTED",' in path.read_text()  # one event per line


# -- replaying ------------------------------------------------------------------------


_GENERATED = re.compile(r"(?:msg|call|apr)_[A-Za-z0-9_-]{16}")


def _ids_in(value: Any) -> set[str]:
    """The generated ids ``value`` names, whole or as the start of a derived id."""
    return set(_GENERATED.findall(json.dumps(value)))


def test_a_warm_replay_matches_with_the_new_ids_in_the_agui_inputs(
    redis: Redis, redis_url: str, recorded: Cassette
) -> None:
    """A fresh server generates fresh call and message ids: the replay must send them in
    ``resume[].interruptId``, tool messages' ``toolCallId``, assistant messages' ids and
    ``toolCalls[].id`` (``msg_…-1``, ``call_…-result`` included), with the thread and run
    ids of its own namespace, or the resumes would name calls the server does not have."""
    report = replay(recorded, redis_url=redis_url)
    assert report.matched, report.format()
    thread = recorded.exchanges[0].request.body["threadId"]
    for sent, exchange in zip(report.requests, recorded.exchanges, strict=True):
        assert sent.body["threadId"].startswith(thread + ".rp")
        assert sent.body["runId"] != exchange.request.body["runId"]
        assert sent.body["runId"].startswith(exchange.request.body["runId"] + ".rp")
    replayed = [r.events or [] for r in report.responses]
    assert replayed[0][0]["threadId"] == report.requests[0].body["threadId"]
    [interrupt] = replayed[0][-1]["outcome"]["interrupts"]
    [recorded_interrupt] = (recorded.exchanges[0].response.events or [])[-1]["outcome"][
        "interrupts"
    ]
    assert interrupt["id"] != recorded_interrupt["id"]
    assert report.requests[1].body["resume"][0]["interruptId"] == interrupt["id"]
    [pending] = replayed[2][-1]["outcome"]["pendingToolCallIds"]
    assert report.requests[3].body["messages"][-1]["toolCallId"] == pending
    both = [i["id"] for i in replayed[4][-1]["outcome"]["interrupts"]]
    assert [e["interruptId"] for e in report.requests[6].body["resume"]] == both
    # every generated id the inputs name is one this server made, none a recorded one
    made = _ids_in([r.events for r in report.responses])
    named = _ids_in([r.body for r in report.requests])
    assert named and named <= made, named - made
    assert not named & _ids_in([e.response.events for e in recorded.exchanges])
    # ... in derived ids too (from the snapshot the last input was built from)
    last = [m["id"] for m in report.requests[6].body["messages"]]
    assert any(i.startswith("msg_") and i.endswith("-1") for i in last), last
    assert sum(i.endswith("-result") for i in last) == 2, last  # Q3's, and pick_color's


class _WatchedServer(ServerProcess):
    """A replay server that notes how each of its processes ended when killed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kill_codes: list[int | None] = []

    def kill(self) -> None:
        proc = self.proc
        super().kill()
        if proc is not None:
            self.kill_codes.append(proc.returncode)


def test_a_cold_replay_kills_the_server_after_every_interrupt_and_still_matches(
    redis: Redis, redis_url: str, recorded: Cassette, tmp_path: Path
) -> None:
    """After each run that ends in an interrupt (or with a frontend tool call pending)
    the server dies by SIGKILL and a new process on the same Redis takes the resume, the
    tool message, the two answers in one resume: the chat still streams what was
    recorded."""
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps(AGENT))
    server = _WatchedServer(
        agent_file, redis_url, secrets.token_urlsafe(48), log_file=tmp_path / "server.log"
    )
    report = replay(recorded, agent=agent_file, cold=True, server=server)
    assert report.matched, report.format()
    assert report.restarts_after == (0, 2, 4, 5)  # the parked runs, and the reload of one
    assert server.kill_codes == [-9] * 4
    assert server.starts == 5
    assert "(cold: killed and restarted 4 times): every response matches" in report.format()


@pytest.mark.parametrize(
    ("change", "exchanges", "cause"),
    [
        ("deny", [0, 4], "the replay has a result of `publish` that the recording does not"),
        ("output", [1, 5, 6], "the call `publish` has another result"),
    ],
    ids=["approval-now-denies", "tool-now-answers-otherwise"],
)
def test_a_replay_against_a_changed_approval_reports_the_difference(
    redis: Redis,
    redis_url: str,
    recorded: Cassette,
    tmp_path: Path,
    change: str,
    exchanges: list[int],
    cause: str,
) -> None:
    """The agent changed under the cassette: ``publish`` is now denied by policy (no
    interrupt: the run goes on with a denial), or it now answers otherwise once
    approved. Either is a failed replay that names where each turn first differs and
    why, never a pass; what a diverged turn does after that (a resume of an interrupt
    the replay never had) follows from it."""
    tool = dict(PUBLISH_TOOL)
    if change == "deny":
        tool["needs_approval"] = "deny"
    else:  # a tool module of the project's own, next to the agent file
        module = f"agui_publish_{secrets.token_hex(5)}"
        (tmp_path / f"{module}.py").write_text(PUBLISH_AGAIN)
        tool["ref"] = f"{module}:publish"
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps({**AGENT, "template": {**AGENT["template"], "tools": [tool]}}))
    report = replay(recorded, agent=agent_file, redis_url=redis_url)
    assert not report.matched
    roots = [f for f in report.findings if f.follows is None]
    assert sorted({f.difference.exchange for f in roots}) == exchanges, report.format()
    assert roots[0].cause is not None and roots[0].cause.startswith(cause), report.format()
    assert f"exchange {exchanges[0]} (POST /api/agui)" in report.format()
    if change == "deny":  # the run no longer stops for the approval
        ends = [d for d in report.differences if d.exchange == 0 and d.path == "outcome.type"]
        assert [(d.chunk_type, d.expected, d.got) for d in ends] == [
            ("RUN_FINISHED", "interrupt", "success")
        ]


# -- the comparison, without a server -------------------------------------------------


def _run(msg: str, call_id: str, expires: str, deltas: list[str]) -> ResponseRecord:
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "STEP_STARTED", "stepName": "step-1"},
        {"type": "TEXT_MESSAGE_START", "messageId": f"{msg}-1", "role": "assistant"},
    ]
    events += [
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": f"{msg}-1", "delta": d} for d in deltas
    ]
    events += [
        {"type": "TEXT_MESSAGE_END", "messageId": f"{msg}-1"},
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": "publish",
         "parentMessageId": f"{msg}-1"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": '{"title":"Q3"}'},
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
        {"type": "STEP_FINISHED", "stepName": "step-1"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "timestamp": len(deltas),
         "outcome": {"type": "interrupt", "interrupts": [
             {"id": call_id, "toolCallId": call_id, "reason": "tool_call",
              "expiresAt": expires},
         ]}},
    ]  # fmt: skip
    return ResponseRecord(status=200, events=events)


def test_derived_ids_clock_values_and_another_text_split_compare_equal() -> None:
    """A step's message ``msg_…-1`` is the runner's message id and a suffix: it is
    learnt as ``msg_…`` (the same label on both sides, and the id a later request is
    rewritten with); an interrupt's ``expiresAt`` and an event's ``timestamp`` are
    wall-clock values; text deltas compare as their whole text."""
    msg_a, msg_b = "msg_x" + "A-1" * 5, "msg_" + "b" * 16  # a token may end in -1
    call_a, call_b = "call_" + "c" * 16, "call_" + "d" * 15 + "-"
    recorded_ids, replayed_ids = IdTable(), IdTable()
    recorded_run = _run(msg_a, call_a, "2026-01-01T00:00:00.000Z", ["Publish", "ing."])
    replayed_run = _run(msg_b, call_b, "2026-05-05T10:00:00.000Z", ["Publishing."])
    assert replayed_run.parks() and recorded_run.finishes()
    found = compare_response(
        0, "POST /api/agui", expected=recorded_run, got=replayed_run,
        recorded_ids=recorded_ids, replayed_ids=replayed_ids,
    )  # fmt: skip
    assert found == []
    assert recorded_ids.label(msg_a) == replayed_ids.label(msg_b) == "msg#1"
    assert recorded_ids.label(f"{msg_a}-1") is None  # learnt as its base
    assert recorded_ids.label(call_a) == replayed_ids.label(call_b) == "call#1"
    # a later input names the derived ids: rewritten with the replay's ids
    later = {
        "messages": [
            {"id": f"{msg_a}-1", "role": "assistant", "toolCalls": [{"id": call_a}]},
            {"id": f"{call_a}-result", "role": "tool", "toolCallId": call_a},
        ],
        "resume": [{"interruptId": call_a, "status": "resolved"}],
    }
    assert translate(later, recorded_ids, replayed_ids) == {
        "messages": [
            {"id": f"{msg_b}-1", "role": "assistant", "toolCalls": [{"id": call_b}]},
            {"id": f"{call_b}-result", "role": "tool", "toolCallId": call_b},
        ],
        "resume": [{"interruptId": call_b, "status": "resolved"}],
    }
    # another outcome is a difference, and said so
    finished = _run(msg_b, call_b, "x", ["Publishing."])
    assert finished.events is not None
    finished.events[-1]["outcome"] = {"type": "success"}
    assert not finished.parks()
    [difference, *_] = compare_response(
        1, "POST /api/agui", expected=recorded_run, got=finished,
        recorded_ids=IdTable(), replayed_ids=IdTable(),
    )  # fmt: skip
    assert (difference.chunk_type, difference.path) == ("RUN_FINISHED", "outcome.type")


def test_frontend_calls_pending_are_a_park_point_and_a_cassette_names_the_thread() -> None:
    """A run that succeeds with frontend tool calls pending parks as much as an
    interrupt does; an AG-UI input names its chat as ``threadId``."""
    pending = ResponseRecord(
        status=200,
        events=[
            {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"},
            {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
             "outcome": {"type": "success", "pendingToolCallIds": ["call_x"]}},
        ],
    )  # fmt: skip
    assert pending.parks() and pending.finishes()
    done = pending.model_copy(deep=True)
    assert done.events is not None
    done.events[-1]["outcome"] = {"type": "success"}
    assert not done.parks() and done.finishes()
    body = {"threadId": "t1", "runId": "r1", "messages": []}
    cassette = Cassette.model_validate(
        {
            "agent_digest": "sha256:" + "0" * 64,
            "model": "scripted",
            "exchanges": [
                {"request": {"method": "POST", "path": "/api/agui", "json": body},
                 "response": pending.document()},
            ],
        }
    )  # fmt: skip
    assert cassette.chat_ids() == ["t1"] and cassette.run_ids() == ["r1"]
    with pytest.raises(ValueError, match="at most one of 'chunks', 'events'"):
        ResponseRecord.model_validate({"status": 200, "chunks": [], "events": []})
