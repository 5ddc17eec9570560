"""The runner against a real Redis: park, settle, resume, supersede, errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import (
    Answer,
    AnswerMismatchError,
    CallNotFoundError,
    ChatBusyError,
    ChatNotFoundError,
    FunctionModel,
    IncompatibleStateError,
    InvalidOutcomeError,
    NothingToResumeError,
    OutcomeNotAllowedError,
    Runner,
    RunnerConfig,
    SettleConflictError,
    parse_agent_file,
)
from parkway.runner.events import (
    ApprovalRequested,
    CallParked,
    Event,
    MessageStarted,
    StepFinished,
    StepStarted,
    ToolCallIssued,
    ToolDenied,
    ToolFailed,
    ToolInputRejected,
    ToolSucceeded,
)
from parkway.runner.store.keys import DEADLINES, deadline_member
from tests.helpers import tools as test_tools
from tests.helpers.runner_rig import finish, make_runner, parked, said, turn
from tests.helpers.support import PICK_TOOL as PICK
from tests.helpers.support import agent_doc, call, text


async def test_client_tool_round_trip_parks_then_resumes_the_same_message(redis: Redis) -> None:
    """The core promise: a client call parks the turn cleanly and the answer resumes the
    same assistant message with the output in the model's input."""
    runner = make_runner(
        redis,
        [[text("Pick one."), call("pick", {"q": "colour"})], [text("got {{last_tool_results}}")]],
    )
    first = await turn(runner, "c1")
    assert finish(first) == "tool-calls"
    [pending] = parked(first)
    assert pending.tool_name == "pick" and pending.key == 'pick#{"q":"colour"}'
    result = await runner.settle(
        "c1", "alice", pending.tool_call_id, {"outcome": "output", "output": {"choice": "red"}}
    )
    assert result.fresh and result.pending == 0
    second = await (await runner.resume("c1", "alice")).collect()
    assert isinstance(second[0], MessageStarted) and second[0].message_id == first[0].message_id
    assert isinstance(second[1], ToolSucceeded) and second[1].output == {"choice": "red"}
    assert isinstance(second[2], StepStarted)
    assert said(second) == 'got [{"result":{"choice":"red"},"tool":"pick"}]'
    assert finish(second) == "stop"


async def test_approval_approved_executes_exactly_the_shown_input_once(redis: Redis) -> None:
    """An approval authorises the input it was shown, once: the tool runs with that input,
    and a repeated approval or resume never runs it again."""
    test_tools.EXECUTIONS.clear()
    runner = make_runner(
        redis, [[call("publish", {"title": "T"})], [text("{{last_tool_results}}")]]
    )
    first = await turn(runner, "a1")
    requests = [e for e in first if isinstance(e, ApprovalRequested)]
    assert len(requests) == 1
    [pending] = parked(first)
    assert pending.kind == "approval" and pending.approval_id == requests[0].approval_id
    await runner.settle("a1", "alice", pending.tool_call_id, {"outcome": "approved"})
    again = await runner.settle("a1", "alice", pending.tool_call_id, {"outcome": "approved"})
    assert not again.fresh
    events = await (await runner.resume("a1", "alice")).collect()
    assert said(events) == '[{"result":{"published":"T"},"tool":"publish"}]'
    with pytest.raises(NothingToResumeError):
        await runner.resume("a1", "alice")
    assert [e["input"] for e in test_tools.EXECUTIONS if e["chat"] == "a1"] == [{"title": "T"}]


async def test_approval_denied_gives_the_model_the_reason(redis: Redis) -> None:
    """A denial is a definite result carrying the reason, and the tool never runs."""
    test_tools.EXECUTIONS.clear()
    runner = make_runner(
        redis, [[call("publish", {"title": "T"})], [text("{{last_tool_results}}")]]
    )
    [pending] = parked(await turn(runner, "d1"))
    await runner.settle(
        "d1", "alice", pending.tool_call_id, {"outcome": "denied", "reason": "not today"}
    )
    events = await (await runner.resume("d1", "alice")).collect()
    denied = [e for e in events if isinstance(e, ToolDenied)]
    assert denied and denied[0].reason == "not today"
    assert json.loads(said(events)) == [
        {"tool": "publish", "result": {"approved": False, "reason": "not today"}}
    ]
    assert not [e for e in test_tools.EXECUTIONS if e["chat"] == "d1"]


