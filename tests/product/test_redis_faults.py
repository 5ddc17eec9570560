"""Redis faults with real parts: replies lost mid-command, commands refused, outages and
restarts (SHUTDOWN and SIGKILL, with AOF). Nothing is lost, nothing is doubled, nothing
answers 500, and every chat can be answered afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Answer, Run, Runner, RunnerConfig, chat_keys, parse_agent_file
from parkway.runner.agent.revisions import AgentStore
from parkway.runner.agent.template import load_template
from parkway.runner.events import (
    CallParked,
    Event,
    MessageFinished,
    RunFailed,
    TextDelta,
    coalesce,
    events_from_json,
)
from parkway.runner.llm.model import Model, ModelEvent, ModelRequest, ModelTextDelta
from parkway.runner.store import scripts
from parkway.runner.store.client import RedisClient, connect
from tests.helpers.faults import RedisProxy, RestartableRedis
from tests.helpers.runner_rig import said
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    ServerThread,
    agent_doc,
    call,
    eventually,
    held_agent_doc,
    sse_chunks,
    text,
    user_message,
)

pytestmark = [
    pytest.mark.slow,
    # redis-py leaves a connection's socket open when the connection handshake (HELLO,
    # SELECT) is cancelled rather than failed: `connect_check_health` disconnects on a
    # RedisError only. Cutting Redis off mid-request cancels such handshakes here (a
    # stream whose client left, a readiness check's timeout), and the garbage collector
    # later finds the socket: a ResourceWarning, raised at a random later point. This
    # module kills connections on purpose; elsewhere the warning still fails a test.
    pytest.mark.filterwarnings("ignore:unclosed <StreamWriter:ResourceWarning"),
]

TWO_STEPS = [[text("Pick one."), call("pick", {"q": "colour"})], [text("got it")]]


def sha(script: str) -> bytes:
    return hashlib.sha1(script.encode()).hexdigest().encode()


def evalsha_of(script: str, *needles: bytes) -> Any:
    """Matches the bytes of an EVALSHA of ``script`` that also contain ``needles``."""
    digest = sha(script)
    return lambda data: digest in data and all(n in data for n in needles)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RestartableRedis]:
    started = RestartableRedis(tmp_path).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
async def proxy(server: RestartableRedis) -> AsyncIterator[RedisProxy]:
    started = await RedisProxy(server.port).start()
    try:
        yield started
    finally:
        await started.aclose()


@pytest.fixture
async def direct(server: RestartableRedis) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def proxied(proxy: RedisProxy) -> AsyncIterator[RedisClient]:
    client = connect(proxy.url, max_connections=8, pool_timeout_s=5)
    try:
        yield client
    finally:
        await client.aclose()


class Thinking:
    """A model that thinks a moment before it streams, so the run's first events go to
    the log on their own (an APPEND) before the step's commit carries the rest."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await asyncio.sleep(0.05)
        async for item in self.inner.stream(request):
            yield item


def runner_on(
    client: RedisClient, turns: list[list[dict[str, Any]]] = TWO_STEPS, *, thinking: bool = False
) -> Runner:
    agent = parse_agent_file(agent_doc(turns))
    assert agent.model is not None
    model = Thinking(agent.model) if thinking else agent.model
    return Runner(client, model, agent.template)


async def history(direct: Redis, chat: str) -> list[dict[str, Any]]:
    return [json.loads(e) for e in await direct.lrange(chat_keys(chat).history, 0, -1)]


async def collected(run: Run) -> list[Event]:
    """A run's events, once its last batch is in the chat's log too."""
    events = await run.collect()
    assert run.task is not None
    await run.task
    return events


async def park_and_finish(runner: Runner, chat: str) -> list[Event]:
    first = await collected(await runner.start_turn(chat, "alice", "hi"))
    [parked] = [e.call for e in first if isinstance(e, CallParked)]
    result = await runner.settle(
        chat, "alice", parked.tool_call_id, {"outcome": "output", "output": {"choice": "red"}}
    )
    assert result.fresh and result.pending == 0
    return first + await collected(await runner.resume(chat, "alice"))


