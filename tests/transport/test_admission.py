"""Admission control over real HTTP: past a per-principal or per-worker limit on runs
or streams the answer is 429 with Retry-After, nothing is started, other principals are
unaffected, and slots come back when runs and streams end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from parkway.runner import chat_keys
from tests.helpers.support import Api, ServerThread, call, held_agent_doc, text, user_message

pytestmark = pytest.mark.slow


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """The file every held run waits for; written when the test ends, releasing them."""
    marker = tmp_path / "release"
    yield marker
    marker.write_text("go")


@pytest.fixture
def server(redis: Redis, redis_url: str, held: Path) -> Iterator[ServerThread]:
    doc = held_agent_doc([[call("wait_for_file", {"path": str(held)})], [text("released")]])
    started = ServerThread(
        redis_url,
        doc,
        max_runs_per_principal=2,
        max_streams_per_principal=3,
        max_runs_per_worker=3,
        max_streams_per_worker=100,
    ).start()
    yield started
    held.write_text("go")  # runs still held end now, not at the shutdown's drain deadline
    started.stop()


@contextlib.asynccontextmanager
async def running(api: Api, chat: str) -> AsyncIterator[httpx.Response]:
    """A turn held in its tool, with its stream open until the block ends."""
    body = {"id": chat, "messages": [user_message("go")], "trigger": "submit-message"}
    async with api.http.stream("POST", "/api/chat", json=body) as response:
        assert response.status_code == 200
        # (the line iterator is kept: a dropped one closes the response when collected)
        lines = response.aiter_lines()
        async for line in lines:
            if "tool-input-available" in line:
                break
        yield response
        del lines


def refused(response: httpx.Response, code: str) -> bool:
    return (
        response.status_code == 429
        and response.json()["error"]["code"] == code
        and int(response.headers["retry-after"]) > 0
    )


async def test_runs_past_the_principal_and_worker_limits_get_429(
    server: ServerThread, redis: Redis, held: Path
) -> None:
    """Alice holds her two runs: her third turn is refused (429, Retry-After) without
    touching its chat; Bob still gets a run, until the worker's three are taken; once
    the runs end, Alice is admitted again."""
    alice = await Api(server.base_url).login()
    bob = await Api(server.base_url).login()
    try:
        async with running(alice, "a1"), running(alice, "a2"):
            third = await alice.chat("a3", [user_message("go")])
            assert refused(third, "too_many_runs"), third.text
            assert not await redis.exists(chat_keys("a3").meta)  # nothing was started
            async with running(bob, "b1"):
                full = await bob.chat("b2", [user_message("go")])
                assert refused(full, "too_many_runs"), full.text
                assert "limit" in full.json()["error"]["message"]
            held.write_text("go")
        # the held runs finish (each gives its slot back as its task ends)
        for _ in range(100):
            after = await alice.chat("a3", [user_message("go")])
            if after.status_code != 429:
                break
            await asyncio.sleep(0.05)
        assert after.status_code == 200
        assert "released" in after.text
    finally:
        await alice.aclose()
        await bob.aclose()


async def test_streams_past_the_principal_limit_get_429_until_one_closes(
    server: ServerThread,
) -> None:
    """A run's own stream and two reconnects fill Alice's three streams: a fourth
    reconnect is refused; closing one gives its slot back."""
    alice = await Api(server.base_url).login()
    try:
        async with running(alice, "s1"):
            stream_url = "/api/chat/s1/stream"
            async with alice.http.stream("GET", stream_url) as first:
                assert first.status_code == 200
                async with alice.http.stream("GET", stream_url) as second:
                    assert second.status_code == 200
                    fourth = await alice.http.get(stream_url)
                    assert refused(fourth, "too_many_streams"), fourth.text
            # both reconnects closed: one more is admitted
            async with alice.http.stream("GET", stream_url) as again:
                assert again.status_code == 200
    finally:
        await alice.aclose()


def test_admission_counts_give_back_their_slots() -> None:
    """The counter itself: limits per principal and per worker, release once."""
    from parkway.transport.api.admission import Admission
    from parkway.transport.errors import HTTPError

    admission = Admission(
        runs_per_principal=1, streams_per_principal=1, runs_per_worker=2, streams_per_worker=1
    )
    release = admission.admit("run", "a")
    with pytest.raises(HTTPError) as caught:
        admission.admit("run", "a")
    assert caught.value.status == 429 and caught.value.headers["retry-after"]
    other = admission.admit("run", "b")
    with pytest.raises(HTTPError):
        admission.admit("run", "c")  # the worker's two are taken
    release()
    release()  # a second release gives nothing back twice
    assert admission.in_use("run") == 1 and admission.in_use("run", "a") == 0
    other()
    assert admission.in_use("run") == 0
    admitted: list[Any] = [admission.admit("stream", "a")]
    with pytest.raises(HTTPError):
        admission.admit("stream", "b")
    admitted[0]()


class AddressedApi(Api):
    """An Api whose connections come from ``address`` (any 127/8 address reaches a
    server bound to 127.0.0.1 on Linux)."""

    def __init__(self, base_url: str, address: str) -> None:
        super().__init__(base_url)
        transport = httpx.AsyncHTTPTransport(local_address=address)
        self.http = httpx.AsyncClient(base_url=base_url, timeout=30, transport=transport)


async def hold_or_refusal(
    stack: contextlib.AsyncExitStack, api: Api, chat: str
) -> httpx.Response | None:
    """A turn held in its tool until the stack closes (None), or the refusal."""
    body = {"id": chat, "messages": [user_message("go")], "trigger": "submit-message"}
    response = await stack.enter_async_context(api.http.stream("POST", "/api/chat", json=body))
    if response.status_code != 200:
        await response.aread()
        return response
    lines = response.aiter_lines()
    async for line in lines:
        if "tool-input-available" in line:
            break
    stack.push_async_callback(lines.aclose)  # (kept until the stack closes)
    return None


async def test_sessions_minted_by_one_address_cannot_take_the_whole_worker(
    redis: Redis, redis_url: str, held: Path
) -> None:
    """The red team's bypass: one address mints session after session, each with its own
    run allowance. It gets the worker's open share (6 of 8 runs) and no more; a user
    from another address is still served from the kept share."""
    doc = held_agent_doc([[call("wait_for_file", {"path": str(held)})], [text("released")]])
    server = ServerThread(
        redis_url, doc, max_runs_per_principal=2, max_runs_per_worker=8,
        max_streams_per_principal=4, admission_reserve=0.25,
    ).start()  # fmt: skip
    clients: list[Api] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            admitted = 0
            refusal = None
            while refusal is None and admitted < 8:
                attacker = await AddressedApi(server.base_url, "127.0.0.1").login()
                clients.append(attacker)
                for m in range(2):
                    refusal = await hold_or_refusal(stack, attacker, f"flood-{admitted}-{m}")
                    if refusal is not None:
                        break
                    admitted += 1
            assert admitted == 6
            assert refusal is not None and refused(refusal, "too_many_runs"), refusal
            assert "other clients" in refusal.json()["error"]["message"]
            victim = await AddressedApi(server.base_url, "127.0.0.2").login()
            clients.append(victim)
            assert await hold_or_refusal(stack, victim, "victim-1") is None
            held.write_text("go")  # the held runs finish; the stack closes their streams
    finally:
        held.write_text("go")
        for api in clients:
            await api.http.aclose()
        server.stop()