async def test_approval_edits_only_where_the_tool_allows_them(redis: Redis) -> None:
    """Edited input is refused unless the tool allows edits; when allowed, the tool runs
    with exactly the edited input (validated against its schema)."""
    test_tools.EXECUTIONS.clear()
    runner = make_runner(
        redis,
        [[call("publish", {"title": "A"}), call("publish_editable", {"title": "B"})], [text("ok")]],
    )
    fixed, editable = parked(await turn(runner, "e1"))
    with pytest.raises(OutcomeNotAllowedError):
        await runner.settle(
            "e1", "alice", fixed.tool_call_id, {"outcome": "approved", "input": {"title": "X"}}
        )
    with pytest.raises(InvalidOutcomeError):
        await runner.settle(
            "e1", "alice", editable.tool_call_id, {"outcome": "approved", "input": {"title": 5}}
        )
    await runner.settle(
        "e1", "alice", fixed.tool_call_id, {"outcome": "approved", "input": {"title": "A"}}
    )
    await runner.settle(
        "e1", "alice", editable.tool_call_id, {"outcome": "approved", "input": {"title": "B2"}}
    )
    await (await runner.resume("e1", "alice")).collect()
    assert sorted(e["input"]["title"] for e in test_tools.EXECUTIONS if e["chat"] == "e1") == [
        "A",
        "B2",
    ]


async def test_mixed_step_resumes_only_when_every_parked_call_is_settled(redis: Redis) -> None:
    """One server tool and two client tools in one step: the server tool runs now, each
    client call parks with its own widget, and the run resumes only after both answers."""
    runner = make_runner(
        redis,
        [
            [
                call("get_weather", {"city": "Oslo"}),
                call("pick", {"q": "a"}),
                call("confirm", {"q": "b"}),
            ],
            [text("{{last_tool_results}}")],
        ],
    )
    first = await turn(runner, "m1")
    assert [e.output for e in first if isinstance(e, ToolSucceeded)] == [
        {"city": "Oslo", "temperature_c": 4, "sky": "snow"}
    ]
    pick, confirm = parked(first)
    result = await runner.settle(
        "m1", "alice", confirm.tool_call_id, {"outcome": "output", "output": True}
    )
    assert result.pending == 1
    with pytest.raises(NothingToResumeError):
        await runner.resume("m1", "alice")
    await runner.settle(
        "m1", "alice", pick.tool_call_id, {"outcome": "output", "output": {"choice": "z"}}
    )
    events = await (await runner.resume("m1", "alice")).collect()
    assert [r["tool"] for r in json.loads(said(events))] == ["get_weather", "pick", "confirm"]


async def test_settle_first_writer_wins_and_identical_repeat_is_idempotent(redis: Redis) -> None:
    """Settle vs settle: the first outcome stands; the same outcome again is accepted,
    a different one is refused with the winner's outcome."""
    runner = make_runner(redis, [[call("pick", {"q": "a"})]])
    [pending] = parked(await turn(runner, "s1"))
    first = {"outcome": "output", "output": {"choice": "a"}}
    assert (await runner.settle("s1", "alice", pending.tool_call_id, first)).fresh
    assert not (await runner.settle("s1", "alice", pending.tool_call_id, first)).fresh
    with pytest.raises(SettleConflictError) as conflict:
        await runner.settle("s1", "alice", pending.tool_call_id, {"outcome": "declined"})
    assert conflict.value.existing == first