# -- a reply lost after the command ran: every script replays safely ------------------


@pytest.mark.parametrize(
    ("script", "needles"),
    [
        (scripts.CLAIM_TURN, ()),
        (scripts.COMMIT, (b"parked",)),
        (scripts.APPEND, ()),
        (scripts.SETTLE, ()),
        (scripts.CLAIM_RESUME, ()),
        (scripts.COMMIT, (b"idle",)),
    ],
    ids=["claim_turn", "park_commit", "append", "settle", "claim_resume", "final_commit"],
)
async def test_a_lost_reply_is_replayed_with_nothing_doubled(
    proxy: RedisProxy,
    proxied: RedisClient,
    direct: Redis,
    script: str,
    needles: tuple[bytes, ...],
) -> None:
    """The command runs in Redis, its reply never comes back, the client sends it again
    on a new connection: the run goes on as if nothing happened, and the history, the
    calls and the event log hold everything exactly once."""
    proxy.lose_reply_of(evalsha_of(script, *needles))
    runner = runner_on(proxied, thinking=True)
    logs: list[list[Event]] = []

    async def collected_and_logged(run: Run) -> list[Event]:
        events = await collected(run)
        logged: list[Event] = []
        for _, fields in await direct.xrange(chat_keys("c1").events):
            logged.extend(events_from_json(fields[b"b"].decode()))
        logs.append(logged)
        return events

    first = await collected_and_logged(await runner.start_turn("c1", "alice", "hi"))
    [parked] = [e.call for e in first if isinstance(e, CallParked)]
    output = {"outcome": "output", "output": {"choice": "red"}}
    assert (await runner.settle("c1", "alice", parked.tool_call_id, output)).fresh
    second = await collected_and_logged(await runner.resume("c1", "alice"))
    events = first + second
    assert proxy.lost == 1
    assert not [e for e in events if isinstance(e, RunFailed)]
    assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == "Pick one.got it"
    entries = await history(direct, "c1")
    assert [e["t"] for e in entries] == ["user", "assistant", "result", "assistant"]
    # the log, as a follower reads it: each event once, in the order the runs emitted
    # them (the log joins adjacent text deltas)
    assert [coalesce(log) for log in logs] == [coalesce(first), coalesce(first) + coalesce(second)]
    meta = await direct.hgetall(chat_keys("c1").meta)
    assert meta[b"state"] == b"idle" and meta[b"model_calls"] == b"2"
    await runner.aclose()


