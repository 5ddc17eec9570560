"""The fixtures of the demo provider's tests: a clock the test moves, the provider served
by uvicorn in a thread on a clean database, and a plain httpx "browser"."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from redis.asyncio import Redis

from tests.helpers.oauth_support import Clock, DemoProviderServer, serve_demo_provider


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def demo(redis_url: str, redis: Redis, clock: Clock) -> Iterator[DemoProviderServer]:
    with serve_demo_provider(redis_url, clock) as provider:
        yield provider


@pytest.fixture
def browser() -> Iterator[httpx.Client]:
    """Redirects not followed: each test reads where the provider sends the user."""
    with httpx.Client(follow_redirects=False, timeout=10) as client:
        yield client