async def test_concurrent_settles_with_different_outcomes_have_exactly_one_winner(
    redis: Redis,
) -> None:
    """Forty settles race; one wins, every loser learns the winner's outcome."""
    runner = make_runner(redis, [[call("pick", {"q": "a"})]])
    [pending] = parked(await turn(runner, "s2"))
    outcomes = [{"outcome": "output", "output": {"choice": str(i)}} for i in range(40)]
    results = await asyncio.gather(
        *(runner.settle("s2", "alice", pending.tool_call_id, o) for o in outcomes),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, SettleConflictError)]
    assert len(winners) == 1 and len(losers) == 39
    assert all(loser.existing == winners[0].call.outcome for loser in losers)


async def test_fifty_concurrent_resumes_produce_exactly_one_continuation(redis: Redis) -> None:
    """Resume vs resume: exactly one caller continues the run; the model is called once."""
    runner = make_runner(redis, [[call("pick", {"q": "a"})], [text("continued")]])
    [pending] = parked(await turn(runner, "r1"))
    await runner.settle(
        "r1", "alice", pending.tool_call_id, {"outcome": "output", "output": {"choice": "a"}}
    )
    results = await asyncio.gather(
        *(runner.resume("r1", "alice") for _ in range(50)), return_exceptions=True
    )
    runs = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, NothingToResumeError | ChatBusyError)]
    assert len(runs) == 1 and len(refused) == 49
    assert said(await runs[0].collect()) == "continued"
    record = await runner.chat("r1", "alice")
    assert record.meta["model_calls"] == "2"
    assert sum(1 for e in record.entries if e["t"] == "assistant") == 2


async def test_new_user_message_supersedes_pending_calls(redis: Redis) -> None:
    """A new message while calls wait settles them cancelled (superseded) before the new
    turn, keeps an answer that already arrived, and the model sees both results."""
    runner = make_runner(
        redis,
        [
            [call("pick", {"q": "a"}), call("confirm", {})],
            [text("{{last_tool_results}} / {{last_user_text}}")],
        ],
    )
    pick, confirm = parked(await turn(runner, "n1", uid="u1"))
    await runner.settle(
        "n1", "alice", pick.tool_call_id, {"outcome": "output", "output": {"choice": "a"}}
    )
    events = await turn(runner, "n1", "never mind", uid="u2")
    record = await runner.chat("n1", "alice")
    outcomes = {c.tool_call_id: c.outcome for c in record.calls}
    assert outcomes[confirm.tool_call_id] == {
        "outcome": "cancelled",
        "reason": "superseded_by_user_message",
    }
    assert outcomes[pick.tool_call_id] == {"outcome": "output", "output": {"choice": "a"}}
    results = [e for e in record.entries if e["t"] == "result"]
    assert [r["result"] for r in results] == [
        {"choice": "a"},
        {"status": "cancelled", "reason": "superseded_by_user_message"},
    ]
    # The model's latest input holds both results, then the new message.
    assert said(events) == (
        '[{"result":{"choice":"a"},"tool":"pick"},{"result":{"reason":'
        '"superseded_by_user_message","status":"cancelled"},"tool":"confirm"}] / never mind'
    )
    with pytest.raises(SettleConflictError):
        await runner.settle(
            "n1", "alice", confirm.tool_call_id, {"outcome": "output", "output": True}
        )


async def test_unknown_tool_and_invalid_input_give_deterministic_errors_and_the_run_continues(
    redis: Redis,
) -> None:
    """A bad call is not fatal: the model gets an error result it can act on."""
    runner = make_runner(
        redis,
        [
            [call("nope", {"x": 1}), call("get_weather", {"town": "Oslo"})],
            [text("{{last_tool_results}}")],
        ],
    )
    events = await turn(runner, "u1")
    rejected = [e for e in events if isinstance(e, ToolInputRejected)]
    assert [r.tool_name for r in rejected] == ["nope", "get_weather"]
    assert rejected[0].error.startswith("unknown tool 'nope' (the tools are: confirm, get_weather,")
    assert "'city' is a required property" in rejected[1].error
    assert finish(events) == "stop"
    results = json.loads(said(events))
    assert results[0] == {
        "tool": "nope",
        "result": {
            "error": "unknown tool 'nope' (the tools are: confirm, get_weather, pick, publish, "
            "publish_editable, request_connection)"
        },
    }


