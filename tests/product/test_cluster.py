"""The core scenarios against a real three-master Redis Cluster on loopback.

Redis Cluster refuses any multi-key command or script whose keys span slots
(``CROSSSLOT``), so every scenario here passing is the proof that each multi-key
operation Parkway makes stays within one slot: a chat's keys share a hash tag, and the
one global key (the deadline index) is only ever written by single-key commands. The
negative control shows this cluster does refuse a cross-slot script, so a regression
would fail these tests rather than slip through.

Chat ids are picked so that chats land on every master, and each test checks the keys
it leaves on every master: a key without a TTL, or a deadline of a call that is not
pending, fails the test.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ClusterCrossSlotError

from parkway.runner import (
    ChatBusyError,
    NothingToResumeError,
    QuotaExceededError,
    Runner,
    RunnerConfig,
    SettleConflictError,
    connect,
    parse_agent_file,
)
from parkway.runner.engine.sweeper import Sweeper
from parkway.runner.events import (
    ApprovalRequested,
    CallParked,
    Event,
    MessageFinished,
    MessageStarted,
    TextDelta,
    ToolDenied,
    ToolSucceeded,
    coalesce,
)
from parkway.runner.store import AddressQuotas, Quotas
from parkway.runner.store.keys import DEADLINES, ChatKeys
from parkway.runner.store.scripts import SETTLE
from tests.helpers import tools as test_tools
from tests.helpers.support import (
    PUBLISH_TOOL,
    Api,
    agent_doc,
    answered,
    call,
    held_agent_doc,
    server_thread,
    sse_chunks,
    text,
)
from tests.helpers.topologies import (
    HOST,
    LoopbackCluster,
    TopologyUnavailableError,
    assert_keyspace_clean,
    unavailable,
)

pytestmark = pytest.mark.slow

OUTPUT_A = {"outcome": "output", "output": {"choice": "a"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    try:
        topology = LoopbackCluster(tmp_path_factory.mktemp("cluster"))
    except TopologyUnavailableError as exc:
        unavailable("REDIS CLUSTER", str(exc))
    topology.start()
    try:
        yield topology
    finally:
        topology.stop()


@pytest.fixture
async def masters(cluster: LoopbackCluster) -> AsyncIterator[list[Redis]]:
    """A plain client per master, each master emptied before and after the test."""
    clients = [Redis(host=HOST, port=port) for port in cluster.ports]
    for node in clients:
        await node.flushall()
    try:
        yield clients
    finally:
        for node in clients:
            await node.flushall()
            await node.aclose()


@pytest.fixture
async def client(cluster: LoopbackCluster, masters: list[Redis]) -> AsyncIterator[RedisCluster]:
    """The cluster client Parkway builds from a ``redis+cluster://`` URL."""
    built = connect(cluster.url)
    assert isinstance(built, RedisCluster)
    await built.initialize()
    try:
        yield built
        await assert_keyspace_clean(masters, built)
    finally:
        await built.aclose()


def make_runner(redis: RedisCluster, turns: list[list[dict[str, Any]]]) -> Runner:
    agent = parse_agent_file(agent_doc(turns))
    return Runner(redis, agent.model, agent.template)


def chats_on_every_master(client: RedisCluster, prefix: str) -> list[str]:
    """One chat id per master: the first ids ``<prefix>-<n>`` whose keys live there."""
    found: dict[str, str] = {}
    for n in range(10_000):
        chat = f"{prefix}-{n}"
        found.setdefault(client.get_node_from_key(ChatKeys(chat).meta).name, chat)
        if len(found) == len(client.get_primaries()):
            return list(found.values())
    raise AssertionError("no chat ids found for every master")


async def masters_holding_chats(masters: list[Redis]) -> int:
    """How many masters hold chat keys (``pw:{...}``; the deadline index is not one)."""
    holding = 0
    for node in masters:
        keys = [key async for key in node.scan_iter(match="pw:{*", count=1000)]
        holding += bool(keys)
    return holding


