"""The runtime: send, park, answer, approve, deny, cancel and resume from Python with no
HTTP, on a real Redis; its event stream; a cold resume by a second process; deadlines
settled by its own sweeper; its embedded Redis; a model swapped in for the agent's."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import (
    AgentFile,
    CallParked,
    ChatNotFoundError,
    Event,
    FunctionInfo,
    FunctionModel,
    MessageFinished,
    MessageStarted,
    ModelMessage,
    NothingToResumeError,
    OutcomeNotAllowedError,
    Reply,
    Runtime,
    SettleConflictError,
    StepStarted,
    TextDelta,
    ToolCall,
    ToolDenied,
    ToolResult,
    ToolSucceeded,
    UserTurn,
    parse_agent_file,
)
from tests.helpers.runner_rig import Clock
from tests.helpers.runtime_worker import AGENT as PICKER_AGENT
from tests.helpers.support import ROOT, agent_doc, call, eventually, text


def scripted(turns: list[list[dict[str, Any]]]) -> AgentFile:
    return parse_agent_file(agent_doc(turns))


def echo(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
    """Calls the tool the user names (``tool:<name> <json input>``) once, then repeats
    what the tools answered."""
    results = info.results_since_user()
    if results:
        return " | ".join(json.dumps(r.result, sort_keys=True) for r in results)
    name, _, raw = info.last_user_text.removeprefix("tool:").partition(" ")
    return ToolCall(name, json.loads(raw or "{}"))


# -- round trips ----------------------------------------------------------------------


async def test_a_turn_parks_on_a_client_tool_and_its_answer_resumes_it(
    redis: Redis, redis_url: str
) -> None:
    """The whole round trip a script does: the turn stops at the client call with its
    id, tool, input, kind and deadline; the answer is recorded; the resume continues the
    same assistant message with the model seeing the answer."""
    agent = scripted(
        [
            [text("Choosing. "), call("pick", {"q": "colour"})],
            [text("You chose {{result.pick.choice}}.")],
        ]
    )
    async with Runtime(agent, redis_url=redis_url) as rt:
        first = await rt.send("c-round", "pick a colour", principal="alice")
        assert first.text == "Choosing. "
        assert first.finish_reason == "tool-calls" and first.is_parked
        parked = first.call("pick")
        assert (parked.tool, parked.kind, parked.input) == ("pick", "client", {"q": "colour"})
        assert parked.deadline is not None and parked.status == "pending"

        settled = await rt.answer("c-round", parked.id, {"choice": "teal"}, principal="alice")
        assert settled.outcome == {"outcome": "output", "output": {"choice": "teal"}}

        second = await rt.resume("c-round", principal="alice")
        assert second.text == "You chose teal."
        assert second.finish_reason == "stop" and not second.is_parked
        assert second.message_id == first.message_id  # the same assistant message goes on

        view = await rt.chat("c-round", principal="alice")
        assert view.owner == "alice" and view.pending == ()
        assert [type(m).__name__ for m in view.messages] == [
            "UserTurn",
            "AssistantTurn",
            "ToolResult",
            "AssistantTurn",
        ]
        with pytest.raises(ChatNotFoundError):  # another principal's chat reads as missing
            await rt.chat("c-round", principal="mallory")


async def test_a_function_model_steers_the_round_trip_and_resume_true_continues(
    redis: Redis, redis_url: str
) -> None:
    """A test drives the agent from Python: the function sees the user's text and,
    after the park, the answer, in the conversation it is given; ``resume=True`` settles
    and continues in one call."""
    async with Runtime(PICKER_AGENT, redis_url=redis_url) as rt:
        first = await rt.send("c-fn", "which fruit?")
        call_ = first.call("pick")
        assert call_.input == {"q": "which fruit?"}
        done = await rt.answer("c-fn", call_.id, {"choice": "plum"}, resume=True)
        assert done.text == "You picked {'choice': 'plum'}."
        assert done.finish_reason == "stop"


async def test_an_async_function_model_and_a_server_tool_run_in_one_turn(
    redis: Redis, redis_url: str
) -> None:
    """An ``async`` reply function works as a plain one; a server tool runs at once and
    its result reaches the function on the next step of the same turn."""
    seen: list[tuple[ModelMessage, ...]] = []

    async def weather(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
        seen.append(tuple(messages))
        await asyncio.sleep(0)
        return echo(messages, info)

    agent = AgentFile(PICKER_AGENT.template, model=FunctionModel(weather))
    async with Runtime(agent, redis_url=redis_url) as rt:
        result = await rt.send("c-async", 'tool:get_weather {"city": "Oslo"}')
    assert not result.is_parked
    assert '"city": "Oslo"' in result.text
    assert [isinstance(m, ToolResult) for m in seen[1]] == [False, False, True]
    assert isinstance(seen[0][0], UserTurn)


async def test_approve_with_edited_input_runs_the_tool_with_exactly_that_input(
    redis: Redis, redis_url: str
) -> None:
    """An approval parks; approving with an edit executes the tool with the edited
    input, once, and the resumed run reports the tool's output."""
    agent = AgentFile(scripted([]).template, model=FunctionModel(echo))
    async with Runtime(agent, redis_url=redis_url) as rt:
        first = await rt.send("c-approve", 'tool:publish_editable {"title": "draft"}')
        gate = first.call("publish_editable")
        assert gate.kind == "approval" and gate.allow_edits
        done = await rt.approve("c-approve", gate.id, input={"title": "final"}, resume=True)
        outputs = [e.output for e in done.events if isinstance(e, ToolSucceeded)]
        assert outputs == [{"published": "final"}]
        assert done.text == '{"published": "final"}'


