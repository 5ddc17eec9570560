"""Bearer JWTs: ``Authorization: Bearer <JWT>`` checked with joserfc.

A token is accepted only when all of these hold (docs/security.md, "Identities"):

- it is a compact JWS whose ``alg`` is in the allow-list (``jwt_algorithms``), which
  holds asymmetric algorithms only: never ``none``, never HMAC;
- the key it names (``kid``) is one of the configured keys, and that key's type is the
  one its algorithm's family needs (RSA for RS/PS, EC for ES, OKP for Ed25519). A token
  that asks for HS256 "keyed with the public key" finds no key: the classic confusion
  attack, where a verifier feeds the public key to HMAC, has nothing to feed;
- the signature verifies; ``iss`` and ``aud`` are the configured ones; ``exp`` is
  present and not past, and ``nbf`` (if any) not ahead, each within ``jwt_leeway_s``;
- the principal claim (``sub`` by default) is a name
  :func:`~parkway.transport.auth.identity.principal_from` accepts, as a proxy's user
  header must be (no control characters, not blank, at most 256 characters);
- with ``jwt_max_lifetime_s`` set, ``iat`` is present and ``exp - iat`` is at most that;
- with ``jwt_typ`` set, the header's ``typ`` is that media type (``at+jwt`` and
  ``application/at+jwt`` are one, in any case; RFC 7515, section 4.1.9).

Browsers: a host application that mounts Parkway may set a cookie holding the user's JWT
(``jwt_cookie`` names it); a request without an Authorization header is then read from
it, so the playground page works with the host's sign-in (docs/embedding.md). Cookies
ride along on cross-site requests, so state-changing ones are subject to the app's
Origin check, as session cookies are.

The keys come from one configured public key (PEM text or a file holding it) or from a
JWKS URL (:mod:`~parkway.transport.auth.jwks`: how fetches are paced and bounded).
Fetching is I/O, so it happens in :meth:`JwtAuthenticator.prepare`, awaited before the
route runs; the synchronous :meth:`JwtAuthenticator.authenticate` only reads the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import JoseError
from starlette.requests import HTTPConnection

from parkway.transport.auth.identity import Identity, principal_from, roles_from
from parkway.transport.auth.jwks import KeySource

__all__ = ["JwtAuthenticator"]

# The key type each allowed algorithm family needs.
_KEY_TYPE = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
# Tokens past this size are refused unread.
_MAX_TOKEN = 8 * 1024


def _key_type_for(alg: str) -> str | None:
    return _KEY_TYPE.get(alg[:2])


def _media_type(value: object) -> str | None:
    """A ``typ`` value compared as RFC 7515 says: in any case, ``application/`` implied."""
    if not isinstance(value, str):
        return None
    value = value.lower()
    return value.removeprefix("application/") if value.count("/") == 1 else value


def _token_of(conn: HTTPConnection, cookie: str | None) -> str | None:
    """The bearer token; without an Authorization header, the host's cookie (if one is
    configured: how the playground page, which holds no token, uses the host's sign-in)."""
    header = conn.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        token = header[7:].strip()
    elif not header and cookie is not None:
        token = conn.cookies.get(cookie, "").strip()
    else:
        return None
    return token if 0 < len(token) <= _MAX_TOKEN else None


def _header_of(token: str) -> dict[str, Any] | None:
    """The token's protected header, unverified (to pick the key), or None."""
    try:
        headers: dict[str, Any] = jws.extract_compact(token.encode("ascii")).headers()
    except (JoseError, ValueError, TypeError, UnicodeError):
        return None
    return headers


class JwtAuthenticator:
    """Identities from bearer JWTs (see the module's docstring for what is checked)."""

    def __init__(
        self,
        keys: KeySource,
        *,
        issuer: str,
        audience: str,
        algorithms: Collection[str] = ("RS256", "ES256", "Ed25519"),
        leeway_s: int = 30,
        principal_claim: str = "sub",
        roles_claim: str = "roles",
        cookie: str | None = None,
        max_lifetime_s: int | None = None,
        typ: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.cookie = cookie
        self.algorithms = frozenset(algorithms)
        self.principal_claim = principal_claim
        self.roles_claim = roles_claim
        self.max_lifetime_s = max_lifetime_s
        self.typ = None if typ is None else _media_type(typ)
        required: dict[str, jwt.ClaimsOption] = {
            "iss": {"essential": True, "value": issuer},
            "aud": {"essential": True, "value": audience},
            "exp": {"essential": True},
        }
        if max_lifetime_s is not None:
            # a lifetime is exp - iat: without iat it cannot be told, so it is required
            required["iat"] = {"essential": True}
        self._claims = jwt.JWTClaimsRegistry(now=lambda: int(clock()), leeway=leeway_s, **required)

    def _allowed_header(self, token: str) -> dict[str, Any] | None:
        """The token's header when its ``alg``, ``kid`` and ``typ`` may be accepted
        (checked before any key is looked for, so a wrong one asks for no fetch)."""
        header = _header_of(token)
        if header is None or header.get("alg") not in self.algorithms:
            return None
        if self.typ is not None and _media_type(header.get("typ")) != self.typ:
            return None
        kid = header.get("kid")
        return header if kid is None or isinstance(kid, str) else None

    def _lifetime_allowed(self, claims: dict[str, Any]) -> bool:
        if self.max_lifetime_s is None:
            return True
        # both are NumericDates by now (the registry checked them)
        return bool(claims["exp"] - claims["iat"] <= self.max_lifetime_s)

    async def prepare(self, conn: HTTPConnection) -> None:
        """Fetch the keys a bearer token's ``kid`` needs, if due (awaited before the
        route, so :meth:`authenticate` never does I/O)."""
        token = _token_of(conn, self.cookie)
        header = None if token is None else self._allowed_header(token)
        if header is not None:
            await self.keys.ensure(header.get("kid"))

    def authenticate(self, conn: HTTPConnection) -> Identity | None:
        token = _token_of(conn, self.cookie)
        header = None if token is None else self._allowed_header(token)
        if token is None or header is None:
            return None
        alg = str(header["alg"])
        key = self.keys.get(header.get("kid"))
        if key is None or key.key_type != _key_type_for(alg):
            return None
        try:
            claims = jwt.decode(token, key, algorithms=[alg]).claims
            self._claims.validate(claims)
        except (JoseError, ValueError, TypeError):
            return None
        principal = principal_from(claims.get(self.principal_claim))
        if principal is None or not self._lifetime_allowed(claims):
            return None
        return Identity(principal, roles_from(claims.get(self.roles_claim)))
