"""An MCP tool that asks a person for input parks its call, and is called again with the
answer once someone settles it (issue 32, "Humans in the loop, durably", first round).

A real Redis, the runner, the scripted model, and the shop (tests/helpers/mcp/shop.py),
a real MCP server built with the official SDK and served over streamable HTTP on
loopback: what it received on each call is asserted from its side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Runner, RunnerConfig, parse_agent_file
from parkway.runner.agent import MAX_INPUT_ROUNDS, TOO_MANY_ROUNDS
from parkway.runner.engine.execution import NO_ANSWER
from parkway.runner.engine.sweeper import Sweeper
from parkway.runner.events import Event, ToolFailed, ToolSucceeded, events_to_json
from parkway.runner.parking import ParkedCall
from parkway.widgets_api.descriptors import describe_call
from tests.helpers.mcp import McpServerThread, shop_entry
from tests.helpers.runner_rig import Clock, finish, parked
from tests.helpers.support import call, eventually, text

ASK = call("shop__ask_person", {"item": "pan"})


@pytest.fixture
def shop() -> Iterator[McpServerThread]:
    with McpServerThread() as server:
        yield server


@contextlib.asynccontextmanager
async def shop_runner(
    redis: Redis, shop: McpServerThread, tool_call: dict[str, Any] = ASK, clock: Clock | None = None
) -> AsyncIterator[Runner]:
    agent = parse_agent_file(
        {
            "template": {"instructions": "shop", "mcps": [shop_entry(shop.url)]},
            "model": {"scripted": {"turns": [[tool_call], [text("{{last_tool_results}}")]]}},
        }
    )
    kwargs: dict[str, Any] = {"clock": clock} if clock is not None else {}
    runner = Runner(redis, agent.model, agent.template, config=RunnerConfig(), **kwargs)
    try:
        yield runner
    finally:
        await runner.aclose()


async def park(runner: Runner, chat: str) -> tuple[ParkedCall, list[Event]]:
    events = await (await runner.start_turn(chat, "alice", "go")).collect()
    assert parked(events), events
    [card] = parked(events)
    assert finish(events) == "tool-calls"
    return card, events


def answer(action: str, content: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"action": action}
    if content is not None:
        response["content"] = content
    return {"outcome": "output", "output": {"responses": {"where": response}}}


async def settle_and_resume(runner: Runner, chat: str, call_id: str, outcome: Any) -> list[Event]:
    await runner.settle(chat, "alice", call_id, outcome)
    return await (await runner.resume(chat, "alice")).collect()


def outputs(events: list[Event]) -> list[Any]:
    return [e.output for e in events if isinstance(e, ToolSucceeded)]


def shown(output: Any) -> str:
    return "".join(block["text"] for block in output["content"])


async def test_a_form_request_parks_the_call_with_a_form_and_keeps_its_state_private(
    redis: Redis, shop: McpServerThread
) -> None:
    """The call parks (chat parked, a client call): its widget shows the server's form
    (message and schema) and names the server; its record keeps the server's
    requestState, which neither the descriptor nor the stored events carry."""
    async with shop_runner(redis, shop) as runner:
        card, events = await park(runner, "form")
        stored = await runner.call("form", "alice", card.tool_call_id)
    assert card.kind == "client" and card.tool_name == "shop__ask_person"
    assert stored.continuation is not None
    kept = dict(stored.continuation["mcp"])
    state = kept.pop("requestState")  # the server's, as it sent it (the SDK seals it)
    assert isinstance(state, str) and state
    assert kept == {
        "server": "shop", "tool": "ask_person", "arguments": {"item": "pan"},
        "kind": "input_required", "keys": ["where"],
    }  # fmt: skip
    descriptor = describe_call("form", stored)
    assert descriptor["kind"] == "mcp-form" and descriptor["callKind"] == "client"
    form = descriptor["render"]["requests"]["where"]
    assert form["message"] == "Which warehouse?" and form["mode"] == "form"
    assert form["schema"]["properties"] == {"w": {"type": "string"}}
    assert descriptor["render"]["server"] == "shop"
    logged = json.dumps(events_to_json(events))
    assert state not in json.dumps(descriptor) and state not in logged
    assert "continuation" not in logged
    assert shop.shop.asked == ["pan"] and shop.shop.answers == []


async def test_the_answer_is_sent_back_with_the_state_and_the_server_s_result_is_the_model_s(
    redis: Redis, shop: McpServerThread
) -> None:
    """Settled with the person's form, the resume calls the tool again with the answer
    (``inputResponses``) and the ``requestState``; the server's result is the tool's."""
    async with shop_runner(redis, shop) as runner:
        card, _ = await park(runner, "answer")
        events = await settle_and_resume(
            runner, "answer", card.tool_call_id, answer("accept", {"w": "north"})
        )
    assert shop.shop.answers == [
        ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
    ]
    [output] = outputs(events)
    assert shown(output) == "pan ships from north"
    assert finish(events) == "stop"


async def test_an_answer_the_form_does_not_accept_is_refused(
    redis: Redis, shop: McpServerThread
) -> None:
    """Content is checked against the server's schema on accept: the settle is refused
    and the call stays pending."""
    async with shop_runner(redis, shop) as runner:
        card, _ = await park(runner, "bad")
        with pytest.raises(Exception, match="w"):
            await runner.settle("bad", "alice", card.tool_call_id, answer("accept", {"w": 3}))
        stored = await runner.call("bad", "alice", card.tool_call_id)
    assert stored.outcome is None and shop.shop.answers == []


@pytest.mark.parametrize(
    ("outcome", "action"),
    [
        (answer("decline"), "decline"),
        ({"outcome": "declined"}, "decline"),
        ({"outcome": "cancelled"}, "cancel"),
    ],
)
async def test_a_decline_or_cancel_goes_to_the_server_which_decides(
    redis: Redis, shop: McpServerThread, outcome: dict[str, Any], action: str
) -> None:
    async with shop_runner(redis, shop) as runner:
        card, _ = await park(runner, "decline")
        events = await settle_and_resume(runner, "decline", card.tool_call_id, outcome)
    assert shop.shop.answers == [("pan", {"where": {"action": action}}, "opaque-pan")]
    [output] = outputs(events)
    assert shown(output) == f"not shipped: the person chose {action}"


async def test_a_timeout_gives_the_model_a_definite_result_without_calling_the_server(
    redis: Redis, shop: McpServerThread
) -> None:
    clock = Clock()
    async with shop_runner(redis, shop, clock=clock) as runner:
        card, _ = await park(runner, "late")
        assert card.deadline is not None
        clock.now = card.deadline + 1
        assert (await Sweeper(runner).sweep_once()).settled == 1
        events = await (await runner.resume("late", "alice")).collect()
    assert [e.error for e in events if isinstance(e, ToolFailed)] == [NO_ANSWER]
    assert shop.shop.answers == []


async def test_a_tool_that_asks_two_rounds_parks_again_and_is_answered_after_a_cold_resume(
    redis: Redis, shop: McpServerThread
) -> None:
    """A retry that asks for more input parks the call again under the same id, with
    the new form and the server's new requestState; each round is answered on a worker
    that did not park it (a fresh runner: nothing in memory), and the last retry's
    result is the model's."""
    twice = call("shop__ask_twice", {"item": "pan"})
    async with shop_runner(redis, shop, twice) as first:
        card, _ = await park(first, "twice")
        before = await first.call("twice", "alice", card.tool_call_id)
    assert before.input_round == 1 and before.continuation is not None
    async with shop_runner(redis, shop, twice) as second:
        events = await settle_and_resume(
            second, "twice", card.tool_call_id, answer("accept", {"w": "north"})
        )
        [again] = parked(events)
        assert finish(events) == "tool-calls"
        stored = await second.call("twice", "alice", again.tool_call_id)
    assert again.tool_call_id == card.tool_call_id and again.kind == "client"
    assert stored.outcome is None and stored.input_round == 2
    assert stored.continuation is not None
    state = stored.continuation["mcp"]["requestState"]  # the server's new one (sealed)
    assert state and state != before.continuation["mcp"]["requestState"]
    assert stored.continuation["mcp"]["keys"] == ["when"]
    form = describe_call("twice", stored)["render"]["requests"]
    assert list(form) == ["when"] and form["when"]["message"] == "Which day from north?"
    async with shop_runner(redis, shop, twice) as third:
        with pytest.raises(Exception, match="when"):  # judged by the second round's form
            await third.settle("twice", "alice", card.tool_call_id, answer("accept", {"w": "x"}))
        done = await settle_and_resume(
            third, "twice", card.tool_call_id,
            {"outcome": "output",
             "output": {"responses": {"when": {"action": "accept", "content": {"d": "monday"}}}}},
        )  # fmt: skip
    [output] = outputs(done)
    assert shown(output) == "pan ships from north on monday"
    assert finish(done) == "stop"
    assert shop.shop.rounds == [
        (1, {}, None),
        (2, {"where": {"action": "accept", "content": {"w": "north"}}}, "round1-pan"),
        (3, {"when": {"action": "accept", "content": {"d": "monday"}}}, "round2-pan-north"),
    ]


