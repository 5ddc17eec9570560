"""A slow or hostile JWKS: the fetch has one deadline, its body a cap, and requests whose
key is cached never wait for it (docs/security.md, "Identities").

Anyone can start a JWKS refetch with a token naming a made-up kid, so the issuer's
answer must never hold other requests. Real parts: a JWKS served on loopback by
``http.server`` that trickles one byte at a time or floods its body
(tests/helpers/jwks.py), real uvicorn servers, a real Redis. Tests pace themselves by
what that server saw (the request arrived, the client hung up), never by the clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from joserfc.jwk import ECKey
from redis.asyncio import Redis

from parkway.transport.auth import KeySource
from tests.helpers.jwks import AUDIENCE, FLOOD_BYTES, ISSUER, JwksServer, Mode, sign
from tests.helpers.support import ServerThread, agent_doc, text

CACHED = ECKey.generate_key("P-256", parameters={"kid": "ec-cached"})
ROTATED = ECKey.generate_key("P-256", parameters={"kid": "ec-rotated"})
AGENT = agent_doc([[text("Hello.")]])
# Long enough that only the test's own release (or hang-up) ends a trickle.
NO_DEADLINE_S = 120.0


@pytest.fixture
def jwks() -> Iterator[JwksServer]:
    with JwksServer() as server:
        server.publish(CACHED, ROTATED)
        yield server


def jwt_server(redis_url: str, jwks_url: str, **settings: Any) -> ServerThread:
    return ServerThread(
        redis_url,
        AGENT,
        auth="jwt",
        jwt_jwks_url=jwks_url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_algorithms="ES256",
        jwt_jwks_refetch_s=0,  # every unknown kid may refetch: the worst case
        **settings,
    ).start()


async def seen(event: Any) -> bool:
    """Whether the JWKS server's ``event`` happens (a thread's Event, awaited off-loop;
    the bound only turns a hang into a failure)."""
    return bool(await asyncio.to_thread(event.wait, 60))


async def agent(base_url: str, key: ECKey) -> httpx.Response:
    headers = {"authorization": f"Bearer {sign(key, 'ES256')}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
        return await http.get("/api/agent")


async def test_a_cached_key_never_waits_for_a_refetch_an_unknown_kid_started(
    jwks: JwksServer,
) -> None:
    """The red team's stall: while a trickling JWKS holds a refetch (started by a token
    naming a kid the cache lacks), a token whose key is cached is answered at once; the
    unknown kid waits for that refetch and gets its key once the answer is complete."""
    jwks.publish(CACHED)
    keys = KeySource(jwks_url=jwks.url, refetch_s=0, timeout_s=NO_DEADLINE_S)
    await keys.ensure(CACHED.kid)
    assert keys.get(CACHED.kid) is not None and jwks.fetches == 1

    jwks.publish(CACHED, ROTATED)
    jwks.switch("trickle")
    unknown = asyncio.create_task(keys.ensure(ROTATED.kid))
    assert await seen(jwks.requested)  # the refetch is under way, trickling

    await keys.ensure(CACHED.kid)  # must not wait behind the trickle
    assert keys.get(CACHED.kid) is not None
    assert not unknown.done(), "the cached kid waited for the whole trickled refetch"
    assert jwks.fetches == 2  # and it started no fetch of its own

    jwks.release.set()
    await unknown
    assert keys.get(ROTATED.kid) is not None


async def test_over_http_cached_keys_are_answered_while_an_unknown_kid_waits(
    redis: Redis, redis_url: str, jwks: JwksServer
) -> None:
    """The same through the app: GET /api/agent with a cached key answers 200 while a
    request with an unknown kid is held by a trickling refetch; that one is answered
    when the JWKS is complete, with the key it brought."""
    del redis
    server = jwt_server(redis_url, jwks.url, jwt_jwks_timeout_s=NO_DEADLINE_S)
    try:
        jwks.publish(CACHED)
        assert (await agent(server.base_url, CACHED)).status_code == 200  # first fetch
        jwks.publish(CACHED, ROTATED)
        jwks.switch("trickle")
        unknown = asyncio.create_task(agent(server.base_url, ROTATED))
        assert await seen(jwks.requested)
        for _ in range(3):
            assert (await agent(server.base_url, CACHED)).status_code == 200
        assert not unknown.done(), "the cached-key requests waited for the trickled refetch"
        jwks.release.set()
        assert (await unknown).status_code == 200
    finally:
        server.stop()


async def test_a_trickling_jwks_fetch_ends_at_its_total_deadline(
    redis: Redis, redis_url: str, jwks: JwksServer
) -> None:
    """``jwt_jwks_timeout_s`` bounds the whole fetch, not each read: a JWKS sending one
    byte at a time (each read well within the timeout) is abandoned at the deadline,
    the request that waited for it gets 401 JSON, and the connection is closed."""
    del redis
    jwks.switch("trickle")
    server = jwt_server(redis_url, jwks.url, jwt_jwks_timeout_s=1.0)
    try:
        answer = await agent(server.base_url, CACHED)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthenticated"
        assert await seen(jwks.answered)
        assert jwks.hung_up.is_set() and not jwks.release.is_set()
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["flood", "flood-declared"])
async def test_a_huge_jwks_body_is_cut_off_at_the_cap_and_cached_keys_keep_working(
    mode: Mode, redis: Redis, redis_url: str, jwks: JwksServer
) -> None:
    """A JWKS answer past 512 KiB is not read to its end: a declared length past the cap
    is refused unread, an undeclared one is cut at the cap (the server sees the client
    close before it has sent everything). The unknown kid's request gets 401; the keys
    already cached keep working."""
    del redis
    server = jwt_server(redis_url, jwks.url)
    try:
        jwks.publish(CACHED)
        assert (await agent(server.base_url, CACHED)).status_code == 200
        jwks.switch(mode)
        answer = await agent(server.base_url, ROTATED)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthenticated"
        assert await seen(jwks.answered)
        assert jwks.hung_up.is_set() and jwks.sent < FLOOD_BYTES
        jwks.switch("serve")
        assert (await agent(server.base_url, CACHED)).status_code == 200
    finally:
        server.stop()
