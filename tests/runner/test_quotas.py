"""Quotas per principal (runner/store/usage.py): what a chat stores is counted by the
scripts that store it, a turn past the owner's quota is refused with nothing stored, a
new chat past the live-chats quota likewise, an artifact past the bytes or the chat's
artifact count is not kept (the model is told), and chats gone by their TTL stop
counting. Over HTTP, and the red team's flood, in tests/transport/test_quotas.py."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Runner, parse_agent_file
from parkway.runner.engine import RunnerConfig
from parkway.runner.errors import QuotaExceededError
from parkway.runner.events import ToolFailed, ToolSucceeded
from parkway.runner.store import Quotas, chat_keys, usage_keys
from tests.helpers.runner_rig import Clock, parked, said
from tests.helpers.support import PICK_TOOL, WEATHER_TOOL, call, text

SALES_TOOL = {"type": "function", "name": "get_sales", "ref": "parkway.runner.demo:get_sales"}
TTL_S = 3600


def quota_runner(
    redis: Redis,
    turns: list[list[dict[str, Any]]],
    quotas: Quotas,
    *,
    tools: list[Any] | None = None,
    clock: Clock | None = None,
) -> Runner:
    doc = {
        "template": {"instructions": "quota agent", "tools": tools or [WEATHER_TOOL, PICK_TOOL]},
        "model": {"scripted": {"turns": turns}},
    }
    agent = parse_agent_file(doc)
    config = RunnerConfig(chat_ttl_s=TTL_S, quotas=quotas)
    if clock is None:
        return Runner(redis, agent.model, agent.template, config=config)
    return Runner(redis, agent.model, agent.template, config=config, clock=clock)


async def say(runner: Runner, chat: str, principal: str = "alice", message: str = "hi") -> Any:
    return await (await runner.start_turn(chat, principal, message)).collect()


async def stored_bytes(redis: Redis, chat: str) -> int:
    """What the chat holds that counts, measured from Redis itself."""
    keys = chat_keys(chat)
    history = await redis.lrange(keys.history, 0, -1)
    calls = await redis.hvals(keys.calls)
    outcomes = await redis.hvals(keys.outcomes)
    records = await redis.hvals(keys.artifacts)
    data = await redis.hvals(keys.artifact_data)
    return sum(len(x) for x in [*history, *calls, *outcomes, *records, *data])


async def total_of(redis: Redis, principal: str) -> int:
    return int(await redis.hget(usage_keys(principal).bytes, "#total") or 0)


async def test_what_a_chat_stores_is_counted_byte_for_byte(redis: Redis) -> None:
    """History, parked call records, outcomes and artifacts, as the scripts write them;
    a turn's claim rolls the chat's count up into its owner's total."""
    runner = quota_runner(
        redis,
        [[call("pick", {"q": "which?"})], [call("get_sales", {"month": "2026-10"})],
         [text("done")], [text("again")]],
        Quotas(),
        tools=[PICK_TOOL, SALES_TOOL],
    )  # fmt: skip
    first = await say(runner, "count-1")
    [pending] = parked(first)
    await runner.settle("count-1", "alice", pending.tool_call_id,
                        {"outcome": "output", "output": {"choice": "b"}})  # fmt: skip
    await (await runner.resume("count-1", "alice")).collect()
    [artifact] = await runner.artifacts.list("count-1")
    assert artifact.source == "get_sales"
    measured = await stored_bytes(redis, "count-1")
    assert int(await redis.hget(chat_keys("count-1").meta, "bytes")) == measured
    await say(runner, "count-1", message="and now?")  # its claim rolls the count up
    assert await total_of(redis, "alice") >= measured
    assert await total_of(redis, "alice") == int(
        await redis.hget(usage_keys("alice").bytes, "count-1")
    )


async def test_a_turn_past_the_stored_bytes_quota_is_refused_and_stores_nothing(
    redis: Redis,
) -> None:
    runner = quota_runner(redis, [[text("x" * 3000)]] * 3, Quotas(stored_bytes=2000))
    assert said(await say(runner, "big-1")) == "x" * 3000  # a run that started finishes
    history = await redis.llen(chat_keys("big-1").history)
    for chat in ("big-1", "big-2"):  # the same chat, and a new one
        with pytest.raises(QuotaExceededError) as refused:
            await say(runner, chat, message="more")
        assert refused.value.quota == "stored_bytes" and refused.value.limit == 2000
    assert await redis.llen(chat_keys("big-1").history) == history
    assert not await redis.exists(chat_keys("big-2").meta)
    # another principal is not touched by alice's use
    assert said(await say(runner, "bob-1", principal="bob")) == "x" * 3000