async def test_a_tool_that_keeps_asking_is_stopped_after_the_last_round_with_a_definite_error(
    redis: Redis, shop: McpServerThread
) -> None:
    """Rounds are bounded: a tool that asks again after MAX_INPUT_ROUNDS answered rounds
    ends with an error the model reads, instead of parking for ever."""
    again = {"outcome": "output",
             "output": {"responses": {"again": {"action": "accept", "content": {}}}}}  # fmt: skip
    async with shop_runner(redis, shop, call("shop__ask_again")) as runner:
        card, _ = await park(runner, "again")
        for round_ in range(1, MAX_INPUT_ROUNDS):
            events = await settle_and_resume(runner, "again", card.tool_call_id, again)
            [more] = parked(events)
            assert more.tool_call_id == card.tool_call_id and more.input_round == round_ + 1
        events = await settle_and_resume(runner, "again", card.tool_call_id, again)
    assert [e.error for e in events if isinstance(e, ToolFailed)] == [TOO_MANY_ROUNDS]
    assert not parked(events) and finish(events) == "stop"
    assert len(shop.shop.answers) == MAX_INPUT_ROUNDS + 1


async def test_a_url_elicitation_parks_a_link_card_and_retries_once_done(
    redis: Redis, shop: McpServerThread
) -> None:
    """An older server's -32042: a card naming the link's host; once the person says
    they finished, the original call is made again (no inputResponses)."""
    async with shop_runner(redis, shop, call("shop__ask_url")) as runner:
        card, _ = await park(runner, "url")
        stored = await runner.call("url", "alice", card.tool_call_id)
        descriptor = describe_call("url", stored)
        events = await settle_and_resume(
            runner, "url", card.tool_call_id,
            {"outcome": "output", "output": {"responses": {"e-1": {"action": "accept"}}}},
        )  # fmt: skip
    assert descriptor["kind"] == "mcp-url"
    link = descriptor["render"]["requests"]["e-1"]
    assert link == {
        "mode": "url", "message": "Authorise the shop",
        "url": "https://shop.example/authorise", "host": "shop.example",
    }  # fmt: skip
    assert outputs(events) == [{"result": "authorised"}]
    assert shop.shop.url_calls == 2


