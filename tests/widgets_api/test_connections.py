"""Connections: tokens encrypted at rest, what reading a connection shows and keeps
alive, and revocation on delete.

Against real Redis and, where a grant must be real, a real OAuth provider on loopback
(``tests/helpers/oidc_peer.py``). Time is the store's injectable clock, never a sleep.
Refresh is in ``tests/widgets_api/test_connection_refresh.py``, providers in
``tests/widgets_api/test_providers.py``.
Anchors: docs' threat model, oauth-security.md §5 items 27, 32, 33.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner.agent.credentials import ConnectionUnavailableError
from parkway.widgets_api.connect.cipher import TokenCipher, TokenKeyError, generate_token_key
from parkway.widgets_api.connect.connections import Connection, ConnectionStore
from parkway.widgets_api.connect.providers import ProviderRegistry
from tests.helpers.oauth_support import (
    ALICE,
    BOB,
    REG,
    Clock,
    LoopbackServer,
    fake_token,
    introspect_active,
    json_reply,
    needs_node,
    offline_provider,
    peer_registry,
    redis_dump,
    save_real,
)
from tests.helpers.oidc_peer import OidcPeer, oidc_peer


@pytest.fixture(scope="module")
def peer() -> Iterator[OidcPeer]:
    with oidc_peer([REG]) as running:
        yield running


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cipher() -> TokenCipher:
    return TokenCipher.from_setting(generate_token_key())


@pytest.fixture
async def offline_store(redis: Redis, cipher: TokenCipher, clock: Clock) -> ConnectionStore:
    return ConnectionStore(redis, cipher, ProviderRegistry([offline_provider()]), clock=clock)


def mentions(dump: dict[bytes, Any], secret: str) -> list[bytes]:
    needle = secret.encode()
    return [key for key, value in dump.items() if needle in key or needle in repr(value).encode()]


# -- encryption at rest ------------------------------------------------------------


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


# -- reading connections -----------------------------------------------------------


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


# -- delete ------------------------------------------------------------------------


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