def said(events: list[Event]) -> str:
    return "".join(e.delta for e in events if isinstance(e, TextDelta))


def parked(events: list[Event]) -> list[Any]:
    return [e.call for e in events if isinstance(e, CallParked)]


def finish(events: list[Event]) -> str:
    last = events[-1]
    assert isinstance(last, MessageFinished), last
    return last.reason


async def turn(runner: Runner, chat: str, message: str = "hi", uid: str | None = None) -> Any:
    return await (await runner.start_turn(chat, "alice", message, user_message_id=uid)).collect()


async def test_client_tool_parks_settles_and_resumes_for_chats_on_every_master(
    client: RedisCluster, masters: list[Redis]
) -> None:
    """The core promise holds on a Cluster wherever a chat's slot lives: park (a script
    plus the global deadline write, two slots in one round trip), settle, a GET-style
    read, and a resume that continues the same assistant message."""
    runner = make_runner(
        client, [[text("Pick."), call("pick", {"q": "c"})], [text("got {{last_tool_results}}")]]
    )
    chats = chats_on_every_master(client, "round")
    for chat in chats:
        first = await turn(runner, chat)
        assert finish(first) == "tool-calls"
        [pending] = parked(first)
        record = await runner.chat(chat, "alice")
        assert record.meta["state"] == "parked"
        assert [c.tool_call_id for c in record.calls] == [pending.tool_call_id]
        assert await client.zscore(DEADLINES, f"{chat} {pending.tool_call_id}") is not None
        result = await runner.settle(chat, "alice", pending.tool_call_id, OUTPUT_A)
        assert result.fresh and result.pending == 0
        assert await client.zscore(DEADLINES, f"{chat} {pending.tool_call_id}") is None
        second = await (await runner.resume(chat, "alice")).collect()
        assert isinstance(second[0], MessageStarted)
        assert second[0].message_id == first[0].message_id
        assert said(second) == 'got [{"result":{"choice":"a"},"tool":"pick"}]'
        assert (await runner.chat(chat, "alice")).meta["state"] == "idle"
    assert await masters_holding_chats(masters) == len(masters) == 3


async def test_approval_approved_runs_once_and_denied_never_runs_on_a_cluster(
    client: RedisCluster,
) -> None:
    """Approvals settle through the same one-slot script: an approved call runs exactly
    once with the shown input, a denied one never runs and the model gets the reason."""
    test_tools.EXECUTIONS.clear()
    runner = make_runner(
        client, [[call("publish", {"title": "T"})], [text("{{last_tool_results}}")]]
    )
    approve, deny = chats_on_every_master(client, "approval")[:2]
    first = await turn(runner, approve)
    assert [e for e in first if isinstance(e, ApprovalRequested)]
    [pending] = parked(first)
    await runner.settle(approve, "alice", pending.tool_call_id, {"outcome": "approved"})
    assert not (
        await runner.settle(approve, "alice", pending.tool_call_id, {"outcome": "approved"})
    ).fresh
    events = await (await runner.resume(approve, "alice")).collect()
    assert said(events) == '[{"result":{"published":"T"},"tool":"publish"}]'
    with pytest.raises(NothingToResumeError):
        await runner.resume(approve, "alice")

    [pending] = parked(await turn(runner, deny))
    refusal = {"outcome": "denied", "reason": "not today"}
    await runner.settle(deny, "alice", pending.tool_call_id, refusal)
    events = await (await runner.resume(deny, "alice")).collect()
    assert [e.reason for e in events if isinstance(e, ToolDenied)] == ["not today"]
    assert [e["chat"] for e in test_tools.EXECUTIONS] == [approve]