class Instructions:
    """Answers with its instructions: which revision of the agent the turn ran on."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ModelTextDelta(request.instructions)


async def test_a_replayed_claim_keeps_its_template_though_the_agent_moved_meanwhile(
    proxy: RedisProxy, proxied: RedisClient, direct: Redis
) -> None:
    """A turn's claim checks the agent's head version it was handed. It ran, its reply
    was lost, an editor committed a new revision before the client sent it again: the
    replay is the same claim, so the turn goes on with the template that claim stored,
    not a mix of the new template and the old snapshot."""
    seed = {"instructions": "one", "tools": []}
    runner = Runner(
        proxied, Instructions(), load_template(seed), agents=AgentStore(proxied, "moving", seed)
    )
    assert (
        said(await collected(await runner.start_turn("m1", "alice", "hi", user_message_id="u1")))
        == "one"
    )

    async def commit_elsewhere() -> None:
        await AgentStore(direct, "moving", seed).commit(
            {"instructions": "two", "tools": []}, expected_version=1, by="user:bob",
            summary="two", editor=True,
        )  # fmt: skip

    proxy.lose_reply_of(evalsha_of(scripts.CLAIM_TURN), meanwhile=commit_elsewhere)
    events = await collected(await runner.start_turn("m1", "alice", "again", user_message_id="u2"))
    assert proxy.lost == 1
    assert said(events) == "one"
    meta = await direct.hgetall(chat_keys("m1").meta)
    assert meta[b"template_digest"].decode() == load_template(seed).digest
    assert [e["t"] for e in await history(direct, "m1")] == ["user", "assistant"] * 2
    # and the next turn runs on the new revision
    assert (
        said(await collected(await runner.start_turn("m1", "alice", "more", user_message_id="u3")))
        == "two"
    )
    await runner.aclose()


async def test_a_follower_sees_each_event_once_when_an_append_reply_is_lost(
    proxy: RedisProxy, proxied: RedisClient, direct: Redis
) -> None:
    """A follower reading the log (the HTTP stream's view) gets the run's events once
    each, in the order the run emitted them, though one append was sent twice."""
    proxy.lose_reply_of(evalsha_of(scripts.APPEND))
    runner = runner_on(proxied, thinking=True)
    run = await runner.start_turn("f1", "alice", "hi")
    start = await asyncio.wait_for(asyncio.shield(run.log_start), 10)
    followed = [e async for e in runner.follow("f1", start)]
    emitted = await run.collect()
    assert proxy.lost == 1
    assert coalesce(followed) == coalesce(emitted)
    await runner.aclose()


@pytest.mark.parametrize("calls", [1, 2])
async def test_a_lost_answer_reply_is_replayed_with_the_same_answer(
    proxy: RedisProxy, proxied: RedisClient, direct: Redis, calls: int
) -> None:
    """ANSWER (settle the answered calls, and claim the resume when none is left) runs,
    its reply is lost, the client sends it again: the second run answers as the first
    would have, whether it claimed the resume (one call) or left a call pending (two),
    and the run goes on with each result once."""
    step = [call("pick", {"q": f"q{i}"}) for i in range(calls)]
    runner = runner_on(proxied, [step, [text("got it")]])
    first = await collected(await runner.start_turn("a1", "alice", "hi"))
    parked = [e.call for e in first if isinstance(e, CallParked)]
    answers = [
        Answer(
            c.tool_call_id, c.tool_name, c.input, {"outcome": "output", "output": {"choice": "x"}}
        )
        for c in parked
    ]
    proxy.lose_reply_of(evalsha_of(scripts.ANSWER))
    report, run = await runner.answer_and_resume("a1", "alice", answers[:1])
    assert proxy.lost == 1
    assert report.settled == (parked[0].tool_call_id,) and report.pending == calls - 1
    if calls == 2:
        assert run is None
        report, run = await runner.answer_and_resume("a1", "alice", answers[1:])
        assert report.settled == (parked[1].tool_call_id,) and report.pending == 0
    assert run is not None
    events = await collected(run)
    assert isinstance(events[-1], MessageFinished) and events[-1].reason == "stop"
    entries = await history(direct, "a1")
    assert [e["t"] for e in entries] == ["user", "assistant", *["result"] * calls, "assistant"]
    await runner.aclose()


# -- a park commit that cannot be written --------------------------------------------


async def test_a_park_commit_that_fails_leaves_no_call_behind_and_the_message_resendable(
    proxy: RedisProxy, proxied: RedisClient, direct: Redis
) -> None:
    """Every attempt of the park commit is cut (the connection dies each time): the run
    ends failed, saying to send the message again; the chat is idle with nothing of the
    turn stored (no call to show as "result unknown"); sending it again parks normally."""
    proxy.refuse(evalsha_of(scripts.COMMIT, b"parked"))
    runner = runner_on(proxied)
    failed = await (await runner.start_turn("p1", "alice", "hi", user_message_id="u1")).collect()
    assert proxy.refused >= 2  # the client retried before giving up
    assert isinstance(failed[-1], RunFailed) and "Send your message again" in failed[-1].message
    meta = await direct.hgetall(chat_keys("p1").meta)
    assert meta[b"state"] == b"idle" and b"lease" not in meta
    assert await history(direct, "p1") == []
    assert await direct.hlen(chat_keys("p1").calls) == 0
    record = await runner.chat("p1", "alice")
    assert record.calls == [] and record.entries == []
    proxy.allow()
    again = await (await runner.start_turn("p1", "alice", "hi", user_message_id="u1")).collect()
    assert isinstance(again[-1], MessageFinished) and again[-1].reason == "tool-calls"
    assert [e["t"] for e in await history(direct, "p1")] == ["user", "assistant"]
    await runner.aclose()


# -- outages over HTTP: 503 with Retry-After, streams end with an error chunk ----------


async def test_an_outage_answers_503_ends_streams_with_an_error_and_recovers(
    proxy: RedisProxy, direct: Redis, tmp_path: Path
) -> None:
    """While Redis cannot be reached: API routes answer 503 ``redis_unavailable`` with
    Retry-After (never 500), /readyz 503 (/healthz still 200: the process lives), an open
    stream ends with an ``error`` chunk and [DONE]; when it is back, the same worker
    serves again without a restart and the chat parked before the outage is answered and
    resumed."""
    marker = tmp_path / "go"
    ready = tmp_path / "ready"
    ready.write_text("")
    # the user's text names the file the tool waits for: one that exists goes straight on
    # to a parked call; the marker holds the run until the test ends
    doc = held_agent_doc(
        [
            [call("wait_for_file", {"path": "{{last_user_text}}"})],
            [call("pick", {"q": "colour"})],
            [text("got it")],
        ]
    )
    # (the proxy serves on this test's loop: the server starts and stops off it)
    server = ServerThread(proxy.url, doc, redis_pool_timeout_s=2.0)
    await asyncio.to_thread(server.start)
    api = await Api(server.base_url).login()
    try:
        parked = await api.say("o1", str(ready))
        call_id = next(
            c["toolCallId"]
            for c in parked
            if c["type"] == "tool-input-available" and c["toolName"] == "pick"
        )
        # a run in progress, followed by a stream
        async with api.http.stream(
            "POST", "/api/chat", json=_turn_body("o2", str(marker))
        ) as streaming:
            assert streaming.status_code == 200
            lines = streaming.aiter_lines()
            async for line in lines:
                if "tool-input-available" in line:
                    break
            proxy.down()
            rest = [line async for line in lines]
        chunks = sse_chunks("\n".join(rest))
        assert chunks[-1]["type"] == "error", chunks
        assert rest[-2:] == ["data: [DONE]", ""] or "data: [DONE]" in rest
        down = await api.http.get("/api/chats/o1")
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "redis_unavailable"
        assert int(down.headers["retry-after"]) > 0
        settle_down = await api.settle("o1", call_id, {"outcome": "output", "output": {}})
        assert settle_down.status_code == 503
        assert (await api.http.get("/readyz")).status_code == 503
        assert (await api.http.get("/healthz")).status_code == 200
        proxy.up()

        async def is_ready() -> bool:
            return (await api.http.get("/readyz")).status_code == 200

        # the worker's breaker lets a probe through a cool-down after it opened
        await eventually(is_ready, within_s=10, every_s=0.05, what="ready again")
        settled = await api.settle(
            "o1", call_id, {"outcome": "output", "output": {"choice": "red"}}
        )
        assert settled.status_code == 200, settled.text
        resumed = await api.resume("o1")
        assert resumed.status_code == 200
        assert "got it" in "".join(c.get("delta", "") for c in sse_chunks(resumed.text))
    finally:
        marker.write_text("go")
        await api.aclose()
        await asyncio.to_thread(server.stop)


def _turn_body(chat: str, words: str) -> dict[str, Any]:
    return {"id": chat, "messages": [user_message(words)], "trigger": "submit-message"}


# -- restarts under load: AOF, SHUTDOWN and SIGKILL ------------------------------------

ROUNDS = 4
RESTARTS = 2  # Redis restarts before rounds 1 and 2 may be answered


@dataclass
class _Load:
    """What paces the chats under load, by conditions rather than the clock: each chat
    answers round ``k + 1`` only once Redis has been restarted the ``k``-th time, so the
    load is still open whenever Redis goes down, however fast or slow the machine."""

    statuses: list[int] = field(default_factory=list)
    restarted: list[asyncio.Event] = field(
        default_factory=lambda: [asyncio.Event() for _ in range(RESTARTS)]
    )
    # the chats waiting for restart k, parked on round k + 1
    held: list[set[str]] = field(default_factory=lambda: [set() for _ in range(RESTARTS)])
    outage_seen: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, status: int) -> None:
        self.statuses.append(status)
        if status == 503:  # Redis is down and a request noticed
            self.outage_seen.set()

    async def hold(self, api: Api, chat: str, round_: int) -> None:
        """Before answering ``round_``: wait for its restart, reading the chat meanwhile
        (the load goes on during the outage, and its requests see the 503s)."""
        if not 1 <= round_ <= RESTARTS:
            return
        restarted = self.restarted[round_ - 1]
        self.held[round_ - 1].add(chat)
        while not restarted.is_set():
            self.record((await api.http.get(f"/api/chats/{chat}")).status_code)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(restarted.wait(), 0.05)


async def _drive_chat(api: Api, chat: str, load: _Load) -> None:
    """Take one chat through its rounds (park, answer, resume) like a patient client:
    a 503 or a stream cut by the outage is retried from the chat's stored state."""
    record = load.record
    while True:  # bounded by the test's wait for the whole load
        response = await api.http.get(f"/api/chats/{chat}")
        record(response.status_code)
        if response.status_code == 404:
            record((await api.chat(chat, [user_message("go")])).status_code)
            continue
        if response.status_code != 200:
            await asyncio.sleep(0.2)
            continue
        body = response.json()
        pending = [c for c in body["calls"] if c["status"] == "pending"]
        if body["state"] == "parked" and pending:
            for c in pending:
                await load.hold(api, chat, int(c["input"]["q"].removeprefix("round ")))
                settled = await api.settle(
                    chat, c["toolCallId"], {"outcome": "output", "output": {"choice": "x"}}
                )
                record(settled.status_code)
            continue
        if body["state"] == "parked":
            record((await api.resume(chat)).status_code)
            continue
        if body["state"] == "idle" and body["messages"]:
            last = body["messages"][-1]
            said = "".join(p.get("text", "") for p in last["parts"] if p["type"] == "text")
            if "done" in said:
                return
            if last["role"] == "user" or not said:
                # the turn failed before it stored anything of the answer: resume or resend
                record((await api.resume(chat)).status_code)
            continue
        await asyncio.sleep(0.1)  # running


@pytest.mark.timeout(300)  # 48 x 4 rounds on a busy 2-core machine; paced by conditions
@pytest.mark.parametrize("restart", ["shutdown", "sigkill"])
async def test_redis_restarted_under_load_loses_nothing_doubles_nothing(
    server: RestartableRedis, direct: Redis, tmp_path: Path, restart: str
) -> None:
    """Two worker processes, 24 chats each taken through four park/answer/resume rounds
    at once, and Redis restarted twice meanwhile (AOF, every write fsynced). Requests
    during the outage get 503 and are retried; none gets 500. Afterwards every chat has
    each step exactly once.

    The load paces itself (:class:`_Load`): Redis goes down once half the chats wait
    for that restart (the others are still mid-round), it comes back once the load has
    met the outage, and no chat can finish before both restarts."""
    turns = [[call("pick", {"q": f"round {i}"})] for i in range(ROUNDS)] + [[text("done")]]
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(agent_doc(turns)))
    env = {"PARKWAY_MAX_RUNS_PER_PRINCIPAL": "1000", "PARKWAY_MAX_STREAMS_PER_PRINCIPAL": "1000"}
    workers = [ParkwayProcess(server.url, agent, env=env).start() for _ in range(2)]
    owner = await Api(workers[0].base_url).login()
    clients = [owner, owner.same_user(workers[1].base_url)]
    chats = [f"r{i}" for i in range(24)]
    load = _Load()
    try:
        for chat in chats:
            assert (await clients[0].chat(chat, [user_message("go")])).status_code == 200
        driving = asyncio.gather(
            *(_drive_chat(clients[i % 2], chat, load) for i, chat in enumerate(chats))
        )

        def half_held(k: int) -> bool:
            if driving.done():
                driving.result()  # a driver failed: its error, not a timeout
            return len(load.held[k]) >= len(chats) // 2

        for k in range(RESTARTS):
            await eventually(lambda k=k: half_held(k), within_s=120, what=f"restart {k}")
            load.outage_seen.clear()
            await asyncio.to_thread(server.shutdown if restart == "shutdown" else server.kill)
            await eventually(load.outage_seen.is_set, within_s=60, what="a 503 in the outage")
            await asyncio.to_thread(server.start)
            load.restarted[k].set()
        await asyncio.wait_for(driving, 180)
    finally:
        for client in clients:
            await client.aclose()
        for worker in workers:
            worker.stop()
    statuses = load.statuses
    assert not [s for s in statuses if s >= 500 and s != 503], sorted(set(statuses))
    assert 503 in statuses
    for chat in chats:
        entries = await history(direct, chat)
        kinds = [e["t"] for e in entries]
        assert kinds.count("user") == 1, (chat, kinds)
        assert kinds.count("assistant") == ROUNDS + 1, (chat, kinds)
        assert kinds.count("result") == ROUNDS, (chat, kinds)
        meta = await direct.hgetall(chat_keys(chat).meta)
        assert meta[b"state"] == b"idle" and meta[b"model_calls"] == str(ROUNDS + 1).encode()