async def test_server_tool_failures_become_error_results_without_internals(redis: Redis) -> None:
    """A tool that raises gives the model a generic error, never the exception's text."""
    broken = {"type": "function", "name": "broken", "ref": "tests.runner.test_runner:explode"}
    runner = make_runner(
        redis, [[call("broken", {})], [text("{{last_tool_results}}")]], tools=[broken]
    )
    events = await turn(runner, "b1")
    failed = [e for e in events if isinstance(e, ToolFailed)]
    assert failed[0].error == "tool 'broken' failed with an internal error"
    assert "secret-detail" not in said(events)


def explode(tool_input: dict[str, Any]) -> None:
    raise RuntimeError("secret-detail")


async def test_answers_match_by_call_id_then_by_parked_call_key_fifo(redis: Redis) -> None:
    """A transcript replayed with fresh ids is matched by parkedCallKey, first in first
    out among identical pending calls; an unknown call id with an unknown key is ignored."""
    runner = make_runner(
        redis, [[call("pick", {"q": "same"}), call("pick", {"q": "same"})], [text("ok")]]
    )
    first, second = parked(await turn(runner, "k1"))
    answers = [
        Answer("fresh-1", "pick", {"q": "same"}, {"outcome": "output", "output": {"choice": "1"}}),
        Answer("forged", "pick", {"q": "other"}, {"outcome": "output", "output": {"choice": "x"}}),
    ]
    report = await runner.answer("k1", "alice", answers)
    assert report.settled == (first.tool_call_id,) and report.pending == 1
    report = await runner.answer(
        "k1",
        "alice",
        [
            Answer(
                second.tool_call_id,
                "pick",
                {"q": "same"},
                {"outcome": "output", "output": {"choice": "2"}},
            )
        ],
    )
    assert report.settled == (second.tool_call_id,) and report.pending == 0
    record = await runner.chat("k1", "alice")
    assert [c.outcome["output"]["choice"] for c in record.calls if c.outcome] == ["1", "2"]


async def test_an_answer_with_other_input_for_a_pending_call_is_refused(redis: Redis) -> None:
    """An answer may not rewrite what was asked: same id, different input is refused and
    nothing is settled."""
    runner = make_runner(redis, [[call("publish", {"title": "T"})]])
    [pending] = parked(await turn(runner, "x1"))
    forged = Answer(pending.tool_call_id, "publish", {"title": "EVIL"}, {"outcome": "approved"})
    with pytest.raises(AnswerMismatchError):
        await runner.answer("x1", "alice", [forged])
    wrong_approval = Answer(
        pending.tool_call_id,
        "publish",
        {"title": "T"},
        {"outcome": "approved"},
        approval_id="apr_x",
    )
    with pytest.raises(AnswerMismatchError):
        await runner.answer("x1", "alice", [wrong_approval])
    assert (await runner.call("x1", "alice", pending.tool_call_id)).outcome is None


async def test_connection_success_cannot_be_claimed_by_the_client(redis: Redis) -> None:
    """Only the server's OAuth callback records a connection; the browser may report
    only that it did not connect."""
    runner = make_runner(
        redis,
        [[call("request_connection", {"provider": "github"})], [text("{{last_tool_results}}")]],
    )
    [pending] = parked(await turn(runner, "o1"))
    claim = {
        "outcome": "output",
        "output": {"connected": True, "provider": "github", "connection_id": "x"},
    }
    with pytest.raises(OutcomeNotAllowedError):
        await runner.settle("o1", "alice", pending.tool_call_id, claim)
    with pytest.raises(OutcomeNotAllowedError):
        await runner.settle("o1", "alice", pending.tool_call_id, {"outcome": "timeout"})
    await runner.settle(
        "o1",
        "alice",
        pending.tool_call_id,
        {"outcome": "output", "output": {"connected": False, "reason": "declined"}},
    )
    events = await (await runner.resume("o1", "alice")).collect()
    assert json.loads(said(events)) == [
        {
            "tool": "request_connection",
            "result": {"connected": False, "reason": "declined", "retryable": False},
        }
    ]