async def test_mixed_step_resumes_only_after_both_client_calls_settle_on_a_cluster(
    client: RedisCluster,
) -> None:
    """A step that parks two calls (and ran a server tool) writes two deadlines and one
    pending set; the chat resumes only when the second answer arrives."""
    runner = make_runner(
        client,
        [
            [call("get_weather", {"city": "Oslo"}), call("pick", {"q": "a"}), call("confirm")],
            [text("{{last_tool_results}}")],
        ],
    )
    [chat] = chats_on_every_master(client, "mixed")[-1:]
    first = await turn(runner, chat)
    assert [e.output for e in first if isinstance(e, ToolSucceeded)] == [
        {"city": "Oslo", "temperature_c": 4, "sky": "snow"}
    ]
    pick, confirm = parked(first)
    assert await client.zcard(DEADLINES) == 2
    settled = await runner.settle(
        chat, "alice", confirm.tool_call_id, {"outcome": "output", "output": True}
    )
    assert settled.pending == 1
    with pytest.raises(NothingToResumeError):
        await runner.resume(chat, "alice")
    await runner.settle(chat, "alice", pick.tool_call_id, OUTPUT_A)
    events = await (await runner.resume(chat, "alice")).collect()
    assert [r["tool"] for r in json.loads(said(events))] == ["get_weather", "pick", "confirm"]
    assert await client.zcard(DEADLINES) == 0


async def test_duplicate_settles_agree_and_conflicting_ones_get_the_winner_on_a_cluster(
    client: RedisCluster,
) -> None:
    """Settle vs settle is decided inside the chat's slot: the same outcome again is
    accepted as a repeat, and of twenty different outcomes racing exactly one wins while
    every loser learns the winner's outcome."""
    runner = make_runner(client, [[call("pick", {"q": "a"})], [call("pick", {"q": "b"})]])
    repeat_chat, race_chat = chats_on_every_master(client, "settle")[:2]
    [pending] = parked(await turn(runner, repeat_chat))
    assert (await runner.settle(repeat_chat, "alice", pending.tool_call_id, OUTPUT_A)).fresh
    assert not (await runner.settle(repeat_chat, "alice", pending.tool_call_id, OUTPUT_A)).fresh
    with pytest.raises(SettleConflictError) as conflict:
        await runner.settle(repeat_chat, "alice", pending.tool_call_id, {"outcome": "declined"})
    assert conflict.value.existing == OUTPUT_A

    [pending] = parked(await turn(runner, race_chat))
    outcomes = [{"outcome": "output", "output": {"choice": str(i)}} for i in range(20)]
    results = await asyncio.gather(
        *(runner.settle(race_chat, "alice", pending.tool_call_id, o) for o in outcomes),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, SettleConflictError)]
    assert len(winners) == 1 and len(losers) == 19
    assert all(loser.existing == winners[0].call.outcome for loser in losers)


async def test_twenty_concurrent_resumes_give_exactly_one_continuation_on_a_cluster(
    client: RedisCluster,
) -> None:
    """Resume vs resume: the claim is one script on the chat's slot, so exactly one of
    twenty callers continues and the model is called once more."""
    runner = make_runner(client, [[call("pick", {"q": "a"})], [text("continued")]])
    [chat] = chats_on_every_master(client, "resume")[1:2]
    [pending] = parked(await turn(runner, chat))
    await runner.settle(chat, "alice", pending.tool_call_id, OUTPUT_A)
    results = await asyncio.gather(
        *(runner.resume(chat, "alice") for _ in range(20)), return_exceptions=True
    )
    runs = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, NothingToResumeError | ChatBusyError)]
    assert len(runs) == 1 and len(refused) == 19
    assert said(await runs[0].collect()) == "continued"
    record = await runner.chat(chat, "alice")
    assert record.meta["model_calls"] == "2"


