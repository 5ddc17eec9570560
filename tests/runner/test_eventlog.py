"""The per-chat event log: responses are views over it; reconnects replay and follow
from any worker; stop, auto-resume and graceful shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import (
    ChatBusyError,
    ChatRecord,
    Runner,
    RunnerConfig,
    ScriptedModel,
    ShuttingDownError,
    chat_keys,
    parse_agent_file,
)
from parkway.runner.eventlog.followers import FELL_BEHIND, INTERRUPTED
from parkway.runner.events import (
    Event,
    MessageStarted,
    RunFailed,
    TextDelta,
    events_from_json,
    events_to_json,
)
from parkway.runner.llm.model import ModelEvent, ModelRequest
from tests.helpers.support import (
    Api,
    agent_doc,
    answered,
    call,
    eventually,
    server_thread,
    sse_chunks,
    text,
    types,
    user_message,
)


class GatedModel:
    """The scripted model, except that the model calls named in ``gated`` stop after
    their first text delta until the test opens the gate. A threading.Event, because the
    server runs its own event loop in another thread."""

    def __init__(self, turns: list[list[dict[str, Any]]], gated: set[int]) -> None:
        self.inner = ScriptedModel(turns)
        self.gated = gated
        self.started = threading.Event()
        self.gate = threading.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        first = request.call_index in self.gated
        async for item in self.inner.stream(request):
            yield item
            if first:
                first = False
                self.started.set()
                while not self.gate.is_set():
                    await asyncio.sleep(0.005)


def said(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


async def idle(runner: Runner, chat_id: str) -> ChatRecord | None:
    """The chat's record once it is idle (its run finished), else None."""
    record = await runner.chat(chat_id, "alice")
    return record if record.meta["state"] == "idle" else None


TURNS = [
    [text("Pick one."), call("pick", {"q": "colour"})],
    [text("Thanks for {{last_tool_results}} and goodbye.")],
]


async def test_a_reconnect_on_another_worker_rebuilds_the_message_and_follows_it_live(
    redis: Redis, redis_url: str
) -> None:
    """The AI SDK resume contract across workers: while worker A streams a continuation,
    a client reconnecting to worker B gets the message from its start — the earlier
    step rebuilt, the answered call without re-firing onToolCall — then the rest live."""
    model = GatedModel(TURNS, gated={1})
    with (
        server_thread(redis_url, agent_doc(TURNS), model=model) as a,
        server_thread(redis_url, agent_doc(TURNS)) as b,
    ):
        api_a = await Api(a.base_url).login()
        api_b = api_a.same_user(b.base_url)
        first = await api_a.say("rc", "hi")
        continuing = asyncio.create_task(api_a.chat("rc", answered(first, {"choice": "red"})))
        await eventually(model.started.is_set)
        lines: list[str] = []
        async with api_b.http.stream("GET", "/api/chat/rc/stream") as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                lines.append(line)
                if '"text-delta"' in line and not model.gate.is_set():
                    model.gate.set()  # B has caught up with the live run: let it finish
        original = await continuing
        await api_a.aclose()
        await api_b.aclose()
    replay = sse_chunks("\n".join(lines))
    assert replay[0] == {"type": "start", "messageId": first[0]["messageId"]}
    assert types(replay).count("start") == 1
    assert "tool-input-available" not in types(replay)  # the answered call does not re-fire
    assert types(replay)[1:8] == [
        "start-step", "text-start", "text-delta", "text-end",
        "tool-input-start", "tool-input-delta", "tool-output-available",
    ]  # fmt: skip
    assert replay[-1] == {"type": "finish", "finishReason": "stop"}
    continuation = sse_chunks(original.text)
    assert (
        said(continuation) == 'Thanks for [{"result":{"choice":"red"},"tool":"pick"}] and goodbye.'
    )
    assert said(replay) == "Pick one." + said(continuation)


