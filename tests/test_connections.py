"""Connections: tokens encrypted at rest, refresh under a cross-worker lock, reconnect on
``invalid_grant``, revocation on delete; providers and the settings that guard the key.

Against real Redis and a real OAuth provider on loopback (``tests/oidc_peer.py``: rotating
refresh tokens with reuse detection). Expiry is driven by the store's injectable clock,
never by sleeping. Anchors: docs' threat model, oauth-security.md §1 "Refresh tokens",
§5 items 27-33.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import shutil
import stat
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from runner.credentials import ConnectionUnavailableError
from tests.oauth_support import (
    Clock,
    LoopbackServer,
    fetch_json,
    introspect_active,
    json_reply,
    obtain_token,
    refresh_directly,
    registration,
    revoke,
    userinfo_status,
)
from tests.oidc_peer import OidcPeer, oidc_peer
from transport.settings import Settings, SettingsError
from widgets_api.connections import Connection, ConnectionStore
from widgets_api.providers import (
    Provider,
    ProviderConfigError,
    ProviderRegistry,
    ProviderSpec,
    build_provider,
    discover,
    load_providers,
    parse_provider_specs,
)
from widgets_api.tokens import TokenCipher, TokenKeyError, generate_token_key

NODE_MISSING = shutil.which("node") is None


def needs_node(test: Callable[..., Any]) -> Callable[..., Any]:
    """Runs against the oidc-provider peer: skipped only when ``node`` is missing."""
    marked = pytest.mark.skipif(NODE_MISSING, reason="the `node` executable is not on PATH")(test)
    return pytest.mark.node(marked)


REG = registration()
SCOPE = "openid offline_access profile repo"
NARROW = "openid offline_access profile"
ALICE = "user:alice"
BOB = "user:bob"
SECRET = "acme-client-secret-never-shown"


# -- fixtures --------------------------------------------------------------------------


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


async def peer_registry(peer: OidcPeer) -> ProviderRegistry:
    spec = ProviderSpec(
        name="acme",
        issuer=peer.issuer,
        client_id=REG["client_id"],
        client_secret=REG["client_secret"],
        scopes=SCOPE.split(),
    )
    return await load_providers([spec], fetch=fetch_json, environ={})


def offline_provider(
    token_endpoint: str = "https://id.acme.example/token", **extra: Any
) -> Provider:
    """A provider with explicit endpoints and no revocation endpoint (nothing fetched)."""
    spec = ProviderSpec(
        name="acme",
        authorization_endpoint="https://id.acme.example/authorize",
        token_endpoint=token_endpoint,
        client_id="acme-client",
        client_secret=SECRET,
        scopes=["profile"],
        **extra,
    )
    return build_provider(spec, metadata=None, environ={})


def fake_token(expires_in: int = 3600) -> dict[str, Any]:
    import secrets

    return {
        "access_token": f"at-{secrets.token_urlsafe(24)}",
        "refresh_token": f"rt-{secrets.token_urlsafe(24)}",
        "token_type": "Bearer",
        "expires_in": expires_in,
    }


@pytest.fixture
async def offline_store(redis: Redis, cipher: TokenCipher, clock: Clock) -> ConnectionStore:
    return ConnectionStore(redis, cipher, ProviderRegistry([offline_provider()]), clock=clock)


@pytest.fixture
async def workers(redis_url: str) -> AsyncIterator[list[Redis]]:
    """Four Redis clients of their own: four workers sharing nothing but Redis."""
    clients = [Redis.from_url(redis_url) for _ in range(4)]
    try:
        yield clients
    finally:
        for client in clients:
            await client.aclose()


# -- helpers ---------------------------------------------------------------------------


async def redis_dump(redis: Redis) -> dict[bytes, Any]:
    """Every key and its whole value (hashes, sets, strings) and TTL presence."""
    out: dict[bytes, Any] = {}
    async for key in redis.scan_iter(count=1000):
        kind = (await redis.type(key)).decode()
        if kind == "hash":
            out[key] = await redis.hgetall(key)
        elif kind == "set":
            out[key] = await redis.smembers(key)
        elif kind == "string":
            out[key] = await redis.get(key)
        else:
            out[key] = kind
    return out


def mentions(dump: dict[bytes, Any], secret: str) -> list[bytes]:
    needle = secret.encode()
    return [key for key, value in dump.items() if needle in key or needle in repr(value).encode()]


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


async def save_real(
    store: ConnectionStore, peer: OidcPeer, *, login: str = "alice", principal: str = ALICE
) -> tuple[str, dict[str, Any]]:
    token = obtain_token(peer, REG, scope=SCOPE, login=login)
    provider = store.providers.get("acme")
    assert provider is not None
    connection = await store.save(
        principal,
        provider,
        token,
        account=login,
        subject=login,
        scopes=str(token["scope"]).split(),
    )
    return connection.id, token


# -- 1. encryption at rest ---------------------------------------------------------------


async def test_tokens_are_encrypted_at_rest_in_every_redis_value(
    redis: Redis, offline_store: ConnectionStore
) -> None:
    """A Redis dump, backup or replica must not hand out live grants (§33)."""
    token = fake_token()
    provider = offline_store.providers.get("acme")
    assert provider is not None
    await offline_store.save(
        ALICE, provider, token, account="alice", subject="1", scopes=["profile"]
    )
    dump = await redis_dump(redis)
    assert len(dump) == 3  # record, index, subject map
    assert mentions(dump, token["access_token"]) == []
    assert mentions(dump, token["refresh_token"]) == []


@pytest.mark.parametrize("target", ["other principal", "other connection"])
async def test_sealed_tokens_moved_to_another_record_do_not_open(
    redis: Redis, offline_store: ConnectionStore, target: str
) -> None:
    """Someone able to write Redis must not borrow a grant by copying its ciphertext."""
    provider = offline_store.providers.get("acme")
    assert provider is not None
    victim_token = fake_token()
    victim = await offline_store.save(
        ALICE, provider, victim_token, account="alice", subject="1", scopes=["profile"]
    )
    thief_principal = BOB if target == "other principal" else ALICE
    thief = await offline_store.save(
        thief_principal, provider, fake_token(), account="mallory", subject="2", scopes=["profile"]
    )
    sealed = await redis.hget(offline_store._keys(ALICE).connection(victim.id), "tokens")
    await redis.hset(offline_store._keys(thief_principal).connection(thief.id), "tokens", sealed)
    with pytest.raises(ConnectionUnavailableError) as refused:
        await offline_store.access_token(thief_principal, thief.id)
    assert refused.value.reason == "needs_reconnect"
    # The victim's own record still opens: the refusal is about where the value sits.
    assert await offline_store.access_token(ALICE, victim.id) == victim_token["access_token"]


async def test_key_rotation_opens_old_values_and_seals_with_the_new_key(
    redis: Redis, clock: Clock
) -> None:
    """Rotating PARKWAY_TOKEN_KEY ("new,old") must not log everyone out."""
    old, new = generate_token_key(), generate_token_key()
    providers = ProviderRegistry([offline_provider()])
    provider = providers.get("acme")
    assert provider is not None
    before = ConnectionStore(redis, TokenCipher.from_setting(old), providers, clock=clock)
    token = fake_token()
    connection = await before.save(ALICE, provider, token, account="a", subject="1", scopes=[])
    key = before._keys(ALICE).connection(connection.id)
    old_blob = (await redis.hget(key, "tokens")).decode()

    rotated = ConnectionStore(
        redis, TokenCipher.from_setting(f"{new},{old}"), providers, clock=clock
    )
    assert await rotated.access_token(ALICE, connection.id) == token["access_token"]
    await rotated.save(ALICE, provider, token, account="a", subject="1", scopes=[])
    new_blob = (await redis.hget(key, "tokens")).decode()
    assert new_blob.split(".")[1] != old_blob.split(".")[1]  # sealed with the new key now
    only_new = ConnectionStore(redis, TokenCipher.from_setting(new), providers, clock=clock)
    assert await only_new.access_token(ALICE, connection.id) == token["access_token"]
    with pytest.raises(TokenKeyError):
        TokenCipher.from_setting(new).open(old_blob, "anything")


@pytest.mark.parametrize("body", ["", "@@@@", "AAAA", "A"], ids=["empty", "junk", "short", "bad"])
def test_corrupted_sealed_value_is_refused_as_token_key_error(body: str) -> None:
    """Callers catch TokenKeyError for "does not open"; a truncated value must be one too."""
    cipher = TokenCipher.from_setting(generate_token_key())
    key_id = cipher.seal(b"x", "ctx").split(".")[1]
    with pytest.raises(TokenKeyError):
        cipher.open(f"v1.{key_id}.{body}", "ctx")


# -- 2. reading connections ---------------------------------------------------------------


async def test_fresh_access_token_is_returned_without_a_token_request(
    redis: Redis, cipher: TokenCipher, clock: Clock
) -> None:
    """A token that is still valid must not cost a round trip to the provider."""
    with LoopbackServer(lambda m, p: json_reply({"error": "nope"}, 400)).running() as server:
        provider = offline_provider(token_endpoint=f"{server.url}/token")
        store = ConnectionStore(redis, cipher, ProviderRegistry([provider]), clock=clock)
        token = fake_token()
        connection = await store.save(ALICE, provider, token, account="a", subject="1", scopes=[])
        clock.advance(3600 - 61)  # just inside the leeway
        assert await store.access_token(ALICE, connection.id) == token["access_token"]
        assert server.requests == []


async def test_list_and_get_never_expose_tokens(offline_store: ConnectionStore) -> None:
    """Connections are shown to the browser and to the model; tokens never are (§33)."""
    provider = offline_store.providers.get("acme")
    assert provider is not None
    token = fake_token()
    saved = await offline_store.save(
        ALICE, provider, token, account="alice", subject="1", scopes=["profile"]
    )
    got = await offline_store.get(ALICE, saved.id)
    listed = await offline_store.list(ALICE)
    assert got == saved and listed == [saved]
    for view in (saved.public(), saved.reference(), repr(saved), repr(listed)):
        text = json.dumps(view) if isinstance(view, dict) else view
        assert "token" not in text.lower()
        assert token["access_token"] not in text and token["refresh_token"] not in text
    assert not [f.name for f in dataclasses.fields(Connection) if "token" in f.name]
    assert set(saved.public()) == {
        "id",
        "provider",
        "account",
        "scopes",
        "status",
        "createdAt",
        "updatedAt",
    }
    assert set(saved.reference()) == {"connected", "provider", "connection_id", "account", "scopes"}


async def test_same_account_reconnected_reuses_its_connection(
    offline_store: ConnectionStore, clock: Clock
) -> None:
    """Reconnecting an account replaces its grant instead of piling up duplicates."""
    provider = offline_store.providers.get("acme")
    assert provider is not None
    first = await offline_store.save(
        ALICE, provider, fake_token(), account="alice", subject="42", scopes=["profile"]
    )
    clock.advance(10)
    newer = fake_token()
    second = await offline_store.save(
        ALICE, provider, newer, account="alice", subject="42", scopes=["profile", "repo"]
    )
    assert second.id == first.id
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert [c.id for c in await offline_store.list(ALICE)] == [first.id]
    assert await offline_store.access_token(ALICE, first.id) == newer["access_token"]
    assert (await offline_store.get(ALICE, first.id)).scopes == ("profile", "repo")  # type: ignore[union-attr]


async def test_different_accounts_of_one_provider_are_separate_connections(
    offline_store: ConnectionStore, clock: Clock
) -> None:
    """A user may connect a work and a personal account of the same provider."""
    provider = offline_store.providers.get("acme")
    assert provider is not None
    work_token, home_token = fake_token(), fake_token()
    work = await offline_store.save(
        ALICE, provider, work_token, account="w", subject="1", scopes=[]
    )
    clock.advance(1)
    home = await offline_store.save(
        ALICE, provider, home_token, account="h", subject="2", scopes=[]
    )
    assert work.id != home.id
    assert [c.account for c in await offline_store.list(ALICE, "acme")] == ["w", "h"]
    assert await offline_store.list(ALICE, "other") == []
    assert await offline_store.list(BOB) == []
    assert await offline_store.access_token(ALICE, work.id) == work_token["access_token"]
    assert await offline_store.access_token(ALICE, home.id) == home_token["access_token"]


async def test_using_a_connection_keeps_all_its_keys_alive(
    redis: Redis, offline_store: ConnectionStore
) -> None:
    """keys.py: the TTL is refreshed on use. If only the record is, the index and subject
    map expire first: the connection vanishes from list() while still usable, and a
    reconnect of the same account creates a duplicate."""
    provider = offline_store.providers.get("acme")
    assert provider is not None
    connection = await offline_store.save(
        ALICE, provider, fake_token(), account="a", subject="1", scopes=[]
    )
    keys = [key async for key in redis.scan_iter(count=1000)]
    assert len(keys) == 3
    for key in keys:  # as if the connection was last used ttl_s - 10 seconds ago
        await redis.expire(key, 10)
    await offline_store.access_token(ALICE, connection.id)
    ttls = {key.decode(): await redis.ttl(key) for key in keys}
    assert all(ttl > 10 for ttl in ttls.values()), ttls


# -- 3. refresh on expiry -----------------------------------------------------------------


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
    caplog.set_level(logging.DEBUG)
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


# -- 4. one refresh across workers --------------------------------------------------------


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
    caplog.set_level(logging.DEBUG)
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


# -- 5. invalid_grant ------------------------------------------------------------------


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
    caplog.set_level(logging.DEBUG)
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


# -- 6. granted scope --------------------------------------------------------------------


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


# -- 7. delete -------------------------------------------------------------------------


@needs_node
async def test_delete_revokes_at_the_provider_and_removes_every_key(
    redis: Redis, peer: OidcPeer, cipher: TokenCipher, clock: Clock
) -> None:
    """§32: a disconnect that only forgets the tokens locally leaves a live grant behind."""
    store = ConnectionStore(redis, cipher, await peer_registry(peer), clock=clock)
    connection_id, token = await save_real(store, peer)
    assert len(await redis_dump(redis)) == 3
    revocations = peer.stats()["revocation_requests"]

    assert await store.delete(ALICE, connection_id) is True
    assert peer.stats()["revocation_requests"] == revocations + 1
    assert not introspect_active(peer, REG, token["refresh_token"])
    assert await redis_dump(redis) == {}
    assert await store.list(ALICE) == []
    with pytest.raises(ConnectionUnavailableError) as gone:
        await store.access_token(ALICE, connection_id)
    assert gone.value.reason == "not_found"
    assert await store.delete(ALICE, connection_id) is False


async def test_delete_without_revocation_endpoint_deletes_locally(
    redis: Redis, offline_store: ConnectionStore
) -> None:
    """Providers without revocation (GitHub's OAuth apps) can still be disconnected."""
    provider = offline_store.providers.get("acme")
    assert provider is not None and provider.revocation_endpoint is None
    connection = await offline_store.save(
        ALICE, provider, fake_token(), account="a", subject="1", scopes=[]
    )
    assert await offline_store.delete(ALICE, connection.id) is True
    assert await redis_dump(redis) == {}
    with pytest.raises(ConnectionUnavailableError) as gone:
        await offline_store.access_token(ALICE, connection.id)
    assert gone.value.reason == "not_found"


# -- 8. token endpoint failures ---------------------------------------------------------


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
    caplog.set_level(logging.DEBUG)
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
    tokens back into a half record (which then outlives the delete for ttl_s)."""
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
        await asyncio.gather(refreshing, return_exceptions=True)
    assert await redis_dump(redis) == {}
    with pytest.raises(ConnectionUnavailableError) as gone:
        await store.access_token(ALICE, connection.id)
    assert gone.value.reason == "not_found"


# -- 9. providers -----------------------------------------------------------------------


METADATA = {
    "issuer": "https://id.acme.example",
    "authorization_endpoint": "https://id.acme.example/authorize",
    "token_endpoint": "https://id.acme.example/token",
}


@pytest.mark.parametrize("methods", [None, [], ["plain"]])
def test_provider_without_s256_is_refused_unless_state_only(methods: list[str] | None) -> None:
    """RFC 9700 §2.1.1: PKCE S256 or an explicit, visible decision to rely on state."""
    metadata = dict(METADATA)
    if methods is not None:
        metadata["code_challenge_methods_supported"] = methods  # type: ignore[assignment]
    spec = ProviderSpec(name="acme", issuer=METADATA["issuer"], client_id="c", client_secret="s")
    with pytest.raises(ProviderConfigError) as refused:
        build_provider(spec, metadata=metadata, environ={})
    assert "S256" in str(refused.value) and "state_only" in str(refused.value)
    relaxed = spec.model_copy(update={"pkce": "state_only"})
    assert build_provider(relaxed, metadata=metadata, environ={}).pkce == "state_only"
    ok = {**METADATA, "code_challenge_methods_supported": ["plain", "S256"]}
    assert build_provider(spec, metadata=ok, environ={}).pkce == "s256"


@needs_node
async def test_discovery_against_the_live_provider_fills_every_endpoint(peer: OidcPeer) -> None:
    """Metadata removes endpoint misconfiguration; the live peer is a real document."""
    metadata = await discover(peer.issuer, fetch_json)
    assert metadata["issuer"] == peer.issuer
    provider = (await peer_registry(peer)).get("acme")
    assert provider is not None
    assert provider.issuer == peer.issuer
    assert provider.token_endpoint == f"{peer.issuer}/token"
    assert provider.revocation_endpoint == f"{peer.issuer}/token/revocation"
    assert provider.iss_parameter is True
    assert provider.pkce == "s256"


async def test_discovery_refuses_metadata_naming_another_issuer() -> None:
    """A document for another issuer is how a mix-up attack starts (RFC 9700 §4.4)."""
    document = {
        **METADATA,
        "issuer": "https://evil.example",
        "code_challenge_methods_supported": ["S256"],
    }

    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        if path == "/.well-known/openid-configuration":
            return json_reply(document)
        return 404, "text/plain", b""

    with LoopbackServer(respond).running() as server:
        with pytest.raises(ProviderConfigError) as refused:
            await discover(server.url, fetch_json)
        spec = ProviderSpec(name="acme", issuer=server.url, client_id="c", client_secret="s")
        with pytest.raises(ProviderConfigError):
            await load_providers([spec], fetch=fetch_json, environ={})
    assert "https://evil.example" in str(refused.value)


def test_iss_parameter_follows_metadata_unless_configured() -> None:
    """RFC 9207 is enforced only where the provider promises to send ``iss``."""
    spec = ProviderSpec(name="acme", issuer=METADATA["issuer"], client_id="c", client_secret="s")
    base = {**METADATA, "code_challenge_methods_supported": ["S256"]}
    with_iss = {**base, "authorization_response_iss_parameter_supported": True}
    assert build_provider(spec, metadata=with_iss, environ={}).iss_parameter is True
    assert build_provider(spec, metadata=base, environ={}).iss_parameter is False
    forced = spec.model_copy(update={"iss_parameter": True})
    assert build_provider(forced, metadata=base, environ={}).iss_parameter is True


async def test_presets_resolve_without_network() -> None:
    """Presets must not depend on reaching the provider at startup."""

    async def no_network(url: str) -> Any:
        raise AssertionError(f"fetched {url}")

    specs = [
        ProviderSpec(name="gh", preset="github", client_id="c", client_secret_env="GH"),
        ProviderSpec(name="goog", preset="google", client_id="c", client_secret="s"),
    ]
    registry = await load_providers(specs, fetch=no_network, environ={"GH": "env-secret"})
    github, google = registry.get("gh"), registry.get("goog")
    assert github is not None and google is not None
    assert github.token_endpoint == "https://github.com/login/oauth/access_token"
    assert github.client_secret == "env-secret" and github.revocation_endpoint is None
    assert google.issuer == "https://accounts.google.com"
    assert google.revocation_endpoint == "https://oauth2.googleapis.com/revoke"
    assert registry.names() == {"gh": "GitHub", "goog": "Google"}


@pytest.mark.parametrize(
    ("entries", "where"),
    [
        (
            [{"name": "a", "client_id": "c"}, {"name": "b", "client_id": "c", "scopes": "repo"}],
            "oauth_providers[1] scopes",
        ),
        ([{"name": "a", "client_id": "c", "bogus": 1}], "oauth_providers[0] bogus"),
        ([{"name": "a"}], "oauth_providers[0] client_id"),
        ([{"name": "a", "client_id": "c", "pkce": "plain"}], "oauth_providers[0] pkce"),
    ],
)
def test_provider_spec_errors_name_the_entry_and_field(entries: list[Any], where: str) -> None:
    """An operator must be able to find the bad line in a list of providers."""
    with pytest.raises(ProviderConfigError) as refused:
        parse_provider_specs(json.dumps(entries))
    assert where in str(refused.value)


def test_provider_spec_file_and_json_errors() -> None:
    with pytest.raises(ProviderConfigError, match="not valid JSON"):
        parse_provider_specs("[{")
    with pytest.raises(ProviderConfigError, match="JSON array"):
        parse_provider_specs('{"name": "a"}')
    with pytest.raises(ProviderConfigError, match="cannot read"):
        parse_provider_specs("@/nonexistent/providers.json")
    assert parse_provider_specs(None) == [] and parse_provider_specs("  ") == []


def test_requested_scopes_stay_inside_the_allow_list() -> None:
    """The model may ask for scopes; only the operator decides which are grantable."""
    spec = ProviderSpec(name="gh", preset="github", client_id="c", client_secret="s")
    provider = build_provider(spec, metadata=None, environ={})
    asked = ["repo", "delete_repo", "admin:org", "read:user", "repo"]
    assert provider.requested_scopes(asked) == ("read:user", "repo")
    assert provider.requested_scopes() == ("read:user",)
    narrow = build_provider(
        spec.model_copy(update={"allowed_scopes": ["gist"]}), metadata=None, environ={}
    )
    assert narrow.requested_scopes(["repo", "gist"]) == ("read:user", "gist")


def test_provider_reprs_never_show_the_client_secret() -> None:
    """Providers and their specs end up in log lines and tracebacks."""
    spec = ProviderSpec(name="acme", preset="github", client_id="c", client_secret=SECRET)
    provider = build_provider(spec, metadata=None, environ={})
    assert SECRET not in repr(provider) and SECRET not in str(provider)
    assert SECRET not in repr(ProviderRegistry([provider]).names())
    assert SECRET not in repr(spec) and SECRET not in str(spec)


# -- 10. settings -----------------------------------------------------------------------


PROVIDERS_JSON = json.dumps(
    [{"name": "acme", "preset": "github", "client_id": "c", "client_secret": SECRET}]
)


def test_external_redis_with_providers_requires_a_token_key(tmp_path: Path) -> None:
    """Each worker generating its own key would make tokens unreadable across workers."""
    from transport.app import create_app

    settings = Settings.from_sources(
        environ={
            "PARKWAY_REDIS_URL": "redis://127.0.0.1:1/0",
            "PARKWAY_SECRET_KEY": "s" * 40,
            "PARKWAY_OAUTH_PROVIDERS": PROVIDERS_JSON,
            "PARKWAY_DATA_DIR": str(tmp_path),
        }
    )
    with pytest.raises(SettingsError, match="PARKWAY_TOKEN_KEY"):
        create_app(settings)
    assert not (tmp_path / "token.key").exists()


@pytest.mark.parametrize(
    "value",
    ["short", "not base64 at all!!", generate_token_key()[:20], f"{generate_token_key()},x"],
)
def test_malformed_token_key_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match="PARKWAY_TOKEN_KEY"):
        Settings.from_sources(environ={"PARKWAY_TOKEN_KEY": value})


def test_embedded_default_persists_and_reuses_the_token_key(tmp_path: Path) -> None:
    """One local server restarted keeps reading the tokens it stored."""
    first = Settings(data_dir=tmp_path).resolve_token_key().get()
    path = tmp_path / "token.key"
    assert path.read_text().strip() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Settings(data_dir=tmp_path).resolve_token_key().get() == first
    TokenCipher.from_setting(first)  # usable
    configured = generate_token_key()
    settings = Settings.from_sources(
        environ={"PARKWAY_TOKEN_KEY": configured, "PARKWAY_DATA_DIR": str(tmp_path)}
    )
    assert settings.resolve_token_key().get() == configured


def test_settings_repr_hides_provider_json_and_token_key(tmp_path: Path) -> None:
    key = generate_token_key()
    settings = Settings.from_sources(
        environ={
            "PARKWAY_OAUTH_PROVIDERS": PROVIDERS_JSON,
            "PARKWAY_TOKEN_KEY": key,
            "PARKWAY_DATA_DIR": str(tmp_path),
        }
    )
    shown = repr(settings)
    assert key not in shown and SECRET not in shown and '"client_id"' not in shown
    assert settings.token_key is not None and settings.token_key.get() == key
