"""What a JWT's claims and header must say beyond its signature: a principal name every
authenticator checks alike, an optional bound on the token's lifetime and an optional
expected ``typ`` (docs/security.md, "Identities").

Real parts: keys made with joserfc, a JWKS on loopback, real uvicorn servers and Redis;
the proxy header's check runs on Starlette's own connection object.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from joserfc.jwk import ECKey
from redis.asyncio import Redis
from starlette.requests import HTTPConnection

from parkway.transport import SettingsError
from parkway.transport.auth import HeaderAuthenticator, TrustedProxies, principal_from
from parkway.transport.settings import Settings
from tests.helpers.jwks import AUDIENCE, ISSUER, JwksServer, sign
from tests.helpers.support import agent_doc, server_thread, text

KEY = ECKey.generate_key("P-256", parameters={"kid": "ec-claims"})
AGENT = agent_doc([[text("Hello.")]])

# Names no authenticator accepts as a principal, and names every one accepts.
REFUSED_NAMES = {
    "empty": "",
    "only spaces": "   ",
    "a newline": "alice\nlevel=info principal=admin",
    "a terminal escape": "alice\x1b[2K",
    "a tab": "alice\tbob",
    "a Unicode line separator": "alice\u2028bob",
    "too long": "a" * 257,
}
ACCEPTED_NAMES = ["alice", "zoë@example.com", "user:42", "a" * 256, "Alice Smith"]


@pytest.fixture
def jwks() -> Iterator[JwksServer]:
    with JwksServer() as server:
        server.publish(KEY)
        yield server


async def statuses(base_url: str, tokens: dict[str, str]) -> dict[str, int]:
    """GET /api/agent's status for each token, by name."""
    found = {}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        for name, token in tokens.items():
            answer = await http.get("/api/agent", headers={"authorization": f"Bearer {token}"})
            if answer.status_code == 401:
                assert answer.json()["error"]["code"] == "unauthenticated"
            found[name] = answer.status_code
    return found


def jwt_settings(jwks: JwksServer, **settings: Any) -> dict[str, Any]:
    return {
        "auth": "jwt",
        "jwt_jwks_url": jwks.url,
        "jwt_issuer": ISSUER,
        "jwt_audience": AUDIENCE,
        "jwt_algorithms": "ES256",
        **settings,
    }


def test_principal_names_are_checked_by_one_rule() -> None:
    """The rule itself: printable, not blank, no surrounding whitespace, 1 to 256
    characters; a name is never trimmed into another (``" alice"`` is not ``alice``)."""
    assert [principal_from(name) for name in ACCEPTED_NAMES] == ACCEPTED_NAMES
    for name in [*REFUSED_NAMES.values(), " alice", "alice ", None, 42, ["alice"]]:
        assert principal_from(name) is None, name


async def test_a_jwt_subject_is_refused_as_a_proxy_header_is(
    redis: Redis, redis_url: str, jwks: JwksServer
) -> None:
    """A ``sub`` with control characters or only spaces was accepted while the proxy's
    header refused both: a newline in a principal forges lines in logs and audit views.
    Now every name the header refuses, the JWT refuses too (401), and the same names are
    accepted by both."""
    del redis
    proxy = HeaderAuthenticator("x-forwarded-user", TrustedProxies(["127.0.0.1"]))

    def by_header(name: str) -> bool:
        scope = {
            "type": "http",
            "headers": [(b"x-forwarded-user", name.encode())],
            "client": ("127.0.0.1", 40000),
        }
        return proxy.authenticate(HTTPConnection(scope)) is not None

    names = {**REFUSED_NAMES, **{f"accepted {name[:12]}": name for name in ACCEPTED_NAMES}}
    with server_thread(redis_url, AGENT, **jwt_settings(jwks)) as server:
        found = await statuses(
            server.base_url, {k: sign(KEY, "ES256", sub=v) for k, v in names.items()}
        )
        padded = await statuses(server.base_url, {"padded": sign(KEY, "ES256", sub=" alice")})
    expected = {name: 200 if name.startswith("accepted") else 401 for name in names}
    assert found == expected
    assert {name: by_header(value) for name, value in names.items()} == {
        name: code == 200 for name, code in expected.items()
    }
    assert padded == {"padded": 401}  # a header's own padding is HTTP's, a claim's is not


async def test_max_lifetime_and_typ_are_enforced_when_set_and_only_then(
    redis: Redis, redis_url: str, jwks: JwksServer
) -> None:
    """With ``jwt_max_lifetime_s`` a token must carry ``iat`` and live at most that long
    (exp - iat); with ``jwt_typ`` its header's ``typ`` must be that media type, in any
    case, with or without ``application/``. Unset (the default), neither is checked."""
    del redis
    now = int(time.time())
    tokens = {
        "short, at+jwt": sign(KEY, "ES256", typ="at+jwt"),
        "application/AT+JWT": sign(KEY, "ES256", typ="application/AT+JWT"),
        "exactly the bound": sign(KEY, "ES256", typ="at+jwt", iat=now, exp=now + 3600),
        "past the bound": sign(KEY, "ES256", typ="at+jwt", iat=now, exp=now + 3601),
        "no iat": sign(KEY, "ES256", typ="at+jwt", iat=None),
        "typ JWT": sign(KEY, "ES256", typ="JWT"),
        "no typ": sign(KEY, "ES256", typ=None),
    }
    bounded = jwt_settings(jwks, jwt_max_lifetime_s=3600, jwt_typ="at+jwt")
    with server_thread(redis_url, AGENT, **bounded) as server:
        found = await statuses(server.base_url, tokens)
    assert found == {
        "short, at+jwt": 200,
        "application/AT+JWT": 200,
        "exactly the bound": 200,
        "past the bound": 401,
        "no iat": 401,
        "typ JWT": 401,
        "no typ": 401,
    }
    with server_thread(redis_url, AGENT, **jwt_settings(jwks)) as server:
        found = await statuses(server.base_url, tokens)
    assert set(found.values()) == {200}


def test_the_new_jwt_settings_come_from_the_environment_and_are_checked() -> None:
    """``PARKWAY_JWT_MAX_LIFETIME_S`` and ``PARKWAY_JWT_TYP`` are read like the other
    ``jwt_*`` settings; a lifetime below 1 s or an empty typ stops startup, naming it."""
    settings = Settings.from_sources(
        environ={"PARKWAY_JWT_MAX_LIFETIME_S": "900", "PARKWAY_JWT_TYP": "at+jwt"}
    )
    assert (settings.jwt_max_lifetime_s, settings.jwt_typ) == (900, "at+jwt")
    assert (Settings().jwt_max_lifetime_s, Settings().jwt_typ) == (None, None)
    with pytest.raises(SettingsError, match=r"jwt_max_lifetime_s \(PARKWAY_JWT_MAX_LIFETIME_S\)"):
        Settings.from_sources(environ={"PARKWAY_JWT_MAX_LIFETIME_S": "0"})
    with pytest.raises(SettingsError, match=r"jwt_typ \(PARKWAY_JWT_TYP\)"):
        Settings(jwt_typ="")