async def test_every_chat_counts_from_the_commit_that_ends_its_run(redis: Redis) -> None:
    """Two chats' text, each under the quota, together over it: a third chat is refused
    (the commit that ends a run rolls its chat up; no later turn is needed)."""
    runner = quota_runner(redis, [[text("v" * 3000)]] * 3, Quotas(stored_bytes=5000))
    await say(runner, "two-1")
    await say(runner, "two-2")
    assert await total_of(redis, "alice") > 6000
    with pytest.raises(QuotaExceededError):
        await say(runner, "two-3")


async def test_a_new_chat_past_the_live_chats_quota_is_refused(redis: Redis) -> None:
    runner = quota_runner(redis, [[text("ok")]] * 5, Quotas(live_chats=2))
    await say(runner, "live-1")
    await say(runner, "live-2")
    with pytest.raises(QuotaExceededError) as refused:
        await say(runner, "live-3")
    assert refused.value.quota == "live_chats"
    assert not await redis.exists(chat_keys("live-3").meta)
    assert said(await say(runner, "live-1", message="still here")) == "ok"  # not a new chat
    assert said(await say(runner, "live-3", principal="bob")) == "ok"


async def test_chats_gone_by_their_ttl_stop_counting(redis: Redis) -> None:
    clock = Clock()
    runner = quota_runner(
        redis, [[text("y" * 3000)]] * 3, Quotas(stored_bytes=2000, live_chats=1), clock=clock
    )
    await say(runner, "old-1")
    with pytest.raises(QuotaExceededError):
        await say(runner, "old-2")
    clock.now += TTL_S + 1  # (the chat's keys expire by Redis's clock: its count by this)
    assert said(await say(runner, "old-2")) == "y" * 3000
    assert await redis.zrange(usage_keys("alice").chats, 0, -1) == [b"old-2"]


async def test_an_artifact_past_the_quota_is_not_kept_and_the_model_is_told(
    redis: Redis,
) -> None:
    """get_sales returns about 60 KB: over a 40 KB quota it is not stored, and the tool
    fails with the reason; nothing of it is in Redis or in the owner's count."""
    runner = quota_runner(
        redis,
        [[call("get_sales", {"month": "2026-10"})], [text("no data")]],
        Quotas(stored_bytes=40_000),
        tools=[SALES_TOOL],
    )
    events = await say(runner, "art-q")
    [failed] = [e for e in events if isinstance(e, ToolFailed)]
    assert "not kept" in failed.error and "storage quota" in failed.error
    assert await runner.artifacts.list("art-q") == []
    assert not any(isinstance(e, ToolSucceeded) for e in events)
    assert await stored_bytes(redis, "art-q") < 40_000


async def test_a_chat_keeps_at_most_its_artifact_quota(redis: Redis) -> None:
    runner = quota_runner(
        redis,
        [[call("get_sales", {"month": "2026-10"}), call("get_sales", {"month": "2026-09"})],
         [text("one of two")]],
        Quotas(artifacts_per_chat=1),
        tools=[SALES_TOOL],
    )  # fmt: skip
    events = await say(runner, "art-n")
    assert len([e for e in events if isinstance(e, ToolSucceeded)]) == 1
    [failed] = [e for e in events if isinstance(e, ToolFailed)]
    assert "artifacts" in failed.error
    assert len(await runner.artifacts.list("art-n")) == 1


async def test_refused_claims_race_to_one_answer_per_turn(redis: Redis) -> None:
    """Many new chats at once against a live-chats quota of 3: exactly 3 are created."""
    import asyncio

    runner = quota_runner(redis, [[text("ok")]] * 30, Quotas(live_chats=3))

    async def attempt(n: int) -> bool:
        try:
            await say(runner, f"race-{n}")
        except QuotaExceededError:
            return False
        return True

    results = await asyncio.gather(*(attempt(n) for n in range(20)))
    assert sum(results) == 3
    assert await redis.zcard(usage_keys("alice").chats) == 3


async def test_the_agent_library_holds_a_bounded_number_of_versions(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every version is kept (no TTL: the library is the agent's), so their number is
    capped; past it nothing is saved."""
    from parkway.runner.codemode import library

    monkeypatch.setattr(library, "MAX_VERSIONS", 2)
    functions = library.FunctionLibrary(redis, "quota-agent")
    code = "def f():\n    return 1\n"
    assert (await functions.save("f", code, "", by="alice")).version == 1
    assert (await functions.save("f", code, "", by="alice")).version == 2
    with pytest.raises(ValueError, match="2 function versions"):
        await functions.save("f", code, "", by="alice")
    assert [v.version for v in await functions.versions("f")] == [1, 2]
    await redis.delete(functions.keys.functions, functions.keys.function_versions)
