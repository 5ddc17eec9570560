"""Deadlines and the sweeper against a real Redis: expired calls are settled ``timeout``
exactly once, the model sees a definite result, and a sweep costs what expired."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import (
    ParkedCall,
    Runner,
    RunnerConfig,
    SettleConflictError,
    SettleResult,
    Sweeper,
    SweepReport,
    normalize_outcome,
    parse_agent_file,
)
from parkway.runner.canonical import canonical_json
from parkway.runner.engine.sweeper import TIMEOUT_OUTCOME
from parkway.runner.events import ToolDenied, ToolSucceeded
from parkway.runner.store.keys import DEADLINES, deadline_member
from parkway.transport.settings import Settings, SettingsError
from tests.helpers import tools as test_tools
from tests.helpers.support import (
    CONNECT_EMBED,
    PICK_TOOL,
    PUBLISH_TOOL,
    Api,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)
from tests.helpers.sweeper_rig import (
    QUICK_TOOL,
    START,
    TIMEOUT,
    Clock,
    deadline_ms,
    make_runner,
    park,
    resume,
    said,
)

# -- what the model sees ----------------------------------------------------------------


async def test_an_expired_client_call_is_settled_timeout_and_the_model_sees_it(
    redis: Redis,
) -> None:
    """The core promise of deadlines: nobody answered, so the server records a definite
    ``timeout`` and the resumed run gives the model ``{"status": "timeout"}``."""
    clock = Clock()
    runner = make_runner(
        redis, [[call("pick", {"q": "a"})], [text("{{last_tool_results}}")]], clock
    )
    [pending] = await park(runner, "c1")
    clock.at_ms(deadline_ms(pending))
    report = await Sweeper(runner).sweep_once()
    assert report == SweepReport(expired=1, settled=1)
    stored = await runner.call("c1", "alice", pending.tool_call_id)
    assert stored.outcome == TIMEOUT and stored.status == "settled"
    events = await resume(runner, "c1")
    assert [e.output for e in events if isinstance(e, ToolSucceeded)] == [{"status": "timeout"}]
    assert json.loads(said(events)) == [{"tool": "pick", "result": {"status": "timeout"}}]


async def test_an_expired_approval_is_a_refusal_and_the_tool_never_runs(redis: Redis) -> None:
    """An approval nobody granted in time must not run: the model is told it was not
    approved, because of the timeout."""
    test_tools.EXECUTIONS.clear()
    clock = Clock()
    runner = make_runner(
        redis, [[call("publish", {"title": "T"})], [text("{{last_tool_results}}")]], clock
    )
    [pending] = await park(runner, "a1")
    assert pending.kind == "approval"
    clock.at_ms(deadline_ms(pending))
    assert (await Sweeper(runner).sweep_once()).settled == 1
    events = await resume(runner, "a1")
    assert [e.reason for e in events if isinstance(e, ToolDenied)] == ["timeout"]
    assert json.loads(said(events)) == [
        {"tool": "publish", "result": {"approved": False, "reason": "timeout"}}
    ]
    assert not [e for e in test_tools.EXECUTIONS if e["chat"] == "a1"]


async def test_an_expired_connection_tells_the_model_it_may_retry(redis: Redis) -> None:
    """A connect flow the user abandoned ends as "not connected, timeout, retryable", so
    the model can offer to try again."""
    clock = Clock()
    runner = make_runner(
        redis,
        [[call("request_connection", {"provider": "github"})], [text("{{last_tool_results}}")]],
        clock,
    )
    [pending] = await park(runner, "o1")
    clock.at_ms(deadline_ms(pending))
    assert (await Sweeper(runner).sweep_once()).settled == 1
    events = await resume(runner, "o1")
    assert json.loads(said(events)) == [
        {
            "tool": "request_connection",
            "result": {"connected": False, "reason": "timeout", "retryable": True},
        }
    ]


def test_the_sweeper_stores_what_the_server_would_store_for_a_timeout() -> None:
    """Racing sweepers and the outcome rules must agree byte for byte, or a second
    sweeper would see a conflict instead of the same outcome."""
    for kind in ("client", "approval"):
        parked_call = ParkedCall("c", "t", kind, {}, "t#{}", 1, "m", 0.0)
        stored = normalize_outcome(parked_call, TIMEOUT, by="server", max_bytes=1000)
        assert canonical_json(stored) == TIMEOUT_OUTCOME


# -- deadlines ----------------------------------------------------------------------------

QUICK_APPROVAL = {**PUBLISH_TOOL, "name": "quick_publish", "deadline_s": 45}


@pytest.mark.parametrize(
    ("tool_call", "seconds"),
    [
        pytest.param(call("publish", {"title": "T"}), 15 * 60, id="approval-default-15min"),
        pytest.param(
            call("request_connection", {"provider": "github"}), 10 * 60, id="connection-10min"
        ),
        pytest.param(call("pick", {"q": "a"}), 120, id="client-default-from-config"),
        pytest.param(call("quick", {}), 30, id="client-tool-deadline_s"),
        pytest.param(call("quick_publish", {"title": "T"}), 45, id="approval-tool-deadline_s"),
    ],
)
async def test_a_call_times_out_exactly_at_its_deadline_and_not_a_millisecond_before(
    redis: Redis, tool_call: dict[str, Any], seconds: int
) -> None:
    """Deadlines are per tool with the documented defaults; one millisecond before the
    deadline the call is left alone, at the deadline it is timed out."""
    clock = Clock()
    tools = [PICK_TOOL, PUBLISH_TOOL, CONNECT_EMBED, QUICK_TOOL, QUICK_APPROVAL]
    runner = make_runner(
        redis, [[tool_call]], clock, tools=tools, config=RunnerConfig(client_deadline_s=120)
    )
    [pending] = await park(runner, "dl")
    assert pending.deadline == START + seconds
    member = deadline_member("dl", pending.tool_call_id)
    assert await redis.zscore(DEADLINES, member) == deadline_ms(pending)
    sweeper = Sweeper(runner)
    clock.at_ms(deadline_ms(pending) - 1)
    assert await sweeper.sweep_once() == SweepReport()
    assert (await runner.call("dl", "alice", pending.tool_call_id)).outcome is None
    clock.at_ms(deadline_ms(pending))
    assert await sweeper.sweep_once() == SweepReport(expired=1, settled=1)
    assert (await runner.call("dl", "alice", pending.tool_call_id)).outcome == TIMEOUT
    assert await redis.zscore(DEADLINES, member) is None


async def test_only_expired_calls_are_touched(redis: Redis) -> None:
    """A sweep settles what has expired and nothing else, also within one step."""
    clock = Clock()
    runner = make_runner(
        redis,
        [[call("quick", {}), call("pick", {"q": "a"})]],
        clock,
        tools=[QUICK_TOOL, PICK_TOOL],
    )
    quick, pick = await park(runner, "mix")
    clock.at_ms(deadline_ms(quick))
    assert (await Sweeper(runner).sweep_once()).settled == 1
    record = await runner.chat("mix", "alice")
    assert {c.tool_call_id: c.outcome for c in record.calls} == {
        quick.tool_call_id: TIMEOUT,
        pick.tool_call_id: None,
    }
    assert await redis.zscore(DEADLINES, deadline_member("mix", pick.tool_call_id)) is not None


# -- races ---------------------------------------------------------------------------------


async def test_a_late_answer_after_the_timeout_conflicts_with_the_timeout(redis: Redis) -> None:
    """Timeout first, then the human answers: the answer is refused and learns the
    recorded outcome, so every client converges on one truth."""
    clock = Clock()
    runner = make_runner(redis, [[call("pick", {"q": "a"})]], clock)
    [pending] = await park(runner, "late")
    clock.at_ms(deadline_ms(pending))
    await Sweeper(runner).sweep_once()
    with pytest.raises(SettleConflictError) as conflict:
        await runner.settle(
            "late", "alice", pending.tool_call_id, {"outcome": "output", "output": {"choice": "x"}}
        )
    assert conflict.value.existing == TIMEOUT


async def test_an_answer_before_the_sweep_stands_and_the_sweeper_leaves_it(redis: Redis) -> None:
    """Answered just before the sweep: the answer stands. Even a deadline member left
    behind for an answered call is only dropped, never turned into a second outcome."""
    clock = Clock()
    runner = make_runner(redis, [[call("pick", {"q": "a"})]], clock)
    [pending] = await park(runner, "early")
    answer = {"outcome": "output", "output": {"choice": "x"}}
    await runner.settle("early", "alice", pending.tool_call_id, answer)
    member = deadline_member("early", pending.tool_call_id)
    assert await redis.zscore(DEADLINES, member) is None  # the settle dropped it
    await redis.zadd(DEADLINES, {member: deadline_ms(pending)})  # as if a drop was lost
    clock.at_ms(deadline_ms(pending))
    report = await Sweeper(runner).sweep_once()
    assert report == SweepReport(expired=1, already_settled=1)
    assert (await runner.call("early", "alice", pending.tool_call_id)).outcome == answer
    assert await redis.zcard(DEADLINES) == 0


async def test_racing_settles_and_sweeps_record_exactly_one_outcome_and_losers_agree(
    redis: Redis,
) -> None:
    """Settle vs timeout vs timeout, decided inside Redis: for each call exactly one
    writer wins, every losing client is told the winner's outcome (409 material), and
    the losing sweepers record nothing."""
    clock = Clock()
    runner = make_runner(redis, [[call("pick", {"q": "a"})]], clock)
    calls = []
    for i in range(20):
        [pending] = await park(runner, f"race{i}")
        calls.append((f"race{i}", pending))
        clock.now += 1000  # deadlines 1000 s apart: each round races over one call
    sweepers = [Sweeper(runner) for _ in range(4)]
    winners = {"client": 0, "sweeper": 0}
    for chat_id, pending in calls:
        clock.at_ms(deadline_ms(pending))
        answers = [{"outcome": "output", "output": {"choice": str(j)}} for j in range(8)]
        results = await asyncio.gather(
            *(runner.settle(chat_id, "alice", pending.tool_call_id, a) for a in answers),
            *(s.sweep_once() for s in sweepers),
            return_exceptions=True,
        )
        settles, sweeps = results[: len(answers)], results[len(answers) :]
        assert all(isinstance(r, SettleResult | SettleConflictError) for r in settles), settles
        assert all(isinstance(r, SweepReport) for r in sweeps), sweeps
        fresh = [r for r in settles if isinstance(r, SettleResult) and r.fresh]
        timed_out = sum(r.settled for r in sweeps if isinstance(r, SweepReport))
        assert len(fresh) + timed_out == 1
        stored = (await runner.call(chat_id, "alice", pending.tool_call_id)).outcome
        assert stored == (TIMEOUT if timed_out else fresh[0].call.outcome)
        losers = [r for r in settles if isinstance(r, SettleConflictError)]
        assert len(losers) == len(answers) - len(fresh)
        assert all(loser.existing == stored for loser in losers)
        winners["sweeper" if timed_out else "client"] += 1
    assert await redis.zcard(DEADLINES) == 0
    assert sum(winners.values()) == len(calls)


async def test_members_naming_no_call_are_dropped(redis: Redis) -> None:
    """A member whose chat expired (or that names no valid call at all) must not stay at
    the head of the index, where it would be read again by every sweep."""
    clock = Clock()
    runner = make_runner(redis, [[text("unused")]], clock)
    await redis.zadd(DEADLINES, {"gone-chat call_1": 1, "garbage": 2, "bad!chat call_2": 3})
    report = await Sweeper(runner).sweep_once()
    assert report == SweepReport(expired=3, missing=3)
    assert await redis.zcard(DEADLINES) == 0


# -- every client sees it ----------------------------------------------------------------


async def test_a_timed_out_call_is_visible_as_such_to_every_client_and_worker(
    redis: Redis, redis_url: str
) -> None:
    """Two workers, one Redis: after the timeout both show the call settled
    ``timeout``, a late settle gets 409 with that outcome, a late AI SDK answer
    continues with the timeout rather than the browser's claim."""
    turns = [[text("Pick."), call("pick", {"q": "colour"})], [text("seen {{last_tool_results}}")]]
    with (
        server_thread(redis_url, agent_doc(turns)) as one,
        server_thread(redis_url, agent_doc(turns)) as two,
    ):
        first = await Api(one.base_url).login()
        second = first.same_user(two.base_url)
        try:
            chunks = await first.say("seen", "hi")
            part = next(c for c in chunks if c["type"] == "tool-input-available")
            call_id = part["toolCallId"]
            # A sweeper of a third worker, whose clock is past every deadline.
            agent = parse_agent_file(agent_doc(turns))
            far = Runner(redis, agent.model, agent.template, clock=lambda: 4_000_000_000.0)
            assert (await Sweeper(far).sweep_once()).settled == 1
            for api in (first, second):
                [view] = (await api.state("seen"))["calls"]
                assert view["toolCallId"] == call_id
                assert view["status"] == "settled" and view["outcome"] == TIMEOUT
                single = await api.http.get(f"/api/chats/seen/calls/{call_id}")
                assert single.json()["outcome"] == TIMEOUT
            late = await second.settle(
                "seen", call_id, {"outcome": "output", "output": {"choice": "x"}}
            )
            assert late.status_code == 409
            assert late.json()["error"]["outcome"] == TIMEOUT
            answer = [
                user_message("hi"),
                {
                    "id": chunks[0]["messageId"],
                    "role": "assistant",
                    "parts": [
                        {"type": "step-start"},
                        {
                            "type": "tool-pick",
                            "toolCallId": call_id,
                            "state": "output-available",
                            "input": part["input"],
                            "output": {"choice": "browser"},
                        },
                    ],
                },
            ]
            response = await second.chat("seen", answer)
            assert response.status_code == 200, response.text
            said_text = "".join(c.get("delta", "") for c in sse_chunks(response.text))
            assert said_text == 'seen [{"result":{"status":"timeout"},"tool":"pick"}]'
        finally:
            await first.aclose()
            await second.aclose()


