"""A Redis outage as a fault run finds it: a real ``parkway serve`` worker after a burst
of turns, with streams open, and its Redis stopped, then started again on the same port
and data folder. Once the worker has met the outage, every API request answers 503
``redis_unavailable`` with Retry-After at once, open streams end with an error chunk,
and the worker serves again by itself when Redis is back."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.faults import RestartableRedis
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    call,
    eventually,
    held_agent_doc,
    sse_chunks,
    text,
    user_message,
)

pytestmark = [pytest.mark.slow]

BURST = 20
STREAMS = 3
ROUNDS = 10  # requests of each kind measured during the outage
# The spec of the answer during an outage (issue 29): within a second, once the worker
# knows. Not a benchmark: a worker that waits out its retries or its pool takes 5-25 s.
ANSWER_WITHIN_S = 1.0


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RestartableRedis]:
    started = RestartableRedis(tmp_path).start()
    try:
        yield started
    finally:
        started.stop()


async def timed(request: asyncio.Future[httpx.Response] | object) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await request  # type: ignore[misc]
    return response, time.perf_counter() - started


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "redis_unavailable"
    assert response.json()["error"]["message"]
    assert int(response.headers["retry-after"]) > 0


@pytest.mark.timeout(180)
async def test_a_stopped_redis_is_answered_at_once_and_the_worker_recovers_alone(
    server: RestartableRedis, tmp_path: Path
) -> None:
    """20 concurrent turns park, 3 more are held running with their streams open; Redis
    stops. The open streams end with an ``error`` chunk and ``[DONE]``. After the first
    503 (allowed a few seconds: the worker's first command finds out), each of 10
    ``GET /api/chats/{id}`` and 10 ``POST /api/chat`` answers 503 ``redis_unavailable``
    with Retry-After within a second. Redis starts again on the same port and data
    folder: with no restart of the worker, a request succeeds within seconds, and the
    chats from before the outage read as they were."""
    ready = tmp_path / "ready"
    ready.write_text("")
    held = tmp_path / "held"  # never written while Redis is up: holds the streamed runs
    doc = held_agent_doc(
        [
            [call("wait_for_file", {"path": "{{last_user_text}}"})],
            [text("Pick one."), call("pick", {"q": "colour"})],
            [text("got it")],
        ]
    )
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(doc))
    env = {"PARKWAY_MAX_RUNS_PER_PRINCIPAL": "100", "PARKWAY_MAX_STREAMS_PER_PRINCIPAL": "100"}
    worker = ParkwayProcess(server.url, agent, env=env).start()
    api = await Api(worker.base_url).login()
    try:
        # the burst: every turn parks on `pick`
        burst = [f"b{i}" for i in range(BURST)]
        answers = await asyncio.gather(*(api.say(chat, str(ready)) for chat in burst))
        for chunks in answers:
            assert [c["toolName"] for c in chunks if c["type"] == "tool-input-available"] == [
                "wait_for_file",
                "pick",
            ]
        before = await api.state("b0")

        # open streams: runs held in their tool, followed live
        async def stream(chat: str, opened: asyncio.Event) -> list[dict[str, object]]:
            body = {"id": chat, "messages": [user_message(str(held))], "trigger": "submit-message"}
            async with api.http.stream("POST", "/api/chat", json=body) as response:
                assert response.status_code == 200
                lines: list[str] = []
                async for line in response.aiter_lines():
                    lines.append(line)
                    if "tool-input-available" in line:
                        opened.set()
                return sse_chunks("\n".join(lines))

        opened = [asyncio.Event() for _ in range(STREAMS)]
        streams = [asyncio.create_task(stream(f"s{i}", opened[i])) for i in range(STREAMS)]
        await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 30)

        await asyncio.to_thread(server.shutdown)

        # every open stream ends, with an error chunk, then [DONE] (sse_chunks stops there)
        for chunks in await asyncio.wait_for(asyncio.gather(*streams), 30):
            assert chunks[-1]["type"] == "error", chunks
            assert chunks[-1]["errorText"]

        # the first failure: the worker finds out (a few seconds at most)
        async def unavailable() -> bool:
            return (await api.http.get("/api/chats/b0")).status_code == 503

        await eventually(unavailable, within_s=15, every_s=0.05, what="the first 503")

        slowest = 0.0
        for i in range(ROUNDS):
            read, took = await timed(api.http.get(f"/api/chats/b{i}"))
            assert_unavailable(read)
            slowest = max(slowest, took)
            turn, took = await timed(api.chat(f"n{i}", [user_message("hello")]))
            assert_unavailable(turn)
            slowest = max(slowest, took)
        assert slowest < ANSWER_WITHIN_S, f"a 503 took {slowest:.3f} s"
        # the process lives through it
        assert (await api.http.get("/healthz")).status_code == 200

        await asyncio.to_thread(server.start)  # same port, same data folder (AOF)

        async def served() -> bool:
            return (await api.http.get("/api/chats/b0")).status_code == 200

        await eventually(served, within_s=30, every_s=0.05, what="served again")
        assert await api.state("b0") == before
        for chat in burst:
            state = await api.state(chat)
            assert state["state"] == "parked", (chat, state["state"])
        # and the worker takes new turns again
        fresh = await api.say("after", str(ready))
        assert any(c["type"] == "tool-input-available" for c in fresh)
    finally:
        held.write_text("go")  # let the held tools end
        await api.aclose()
        worker.stop()