async def test_an_edit_where_the_tool_allows_none_is_refused(redis: Redis, redis_url: str) -> None:
    """Approving with other input than the call had, on a tool without edits, raises
    the runner's error, and the call stays pending."""
    agent = AgentFile(scripted([]).template, model=FunctionModel(echo))
    async with Runtime(agent, redis_url=redis_url) as rt:
        first = await rt.send("c-noedit", 'tool:publish {"title": "draft"}')
        gate = first.call("publish")
        with pytest.raises(OutcomeNotAllowedError):
            await rt.approve("c-noedit", gate.id, input={"title": "other"})
        assert (await rt.call("c-noedit", gate.id)).status == "pending"


async def test_deny_gives_the_model_the_denial_and_its_reason(redis: Redis, redis_url: str) -> None:
    """A denied call never runs; the model is told it was denied, and why."""
    agent = AgentFile(scripted([]).template, model=FunctionModel(echo))
    async with Runtime(agent, redis_url=redis_url) as rt:
        first = await rt.send("c-deny", 'tool:publish {"title": "draft"}')
        gate = first.call("publish")
        await rt.deny("c-deny", gate.id, reason="not today")
        done = await rt.resume("c-deny")
        assert [e.reason for e in done.events if isinstance(e, ToolDenied)] == ["not today"]
        assert json.loads(done.text) == {"approved": False, "reason": "not today"}


async def test_cancel_and_decline_are_definite_outcomes_the_model_sees(
    redis: Redis, redis_url: str
) -> None:
    """Two calls of one step: cancelling one leaves the chat waiting on the other
    (``resume=True`` says so without running anything); declining it resumes, and the
    model sees both outcomes."""
    agent = scripted(
        [[call("pick", {"q": "a"}), call("confirm", {"q": "b"})], [text("{{last_tool_results}}")]]
    )
    async with Runtime(agent, redis_url=redis_url) as rt:
        first = await rt.send("c-cancel", "go")
        pick, confirm = first.call("pick"), first.call("confirm")
        waiting = await rt.cancel("c-cancel", pick.id, reason="closed", resume=True)
        assert waiting.events == () and [c.id for c in waiting.parked] == [confirm.id]
        with pytest.raises(NothingToResumeError):
            await rt.resume("c-cancel")
        done = await rt.decline("c-cancel", confirm.id, resume=True)
        assert json.loads(done.text) == [
            {"tool": "pick", "result": {"status": "cancelled", "reason": "closed"}},
            {"tool": "confirm", "result": {"status": "declined"}},
        ]


