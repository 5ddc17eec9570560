"""The fixtures of the connect-flow tests: one rig (a real Parkway and a real
oidc-provider, ``tests/helpers/connect_rig.py``) per module, and a signed-in browser per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from tests.helpers.connect_rig import Browser, Rig, signed_in, start_rig
from tests.helpers.oidc_peer import oidc_peer


@pytest.fixture(scope="module")
def rig(redis_url: str) -> Iterator[Rig]:
    yield from start_rig(redis_url, oidc_peer)


@pytest.fixture
def browser(rig: Rig, redis: Redis) -> Iterator[Browser]:
    """A browser signed in to the rig's Parkway (this folder's, not chromium)."""
    del redis  # a clean database, and the keyspace check afterwards
    yield from signed_in(rig)
