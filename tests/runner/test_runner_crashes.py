"""The runner across leases and crashes: a turn refused while a run holds the lease, a
worker that dies after its claim, a dead turn that stored nothing, a chat id reused
after expiry, and writes that happen before anyone is told (a parked call, a server
tool's result)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import (
    ChatBusyError,
    NothingToResumeError,
    chat_keys,
)
from parkway.runner.events import (
    CallParked,
)
from tests.helpers import tools as test_tools
from tests.helpers.runner_rig import Clock, clocked_runner, make_runner, parked, said, turn
from tests.helpers.support import PICK_TOOL as PICK
from tests.helpers.support import call, text


async def test_a_resume_whose_worker_died_is_taken_over_once_the_lease_lapses(redis: Redis) -> None:
    """Resume vs crash: a worker that claimed the resume and died holds the chat only
    until its lease lapses; then another worker resumes with every stored outcome."""
    clock = Clock()
    runner = clocked_runner(
        redis, [[call("pick", {"q": "a"})], [text("{{last_tool_results}}")]], clock
    )
    [pending] = parked(await turn(runner, "to"))
    await runner.settle(
        "to", "alice", pending.tool_call_id, {"outcome": "output", "output": {"choice": "k"}}
    )
    # A worker claims the resume and dies before it commits anything.
    dead = await runner.store.claim_resume(
        chat_keys("to"),
        principal="alice",
        token="dead-worker",
        now_ms=runner._now_ms(),
        lease_ms=60_000,
    )
    assert [c.tool_call_id for c in dead.calls] == [pending.tool_call_id]
    with pytest.raises(ChatBusyError):
        await runner.resume("to", "alice")
    clock.now += 61
    events = await (await runner.resume("to", "alice")).collect()
    assert json.loads(said(events)) == [{"tool": "pick", "result": {"choice": "k"}}]


async def test_a_turn_whose_worker_died_after_its_claim_loses_no_outcome(redis: Redis) -> None:
    """Turn vs crash: a new message's claim superseded the pending call, then its worker
    died before writing; the next turn still gives the model every result."""
    clock = Clock()
    runner = clocked_runner(
        redis,
        [[call("pick", {"q": "a"}), call("confirm", {})], [text("{{last_tool_results}}")]],
        clock,
    )
    pick, confirm = parked(await turn(runner, "tc", uid="u1"))
    await runner.settle(
        "tc", "alice", pick.tool_call_id, {"outcome": "output", "output": {"choice": "z"}}
    )
    template = runner.template
    dead = await runner.store.claim_turn(
        chat_keys("tc"), principal="alice", token="dead", now_ms=runner._now_ms(), lease_ms=60_000,
        user_message_id="u2", supersede_outcome='{"outcome":"cancelled","reason":"superseded_by_user_message"}',
        message_id="msg_dead", template_digest=template.digest, template_json=template.canonical,
    )  # fmt: skip
    assert dead.parked_ids == [pick.tool_call_id, confirm.tool_call_id]
    clock.now += 61
    events = await turn(runner, "tc", "again", uid="u2")  # the dead turn never stored u2
    assert json.loads(said(events)) == [
        {"tool": "pick", "result": {"choice": "z"}},
        {
            "tool": "confirm",
            "result": {"status": "cancelled", "reason": "superseded_by_user_message"},
        },
    ]


async def test_a_dead_turn_that_stored_nothing_is_not_resumed_and_its_message_can_be_resent(
    redis: Redis,
) -> None:
    """A turn whose worker died before storing its message has nothing to continue: a
    resume is refused, and the same message may be sent again."""
    clock = Clock()
    runner = clocked_runner(redis, [[text("one")], [text("two {{last_user_text}}")]], clock)
    await turn(runner, "dt", "first", uid="u1")
    template = runner.template
    await runner.store.claim_turn(
        chat_keys("dt"), principal="alice", token="dead", now_ms=runner._now_ms(), lease_ms=60_000,
        user_message_id="u2", supersede_outcome="{}", message_id="msg_dead",
        template_digest=template.digest, template_json=template.canonical,
    )  # fmt: skip
    clock.now += 61
    with pytest.raises(NothingToResumeError, match="interrupted"):
        await runner.resume("dt", "alice")
    assert said(await turn(runner, "dt", "second", uid="u2")) == "two second"


async def test_a_new_chat_never_sees_leftovers_of_an_expired_one(redis: Redis) -> None:
    """Keys of a chat live and die together; a chat created under a reused id starts
    empty even if stray keys of an old one remain."""
    runner = make_runner(redis, [[call("pick", {"q": "secret input"})]])
    [pending] = parked(await turn(runner, "reuse"))
    await runner.settle("reuse", "alice", pending.tool_call_id, {"outcome": "declined"})
    ttls = {
        key: await redis.ttl(key) for key in chat_keys("reuse").all() if await redis.exists(key)
    }
    assert len(ttls) == 5 and all(t > 0 for t in ttls.values())  # pending is empty, so absent
    await redis.delete(chat_keys("reuse").meta)  # as if only the meta key had expired
    fresh = make_runner(redis, [[text("hello")]])
    await (await fresh.start_turn("reuse", "bob", "hi")).collect()
    record = await fresh.chat("reuse", "bob")
    assert record.calls == []
    assert [e["t"] for e in record.entries] == ["user", "assistant"]


async def test_server_tool_results_are_stored_as_soon_as_the_tools_finish(redis: Redis) -> None:
    """Results of a step that does not park are persisted before the next model step, so
    a worker dying during that step loses nothing the client already saw."""
    runner = make_runner(redis, [[call("get_weather", {"city": "Oslo"})], [text("next")]])
    original = runner.model.stream
    seen: list[list[str]] = []

    async def observing(request: Any) -> Any:
        history = await redis.lrange(chat_keys("early-r").history, 0, -1)
        seen.append([json.loads(h)["t"] for h in history])
        async for item in original(request):
            yield item

    runner.model = type("M", (), {"stream": staticmethod(observing)})()
    await turn(runner, "early-r")
    assert seen[1] == ["user", "assistant", "result"]


async def test_a_parked_call_exists_before_anyone_hears_of_it(redis: Redis) -> None:
    """A client that answers the instant it sees a widget must find the call: call
    events are emitted only after the step is persisted, even while server tools run."""
    test_tools.GATE.clear()
    gated = {"type": "function", "name": "gated", "ref": "tests.helpers.tools:gated"}
    runner = make_runner(
        redis, [[call("gated"), call("pick", {"q": "a"})], [text("ok")]], tools=[gated, PICK]
    )
    run = await runner.start_turn("early", "alice", "go")
    async for event in run.events():
        if isinstance(event, CallParked):
            result = await runner.settle(
                "early",
                "alice",
                event.call.tool_call_id,
                {"outcome": "output", "output": {"choice": "fast"}},
            )
            assert result.fresh
            test_tools.GATE.set()
    state = (await runner.chat("early", "alice")).meta["state"]
    assert state == "parked"
    assert said(await (await runner.resume("early", "alice")).collect()) == "ok"


async def test_a_turn_while_a_run_holds_the_lease_is_refused(redis: Redis) -> None:
    """Two turns of one chat never run at once."""
    gate = asyncio.Event()
    runner = make_runner(redis, [[text("slow")]])

    async def slow_stream(request: Any) -> Any:
        await gate.wait()
        async for item in original(request):
            yield item

    original = runner.model.stream
    runner.model = type("M", (), {"stream": staticmethod(slow_stream)})()
    run = await runner.start_turn("l1", "alice", "first")
    with pytest.raises(ChatBusyError):
        await runner.start_turn("l1", "alice", "second")
    gate.set()
    assert said(await run.collect()) == "slow"