async def test_another_principal_cannot_see_settle_or_resume_a_chat(redis: Redis) -> None:
    """Ownership: to anyone else a chat does not exist."""
    runner = make_runner(redis, [[call("pick", {"q": "a"})]])
    [pending] = parked(await turn(runner, "p1"))
    with pytest.raises(ChatNotFoundError):
        await runner.chat("p1", "mallory")
    with pytest.raises(ChatNotFoundError):
        await runner.settle("p1", "mallory", pending.tool_call_id, {"outcome": "declined"})
    with pytest.raises(ChatNotFoundError):
        await runner.resume("p1", "mallory")
    with pytest.raises(ChatNotFoundError):
        await runner.start_turn("p1", "mallory", "hi")
    assert (await runner.call("p1", "alice", pending.tool_call_id)).outcome is None


@pytest.mark.parametrize("worker", ["parking", "cold"])
async def test_a_settle_is_judged_alike_by_the_parking_worker_and_a_cold_one(
    redis: Redis, worker: str
) -> None:
    """The worker that parked a call settles it in one round trip from the record it
    wrote; another reads the record first. Both answer every case alike: a first
    settle, an identical repeat, a different one, another principal (nothing written,
    the call's deadline kept), an unknown call."""
    parking = make_runner(redis, [[call("pick", {"q": "a"})]])
    [pending] = parked(await turn(parking, "w1"))
    settler = parking if worker == "parking" else make_runner(redis, [])
    cached = settler.store.known_calls.recall("w1", pending.tool_call_id)
    assert (cached is not None) == (worker == "parking")
    member = deadline_member("w1", pending.tool_call_id)
    with pytest.raises(ChatNotFoundError):
        await settler.settle("w1", "mallory", pending.tool_call_id, {"outcome": "declined"})
    assert await redis.zscore(DEADLINES, member) is not None
    assert (await settler.call("w1", "alice", pending.tool_call_id)).outcome is None
    with pytest.raises(CallNotFoundError):
        await settler.settle("w1", "alice", "call_unknown", {"outcome": "declined"})
    first = await settler.settle("w1", "alice", pending.tool_call_id, {"outcome": "declined"})
    assert first.fresh and first.pending == 0 and first.call.outcome == {"outcome": "declined"}
    assert await redis.zscore(DEADLINES, member) is None
    again = await settler.settle("w1", "alice", pending.tool_call_id, {"outcome": "declined"})
    assert not again.fresh and again.call.outcome == {"outcome": "declined"}
    with pytest.raises(SettleConflictError) as conflict:
        await settler.settle(
            "w1", "alice", pending.tool_call_id, {"outcome": "output", "output": {"choice": "b"}}
        )
    assert conflict.value.existing == {"outcome": "declined"}