async def test_new_user_message_supersedes_pending_calls_on_a_cluster(
    client: RedisCluster,
) -> None:
    """A new message settles the waiting calls as superseded in the claim script, keeps
    an answer that already arrived, and a late answer is refused."""
    runner = make_runner(
        client,
        [
            [call("pick", {"q": "a"}), call("confirm", {})],
            [text("{{last_tool_results}} / {{last_user_text}}")],
        ],
    )
    [chat] = chats_on_every_master(client, "supersede")[:1]
    pick, confirm = parked(await turn(runner, chat, uid="u1"))
    await runner.settle(chat, "alice", pick.tool_call_id, OUTPUT_A)
    events = await turn(runner, chat, "never mind", uid="u2")
    outcomes = {c.tool_call_id: c.outcome for c in (await runner.chat(chat, "alice")).calls}
    assert outcomes == {
        pick.tool_call_id: OUTPUT_A,
        confirm.tool_call_id: {"outcome": "cancelled", "reason": "superseded_by_user_message"},
    }
    assert said(events).endswith(" / never mind")
    with pytest.raises(SettleConflictError):
        await runner.settle(
            chat, "alice", confirm.tool_call_id, {"outcome": "output", "output": True}
        )


async def test_racing_sweepers_time_out_expired_calls_on_every_master_exactly_once(
    client: RedisCluster,
) -> None:
    """Settle vs timeout across the cluster: a sweep reads the global deadline index
    (on one master) and settles calls whose chats live on every master in one pipeline
    of per-chat scripts; three racing sweepers time each call out once, drop every
    deadline, and the resumed runs give the model the timeout."""
    runner = make_runner(client, [[call("pick", {"q": "a"})], [text("{{last_tool_results}}")]])
    chats = chats_on_every_master(client, "sweep")
    waiting = {chat: parked(await turn(runner, chat)) for chat in chats}
    later = max(c.deadline for calls in waiting.values() for c in calls) + 1
    sweepers = [Sweeper(runner, clock=lambda: later) for _ in range(3)]
    reports = await asyncio.gather(*(s.sweep_once() for s in sweepers))
    assert sum(r.settled for r in reports) == len(chats)
    assert sum(r.failed for r in reports) == 0
    assert await client.zcard(DEADLINES) == 0
    for chat in chats:
        events = await (await runner.resume(chat, "alice")).collect()
        assert json.loads(said(events)) == [{"tool": "pick", "result": {"status": "timeout"}}]


async def test_scripts_flushed_from_every_master_are_loaded_again_where_they_run(
    client: RedisCluster, masters: list[Redis]
) -> None:
    """After SCRIPT FLUSH (or a fresh master), EVALSHA answers NOSCRIPT on the chat's
    node. Both paths recover: a registered script on its own, and the pipelined
    script-plus-deadline round trip of park and settle, which loads the script on every
    master and sends the round trip again."""
    runner = make_runner(client, [[call("pick", {"q": "a"})], [text("again")]])
    await client.script_flush()
    chats = chats_on_every_master(client, "noscript")
    for chat in chats:
        [pending] = parked(await turn(runner, chat))
        await runner.settle(chat, "alice", pending.tool_call_id, OUTPUT_A)
        assert said(await (await runner.resume(chat, "alice")).collect()) == "again"
    settle_sha = hashlib.sha1(SETTLE.encode()).hexdigest()
    assert [(await node.script_exists(settle_sha))[0] for node in masters] == [True] * 3


async def test_a_chat_is_one_slot_and_the_cluster_refuses_cross_slot_scripts(
    client: RedisCluster, masters: list[Redis]
) -> None:
    """The negative control: every key of a chat hashes to one slot (asked of the
    cluster, not computed here), and this cluster does refuse a script whose keys span
    slots, so a key that lost its hash tag would fail the scenarios above."""

    async def slot(key: str) -> int:
        return int(await masters[0].execute_command("CLUSTER KEYSLOT", key))

    chats = chats_on_every_master(client, "slots")
    for chat in chats:
        assert len({await slot(key) for key in ChatKeys(chat).all()}) == 1
    one, other = chats[:2]
    # A chat whose slot differs from the deadline index's (chats sit on every master).
    index_slot = await slot(DEADLINES)
    apart = [c for c in chats if await slot(ChatKeys(c).meta) != index_slot].pop()
    mixed = [
        [ChatKeys(one).calls, ChatKeys(other).outcomes, ChatKeys(one).pending],
        [ChatKeys(apart).calls, DEADLINES, ChatKeys(apart).pending],
    ]
    for node in masters:  # every node refuses them, whichever slots it serves
        for keys in mixed:
            with pytest.raises(ClusterCrossSlotError):  # the server's CROSSSLOT reply
                await node.execute_command("EVAL", SETTLE, len(keys), *keys, "id", "{}", 60)