async def test_stop_keeps_the_partial_answer_and_finishes_cleanly(
    redis: Redis, redis_url: str
) -> None:
    """An explicit stop (unlike a disconnect) ends the run at once, keeps what the model
    said so far, and ends the stream with a clean finish; the chat can go on."""
    turns = [[text("One two three four.")], [text("next turn")]]
    model = GatedModel(turns, gated={0})
    with server_thread(redis_url, agent_doc(turns), model=model) as srv:
        api = await Api(srv.base_url).login()
        streaming = asyncio.create_task(api.chat("st", [user_message("go", "u1")]))
        await eventually(model.started.is_set)
        stop = await api.http.post("/api/chats/st/stop")
        assert stop.status_code == 202
        response = await streaming
        state = await api.state("st")
        again = await api.http.post("/api/chats/st/stop")
        after = await api.say("st", "more", "u2")
        await api.aclose()
    chunks = sse_chunks(response.text)
    assert types(chunks)[-3:] == ["text-end", "finish-step", "finish"]
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert said(chunks) == "One "
    assert state["state"] == "idle"
    assert state["messages"][1]["parts"][1] == {"type": "text", "text": "One ", "state": "done"}
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_running"
    assert said(after) == "next turn"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_follower_reports_a_run_whose_worker_died(redis: Redis) -> None:
    """A client following a run on another worker is not left hanging when the producing
    worker dies: once its lease lapses, the follow ends saying the run was interrupted."""
    clock = Clock()
    agent = parse_agent_file(agent_doc([[text("x")]]))
    runner = Runner(
        redis, agent.model, agent.template, clock=clock, config=RunnerConfig(follow_quiet_s=0.05)
    )
    keys = chat_keys("dead")
    template = agent.template
    claim = await runner.store.claim_turn(
        keys, principal="alice", token="dead", now_ms=runner._now_ms(), lease_ms=60_000,
        user_message_id="u1", supersede_outcome="{}", message_id="msg_dead",
        template_digest=template.digest, template_json=template.canonical,
    )  # fmt: skip
    assert claim.entries == [] and claim.model_calls == 0  # a new chat
    events: list[Event] = [MessageStarted("msg_dead"), TextDelta("t0", "half")]
    start = await runner.store.append_events(
        keys, token="dead", batch=events_to_json(events), finish="", now_ms=1, seq=1
    )
    clock.now += 61  # the dead worker's lease lapses
    seen = [event async for event in runner.follow("dead", start)]
    assert seen == [*events, RunFailed(INTERRUPTED)]
    # A worker that lost the chat can no longer write into its log.
    await runner.store.claim_turn(
        keys, principal="alice", token="new", now_ms=runner._now_ms(), lease_ms=60_000,
        user_message_id="u2", supersede_outcome="{}", message_id="msg_new",
        template_digest=template.digest, template_json=template.canonical,
    )  # fmt: skip
    assert (
        await runner.store.append_events(keys, token="dead", batch="[]", finish="", now_ms=1, seq=2)
        == ""
    )


async def test_auto_resume_policy_continues_a_settled_chat_without_the_client(redis: Redis) -> None:
    """With resume_policy "auto", the last settle resumes the chat in the background;
    the client later picks the result up from the chat (or its stream)."""
    doc = agent_doc(TURNS)
    doc["template"]["resume_policy"] = "auto"
    agent = parse_agent_file(doc)
    runner = Runner(redis, agent.model, agent.template)
    run = await runner.start_turn("auto", "alice", "hi")
    parked = [e async for e in run.events()]
    call_id = next(e.tool_call_id for e in parked if e.kind == "tool-call-issued")
    await runner.settle("auto", "alice", call_id, {"outcome": "output", "output": {"choice": "z"}})
    record = await eventually(lambda: idle(runner, "auto"), what="the chat resumed itself")
    assert (
        record.entries[-1]["text"]
        == 'Thanks for [{"result":{"choice":"z"},"tool":"pick"}] and goodbye.'
    )


async def test_shutdown_refuses_new_runs_and_hands_running_chats_over_at_once(redis: Redis) -> None:
    """Graceful shutdown: no new runs; a run still going after the grace period is
    cancelled and its lease released, so another worker can continue right away rather
    than after the lease expires."""
    turns = [[text("slow answer")]]
    agent = parse_agent_file(agent_doc(turns))
    model = GatedModel(turns, gated={0})
    leaving = Runner(redis, model, agent.template)
    run = await leaving.start_turn("sd", "alice", "hi", user_message_id="u1")
    await eventually(model.started.is_set)
    await leaving.aclose(grace_s=0.05)
    events = [e async for e in run.events()]
    assert isinstance(events[-1], RunFailed)
    with pytest.raises(ShuttingDownError):
        await leaving.start_turn("other", "alice", "hi")
    staying = Runner(redis, agent.model, agent.template)
    again = await (await staying.start_turn("sd", "alice", "hi", user_message_id="u1")).collect()
    # Taken over at once, not after the lease; the cancelled run had stored nothing, so
    # the resent message is answered by the script's first turn again.
    assert "".join(e.delta for e in again if isinstance(e, TextDelta)) == "slow answer"


async def test_a_shutting_down_server_answers_503(redis: Redis, redis_url: str) -> None:
    """A worker that is leaving says so, so a load balancer or client retries elsewhere."""
    with server_thread(redis_url, agent_doc(TURNS)) as srv:
        api = await Api(srv.base_url).login()
        srv.app.state.runner.closing = True
        response = await api.chat("sd2", [user_message("hi")])
        srv.app.state.runner.closing = False
        await api.aclose()
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "shutting_down"


async def test_responses_are_views_over_the_log(redis: Redis, redis_url: str) -> None:
    """What a POST streams is exactly what the chat's log holds for that run."""
    with server_thread(redis_url, agent_doc(TURNS)) as srv:
        api = await Api(srv.base_url).login()
        chunks = await api.say("view", "hi")
        await api.aclose()
    entries = await redis.xrange(chat_keys("view").events)
    logged = [e for _, fields in entries for e in events_from_json(fields[b"b"])]
    assert len(logged) == len(chunks)
    assert logged[0].kind == "message-started"
    assert logged[-1].kind == "message-finished"
    assert types(chunks)[-1] == "finish"


