"""An older MCP server's form question in the middle of a call: a bounded live wait
(issue 32, "Older servers (2025-11-25)").

A real Redis, the runner, the scripted model, and the shop (tests/helpers/mcp/shop.py)
serving the ``initialize`` era (2025-11-25) over streamable HTTP on loopback: its
``ask_live`` tool sends ``elicitation/create`` during the call and notes what it got.
The question reaches the run's stream as the ``parkway-live-input`` data part; the
person's answer goes through :meth:`Runner.answer_live`, as the HTTP route's does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Runner, RunnerConfig, parse_agent_file
from parkway.runner.agent import LiveQuestion, ToolContext
from parkway.runner.engine.live import LIVE_PART
from parkway.runner.errors import (
    CallNotFoundError,
    InvalidOutcomeError,
    LiveQuestionClosedError,
)
from parkway.runner.events import DataPublished, Event, ToolSucceeded
from parkway.runner.store import LIVE_UNSEEN_MS, LiveStore, chat_keys
from tests.helpers.mcp import McpServerThread, shop_entry
from tests.helpers.runner_rig import finish
from tests.helpers.support import call, text

ASK = call("shop__ask_live", {"item": "pan"})
NORTH = {"action": "accept", "content": {"warehouse": "north"}}


@pytest.fixture
def old_shop() -> Iterator[McpServerThread]:
    with McpServerThread(legacy=True) as server:
        yield server


@contextlib.asynccontextmanager
async def live_runner(
    redis: Redis, shop: McpServerThread, calls: list[dict[str, Any]] | None = None, **entry: Any
) -> AsyncIterator[Runner]:
    agent = parse_agent_file(
        {
            "template": {"instructions": "shop", "mcps": [shop_entry(shop.url, **entry)]},
            "model": {"scripted": {"turns": [calls or [ASK], [text("{{last_tool_results}}")]]}},
        }
    )
    runner = Runner(redis, agent.model, agent.template, config=RunnerConfig())
    try:
        yield runner
    finally:
        await runner.aclose()


def questions(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events if isinstance(e, DataPublished) and e.name == LIVE_PART]


def said(events: list[Event]) -> list[Any]:
    """What each call's tool said (a tool returning a string: its structured result)."""
    return [e.output.get("result", e.output) for e in events if isinstance(e, ToolSucceeded)]


async def until_asked(
    runner: Runner, chat: str, answer: Any = None
) -> tuple[list[Event], dict[str, Any]]:
    """Run a turn; once the live question is on its stream, ``answer`` it (a callable
    taking the question, or nothing); all of the run's events and the question."""
    run = await runner.start_turn(chat, "alice", "go")
    events: list[Event] = []
    asked: dict[str, Any] = {}
    async for event in run.events():
        events.append(event)
        found = questions([event])
        if found and found[0]["state"] == "open":
            asked = found[0]
            if answer is not None:
                await answer(asked)
    return events, asked


async def test_the_question_reaches_the_person_and_their_answer_the_server(
    redis: Redis, old_shop: McpServerThread
) -> None:
    """The server's form is on the run's stream (message, schema, who asks, deadline);
    the person's answer goes to the server, whose result is the call's; the question's
    part is put again, answered."""
    async with live_runner(redis, old_shop) as runner:

        async def reply(q: dict[str, Any]) -> None:
            await runner.answer_live("lv", "alice", q["toolCallId"], q["liveId"], NORTH)

        events, asked = await until_asked(runner, "lv", reply)
    assert asked["message"] == "Where should the pan ship from?"
    assert asked["requestedSchema"]["properties"]["warehouse"]["type"] == "string"
    assert asked["requestedSchema"]["required"] == ["warehouse"]
    assert asked["asker"] == {"server": "shop", "tool": "ask_live"}
    assert asked["deadline"] > 0 and asked["liveId"].startswith("lq_")
    assert [q["state"] for q in questions(events)] == ["open", "answered"]
    assert questions(events)[-1]["action"] == "accept"
    assert old_shop.shop.live == [("accept", {"warehouse": "north"})]
    assert said(events) == ["pan ships from north"]
    assert finish(events) == "stop"


async def test_a_decline_reaches_the_server_which_decides(
    redis: Redis, old_shop: McpServerThread
) -> None:
    async with live_runner(redis, old_shop) as runner:

        async def reply(q: dict[str, Any]) -> None:
            await runner.answer_live(
                "dec", "alice", q["toolCallId"], q["liveId"], {"action": "decline"}
            )

        events, _ = await until_asked(runner, "dec", reply)
    assert old_shop.shop.live == [("decline", None)]
    assert said(events) == ["no warehouse (decline)"]