HTTP_TURNS = [
    [text("Pick."), call("pick", {"q": "colour"})],
    [text("seen {{last_tool_results}}")],
]


async def test_http_park_answer_and_continuation_through_a_cluster_url(
    cluster: LoopbackCluster, client: RedisCluster, masters: list[Redis]
) -> None:
    """End to end on a ``redis+cluster://`` URL: a real server parks over POST
    /api/chat, takes the answer as AI SDK history and streams the continuation of the
    same message, for chats on every master."""
    with server_thread(cluster.url, agent_doc(HTTP_TURNS)) as server:
        api = await Api(server.base_url).login()
        try:
            ready = (await api.http.get("/readyz")).json()
            assert (ready["status"], ready["checks"]["redis"]["ok"]) == ("ready", True)
            for chat in chats_on_every_master(client, "http"):
                chunks = await api.say(chat, "hi")
                assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
                state = await api.state(chat)
                assert [c["status"] for c in state["calls"]] == ["pending"]
                response = await api.chat(chat, answered(chunks, {"choice": "red"}))
                assert response.status_code == 200, response.text
                cont = sse_chunks(response.text)
                assert cont[0] == {"type": "start", "messageId": chunks[0]["messageId"]}
                assert cont[1]["type"] == "start-step"
                said_text = "".join(c["delta"] for c in cont if c["type"] == "text-delta")
                assert said_text == 'seen [{"result":{"choice":"red"},"tool":"pick"}]'
                assert (await api.state(chat))["state"] == "idle"
        finally:
            await api.aclose()
    assert await masters_holding_chats(masters) == 3