async def test_a_timeout_resumes_an_auto_policy_chat(redis: Redis) -> None:
    """With resume_policy "auto", a call the sweeper times out continues the chat with
    the definite timeout result, with no client involved."""
    from parkway.runner import Sweeper

    doc = agent_doc(TURNS)
    doc["template"]["resume_policy"] = "auto"
    agent = parse_agent_file(doc)
    clock = Clock()
    runner = Runner(redis, agent.model, agent.template, clock=clock)
    await (await runner.start_turn("ta", "alice", "hi")).collect()
    clock.now += 16 * 60  # past the 15-minute client default
    report = await Sweeper(runner, on_timeout=runner.on_timeout).sweep_once()
    assert report.settled == 1
    record = await eventually(lambda: idle(runner, "ta"), what="the resume after the timeout")
    assert (
        record.entries[-1]["text"]
        == 'Thanks for [{"result":{"status":"timeout"},"tool":"pick"}] and goodbye.'
    )


async def test_a_parked_run_ends_its_log_with_its_park_even_when_resumed_at_once(
    redis: Redis,
) -> None:
    """The step that parks and the events that announce it (the call, the message's end)
    are stored in one atomic step: a settle and resume that come the moment the caller
    hears of the call (before the parked run's task has even finished) never cut the
    parked run's log short, so its followers see it end."""
    agent = parse_agent_file(agent_doc(TURNS))
    runner = Runner(redis, agent.model, agent.template)
    for i in range(20):
        chat = f"fast-{i}"
        run = await runner.start_turn(chat, "alice", "hi")
        parked: list[Event] = []
        async for event in run.events():
            parked.append(event)
            if event.kind == "tool-call-issued":
                break  # answer at once: the run's task may still be running
        call_id = next(e.tool_call_id for e in parked if e.kind == "tool-call-issued")  # type: ignore[attr-defined]
        await runner.settle(
            chat, "alice", call_id, {"outcome": "output", "output": {"choice": "z"}}
        )
        resumed = await (await runner.resume(chat, "alice")).collect()
        assert resumed[-1].kind == "message-finished"
        start = await run.log_start  # (the log keeps the last two runs)
        followed = [e async for e in runner.follow(chat, start)]
        assert [e.kind for e in followed[-3:]] == [
            "call-parked",
            "step-finished",
            "message-finished",
        ]
    await runner.aclose()


async def test_the_log_keeps_the_last_two_runs_for_a_while(redis: Redis) -> None:
    """What the event log keeps: a run's end drops every run before the previous one
    (both replayable from the history) and lets the log expire after ``log_keep_s``; a
    follower of a dropped run is told it fell behind, never handed a later run's
    events as its own."""
    turns = [[text(f"answer {i}")] for i in range(3)]
    agent = parse_agent_file(agent_doc(turns))
    runner = Runner(redis, agent.model, agent.template, config=RunnerConfig(log_keep_s=90))
    keys = chat_keys("kept")
    starts = []
    for i in range(3):
        run = await runner.start_turn("kept", "alice", f"question {i}")
        await run.collect()
        assert run.task is not None
        await run.task
        starts.append(await run.log_start)
        logged = [entry_id.decode() for entry_id, _ in await redis.xrange(keys.events)]
        assert logged[0] == starts[max(0, i - 1)]  # this run and the one before it
        assert 0 < await redis.ttl(keys.events) <= 90
    followed = [e async for e in runner.follow("kept", starts[1])]
    assert said_events(followed) == "answer 1"
    gone = [e async for e in runner.follow("kept", starts[0])]
    assert gone == [RunFailed(FELL_BEHIND)]
    await runner.aclose()


def said_events(events: list[Event]) -> str:
    return "".join(e.delta for e in events if isinstance(e, TextDelta))


async def test_a_tool_that_outlasts_the_lease_keeps_its_chat(redis: Redis, tmp_path: Any) -> None:
    """The worker's run watch renews the leases of its running runs (all in one round
    trip): a server tool that runs three times as long as the lease keeps its chat, so
    no other worker can take it over meanwhile, and the run ends normally."""
    hang = {"type": "function", "name": "hang", "ref": "tests.helpers.tools:hang", "timeout_s": 10}
    marker = tmp_path / "marker"
    turns = [[call("hang", {"marker": str(marker), "seconds": 1.5})], [text("done")]]
    agent = parse_agent_file(agent_doc(turns, tools=[hang]))
    config = RunnerConfig(lease_s=0.5)
    runner = Runner(redis, agent.model, agent.template, config=config)
    other = Runner(redis, agent.model, agent.template, config=config)
    run = await runner.start_turn("long", "alice", "go")
    await eventually(marker.exists, what="the tool started")
    await asyncio.sleep(1.0)  # twice the lease: only renewals keep it
    with pytest.raises(ChatBusyError):
        await other.start_turn("long", "alice", "take it")
    events = await run.collect()
    assert said_events(events) == "done"
    await runner.aclose()
    await other.aclose()