async def test_a_stale_pooled_connection_never_surfaces_after_a_restart(
    server: RestartableRedis,
) -> None:
    """Every connection of the pool was opened before a clean restart: each command
    after it still succeeds (the client reconnects and sends it again)."""
    client = connect(server.url, max_connections=8)
    try:
        await asyncio.gather(*(client.set(f"k{i}", i) for i in range(32)))
        await asyncio.to_thread(server.shutdown)
        await asyncio.to_thread(server.start)
        values = await asyncio.gather(*(client.get(f"k{i}") for i in range(32)))
        assert values == [str(i).encode() for i in range(32)]
    finally:
        await client.aclose()


async def test_commands_wait_for_a_free_connection_instead_of_failing(
    server: RestartableRedis,
) -> None:
    """Two connections, 200 concurrent commands: they queue for a connection (bounded
    wait) and all succeed; the server never sees more than two connections of ours."""
    client = connect(server.url, max_connections=2, pool_timeout_s=10)
    try:
        results = await asyncio.gather(*(client.incr("n") for _ in range(200)))
        assert sorted(results) == list(range(1, 201))
        assert len(await client.client_list()) <= 2
    finally:
        await client.aclose()


async def test_followers_survive_their_watch_connection_dying(
    proxy: RedisProxy, proxied: RedisClient, tmp_path: Path
) -> None:
    """Every connection (the log watch's subscription included) is cut while followers
    wait on a held run; Redis stays up. The watch reconnects and subscribes again, and
    the followers get the run's end though their quiet period outlasts the test."""
    release = tmp_path / "go"
    doc = held_agent_doc([[call("wait_for_file", {"path": str(release)})], [text("after the cut")]])
    agent = parse_agent_file(doc)
    runner = Runner(proxied, agent.model, agent.template, config=RunnerConfig(follow_quiet_s=600))
    run = await runner.start_turn("w1", "alice", "hi")
    start = await asyncio.wait_for(asyncio.shield(run.log_start), 10)
    following = asyncio.gather(*([collect(runner.follow("w1", start)) for _ in range(3)]))
    watch = runner.logwatch

    def wakes() -> list[asyncio.Event]:
        """The followers' wake-up events (each follower clears its own before it reads)."""
        return [event for events in watch._waiters.values() for event in events]

    # the three followers wait, subscribed on a live connection, before the cut
    await eventually(lambda: len(wakes()) == 3 and watch.healthy, what="followers waiting")
    proxy.down()
    proxy.up()
    # the watch notices, reconnects and subscribes again
    await eventually(lambda: watch.reconnects > 0, within_s=10, every_s=0.05)
    assert watch.reconnects == 1
    # the reconnect woke every follower; each has taken its wake-up (and reads again)
    await eventually(lambda: not any(e.is_set() for e in wakes()), what="wake-ups taken")
    release.write_text("go")
    followed = await asyncio.wait_for(following, 30)
    emitted = await run.collect()
    for events in followed:
        assert coalesce(events) == coalesce(emitted)
        assert "after the cut" in "".join(e.delta for e in events if isinstance(e, TextDelta))
    await runner.aclose()


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]