async def test_when_the_wait_ends_the_server_hears_cancel_and_a_late_answer_is_refused(
    redis: Redis, old_shop: McpServerThread
) -> None:
    """Nobody answers within live_input_s: the server is told ``cancel`` and the call
    ends with its definite result; an answer after that is refused (409) and changes
    nothing."""
    async with live_runner(redis, old_shop, live_input_s=1) as runner:
        events, asked = await until_asked(runner, "late")
        with pytest.raises(LiveQuestionClosedError):
            await runner.answer_live("late", "alice", asked["toolCallId"], asked["liveId"], NORTH)
    assert [q["state"] for q in questions(events)] == ["open", "expired"]
    assert old_shop.shop.live == [("cancel", None)]
    assert said(events) == ["no warehouse (cancel)"]


async def test_racing_answers_have_one_winner(redis: Redis, old_shop: McpServerThread) -> None:
    """Twenty different answers at once: one is recorded and reaches the server; the
    others are refused as answered already."""
    outcomes: list[Any] = []
    async with live_runner(redis, old_shop) as runner:

        async def race(q: dict[str, Any]) -> None:
            async def one(i: int) -> Any:
                body = {"action": "accept", "content": {"warehouse": f"w{i}"}}
                try:
                    return await runner.answer_live(
                        "race", "alice", q["toolCallId"], q["liveId"], body
                    )
                except LiveQuestionClosedError:
                    return None

            outcomes.extend(await asyncio.gather(*(one(i) for i in range(20))))

        events, _ = await until_asked(runner, "race", race)
    winners = [o for o in outcomes if o is not None]
    assert len(winners) == 1
    assert old_shop.shop.live == [("accept", winners[0]["content"])]
    assert said(events) == [f"pan ships from {winners[0]['content']['warehouse']}"]


async def test_bad_answers_and_other_users_are_refused_and_the_question_stays_open(
    redis: Redis, old_shop: McpServerThread
) -> None:
    """Another user, another call, an unknown id: not found. Content the form does not
    accept, an unknown action, content on a decline: invalid. None of them closes the
    question; the owner's valid answer still wins."""
    refused: list[type[Exception]] = []
    async with live_runner(redis, old_shop) as runner:

        async def attempts(q: dict[str, Any]) -> None:
            call_id, live_id = q["toolCallId"], q["liveId"]
            tries: list[tuple[str, str, str, Any]] = [
                ("bob", call_id, live_id, NORTH),
                ("alice", "other-call", live_id, NORTH),
                ("alice", call_id, "lq_AAAAAAAAAAAAAAAA", NORTH),
                ("alice", call_id, "../../x", NORTH),
                ("alice", call_id, live_id, {"action": "accept", "content": {"warehouse": 7}}),
                ("alice", call_id, live_id, {"action": "accept", "content": {}}),
                ("alice", call_id, live_id, {"action": "accept"}),
                ("alice", call_id, live_id, {"action": "maybe"}),
                ("alice", call_id, live_id, {"action": "decline", "content": {"x": 1}}),
                ("alice", call_id, live_id, ["accept"]),
            ]
            for who, cid, lid, body in tries:
                with pytest.raises((CallNotFoundError, InvalidOutcomeError)) as caught:
                    await runner.answer_live("bad", who, cid, lid, body)
                refused.append(caught.type)
            await runner.answer_live("bad", "alice", call_id, live_id, NORTH)

        events, _ = await until_asked(runner, "bad", attempts)
    assert refused[:4] == [CallNotFoundError] * 4
    assert refused[4:] == [InvalidOutcomeError] * 6
    assert old_shop.shop.live == [("accept", {"warehouse": "north"})]
    assert said(events) == ["pan ships from north"]


async def test_no_live_wait_when_the_entry_says_0_or_two_calls_share_the_session(
    redis: Redis, old_shop: McpServerThread
) -> None:
    """live_input_s 0: the server hears cancel at once. Two calls of one step in flight
    on the server's session: a question cannot be told apart, so neither person is
    asked and each call's server hears cancel."""
    async with live_runner(redis, old_shop, live_input_s=0) as runner:
        off = await (await runner.start_turn("off", "alice", "go")).collect()
    two = [ASK, call("shop__ask_live", {"item": "pot"})]
    async with live_runner(redis, old_shop, two) as runner:
        both = await (await runner.start_turn("two", "alice", "go")).collect()
    assert not questions(off) and not questions(both)
    assert said(off) == ["no warehouse (cancel)"]
    assert sorted(said(both)) == ["no warehouse (cancel)", "no warehouse (cancel)"]
    assert old_shop.shop.live == [("cancel", None)] * 3


