"""Fixtures: a real Redis for every test (embedded unless PARKWAY_TEST_REDIS_URL is
set), a clean database per test, and a check of the keyspace each test leaves."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from runner.embedded import EmbeddedRedis
from tests.topologies import assert_keyspace_clean


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
        # Every key a test leaves must expire on its own (tests/topologies.py says how).
        await assert_keyspace_clean([client], client)
    finally:
        await client.flushdb()
        await client.aclose()
