"""Connection refresh: one refresh under a cross-worker lock, the rotated refresh token
persisted, reconnect on ``invalid_grant``, never more scope than granted, and provider
failures that change nothing.

Against real Redis and a real OAuth provider on loopback (``tests/helpers/oidc_peer.py``: rotating
refresh tokens with reuse detection). Expiry is driven by the store's injectable clock,
never by sleeping. Anchors: docs' threat model, oauth-security.md §1 "Refresh tokens",
§5 items 27-31.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner.agent.credentials import ConnectionUnavailableError
from parkway.transport.logs import QUIET_LOGGERS
from parkway.widgets_api.connect.cipher import TokenCipher, generate_token_key
from parkway.widgets_api.connect.connections import ConnectionStore
from parkway.widgets_api.connect.providers import ProviderRegistry
from tests.helpers.oauth_support import (
    ALICE,
    REG,
    SECRET,
    Clock,
    LoopbackServer,
    fake_token,
    introspect_active,
    json_reply,
    needs_node,
    offline_provider,
    peer_registry,
    redis_dump,
    refresh_directly,
    revoke,
    save_real,
    userinfo_status,
)
from tests.helpers.oidc_peer import OidcPeer, oidc_peer


def debug_everything(caplog: pytest.LogCaptureFixture) -> None:
    """Every logger at DEBUG for this test, the libraries the server holds at WARNING
    (transport/logs.py, QUIET_LOGGERS) included: an earlier test in this process may have
    applied the server's logging, and a token must not be logged at any level."""
    caplog.set_level(logging.DEBUG)
    for name in QUIET_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)


NARROW = "openid offline_access profile"


@pytest.fixture(scope="module")
def peer() -> Iterator[OidcPeer]:
    with oidc_peer([REG]) as running:
        yield running


@pytest.fixture(scope="module")
def narrow_peer() -> Iterator[OidcPeer]:
    """Consent grants only ``NARROW`` whatever is asked."""
    with oidc_peer([REG], grant_only=NARROW) as running:
        yield running


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cipher() -> TokenCipher:
    return TokenCipher.from_setting(generate_token_key())


@pytest.fixture
async def workers(redis_url: str) -> AsyncIterator[list[Redis]]:
    """Four Redis clients of their own: four workers sharing nothing but Redis."""
    clients = [Redis.from_url(redis_url) for _ in range(4)]
    try:
        yield clients
    finally:
        for client in clients:
            await client.aclose()


async def stored_tokens(
    store: ConnectionStore, principal: str, connection_id: str
) -> dict[str, Any]:
    """The decrypted token set as stored (through the store's own key and context)."""
    raw = await store.redis.hgetall(store._keys(principal).connection(connection_id))
    return store._open(principal, connection_id, raw)


def refreshes(peer: OidcPeer) -> int:
    return int(peer.stats()["token_requests"].get("refresh_token", 0))


def assert_not_logged(caplog: pytest.LogCaptureFixture, *tokens: str) -> None:
    assert caplog.records, "the test should have produced some log records to check"
    for token in tokens:
        assert token not in caplog.text


# -- refresh on expiry -------------------------------------------------------------


