"""A new user message that comes with answers to tool calls (an AI SDK client resends its
tool outputs with every message): what they answer is settled with their outcome, what
they do not is superseded by the turn, and while nothing is pending they cost nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Answer, AnswerMismatchError, Runner
from parkway.runner.events import Event
from parkway.runner.parking import ParkedCall
from tests.helpers.runner_rig import RoundTrips, finish, make_runner, parked, said, turn
from tests.helpers.support import call, text

SUPERSEDED = {"outcome": "cancelled", "reason": "superseded_by_user_message"}


def answer(parked_call: ParkedCall, output: Any, *, tool_input: Any = None) -> Answer:
    return Answer(
        tool_call_id=parked_call.tool_call_id,
        tool_name=parked_call.tool_name,
        tool_input=parked_call.input if tool_input is None else tool_input,
        outcome={"outcome": "output", "output": output},
    )


async def new_message(
    runner: Runner, chat: str, answers: list[Answer], uid: str = "u2"
) -> list[Event]:
    run = await runner.start_turn(chat, "alice", "moving on", user_message_id=uid, answers=answers)
    return await run.collect()


async def outcomes(runner: Runner, chat: str) -> dict[str, Any]:
    record = await runner.chat(chat, "alice")
    return {c.tool_call_id: c.outcome for c in record.calls}


async def test_answers_settle_their_calls_and_the_turn_supersedes_the_rest(redis: Redis) -> None:
    runner = make_runner(
        redis,
        [[call("pick", {"q": "a"}), call("pick", {"q": "b"})], [text("{{last_tool_results}}")]],
    )
    first, second = parked(await turn(runner, "both", uid="u1"))
    events = await new_message(runner, "both", [answer(first, {"choice": "x"})])
    assert json.loads(said(events)) == [
        {"tool": "pick", "result": {"choice": "x"}},
        {"tool": "pick", "result": {"status": "cancelled", "reason": "superseded_by_user_message"}},
    ]
    assert await outcomes(runner, "both") == {
        first.tool_call_id: {"outcome": "output", "output": {"choice": "x"}},
        second.tool_call_id: SUPERSEDED,
    }


async def test_an_answer_that_does_not_fit_its_call_changes_nothing(redis: Redis) -> None:
    """An answer naming a pending call with other input is refused before the claim
    takes anything: the chat stays parked on its call, which a right answer settles."""
    runner = make_runner(redis, [[call("pick", {"q": "a"})], [text("{{last_tool_results}}")]])
    [pending] = parked(await turn(runner, "wrong", uid="u1"))
    with pytest.raises(AnswerMismatchError):
        await new_message(
            runner, "wrong", [answer(pending, {"choice": "x"}, tool_input={"q": "z"})]
        )
    assert await outcomes(runner, "wrong") == {pending.tool_call_id: None}
    assert (await runner.chat("wrong", "alice")).meta["state"] == "parked"
    events = await new_message(runner, "wrong", [answer(pending, {"choice": "y"})])
    assert finish(events) == "stop"
    assert await outcomes(runner, "wrong") == {
        pending.tool_call_id: {"outcome": "output", "output": {"choice": "y"}}
    }


async def test_answers_to_settled_calls_cost_no_round_trip(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common case: the client resends the outputs of calls settled long ago. Taking
    the turn is one round trip (the claim) with them as without them, and their calls
    keep their outcomes."""
    runner = make_runner(
        redis, [[call("pick", {"q": "a"})], [text("done")], [text("next")], [text("again")]]
    )
    [done] = parked(await turn(runner, "old", uid="u1"))
    output = {"outcome": "output", "output": {"choice": "x"}}
    await runner.settle("old", "alice", done.tool_call_id, output)
    assert finish(await (await runner.resume("old", "alice")).collect()) == "stop"
    trips = RoundTrips(monkeypatch)
    counted = []
    for uid, answers in (("u2", [answer(done, {"choice": "x"})]), ("u3", [])):
        before = trips.count
        run = await runner.start_turn("old", "alice", "more", user_message_id=uid, answers=answers)
        counted.append(trips.count - before)
        assert finish(await run.collect()) == "stop"
    assert counted == [1, 1]
    assert await outcomes(runner, "old") == {done.tool_call_id: output}