async def test_settles_are_first_writer_wins_with_the_runners_errors(
    redis: Redis, redis_url: str
) -> None:
    """Two runtimes on one Redis answer the same call at once: exactly one outcome is
    recorded; the same answer again is accepted, a different one raises the conflict
    carrying the recorded outcome."""
    agent = scripted([[call("pick", {"q": "x"})], [text("ok")]])
    async with (
        Runtime(agent, redis_url=redis_url) as one,
        Runtime(agent, redis_url=redis_url) as two,
    ):
        parked = (await one.send("c-race", "go")).call("pick")
        answers = await asyncio.gather(
            one.answer("c-race", parked.id, {"choice": "a"}),
            two.answer("c-race", parked.id, {"choice": "b"}),
            return_exceptions=True,
        )
        won = [a for a in answers if not isinstance(a, BaseException)]
        lost = [a for a in answers if isinstance(a, SettleConflictError)]
        assert len(won) == 1 and len(lost) == 1
        assert not isinstance(won[0], BaseException)
        recorded = won[0].outcome
        assert lost[0].existing == recorded
        again = await two.settle("c-race", parked.id, dict(recorded or {}))
        assert again.outcome == recorded


async def test_a_new_message_supersedes_the_pending_calls(redis: Redis, redis_url: str) -> None:
    """Sending while a call waits settles it ``cancelled`` (superseded) first, as over
    HTTP, and the new turn runs."""
    agent = scripted([[call("pick", {"q": "x"})], [text("fresh turn")]])
    async with Runtime(agent, redis_url=redis_url) as rt:
        parked = (await rt.send("c-supersede", "first")).call("pick")
        second = await rt.send("c-supersede", "never mind")
        assert second.text == "fresh turn"
        outcome = (await rt.call("c-supersede", parked.id)).outcome
        assert outcome == {"outcome": "cancelled", "reason": "superseded_by_user_message"}


# -- streaming ------------------------------------------------------------------------