@needs_node
async def test_expired_token_refreshes_once_and_persists_the_rotated_refresh_token(
    redis: Redis,
    peer: OidcPeer,
    cipher: TokenCipher,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§27 with rotation: the refresh token that was just issued must be the one stored,
    or the next refresh presents a dead token and the grant is lost."""
    debug_everything(caplog)
    store = ConnectionStore(redis, cipher, await peer_registry(peer), clock=clock)
    connection_id, token = await save_real(store, peer)
    start = refreshes(peer)

    clock.advance(3600)
    first = await store.access_token(ALICE, connection_id)
    assert first != token["access_token"]
    assert await store.access_token(ALICE, connection_id) == first
    assert refreshes(peer) == start + 1
    stored = await stored_tokens(store, ALICE, connection_id)
    assert stored["access_token"] == first
    assert stored["refresh_token"] != token["refresh_token"]
    assert introspect_active(peer, REG, stored["refresh_token"])

    clock.advance(3600)
    second = await store.access_token(ALICE, connection_id)
    assert second not in (first, token["access_token"])
    assert refreshes(peer) == start + 2
    again = await stored_tokens(store, ALICE, connection_id)
    assert again["refresh_token"] not in (stored["refresh_token"], token["refresh_token"])
    assert userinfo_status(peer, second) == 200
    assert (await store.get(ALICE, connection_id)).status == "active"  # type: ignore[union-attr]
    assert_not_logged(
        caplog,
        token["access_token"],
        token["refresh_token"],
        first,
        stored["refresh_token"],
        second,
        again["refresh_token"],
    )


# -- one refresh across workers ----------------------------------------------------


@needs_node
async def test_concurrent_callers_across_workers_cause_exactly_one_refresh(
    peer: OidcPeer,
    workers: list[Redis],
    redis: Redis,
    cipher: TokenCipher,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§28: without a cross-process lock a rotating provider sees the same refresh token
    twice, treats it as theft and revokes the grant for everyone."""
    debug_everything(caplog)
    registry = await peer_registry(peer)
    stores = [ConnectionStore(client, cipher, registry, clock=clock) for client in workers]
    connection_id, token = await save_real(stores[0], peer)
    clock.advance(3600)
    start = refreshes(peer)

    results = await asyncio.gather(
        *(stores[i % len(stores)].access_token(ALICE, connection_id) for i in range(24))
    )
    assert refreshes(peer) == start + 1
    assert len(set(results)) == 1 and results[0] != token["access_token"]
    assert peer.stats()["token_errors"].get("invalid_grant", 0) == 0
    renewed = await stored_tokens(stores[2], ALICE, connection_id)

    # The grant survived: the persisted refresh token still works, the token is live.
    clock.advance(3600)
    later = await stores[3].access_token(ALICE, connection_id)
    assert later != results[0]
    assert refreshes(peer) == start + 2
    assert userinfo_status(peer, later) == 200
    assert_not_logged(
        caplog, token["access_token"], token["refresh_token"], results[0], renewed["refresh_token"]
    )


@needs_node
async def test_refreshing_without_the_lock_loses_the_grant(
    peer: OidcPeer, workers: list[Redis], redis: Redis, cipher: TokenCipher, clock: Clock
) -> None:
    """Control for the test above: two workers refreshing the same snapshot (the lock
    bypassed, taken in turn so it is deterministic) trip reuse detection, which revokes
    the grant, including the winner's fresh refresh token."""
    registry = await peer_registry(peer)
    one, two = (ConnectionStore(client, cipher, registry, clock=clock) for client in workers[:2])
    connection_id, _ = await save_real(one, peer)
    clock.advance(3600)
    connection = await one.get(ALICE, connection_id)
    assert connection is not None
    snapshot = await stored_tokens(one, ALICE, connection_id)

    await one._refresh(ALICE, connection, snapshot)
    winner = await stored_tokens(one, ALICE, connection_id)
    with pytest.raises(ConnectionUnavailableError) as lost:
        await two._refresh(ALICE, connection, snapshot)
    assert lost.value.reason == "needs_reconnect"
    assert not introspect_active(peer, REG, winner["refresh_token"])


class WatchedClock(Clock):
    """A clock that says when it has been read twice since :meth:`watch`: a caller of an
    expired connection reads it once to find the token expired, then once per look
    inside the refresh lock's wait loop."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.read_twice = asyncio.Event()

    def __call__(self) -> float:
        self.reads += 1
        if self.reads >= 2:
            self.read_twice.set()
        return super().__call__()

    def watch(self) -> None:
        self.reads = 0
        self.read_twice.clear()


async def test_a_waiting_caller_takes_the_new_token_while_the_lock_is_still_held(
    redis: Redis, cipher: TokenCipher
) -> None:
    """docs/security.md: callers waiting for another worker's refresh use the new token
    as soon as it is stored. A worker that stored its refresh and then died keeps the
    lock until it times out (30 s); waiting for the lock rather than for the token would
    stall every caller of the connection that long."""
    clock = WatchedClock()
    store = ConnectionStore(redis, cipher, ProviderRegistry([offline_provider()]), clock=clock)
    provider = store.providers.get("acme")
    assert provider is not None
    connection = await store.save(
        ALICE, provider, fake_token(), account="a", subject="1", scopes=[]
    )
    clock.advance(3600)
    other_worker = redis.lock(store._keys(ALICE).refresh_lock(connection.id), timeout=30)
    assert await other_worker.acquire(blocking=False)

    clock.watch()
    waiting = asyncio.ensure_future(store.access_token(ALICE, connection.id))
    await asyncio.wait_for(clock.read_twice.wait(), 10)  # inside the wait loop now
    renewed = fake_token()  # what the other worker's refresh stored before it died
    await store.save(ALICE, provider, renewed, account="a", subject="1", scopes=[])
    assert await asyncio.wait_for(waiting, 10) == renewed["access_token"]
    assert await other_worker.owned()
    await other_worker.release()


# -- invalid_grant -----------------------------------------------------------------


@needs_node
@pytest.mark.parametrize("spoil", ["revoked", "already rotated"])
async def test_invalid_grant_marks_needs_reconnect_without_retrying(
    redis: Redis,
    peer: OidcPeer,
    cipher: TokenCipher,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
    spoil: str,
) -> None:
    """§29: a dead grant must turn into "connect again" for the model, once, not into a
    refresh loop hammering the provider."""
    debug_everything(caplog)
    store = ConnectionStore(redis, cipher, await peer_registry(peer), clock=clock)
    connection_id, token = await save_real(store, peer)
    seen = [token["access_token"], token["refresh_token"]]
    if spoil == "revoked":
        revoke(peer, REG, token["refresh_token"], "refresh_token")
    else:
        rotated = refresh_directly(peer, REG, token["refresh_token"])
        seen += [rotated["access_token"], rotated["refresh_token"]]
    clock.advance(3600)
    start = refreshes(peer)

    with pytest.raises(ConnectionUnavailableError) as first:
        await store.access_token(ALICE, connection_id)
    assert first.value.reason == "needs_reconnect"
    assert first.value.provider == "acme"
    assert "request_connection" in str(first.value) and "'acme'" in str(first.value)
    assert refreshes(peer) == start + 1
    assert (await store.get(ALICE, connection_id)).status == "needs_reconnect"  # type: ignore[union-attr]
    assert [c.status for c in await store.list(ALICE)] == ["needs_reconnect"]

    other_worker = ConnectionStore(redis, cipher, store.providers, clock=clock)
    for attempt in (store, other_worker):
        with pytest.raises(ConnectionUnavailableError) as again:
            await attempt.access_token(ALICE, connection_id)
        assert again.value.reason == "needs_reconnect"
    assert refreshes(peer) == start + 1
    assert_not_logged(caplog, *seen)


# -- granted scope -----------------------------------------------------------------


@needs_node
async def test_narrower_grant_is_recorded_and_refresh_asks_no_more_scope(
    redis: Redis, narrow_peer: OidcPeer, cipher: TokenCipher, clock: Clock
) -> None:
    """§30/§31: a refresh carrying the configured (wider) scope is refused as
    invalid_scope; the recorded scope must be what the user really granted."""
    store = ConnectionStore(redis, cipher, await peer_registry(narrow_peer), clock=clock)
    connection_id, token = await save_real(store, narrow_peer)
    assert set(str(token["scope"]).split()) == set(NARROW.split())
    connection = await store.get(ALICE, connection_id)
    assert connection is not None and "repo" not in connection.scopes
    errors = dict(narrow_peer.stats()["token_errors"])
    start = refreshes(narrow_peer)

    clock.advance(3600)
    renewed = await store.access_token(ALICE, connection_id, scopes=["profile"])
    assert renewed != token["access_token"]
    assert refreshes(narrow_peer) == start + 1
    assert narrow_peer.stats()["token_errors"] == errors
    after = await store.get(ALICE, connection_id)
    assert after is not None and set(after.scopes) == set(NARROW.split())


@needs_node
async def test_tool_needing_an_ungranted_scope_is_asked_to_reconnect(
    redis: Redis, narrow_peer: OidcPeer, cipher: TokenCipher, clock: Clock
) -> None:
    """§31: a missing scope is named, so the model can ask for exactly that, and no token
    request is wasted on it."""
    store = ConnectionStore(redis, cipher, await peer_registry(narrow_peer), clock=clock)
    connection_id, _ = await save_real(store, narrow_peer)
    start = refreshes(narrow_peer)
    for advance in (0, 3600):  # fresh, then expired: the scope check comes first
        clock.advance(advance)
        with pytest.raises(ConnectionUnavailableError) as missing:
            await store.access_token(ALICE, connection_id, scopes=["repo"])
        assert missing.value.reason == "missing_scope"
        assert "repo" in str(missing.value) and "request_connection" in str(missing.value)
    assert refreshes(narrow_peer) == start
    assert (await store.get(ALICE, connection_id)).status == "active"  # type: ignore[union-attr]


# -- token endpoint failures -------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        ((500, "text/plain", b"internal error"), "http_500"),
        ((200, "text/html", b"<html>not json</html>"), "invalid_response"),
        (json_reply({"error": "temporarily_unavailable"}, 400), "temporarily_unavailable"),
    ],
    ids=["500", "non-json", "oauth-error"],
)
async def test_token_endpoint_failure_on_refresh_is_provider_error_and_changes_nothing(
    redis: Redis,
    cipher: TokenCipher,
    clock: Clock,
    reply: tuple[int, str, bytes],
    code: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A provider outage is "try later", not "connect again": the grant is still good."""
    debug_everything(caplog)
    with LoopbackServer(lambda m, p: reply).running() as server:
        provider = offline_provider(token_endpoint=f"{server.url}/token")
        store = ConnectionStore(redis, cipher, ProviderRegistry([provider]), clock=clock)
        token = fake_token()
        connection = await store.save(ALICE, provider, token, account="a", subject="1", scopes=[])
        clock.advance(3600)
        before = await redis_dump(redis)
        with pytest.raises(ConnectionUnavailableError) as failed:
            await store.access_token(ALICE, connection.id)
        assert server.requests == [("POST", "/token")]
    assert failed.value.reason == "provider_error"
    assert code in str(failed.value)
    assert await redis_dump(redis) == before
    assert (await store.get(ALICE, connection.id)).status == "active"  # type: ignore[union-attr]
    assert token["refresh_token"] not in caplog.text and SECRET not in caplog.text


async def test_delete_during_a_refresh_is_not_undone_by_it(
    redis: Redis, cipher: TokenCipher, clock: Clock
) -> None:
    """A disconnect must stick: a refresh that was in flight must not write the new
    tokens back into a half record (which then outlives the delete for ttl_s). The
    refresh ends as ``not_found``: its lock went with the connection, and finding it
    gone must not turn into another error."""
    gate = threading.Event()
    issued = {"access_token": "at-after", "refresh_token": "rt-after", "expires_in": 3600}
    with LoopbackServer(lambda m, p: json_reply(issued), gate=gate).running() as server:
        provider = offline_provider(token_endpoint=f"{server.url}/token")
        store = ConnectionStore(redis, cipher, ProviderRegistry([provider]), clock=clock)
        connection = await store.save(
            ALICE, provider, fake_token(), account="a", subject="1", scopes=[]
        )
        clock.advance(3600)
        refreshing = asyncio.ensure_future(store.access_token(ALICE, connection.id))
        assert await asyncio.to_thread(server.received.wait, 10)
        assert await store.delete(ALICE, connection.id) is True
        gate.set()
        [ended] = await asyncio.gather(refreshing, return_exceptions=True)
    assert isinstance(ended, ConnectionUnavailableError) and ended.reason == "not_found"
    assert await redis_dump(redis) == {}
    with pytest.raises(ConnectionUnavailableError) as gone:
        await store.access_token(ALICE, connection.id)
    assert gone.value.reason == "not_found"
