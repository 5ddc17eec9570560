"""Fixtures: a real Redis for every test (embedded unless PARKWAY_TEST_REDIS_URL is
set), a clean database per test, and a check of the keyspace each test leaves."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from runner.embedded import EmbeddedRedis
from runner.keys import DEADLINES, ChatKeys, parse_deadline_member


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    configured = os.environ.get("PARKWAY_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    # Unix socket paths are short-limited; a short temp folder keeps us under it.
    folder = Path(tmp_path_factory.mktemp("redis", numbered=True))
    server = EmbeddedRedis(folder)
    url = server.start()
    try:
        yield url
    finally:
        server.stop(force=True)  # the suite's own server: never left behind


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    await client.flushdb()
    try:
        yield client
        # Every key a test leaves must expire on its own: a key without a TTL is a leak.
        # The one exception is the deadline index, whose members are owned by their
        # calls: each must belong to a call that is still pending.
        leaked = [
            key.decode()
            async for key in client.scan_iter(count=1000)
            if key != DEADLINES.encode() and await client.ttl(key) < 0
        ]
        assert not leaked, f"keys without a TTL were left behind: {sorted(leaked)[:10]}"
        stale = []
        for member in await client.zrange(DEADLINES, 0, -1):
            chat_id, call_id = parse_deadline_member(member.decode())
            keys = ChatKeys(chat_id)
            if not await client.hexists(keys.calls, call_id) or await client.hexists(
                keys.outcomes, call_id
            ):
                stale.append(member.decode())
        assert not stale, f"deadlines of calls that are not pending: {stale[:10]}"
    finally:
        await client.flushdb()
        await client.aclose()