async def test_the_app_runs_a_sweeper_that_times_out_expired_calls(
    redis: Redis, redis_url: str
) -> None:
    """Every worker sweeps on its own: a call whose deadline has already passed is
    timed out by the server with no request, and its listener hook is called."""
    turns = [[call("pick", {"q": "a"})]]
    with server_thread(redis_url, agent_doc(turns), sweep_interval_s=0.02) as server:
        sweeper = server.app.state.sweeper
        assert isinstance(sweeper, Sweeper)
        heard: list[tuple[str, str, int]] = []

        async def listen(chat_id: str, tool_call_id: str, pending_left: int) -> None:
            heard.append((chat_id, tool_call_id, pending_left))

        sweeper.on_timeout = listen
        api = await Api(server.base_url).login()
        try:
            # Parked by a worker whose clock is an hour behind: its deadline has passed.
            behind = Clock(time.time() - 3600)
            [pending] = await park(make_runner(redis, turns, behind), "app", api.principal)
            limit = time.monotonic() + 10
            while not heard:
                assert time.monotonic() < limit, "the app's sweeper never timed the call out"
                await asyncio.sleep(0.01)
            assert heard == [("app", pending.tool_call_id, 0)]
            [view] = (await api.state("app"))["calls"]
            assert view["outcome"] == TIMEOUT
        finally:
            await api.aclose()


def test_the_sweep_interval_is_a_positive_setting() -> None:
    """Operators tune the sweep period with PARKWAY_SWEEP_INTERVAL_S; nonsense is refused
    at startup instead of making a worker spin or never sweep."""
    assert Settings().sweep_interval_s == 0.25
    assert (
        Settings.from_sources(environ={"PARKWAY_SWEEP_INTERVAL_S": "0.5"}).sweep_interval_s == 0.5
    )
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(SettingsError, match="sweep_interval_s"):
            Settings.from_sources(environ={"PARKWAY_SWEEP_INTERVAL_S": bad})
