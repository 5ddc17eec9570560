"""Quotas over HTTP against a real uvicorn and real bubblewrap: a turn past the quota is
a 429 naming it, and the red team's storage flood (fresh sessions from one address,
each approving its own code that prints 16 MiB) is bounded by the session throttle
times the per-principal quota. The counting itself: tests/runner/test_quotas.py."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from tests.helpers.support import (
    Api,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
CODE_TOOL = {"type": "platform", "op": "execute_code"}
FLOOD = 'import sys\nsys.stdout.write("x" * (16 * 1024 * 1024))\nresult(1)\n'

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None and os.environ.get("PARKWAY_REQUIRE_SANDBOX") != "1",
    reason="SANDBOX TESTS DID NOT RUN: bubblewrap is not installed (apt-get install bubblewrap)",
)


async def test_a_turn_past_the_quota_is_a_429_naming_it(redis: Redis, redis_url: str) -> None:
    del redis
    doc = agent_doc([[text("z" * 3000)]] * 3, tools=[])
    with server_thread(redis_url, doc, quota_stored_bytes=2000) as server:
        alice = await Api(server.base_url).login()
        try:
            await alice.say("q-1", "first")
            refused = await alice.chat("q-1", [user_message("second", "u2")])
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert error["code"] == "quota_exceeded"
            assert error["quota"] == "stored_bytes" and error["limit"] == 2000
            assert "storage quota" in error["message"]
            # nothing of the refused turn was stored
            messages = (await alice.state("q-1"))["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant"]
        finally:
            await alice.aclose()


async def flood(api: Api, chat: str) -> dict[str, Any]:
    """A turn whose code prints 16 MiB, approved by its own requester; the code's output."""
    chunks = await api.say(chat, "print a lot")
    [request] = [c for c in chunks if c["type"] == "tool-approval-request"]
    [tool_input] = [c for c in chunks if c["type"] == "tool-input-available"]
    settled = await api.settle(chat, tool_input["toolCallId"], {"outcome": "approved"})
    assert settled.status_code == 200, settled.text
    del request
    resumed = await api.resume(chat)
    assert resumed.status_code == 200, resumed.text
    [output] = [c for c in sse_chunks(resumed.text) if c["type"] == "tool-output-available"]
    return output["output"]  # type: ignore[no-any-return]


@needs_sandbox
async def test_the_storage_flood_is_bounded(redis: Redis, redis_url: str) -> None:
    """Fresh sessions from one address, each approving code that prints 16 MiB: the first
    output fits the 20 MiB quota and is kept; the second of the same principal is not
    (its first characters stay inline); the address gets three sessions and then 429;
    what its chats hold in Redis stays under sessions x quota."""
    doc = agent_doc(
        [[call("execute_code", {"code": FLOOD})], [text("printed")]] * 2, tools=[CODE_TOOL]
    )
    with server_thread(
        redis_url, doc, quota_stored_bytes=20 * MIB, session_burst=3, sessions_per_minute=1
    ) as server:
        sessions: list[Api] = []
        try:
            for _ in range(3):
                sessions.append(await Api(server.base_url).login())
            minted = await sessions[0].http.post("/api/sessions")
            assert (
                minted.status_code == 429 and minted.json()["error"]["code"] == "too_many_sessions"
            )
            for n, api in enumerate(sessions):
                first = await flood(api, f"flood-{n}-a")
                assert first["stdout_artifact"]["bytes"] == 16 * MIB
                second = await flood(api, f"flood-{n}-b")
                assert "stdout_artifact" not in second
                assert "storage quota" in second["stdout_note"]
                assert len(second["stdout"]) < 64 * 1024
            # What the flood's chats hold: exactly the three outputs kept (without the
            # quota, six), and in Redis's memory (MEMORY USAGE of each of their keys; the
            # server's used_memory also counts transient client buffers) at most that
            # and the allocator's rounding (jemalloc puts 16 MiB and a header in a 20 MiB
            # size class): well under the six outputs' 96 MiB.
            payload = held = 0
            async for key in redis.scan_iter(match="pw:{flood-*", count=1000):
                held += int(await redis.memory_usage(key, samples=0) or 0)
                if key.endswith(b":artifact-data"):
                    for field in await redis.hkeys(key):
                        payload += await redis.hstrlen(key, field)
            assert payload == 3 * 16 * MIB
            assert held < 3 * 20 * MIB * 1.1, held
        finally:
            for api in sessions:
                await api.aclose()


async def test_startup_warns_about_redis_without_maxmemory(redis: Redis) -> None:
    """No maxmemory, or an evicting policy, is named at startup; a bounded, non-evicting
    Redis is not."""
    from parkway.transport.app import memory_warning

    try:
        config = await redis.config_get("maxmemory*")
    except ResponseError as exc:  # (a Redis that refuses CONFIG is not judged: below)
        pytest.skip(f"this Redis refuses CONFIG: {exc}")
    try:
        await redis.config_set("maxmemory", 0)
        await redis.config_set("maxmemory-policy", "noeviction")
        assert "no maxmemory" in (await memory_warning(redis) or "")
        await redis.config_set("maxmemory", 1024 * MIB)
        assert await memory_warning(redis) is None
        await redis.config_set("maxmemory-policy", "allkeys-lru")
        assert "evicts keys" in (await memory_warning(redis) or "")
    finally:
        await redis.config_set("maxmemory", config["maxmemory"])
        await redis.config_set("maxmemory-policy", config["maxmemory-policy"])