@pytest.mark.parametrize("worker", ["parking", "cold"])
async def test_answers_and_the_resume_are_alike_on_the_parking_worker_and_a_cold_one(
    redis: Redis, worker: str
) -> None:
    """The AI SDK path: the worker that parked the step settles answers and claims the
    resume in one script; another one reads the pending calls first. Both give the same
    reports and the same run: an answer to one of two calls leaves one pending and no
    run, an answer under a fresh id stands in for the call with its key, a repeat of a
    settled call's answer is ignored, and the last answer resumes the chat."""
    both = [call("pick", {"q": "a"}), call("pick", {"q": "b"})]
    parking = make_runner(redis, [both, [text("done")]])
    calls = parked(await turn(parking, "aw"))
    answerer = parking if worker == "parking" else make_runner(redis, [both, [text("done")]])
    output = {"outcome": "output", "output": {"choice": "x"}}
    first = Answer(calls[0].tool_call_id, "pick", {"q": "a"}, output)
    report, run = await answerer.answer_and_resume("aw", "alice", [first])
    assert (report.settled, report.pending, run) == ((calls[0].tool_call_id,), 1, None)
    report, run = await answerer.answer_and_resume("aw", "alice", [first])
    assert (report.settled, report.pending, run) == ((), 1, None)
    with pytest.raises(ChatNotFoundError):
        await answerer.answer_and_resume("aw", "mallory", [first])
    fresh = Answer("call_fresh", "pick", {"q": "b"}, output)
    report, run = await answerer.answer_and_resume("aw", "alice", [first, fresh])
    assert (report.settled, report.pending) == ((calls[1].tool_call_id,), 0)
    assert run is not None
    assert said(await run.collect()) == "done"
    record = await parking.chat("aw", "alice")
    assert [c.outcome for c in record.calls] == [
        {"outcome": "output", "output": {"choice": "x"}}
    ] * 2


async def test_a_record_with_an_unknown_schema_version_fails_closed(redis: Redis) -> None:
    """Parked state is versioned: a chat written by a newer Parkway is refused with a
    clear error, never half-read."""
    runner = make_runner(redis, [[call("pick", {"q": "a"})]])
    await turn(runner, "v1")
    await redis.hset("pw:{v1}:meta", "v", "99")
    with pytest.raises(IncompatibleStateError, match="schema version 99"):
        await runner.start_turn("v1", "alice", "again")
    with pytest.raises(IncompatibleStateError):
        await runner.chat("v1", "alice")


async def test_the_script_counts_model_calls_across_turns_and_ends_cleanly(redis: Redis) -> None:
    """Turn k answers the k-th model call of the chat; past the script the model says so,
    and how to start over or go on with a real model (not a bare "end of script")."""
    runner = make_runner(redis, [[text("one {{last_user_text}}")], [text("two")]])
    assert said(await turn(runner, "sc", "a", uid="1")) == "one a"
    assert said(await turn(runner, "sc", "b", uid="2")) == "two"
    done = said(await turn(runner, "sc", "c", uid="3"))
    assert done.startswith("This agent's script is done")
    assert "Start a new chat (New chat)" in done and "parkway serve --model NAME" in done


async def test_a_repeated_user_message_id_is_refused(redis: Redis) -> None:
    """A resent user message (same id) never starts a second turn."""
    from parkway.runner import DuplicateMessageError

    runner = make_runner(redis, [[text("one")], [text("two")]])
    await turn(runner, "dup", "a", uid="same")
    with pytest.raises(DuplicateMessageError):
        await runner.start_turn("dup", "alice", "a", user_message_id="same")


async def test_server_tools_of_one_step_run_concurrently(redis: Redis) -> None:
    """Server tools of a step run at the same time, not one after another."""
    tools = [
        {
            "type": "function",
            "name": f"meet{i}",
            "ref": "tests.runner.test_runner:meet",
            "input_schema": {"type": "object"},
        }
        for i in range(3)
    ]
    runner = make_runner(
        redis, [[call("meet0"), call("meet1"), call("meet2")], [text("done")]], tools=tools
    )
    BARRIER.clear()
    events = await asyncio.wait_for(turn(runner, "cc"), timeout=20)
    assert [e.output for e in events if isinstance(e, ToolSucceeded)] == [{"met": 3}] * 3


BARRIER: list[int] = []


async def meet(tool_input: dict[str, Any]) -> dict[str, int]:
    """Returns only once all three calls are running at the same time."""
    BARRIER.append(1)
    while len(BARRIER) < 3:
        await asyncio.sleep(0.005)
    return {"met": len(BARRIER)}


