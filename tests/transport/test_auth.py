"""Identities over HTTP: bearer JWTs against a JWKS served on loopback, a trusted proxy's
header, anonymous sessions and their pace, and the settings that choose among them.

Real parts only: keys made with joserfc, a JWKS served by ``http.server`` in a thread,
real uvicorn servers on loopback, a real Redis, ``parkway serve`` as a process.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc.jwk import ECKey, OKPKey, RSAKey
from redis.asyncio import Redis

from parkway.transport import SettingsError, create_app
from parkway.transport.auth import KeySource
from parkway.transport.settings import Settings
from tests.helpers.jwks import AUDIENCE, ISSUER, JwksServer, claims, sign
from tests.helpers.oauth_support import needs_node, obtain_token, registration
from tests.helpers.oidc_peer import oidc_peer
from tests.helpers.support import (
    ROOT,
    TEST_SECRET,
    ServerThread,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

TURNS = [[text("Pick."), call("pick", {"q": "colour"})], [text("seen {{last_tool_results}}")]]


@pytest.fixture
def jwks() -> Iterator[JwksServer]:
    with JwksServer() as server:
        yield server


RSA = RSAKey.generate_key(2048, parameters={"kid": "rsa-1"})
EC = ECKey.generate_key("P-256", parameters={"kid": "ec-1"})
ED = OKPKey.generate_key("Ed25519", parameters={"kid": "ed-1"})
ROTATED = RSAKey.generate_key(2048, parameters={"kid": "rsa-2"})
STRANGER = RSAKey.generate_key(2048, parameters={"kid": "rsa-1"})  # same kid, other key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], body: dict[str, Any], signature: bytes = b"") -> str:
    return (
        f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}.{_b64(signature)}"
    )


def hmac_with_public_key(key: RSAKey) -> str:
    """HS256 "signed" with the RSA public key's PEM: a verifier that lets the token pick
    the algorithm and feeds it the public key would accept this."""
    head = _b64(json.dumps({"alg": "HS256", "kid": key.kid}).encode())
    body = _b64(json.dumps(claims()).encode())
    secret = key.as_pem(private=False)
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


def jwt_server(redis_url: str, jwks_url: str, **settings: Any) -> ServerThread:
    return ServerThread(
        redis_url,
        agent_doc(TURNS),
        auth="jwt",
        jwt_jwks_url=jwks_url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        **settings,
    ).start()


@pytest.fixture
async def jwt_base(redis: Redis, redis_url: str, jwks: JwksServer) -> AsyncIterator[str]:
    jwks.publish(RSA, EC, ED)
    # refetch_s=0: a new kid is fetched at once (the pace is KeySource's own test)
    server = jwt_server(redis_url, jwks.url, jwt_jwks_refetch_s=0, editors=())
    try:
        yield server.base_url
    finally:
        server.stop()


def client(base_url: str, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30, **kwargs)


async def chat(http: httpx.AsyncClient, chat_id: str) -> httpx.Response:
    body = {"id": chat_id, "messages": [user_message("hi")], "trigger": "submit-message"}
    return await http.post("/api/chat", json=body)


# -- JWT ------------------------------------------------------------------------------


async def test_a_jwt_principal_runs_a_chat_end_to_end_and_sees_only_its_own(
    jwt_base: str,
) -> None:
    """The principal is the token's ``sub``: it parks, settles and resumes its chat
    through the API, and another subject's token finds no such chat (404)."""
    async with (
        client(jwt_base, sign(RSA)) as alice,
        client(jwt_base, sign(EC, "ES256", sub="bob")) as bob,
    ):
        parked = await chat(alice, "jwt-1")
        assert parked.status_code == 200, parked.text
        chunks = sse_chunks(parked.text)
        call_id = next(c["toolCallId"] for c in chunks if c["type"] == "tool-input-available")
        assert (await bob.get("/api/chats/jwt-1")).status_code == 404
        stolen = await bob.post(
            f"/api/chats/jwt-1/calls/{call_id}", json={"outcome": "output", "output": {}}
        )
        assert stolen.status_code == 404
        settled = await alice.post(
            f"/api/chats/jwt-1/calls/{call_id}",
            json={"outcome": "output", "output": {"choice": "red"}},
        )
        assert settled.status_code == 200, settled.text
        resumed = await alice.post("/api/chats/jwt-1/resume")
        assert resumed.status_code == 200
        outputs = [c for c in sse_chunks(resumed.text) if c["type"] == "tool-output-available"]
        assert outputs[0]["output"] == {"choice": "red"}
        assert (await alice.get("/api/chats/jwt-1")).status_code == 200