async def test_followers_are_woken_for_chats_on_every_master(
    client: RedisCluster, tmp_path: Path
) -> None:
    """The log watch's one subscription hears appends to chats on every master (classic
    PUBLISH reaches the whole Cluster): three followers per chat wait while the run is
    held in a tool, and are woken when it goes on. Their quiet period is longer than
    the test's patience, so only wake-ups can bring them the run's end."""
    release = tmp_path / "go"
    turns = [[call("wait_for_file", {"path": str(release)})], [text("from every master")]]
    agent = parse_agent_file(held_agent_doc(turns))
    runner = Runner(client, agent.model, agent.template, config=RunnerConfig(follow_quiet_s=600))
    chats = chats_on_every_master(client, "watched")
    runs = [await runner.start_turn(chat, "alice", "hi") for chat in chats]
    starts = [await asyncio.wait_for(asyncio.shield(run.log_start), 10) for run in runs]

    async def follow(chat: str, start: str) -> list[Event]:
        return [event async for event in runner.follow(chat, start)]

    following = asyncio.gather(
        *(follow(c, s) for c, s in zip(chats, starts, strict=True) for _ in range(3))
    )
    await asyncio.sleep(0.5)  # the followers have read what there is and wait
    release.write_text("go")
    followed = await asyncio.wait_for(following, 30)
    emitted = [await run.collect() for run in runs]
    for i, events in enumerate(followed):
        assert coalesce(events) == coalesce(emitted[i // 3])
        assert said(events) == "from every master"
    await runner.aclose()


async def test_the_approvals_queue_and_settles_by_an_approver_on_a_cluster(
    client: RedisCluster,
) -> None:
    """The approvals index is a global key (another slot than any chat): the commit
    that parks adds to it in the same round trip, an approver's queue reads chats on
    every master, and the approver's settle takes the call out of it."""
    tool = {**PUBLISH_TOOL, "approvers": "approver"}
    agent = parse_agent_file(
        {"template": {"instructions": "", "tools": [tool]},
         "model": {"scripted": {"turns": [[call("publish", {"title": "T"})], [text("ok")]]}}}
    )  # fmt: skip
    runner = Runner(client, agent.model, agent.template)
    chats = chats_on_every_master(client, "queue")
    calls = {}
    for chat in chats:
        [pending] = parked(await turn(runner, chat))
        calls[chat] = pending.tool_call_id
    approver = frozenset({"approver"})
    page = await runner.approvals("bob", approver)
    assert {a.chat_id for a in page.approvals} == set(chats)
    assert [a.chat_id for a in page.approvals] == list(reversed(chats))  # newest first
    assert (await runner.approvals("alice", frozenset())).approvals == []
    first = chats[0]
    result = await runner.settle(
        first, "bob", calls[first], {"outcome": "approved"}, roles=approver
    )
    assert result.fresh
    left = await runner.approvals("bob", approver)
    assert {a.chat_id for a in left.approvals} == set(chats[1:])
    for chat in chats[1:]:
        await runner.settle(chat, "bob", calls[chat], {"outcome": "denied"}, roles=approver)
    assert (await runner.approvals("bob", approver)).approvals == []


async def test_quotas_hold_on_a_cluster(client: RedisCluster) -> None:
    """The usage keys are in another slot than any chat: the check is its own round trip
    before the claim (runner/store/usage.py), and still refuses a chat past the
    live-chats quota and a turn past the stored bytes, on every master."""
    agent = parse_agent_file(agent_doc([[text("w" * 3000)]] * 4))
    runner = Runner(
        client, agent.model, agent.template,
        config=RunnerConfig(quotas=Quotas(live_chats=2, stored_bytes=5000)),
    )  # fmt: skip
    first, second, third = chats_on_every_master(client, "quota")
    await turn(runner, first)
    await turn(runner, second)
    with pytest.raises(QuotaExceededError) as refused:
        await turn(runner, third)
    assert refused.value.quota == "live_chats"
    # (a Cluster rolls a chat's bytes up at its turns: `second`'s are not counted yet,
    # `first`'s are once it takes a turn, so its third turn is refused)
    await turn(runner, first, "more")
    with pytest.raises(QuotaExceededError) as refused:
        await turn(runner, first, "and more")
    assert refused.value.quota == "stored_bytes"


async def test_address_quotas_hold_on_a_cluster(client: RedisCluster) -> None:
    """An address's usage keys are in a slot of their own, its principals' chats on every
    master: its check reads the chat's meta first, then counts in the address's slot. A
    new chat past the address's live chats is refused whichever principal asks, the
    stored bytes its runs' ends rolled up refuse the next turn, and a principal with no
    address is not counted."""
    agent = parse_agent_file(agent_doc([[text("w" * 3000)]] * 4))
    shared = AddressQuotas(
        of=lambda p: "198.51.100.7" if p.startswith("anon-") else None,
        stored_bytes=5000, live_chats=2,
    )  # fmt: skip
    runner = Runner(
        client, agent.model, agent.template,
        config=RunnerConfig(quotas=Quotas(), addresses=shared),
    )  # fmt: skip

    async def turn_of(principal: str, chat: str) -> None:
        await (await runner.start_turn(chat, principal, "hi")).collect()

    first, second, third = chats_on_every_master(client, "addr")
    await turn_of("anon-1", first)
    await turn_of("anon-2", second)
    with pytest.raises(QuotaExceededError) as refused:
        await turn_of("anon-3", third)
    assert refused.value.quota == "address_live_chats"
    await turn_of("alice", third)  # no address: counted alone
    # both chats were rolled up when their runs ended: 6,000 bytes and more
    with pytest.raises(QuotaExceededError) as refused:
        await turn_of("anon-1", first)
    assert refused.value.quota == "address_stored_bytes"