async def test_two_answers_racing_have_one_winner_and_the_server_is_called_once(
    redis: Redis, shop: McpServerThread
) -> None:
    async with shop_runner(redis, shop) as runner:
        card, _ = await park(runner, "race")
        results = await asyncio.gather(
            runner.settle("race", "alice", card.tool_call_id, answer("accept", {"w": "north"})),
            runner.settle("race", "alice", card.tool_call_id, answer("accept", {"w": "south"})),
            return_exceptions=True,
        )
        resumes = await asyncio.gather(
            *(runner.resume("race", "alice") for _ in range(2)), return_exceptions=True
        )
        for run in resumes:
            if not isinstance(run, BaseException):
                await run.collect()
    assert sorted(type(r).__name__ for r in results) == ["SettleConflictError", "SettleResult"]
    assert sum(isinstance(r, BaseException) for r in resumes) == 1
    [(_, answers, _)] = shop.shop.answers
    assert answers["where"]["content"]["w"] in ("north", "south")


async def test_an_approved_tool_that_then_asks_parks_again_and_is_answered(
    redis: Redis, shop: McpServerThread
) -> None:
    """A tool the operator gates behind an approval: approved, it runs and asks for the
    form, so the call parks again (a client call now); answered, it is called again."""
    agent = parse_agent_file(
        {
            "template": {
                "instructions": "shop",
                "mcps": [shop_entry(shop.url, tools={"ask_person": {"policy": "ask"}})],
            },
            "model": {"scripted": {"turns": [[ASK], [text("{{last_tool_results}}")]]}},
        }
    )
    runner = Runner(redis, agent.model, agent.template)
    try:
        approval, _ = await park(runner, "gated")
        assert approval.kind == "approval"
        events = await settle_and_resume(
            runner, "gated", approval.tool_call_id, {"outcome": "approved"}
        )
        [form] = parked(events)
        assert form.kind == "client" and form.tool_call_id == approval.tool_call_id
        stored = await runner.call("gated", "alice", form.tool_call_id)
        assert stored.outcome is None and stored.continuation is not None
        assert finish(events) == "tool-calls"
        done = await settle_and_resume(
            runner, "gated", form.tool_call_id, answer("accept", {"w": "east"})
        )
    finally:
        await runner.aclose()
    [output] = outputs(done)
    assert shown(output) == "pan ships from east"
    assert [a[1] for a in shop.shop.answers] == [
        {"where": {"action": "accept", "content": {"w": "east"}}}
    ]