async def test_the_call_s_timeout_stops_while_the_person_is_asked(
    redis: Redis, old_shop: McpServerThread
) -> None:
    """A call's timeout_s measures the server: a person who takes longer than it to
    answer does not time the call out."""
    async with live_runner(redis, old_shop, timeout_s=0.5) as runner:

        async def slow(q: dict[str, Any]) -> None:
            await asyncio.sleep(1.5)  # three times the call's timeout, spent by the person
            await runner.answer_live("slow", "alice", q["toolCallId"], q["liveId"], NORTH)

        events, _ = await until_asked(runner, "slow", slow)
    assert said(events) == ["pan ships from north"]


async def test_the_question_is_kept_under_the_chat_with_a_ttl(
    redis: Redis, old_shop: McpServerThread
) -> None:
    """Its record lives under the chat's hash tag, expires on its own, and never holds
    the answer's content beyond the question's own hash."""
    found: dict[str, Any] = {}
    async with live_runner(redis, old_shop) as runner:

        async def look(q: dict[str, Any]) -> None:
            key = chat_keys("kept").live(q["liveId"])
            found["ttl"] = await redis.ttl(key)
            found["state"] = await redis.hget(key, "state")
            await runner.answer_live("kept", "alice", q["toolCallId"], q["liveId"], NORTH)

        await until_asked(runner, "kept", look)
    assert found["state"] == b"open"
    assert 60 < found["ttl"] <= 60 + 120


async def test_an_answer_after_the_asking_worker_stopped_looking_is_refused(redis: Redis) -> None:
    """The asking worker marks the question as watched each time it polls; once it has
    not for LIVE_UNSEEN_MS (it died, or lost Redis), an answer is refused as expired
    instead of being recorded for nobody, and the deadline refuses one too."""
    store = LiveStore(redis)
    keys = chat_keys("gone")
    schema = {"type": "object"}
    for live_id, opened in (("lq_died", 0), ("lq_alive", 1)):
        await store.open(keys, live_id, principal="alice", call="c1", schema=schema,
                         now_ms=1_000_000 * opened, deadline_ms=10_000_000)  # fmt: skip
    later = 1_000_000 + LIVE_UNSEEN_MS + 1
    died = await store.answer(keys, "lq_died", principal="alice", call="c1",
                              answer={"action": "decline"}, now_ms=later)  # fmt: skip
    await store.poll(keys, "lq_alive", later - 1)  # its worker is still there
    alive = await store.answer(keys, "lq_alive", principal="alice", call="c1",
                               answer={"action": "decline"}, now_ms=later)  # fmt: skip
    await store.open(keys, "lq_past", principal="alice", call="c1", schema=schema,
                     now_ms=later, deadline_ms=later + 10)  # fmt: skip
    past = await store.answer(keys, "lq_past", principal="alice", call="c1",
                              answer={"action": "decline"}, now_ms=later + 11)  # fmt: skip
    assert (died, alive, past) == ("expired", "ok", "expired")
    assert await store.close(keys, "lq_alive") == {"action": "decline"}
    assert await store.close(keys, "lq_died") is None


async def test_a_python_tool_asks_live_through_its_context(redis: Redis) -> None:
    """``ctx.ask_live`` is the same mechanism for any server tool: the question on the
    stream, the owner's answer back to the tool (here, returned as its output); a
    context with no ``live_input`` (nobody watches the run) gets cancel at once."""
    tool = {"type": "function", "name": "ask_city", "ref": "tests.helpers.tools:ask_city",
            "input_schema": {"type": "object"}}  # fmt: skip
    agent = parse_agent_file(
        {
            "template": {"instructions": "cities", "tools": [tool]},
            "model": {"scripted": {"turns": [
                [call("ask_city", {"wait_s": 30})], [text("{{last_tool_results}}")]]}},
        }
    )  # fmt: skip
    runner = Runner(redis, agent.model, agent.template, config=RunnerConfig())
    try:

        async def reply(q: dict[str, Any]) -> None:
            body = {"action": "accept", "content": {"city": "Oslo"}}
            await runner.answer_live("py", "alice", q["toolCallId"], q["liveId"], body)

        events, asked = await until_asked(runner, "py", reply)
    finally:
        await runner.aclose()
    assert asked["asker"] == {"tool": "ask_city"} and asked["message"] == "Which city?"
    assert [e.output for e in events if isinstance(e, ToolSucceeded)] == [
        {"action": "accept", "content": {"city": "Oslo"}}
    ]
    nobody = ToolContext("py", "alice", "c1", "ask_city")
    question = LiveQuestion("Which city?", {"type": "object"}, {}, 30)
    assert await nobody.ask_live(question) == {"action": "cancel"}