@pytest.mark.parametrize("with_server_call", [False, True], ids=["parks-only", "with-server-call"])
async def test_tool_call_events_precede_widgets(redis: Redis, with_server_call: bool) -> None:
    """A parked call's widget (``CallParked``, and ``ApprovalRequested`` for an approval)
    comes after the call itself (``ToolCallIssued``): an AI SDK client attaches a widget
    or an approval request to a tool part it must already have. Both orders of a step
    are checked: one that only parks, and one that also runs a server tool first."""
    calls = [call("pick", {"q": "colour"}), call("publish", {"title": "T"})]
    if with_server_call:
        calls.append(call("get_weather", {"city": "Oslo"}))
    runner = make_runner(redis, [calls, [text("unused")]])
    events = await turn(runner, f"widgets-{with_server_call}")
    position = {(e.kind, call_of(e)): i for i, e in enumerate(events)}
    widgets = parked(events)
    assert sorted(c.tool_name for c in widgets) == ["pick", "publish"]
    for parked_call in widgets:
        call_id = parked_call.tool_call_id
        issued = position[("tool-call-issued", call_id)]
        assert issued < position[("call-parked", call_id)]
        if parked_call.kind == "approval":
            assert issued < position[("approval-requested", call_id)]
    if with_server_call:
        [ran] = [e for e in events if isinstance(e, ToolSucceeded)]
        assert (
            position[("tool-call-issued", ran.tool_call_id)]
            < position[("tool-succeeded", ran.tool_call_id)]
        )


def call_of(event: Event) -> str | None:
    """The id of the tool call an event is about (None for a text or step event)."""
    if isinstance(event, CallParked):
        return event.call.tool_call_id
    return getattr(event, "tool_call_id", None)


def test_events_are_frozen_dataclasses_with_a_kind_tag() -> None:
    """Event classes are plain frozen dataclasses with a kind tag."""
    event = ToolCallIssued("c", "t", {})
    assert event.kind == "tool-call-issued"
    with pytest.raises(AttributeError):
        event.tool_name = "x"  # type: ignore[misc]


async def test_resume_uses_the_template_snapshot_the_run_started_with(redis: Redis) -> None:
    """A worker whose agent template changed (or lacks the tool) still resumes a parked
    run with the template the run started with."""
    test_tools.EXECUTIONS.clear()
    before = make_runner(
        redis, [[call("publish", {"title": "S"})], [text("{{last_tool_results}}")]]
    )
    [pending] = parked(await turn(before, "snap"))
    await before.settle("snap", "alice", pending.tool_call_id, {"outcome": "approved"})
    after = make_runner(redis, [[text("unused")], [text("{{last_tool_results}}")]], tools=[])
    events = await (await after.resume("snap", "alice")).collect()
    assert json.loads(said(events)) == [{"tool": "publish", "result": {"published": "S"}}]
    assert [e["chat"] for e in test_tools.EXECUTIONS] == ["snap"]


async def test_an_approval_granted_before_a_new_message_still_runs(redis: Redis) -> None:
    """The human approved; a new message arriving before the resume must not turn that
    approval into a denial: the tool runs, with the approved input, before the new turn."""
    test_tools.EXECUTIONS.clear()
    runner = make_runner(
        redis,
        [
            [call("publish", {"title": "P"}), call("pick", {"q": "a"})],
            [text("{{last_tool_results}}")],
        ],
    )
    approval, _ = parked(await turn(runner, "ap", uid="u1"))
    await runner.settle("ap", "alice", approval.tool_call_id, {"outcome": "approved"})
    events = await turn(runner, "ap", "moving on", uid="u2")
    assert [e["input"] for e in test_tools.EXECUTIONS if e["chat"] == "ap"] == [{"title": "P"}]
    assert json.loads(said(events)) == [
        {"tool": "publish", "result": {"published": "P"}},
        {"tool": "pick", "result": {"status": "cancelled", "reason": "superseded_by_user_message"}},
    ]