async def test_a_declined_link_is_the_model_s_to_read_and_the_server_is_not_called_again(
    redis: Redis, shop: McpServerThread
) -> None:
    async with shop_runner(redis, shop, call("shop__ask_url")) as runner:
        card, _ = await park(runner, "nolink")
        events = await settle_and_resume(
            runner, "nolink", card.tool_call_id, {"outcome": "declined"}
        )
    [error] = [e.error for e in events if isinstance(e, ToolFailed)]
    assert "did not complete the MCP server's link (decline)" in error
    assert shop.shop.url_calls == 1


async def test_a_link_the_server_says_was_completed_settles_the_call_and_the_run_resumes(
    redis: Redis,
) -> None:
    """A 2025-11-25 server's ``notifications/elicitation/complete`` for the link a parked
    call waits for settles it as accepted (the server's decision, through the one-winner
    settle) and resumes the run, which calls the tool again: nobody clicks "done"."""
    with McpServerThread(legacy=True) as old:
        async with shop_runner(redis, old, call("shop__ask_url")) as runner:
            card, _ = await park(runner, "linked")
            await old.complete_link("e-1")

            async def idle() -> Any:
                record = await runner.chat("linked", "alice")
                return record if record.meta.get("state") == "idle" else None

            record = await eventually(idle, what="the run resumed by the completion")
            stored = await runner.call("linked", "alice", card.tool_call_id)
            late = await runner.settle(  # the person's "done" afterwards: the same answer
                "linked", "alice", card.tool_call_id,
                {"outcome": "output", "output": {"responses": {"e-1": {"action": "accept"}}}},
            )  # fmt: skip
    assert stored.outcome is not None
    assert stored.outcome["output"] == {"responses": {"e-1": {"action": "accept"}}}
    assert not late.fresh
    assert old.shop.url_calls == 2
    assert "authorised" in json.dumps(list(record.entries))  # the retry's result


async def test_a_completion_after_the_person_declined_changes_nothing(redis: Redis) -> None:
    """The person's decline won: the server's later completion loses the settle and the
    tool is not called again."""
    with McpServerThread(legacy=True) as old:
        async with shop_runner(redis, old, call("shop__ask_url")) as runner:
            card, _ = await park(runner, "nope")
            events = await settle_and_resume(
                runner, "nope", card.tool_call_id, {"outcome": "declined"}
            )
            await old.complete_link("e-1")
            stored = await runner.call("nope", "alice", card.tool_call_id)
    assert stored.outcome is not None and stored.outcome["outcome"] == "declined"
    assert [e for e in events if isinstance(e, ToolFailed)]
    assert old.shop.url_calls == 1
