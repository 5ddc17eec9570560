"""Several `parkway serve` processes on one Redis behave as one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner.store.keys import chat_keys
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    agent_doc,
    answered,
    call,
    eventually,
    sse_chunks,
    text,
    types,
)

pytestmark = pytest.mark.slow

# These tests race one principal's requests on purpose; admission control (its own
# tests are in test_admission.py) must not turn the race into 429s.
UNLIMITED = {
    "PARKWAY_MAX_RUNS_PER_PRINCIPAL": "100000",
    "PARKWAY_MAX_STREAMS_PER_PRINCIPAL": "100000",
}


async def test_park_on_a_settle_on_b_resume_on_c_reconnect_to_d_mid_stream(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Four worker processes sharing only Redis: the chat parks on A, is settled on B,
    resumed on C, and a client reconnecting to D while C is mid-continuation gets the
    whole message and follows it to the end."""
    gate = tmp_path / "open"
    wait_tool = {
        "type": "function",
        "name": "wait_for_file",
        "ref": "tests.helpers.tools:wait_for_file",
    }
    pick = {"type": "client", "name": "pick", "input_schema": {"type": "object"}}
    turns = [
        [text("Pick."), call("pick", {"q": "x"})],
        [text("Working on it."), call("wait_for_file", {"path": str(gate)})],
        [text("Done with {{last_tool_results}}.")],
    ]
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(agent_doc(turns, tools=[pick, wait_tool])))
    a, b, c, d = (ParkwayProcess(redis_url, agent, env=UNLIMITED).start() for _ in range(4))
    try:
        on_a = await Api(a.base_url).login()
        first = await on_a.say("abcd", "hi")
        call_id = next(x["toolCallId"] for x in first if x["type"] == "tool-input-available")
        on_b, on_c, on_d = (on_a.same_user(w.base_url) for w in (b, c, d))
        settled = await on_b.settle(
            "abcd", call_id, {"outcome": "output", "output": {"choice": "b"}}
        )
        assert settled.status_code == 200
        resuming = asyncio.create_task(on_c.resume("abcd"))

        async def c_waits_in_the_tool() -> bool:
            info = await redis.hget(chat_keys("abcd").meta, "run_start")
            entries = await redis.xrange(chat_keys("abcd").events, min=info or "-") if info else []
            return any(b'"tool_name":"wait_for_file"' in e[1][b"b"] for e in entries)

        await eventually(c_waits_in_the_tool, within_s=30, what="C's run waiting in the tool")
        lines: list[str] = []
        async with on_d.http.stream("GET", "/api/chat/abcd/stream") as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                lines.append(line)
                if "wait_for_file" in line and not gate.exists():
                    gate.write_text("go")  # D has caught up: let C finish
        from_c = sse_chunks((await resuming).text)
        for api in (on_a, on_b, on_c, on_d):
            await api.aclose()
    finally:
        for worker in (a, b, c, d):
            worker.stop()
    replay = sse_chunks("\n".join(lines))
    assert replay[0] == {"type": "start", "messageId": first[0]["messageId"]}
    assert replay[-1] == {"type": "finish", "finishReason": "stop"}
    said = "".join(x["delta"] for x in replay if x["type"] == "text-delta")
    assert (
        said == 'Pick.Working on it.Done with [{"result":{"seen":"open"},"tool":"wait_for_file"}].'
    )
    assert types(from_c)[-1] == "finish"
    assert "".join(x["delta"] for x in from_c if x["type"] == "text-delta") == said[len("Pick.") :]


@pytest.mark.parametrize(
    "count",
    [250, pytest.param(1000, marks=pytest.mark.load)],  # make load: the full size
)
async def test_hundreds_of_chats_parked_then_resumed_across_three_workers(
    redis: Redis, redis_url: str, tmp_path: Path, count: int
) -> None:
    """Hundreds of chats (``make test``: 250; ``make load``: 1,000) park on three
    workers; each answer is posted twice, to two different workers, all at once. Every
    chat continues exactly once: none lost, none doubled."""
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(agent_doc([[call("pick", {"q": "n"})], [text("resumed")]])))
    workers = [ParkwayProcess(redis_url, agent, env=UNLIMITED).start() for _ in range(3)]
    chats = [f"k{i}" for i in range(count)]
    limit = asyncio.Semaphore(48)
    owner = Api(workers[0].base_url)
    clients: list[Api] = []
    try:
        await owner.login()
        clients = [owner.same_user(w.base_url) for w in workers]

        async def park(i: int) -> list[dict[str, Any]]:
            async with limit:
                return await clients[i % 3].say(chats[i], "hi")

        parked = await asyncio.gather(*(park(i) for i in range(len(chats))))

        async def answer(i: int, worker: int) -> int:
            async with limit:
                response = await clients[worker].chat(
                    chats[i], answered(parked[i], {"choice": "n"})
                )
                return response.status_code

        statuses = await asyncio.gather(
            *(answer(i, (i + k) % 3) for i in range(len(chats)) for k in (0, 1))
        )
    finally:
        for client in [owner, *clients]:
            await client.aclose()
        for worker in workers:
            worker.stop()
    assert statuses.count(200) == len(chats)
    assert all(s == 409 for s in statuses if s != 200)
    pipe = redis.pipeline(transaction=False)
    for chat in chats:
        pipe.hmget(chat_keys(chat).meta, ["state", "model_calls"])
        pipe.llen(chat_keys(chat).history)
    replies = await pipe.execute()
    states = replies[0::2]
    lengths = replies[1::2]
    assert all(s == [b"idle", b"2"] for s in states)
    assert set(lengths) == {4}  # user, step 1, its result, step 2: nothing twice