async def test_stream_yields_each_event_as_it_happens_in_order(
    redis: Redis, redis_url: str
) -> None:
    """The stream hands over the message start while the model is still thinking (its
    reply is held until the test has seen it), then the rest in the run's order, ending
    with the park."""
    gate = asyncio.Event()

    async def held(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
        await gate.wait()
        if info.results_since_user():
            return "Thanks."
        return ["Asking. ", ToolCall("pick", {"q": "now"})]

    agent = AgentFile(PICKER_AGENT.template, model=FunctionModel(held))
    events: list[Event] = []
    async with Runtime(agent, redis_url=redis_url) as rt:
        async for event in rt.stream("c-stream", "hi"):
            events.append(event)
            if isinstance(event, StepStarted):
                assert not gate.is_set()  # nothing of the reply exists yet
                gate.set()
        kinds = [e.kind for e in events]
        assert isinstance(events[0], MessageStarted)
        assert isinstance(events[-1], MessageFinished) and events[-1].reason == "tool-calls"
        assert kinds.index("text-delta") < kinds.index("tool-call-issued")
        assert kinds.index("tool-call-issued") < kinds.index("call-parked")
        assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == "Asking. "
        (parked,) = [e.call for e in events if isinstance(e, CallParked)]
        await rt.answer("c-stream", parked.tool_call_id, {"choice": "x"})
        resumed = [e async for e in rt.stream_resume("c-stream")]
        assert isinstance(resumed[0], MessageStarted)
        assert resumed[0].message_id == events[0].message_id
        assert "".join(e.delta for e in resumed if isinstance(e, TextDelta)) == "Thanks."


# -- cold resume, deadlines, embedded Redis, models ---------------------------------------


@pytest.mark.slow
async def test_a_chat_parked_here_is_resumed_by_another_process(
    redis: Redis, redis_url: str
) -> None:
    """Nothing of a parked run lives in the process that parked it: a second process,
    with its own Runtime on the same Redis, answers the call and runs the rest of the
    turn; this process then reads the finished chat."""
    async with Runtime(PICKER_AGENT, redis_url=redis_url) as rt:
        first = await rt.send("c-cold", "which fruit?")
        assert first.is_parked
    worker = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.helpers.runtime_worker", redis_url, "c-cold", "fig"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert worker.returncode == 0, worker.stderr
    report = json.loads(worker.stdout.strip().splitlines()[-1])
    assert report["pid"] != os.getpid()
    assert report == {**report, "text": "You picked {'choice': 'fig'}.", "finish": "stop"}
    async with Runtime(PICKER_AGENT, redis_url=redis_url) as rt:
        view = await rt.chat("c-cold")
        assert view.pending == () and view.calls[0].outcome == {
            "outcome": "output",
            "output": {"choice": "fig"},
        }
        assert "You picked" in str(view.messages[-1])


async def test_a_call_past_its_deadline_times_out_through_the_runtimes_sweeper(
    redis: Redis, redis_url: str
) -> None:
    """The runtime's own sweeper settles an unanswered call ``timeout`` once its
    deadline passes (on the clock the runtime was given); a late answer conflicts, and
    the resumed model sees the timeout."""
    clock = Clock()
    agent = scripted([[call("pick", {"q": "x"})], [text("{{last_tool_results}}")]])
    async with Runtime(agent, redis_url=redis_url, clock=clock, sweep_interval_s=0.01) as rt:
        parked = (await rt.send("c-deadline", "go")).call("pick")
        assert parked.deadline is not None
        assert (await rt.call("c-deadline", parked.id)).status == "pending"
        clock.now = parked.deadline.timestamp() + 1

        async def timed_out() -> bool:
            return (await rt.call("c-deadline", parked.id)).outcome == {"outcome": "timeout"}

        await eventually(timed_out, what="the sweeper to time the call out")
        with pytest.raises(SettleConflictError) as late:
            await rt.answer("c-deadline", parked.id, {"choice": "late"})
        assert late.value.existing == {"outcome": "timeout"}
        done = await rt.resume("c-deadline")
        assert json.loads(done.text) == [{"tool": "pick", "result": {"status": "timeout"}}]


async def test_sweep_settles_expired_calls_now_without_a_background_sweeper(
    redis: Redis, redis_url: str
) -> None:
    """With the background sweeper off, ``sweep()`` is the one sweep a test drives."""
    clock = Clock()
    agent = scripted([[call("confirm", {})]])
    async with Runtime(agent, redis_url=redis_url, clock=clock, sweep_interval_s=None) as rt:
        parked = (await rt.send("c-sweep", "go")).call("confirm")
        assert (await rt.sweep()).expired == 0
        assert parked.deadline is not None
        clock.now = parked.deadline.timestamp()
        report = await rt.sweep()
        assert (report.expired, report.settled) == (1, 1)
        assert (await rt.call("c-sweep", parked.id)).outcome == {"outcome": "timeout"}


async def test_without_a_url_the_runtime_runs_its_own_redis_and_removes_it(
    tmp_path: Path,
) -> None:
    """``redis_url=None`` starts the embedded Redis in a scratch folder that is gone
    after close; with ``data_dir`` the folder (and the parked chat) stays for the next
    runtime."""
    agent = scripted([[call("confirm", {})], [text("resumed")]])
    async with Runtime(agent) as rt:
        scratch = Path(rt.redis_url.removeprefix("unix://")).parent
        assert (await rt.send("c-embedded", "go")).is_parked
    assert not scratch.exists()

    folder = tmp_path / "d"
    async with Runtime(agent, data_dir=folder) as rt:
        parked = (await rt.send("c-kept", "go")).call("confirm")
    async with Runtime(agent, data_dir=folder) as rt:  # a new server, on the kept files
        done = await rt.answer("c-kept", parked.id, {"ok": True}, resume=True)
        assert done.text == "resumed"


class CodeAgent:
    """Stands in for an agent defined in code: anything with ``agent_file()``."""

    def agent_file(self) -> AgentFile:
        return scripted([[text("from code")]])


async def test_an_object_with_agent_file_is_an_agent_and_model_overrides_its_model(
    redis: Redis, redis_url: str
) -> None:
    """``Runtime`` takes what an agent defined in code compiles to, and ``model=``
    replaces the agent's model for every run (a test swapping in its own)."""
    async with Runtime(CodeAgent(), redis_url=redis_url) as rt:
        assert (await rt.send("c-code", "hi")).text == "from code"
    override = FunctionModel(lambda messages, info: "overridden")
    async with Runtime(CodeAgent(), redis_url=redis_url, model=override) as rt:
        assert (await rt.send("c-override", "hi")).text == "overridden"


def test_a_runtime_without_a_usable_model_is_refused_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A provider model whose key is missing is named before anything starts."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    from parkway.runner.errors import ModelError

    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        Runtime(CodeAgent(), model="anthropic:claude-sonnet-4-6", environ={})