async def test_every_allow_listed_key_family_is_accepted_and_roles_come_from_the_claim(
    jwt_base: str,
) -> None:
    """RS256, ES256 and Ed25519 tokens from the JWKS are accepted; the ``roles`` claim (a
    list or a space-separated string) grants the editor role, which ``editors`` does not."""
    tokens = {
        "rsa": sign(RSA, roles=["editor"]),
        "ec": sign(EC, "ES256", sub="ec-user", roles="viewer editor"),
        "ed": sign(ED, "Ed25519", sub="ed-user"),
    }
    seen = {}
    for name, token in tokens.items():
        async with client(jwt_base, token) as http:
            answer = await http.get("/api/agent")
            assert answer.status_code == 200, (name, answer.text)
            seen[name] = answer.json()["mayCommit"]
    assert seen == {"rsa": True, "ec": True, "ed": False}


REFUSED = {
    "expired": lambda: sign(RSA, exp=int(time.time()) - 3600),
    "not yet valid": lambda: sign(RSA, nbf=int(time.time()) + 3600),
    "no expiry": lambda: sign(RSA, exp=None),
    "wrong issuer": lambda: sign(RSA, iss="https://evil.example.test"),
    "wrong audience": lambda: sign(RSA, aud="someone-else"),
    "algorithm not allow-listed": lambda: sign(RSA, "RS512"),
    "alg none": lambda: unsigned({"alg": "none", "kid": "rsa-1"}, claims()),
    "HS256 keyed with the public key": lambda: hmac_with_public_key(RSA),
    "signed by another key": lambda: sign(STRANGER),
    "unknown kid": lambda: sign(ROTATED),
    "no subject": lambda: sign(RSA, sub=None),
    "malformed": lambda: "not.a.jwt",
    "garbage": lambda: "eyJhbGciOiJSUzI1NiJ9." + "A" * 40,
    "header not JSON": lambda: f"{_b64(b'{nope')}.{_b64(b'{}')}.{_b64(b'x')}",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_bad_token_answers_401_json_and_never_reaches_a_chat(
    case: str, jwt_base: str, redis: Redis
) -> None:
    """Each classic way a JWT can be wrong, forged or confused is refused with 401 JSON,
    and the chat route writes nothing to Redis for it."""
    before = await redis.dbsize()
    async with client(jwt_base, REFUSED[case]()) as http:
        answer = await chat(http, "jwt-refused")
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["code"] == "unauthenticated"
        assert "Bearer" in answer.json()["error"]["message"]
        assert (await http.get("/api/chats/jwt-refused")).status_code == 401
    assert await redis.dbsize() == before


async def test_a_cookie_the_host_sets_carries_the_token_for_the_playground_page(
    redis: Redis, redis_url: str, jwks: JwksServer
) -> None:
    """With ``jwt_cookie`` named, a browser request without an Authorization header is
    read from the host's cookie (the playground page holds no token of its own); the
    same checks apply, and without the setting the cookie is ignored."""
    jwks.publish(RSA)
    for cookie, expected in (("host_jwt", 200), (None, 401)):
        server = jwt_server(redis_url, jwks.url, jwt_cookie=cookie)
        try:
            async with client(server.base_url) as http:
                http.cookies.set("host_jwt", sign(RSA))
                assert (await http.get("/api/agent")).status_code == expected
                http.cookies.set("host_jwt", sign(RSA, exp=int(time.time()) - 3600))
                assert (await http.get("/api/agent")).status_code == 401
        finally:
            server.stop()


async def test_a_rotated_key_is_accepted_once_the_jwks_publishes_it(
    jwt_base: str, jwks: JwksServer
) -> None:
    """Key rotation: a token signed by a key the JWKS does not list yet is refused; once
    the issuer publishes it, the next request refetches the JWKS and is accepted."""
    token = sign(ROTATED, sub="rotated")
    async with client(jwt_base, token) as http:
        assert (await http.get("/api/agent")).status_code == 401
        jwks.publish(RSA, ROTATED)
        assert (await http.get("/api/agent")).status_code == 200


async def test_unknown_kids_refetch_the_jwks_at_a_bounded_pace(jwks: JwksServer) -> None:
    """An unknown kid asks for a refetch, but fetches are ``refetch_s`` apart whatever
    the kids: tokens with made-up kids cannot make the server hammer the issuer."""
    jwks.publish(RSA)
    now = [1000.0]
    keys = KeySource(jwks_url=jwks.url, ttl_s=300, refetch_s=30, clock=lambda: now[0])
    await keys.ensure("rsa-1")
    assert keys.get("rsa-1") is not None and jwks.fetches == 1
    for kid in ("made-up-1", "made-up-2", "rsa-2"):
        await keys.ensure(kid)
    assert jwks.fetches == 1  # within refetch_s of the last fetch
    await keys.ensure("rsa-1")  # known and fresh: nothing to do
    jwks.publish(RSA, ROTATED)
    now[0] += 30
    await keys.ensure("rsa-2")
    assert jwks.fetches == 2 and keys.get("rsa-2") is not None
    now[0] += 300  # the TTL: a known kid refreshes too (in the background)
    await keys.ensure("rsa-1")
    await keys.idle()
    assert jwks.fetches == 3


async def test_requests_arriving_during_the_first_jwks_fetch_wait_for_its_keys(
    jwks: JwksServer,
) -> None:
    """A page's first requests come at once: those that arrive while the first fetch is
    under way wait for it rather than read the empty cache (and answer 401), and the
    JWKS is still fetched once."""
    jwks.publish(RSA)
    keys = KeySource(jwks_url=jwks.url, ttl_s=300, refetch_s=30)

    async def key_after_ensure() -> bool:
        await keys.ensure("rsa-1")
        return keys.get("rsa-1") is not None

    assert await asyncio.gather(*(key_after_ensure() for _ in range(4))) == [True] * 4
    assert jwks.fetches == 1


async def test_a_configured_public_key_verifies_and_sessions_are_not_offered(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """``jwt_public_key`` (here a file holding the PEM) verifies tokens without a JWKS;
    the same PEM used as an HMAC secret is refused; with JWTs, POST /api/sessions is a
    clear 404 JSON error rather than an anonymous session."""
    pem = tmp_path / "issuer.pem"
    pem.write_bytes(RSA.as_pem(private=False))
    with server_thread(
        redis_url,
        agent_doc(TURNS),
        auth="jwt",
        jwt_public_key=str(pem),
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
    ) as server:
        async with client(server.base_url, sign(RSA)) as good:
            assert (await good.get("/api/agent")).status_code == 200
            sessions = await good.post("/api/sessions")
            assert sessions.status_code == 404
            assert "does not issue sessions" in sessions.json()["error"]["message"]
        async with client(server.base_url, hmac_with_public_key(RSA)) as forged:
            assert (await forged.get("/api/agent")).status_code == 401


def test_jwt_settings_are_checked_at_startup() -> None:
    """An incomplete or unsafe JWT configuration stops startup, naming what to fix."""
    with pytest.raises(SettingsError, match=r"jwt_issuer.*PARKWAY_JWT_ISSUER"):
        Settings(auth="jwt", jwt_jwks_url="https://id.example/jwks", jwt_audience="a")
    with pytest.raises(SettingsError, match="exactly one of jwt_jwks_url"):
        Settings(auth="jwt", jwt_issuer="i", jwt_audience="a")
    for bad in ("HS256", "none", "RS256,HS512"):
        with pytest.raises(SettingsError, match="never none, never HMAC"):
            Settings(jwt_algorithms=bad)
    with pytest.raises(SettingsError, match="trusted_proxies"):
        Settings(auth="header", auth_header="X-Forwarded-User")


# -- a trusted proxy's header ---------------------------------------------------------


@pytest.mark.parametrize(
    ("trusted", "source", "believed"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.0/30", "127.0.0.2", True),
        ("127.0.0.1", "127.0.0.2", False),
        ("10.0.0.0/8", "127.0.0.1", False),
    ],
)
async def test_the_user_header_is_believed_from_trusted_proxies_only(
    redis: Redis, redis_url: str, trusted: str, source: str, believed: bool
) -> None:
    """From a trusted proxy's address the header names the user (and its roles header
    grants roles); from any other address the same headers are ignored: 401."""
    with server_thread(
        redis_url,
        agent_doc(TURNS),
        auth="header",
        auth_header="X-Forwarded-User",
        auth_roles_header="X-Forwarded-Roles",
        trusted_proxies=trusted,
        editors=(),
    ) as server:
        transport = httpx.AsyncHTTPTransport(local_address=source)
        async with httpx.AsyncClient(
            base_url=server.base_url, transport=transport, timeout=30
        ) as http:
            carol = {"x-forwarded-user": "carol", "x-forwarded-roles": "editor"}
            answer = await http.get("/api/agent", headers=carol)
            if not believed:
                assert answer.status_code == 401
                assert answer.json()["error"]["code"] == "unauthenticated"
                return
            assert answer.status_code == 200 and answer.json()["mayCommit"] is True
            body = {"id": "hdr-1", "messages": [user_message("hi")], "trigger": "submit-message"}
            assert (await http.post("/api/chat", json=body, headers=carol)).status_code == 200
            dave = {"x-forwarded-user": "dave"}
            assert (await http.get("/api/chats/hdr-1", headers=dave)).status_code == 404
            assert (await http.get("/api/chats/hdr-1", headers=carol)).status_code == 200
            assert (await http.get("/api/chats/hdr-1")).status_code == 401


# -- anonymous, and choosing -----------------------------------------------------------


def test_anonymous_is_the_default_on_a_local_playground_only(redis_url: str) -> None:
    """Anyone who reaches the server gets an anonymous session, so outside a local
    playground (an external Redis, a public bind, a public_url) it must be chosen."""
    assert Settings().resolve_auth() == "anonymous"
    for settings in (
        Settings(redis_url=redis_url),
        Settings(host="0.0.0.0"),
        Settings(public_url="https://chat.example.com"),
    ):
        with pytest.raises(SettingsError, match=r"auth \(--auth, PARKWAY_AUTH\) is required"):
            create_app(settings)
    chosen = Settings(redis_url=redis_url, auth="anonymous", secret_key=TEST_SECRET)
    assert create_app(chosen).state.session_throttle is not None


async def test_anonymous_sessions_are_minted_at_a_bounded_pace_per_address(
    redis: Redis, redis_url: str
) -> None:
    """Chosen explicitly outside a local playground, anonymous sessions come in a burst
    per client address, then 429 ``too_many_sessions`` with Retry-After; another address
    has its own allowance."""
    with server_thread(
        redis_url, agent_doc(TURNS), session_burst=3, sessions_per_minute=1
    ) as server:
        async with client(server.base_url) as first:
            for _ in range(3):
                assert (await first.post("/api/sessions")).status_code == 201
            refused = await first.post("/api/sessions")
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "too_many_sessions"
            assert 1 <= int(refused.headers["retry-after"]) <= 60
        other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with client(server.base_url, transport=other) as second:
            assert (await second.post("/api/sessions")).status_code == 201


# -- typos ----------------------------------------------------------------------------


def test_an_unknown_parkway_variable_stops_serve_with_one_line_naming_the_fix(
    tmp_path: Path,
) -> None:
    """``PARKWAY_AUHT=jwt`` once started an anonymous server without a word: a
    ``PARKWAY_*`` variable that is no setting now stops ``parkway serve`` (exit 2) with
    one line naming it and the closest setting; the test suite's own variables pass."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    env.update(PYTHONPATH=str(ROOT), PARKWAY_AUHT="jwt", PARKWAY_REQUIRE_BROWSER="1")
    result = subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--port", "0",
         "--data-dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "parkway: PARKWAY_AUHT is not a Parkway setting (did you mean PARKWAY_AUTH?); "
        "see docs/operations.md"
    ]
    with pytest.raises(SettingsError, match=r"PARKWAY_JWT_ISUER .*PARKWAY_JWT_ISSUER"):
        Settings.from_sources(environ={"PARKWAY_JWT_ISUER": "x"})
    assert Settings.from_sources(environ={"PARKWAY_TEST_REDIS_URL": "x", "parkway_auht": "x"})


# -- a real OpenID provider ------------------------------------------------------------


@needs_node
async def test_an_id_token_from_a_real_openid_provider_verifies_through_its_jwks(
    redis: Redis, redis_url: str
) -> None:
    """Beyond keys made here: an ID token issued by the loopback OpenID provider (node
    oidc-provider, authorization code + PKCE) verifies against the JWKS its discovery
    document names, and its subject owns the chat it starts."""
    reg = registration()
    with oidc_peer([reg]) as peer:
        tokens = await asyncio.to_thread(obtain_token, peer, reg, scope="openid", login="alice")
        async with httpx.AsyncClient(timeout=30) as http:
            found = await http.get(f"{peer.issuer}/.well-known/openid-configuration")
        with server_thread(
            redis_url,
            agent_doc(TURNS),
            auth="jwt",
            jwt_jwks_url=found.json()["jwks_uri"],
            jwt_issuer=peer.issuer,
            jwt_audience=reg["client_id"],
        ) as server:
            async with client(server.base_url, tokens["id_token"]) as alice:
                assert (await chat(alice, "oidc-1")).status_code == 200
                assert (await alice.get("/api/chats/oidc-1")).status_code == 200
            async with client(server.base_url, tokens["id_token"][:-4] + "AAAA") as forged:
                assert (await forged.get("/api/chats/oidc-1")).status_code == 401