async def test_settles_are_judged_by_the_schema_the_call_was_parked_with(redis: Redis) -> None:
    """A worker with a changed template judges an answer by the run's own snapshot."""
    runner = make_runner(redis, [[call("pick", {"q": "a"})]])
    [pending] = parked(await turn(runner, "sch"))
    loose = {**PICK, "output_schema": {"type": "object"}}
    other = make_runner(redis, [[text("x")]], tools=[loose])
    with pytest.raises(InvalidOutcomeError, match="output_schema"):
        await other.settle(
            "sch", "alice", pending.tool_call_id, {"outcome": "output", "output": {"x": 1}}
        )


async def test_oversized_server_tool_output_becomes_an_error_result(redis: Redis) -> None:
    big = {"type": "function", "name": "big", "ref": "tests.runner.test_runner:big_output"}
    agent = parse_agent_file(
        agent_doc([[call("big")], [text("{{last_tool_results}}")]], tools=[big])
    )
    runner = Runner(redis, agent.model, agent.template, config=RunnerConfig(max_output_bytes=1000))
    events = await turn(runner, "big")
    [failed] = [e for e in events if isinstance(e, ToolFailed)]
    assert "over the 1000 limit" in failed.error


def big_output(tool_input: dict[str, Any]) -> str:
    return "x" * 5000


async def test_a_run_out_of_steps_ends_on_a_text_step(redis: Redis) -> None:
    """A model that never stops calling tools is cut off with a visible notice, on a
    text-only step so an AI SDK client does not resend automatically."""
    agent = parse_agent_file(agent_doc([[call("get_weather", {"city": "Oslo"})]] * 5))
    runner = Runner(redis, agent.model, agent.template, config=RunnerConfig(max_steps=3))
    events = await turn(runner, "steps")
    assert finish(events) == "length"
    assert said(events) == "(stopped after 3 steps without a final answer)"
    assert isinstance(events[-2], StepFinished)


async def test_approvals_finished_by_a_new_turn_use_the_template_they_were_made_under(
    redis: Redis,
) -> None:
    """A worker with a newer template (here without the tool) still runs an approval that
    was granted under the old one, with that template's tool."""
    test_tools.EXECUTIONS.clear()
    old = make_runner(redis, [[call("publish", {"title": "old"})], [text("{{last_tool_results}}")]])
    [pending] = parked(await turn(old, "tpl", uid="u1"))
    await old.settle("tpl", "alice", pending.tool_call_id, {"outcome": "approved"})
    new = make_runner(redis, [[text("x")], [text("{{last_tool_results}}")]], tools=[])
    events = await turn(new, "tpl", "next", uid="u2")
    assert json.loads(said(events)) == [{"tool": "publish", "result": {"published": "old"}}]


async def test_the_turns_message_is_read_back_while_its_first_step_streams(
    redis: Redis,
) -> None:
    """The turn's user message is stored with the run's first commit, after the model's
    first step; a reader in between (a page reloaded, an AG-UI client following the run)
    still sees it, from the claim, and sees it once after the commit."""
    reached, release = asyncio.Event(), asyncio.Event()

    async def slow_first_step(messages: Any, info: Any) -> str:
        reached.set()
        await release.wait()
        return "Hello."

    template = parse_agent_file(agent_doc([[text("unused")]])).template
    runner = Runner(redis, FunctionModel(slow_first_step), template)
    run = await runner.start_turn("c-window", "alice", "hi there", user_message_id="u1")
    try:
        await asyncio.wait_for(reached.wait(), 20)
        during = await runner.chat("c-window", "alice")
        assert during.meta["state"] == "running"
        assert [e for e in during.entries if e["t"] == "user"] == [
            {"t": "user", "text": "hi there", "uid": "u1"}
        ]
    finally:
        release.set()
    assert said(await run.collect()) == "Hello."
    after = await runner.chat("c-window", "alice")
    assert [e for e in after.entries if e["t"] == "user"] == [
        {"t": "user", "text": "hi there", "uid": "u1"}
    ]
    assert "turn_user" not in after.meta  # kept only while the run runs
