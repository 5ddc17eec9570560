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
- the principal claim (``sub`` by default) is a non-empty string.

Browsers: a host application that mounts Parkway may set a cookie holding the user's JWT
(``jwt_cookie`` names it); a request without an Authorization header is then read from
it, so the playground page works with the host's sign-in (docs/embedding.md). Cookies
ride along on cross-site requests, so state-changing ones are subject to the app's
Origin check, as session cookies are.

The keys come from one configured public key (PEM text or a file holding it) or from a
JWKS URL. A JWKS is fetched with a bounded timeout and kept for ``jwt_jwks_ttl_s``; a
token naming a ``kid`` the cached set lacks (the issuer rotated its keys) asks for a new
fetch, and fetches are at least ``jwt_jwks_refetch_s`` apart, so tokens with made-up
kids cannot make the server hammer the issuer. Fetching is I/O, so it happens in
:meth:`JwtAuthenticator.prepare`, awaited before the route runs; the synchronous
:meth:`JwtAuthenticator.authenticate` only reads the cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import httpx2
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, JWKRegistry, OKPKey, RSAKey
from starlette.requests import HTTPConnection

from parkway.transport.auth.identity import Identity, roles_from

__all__ = ["JwtAuthenticator", "KeySource", "load_public_key"]

log = logging.getLogger(__name__)

_PublicKey = RSAKey | ECKey | OKPKey

# The key type each allowed algorithm family needs.
_KEY_TYPE = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
# Tokens and JWKS documents past these sizes are refused unread.
_MAX_TOKEN = 8 * 1024
_MAX_JWKS = 512 * 1024
_MAX_PRINCIPAL = 256


def _key_type_for(alg: str) -> str | None:
    return _KEY_TYPE.get(alg[:2])


def load_public_key(value: str) -> _PublicKey:
    """The verification key in ``value``: PEM text, or the path of a file holding it.
    Only public key types are taken (never a bare string read as an HMAC secret)."""
    text = value if "-----BEGIN" in value else Path(value).read_text()
    for kind in ("RSA", "EC", "OKP"):
        try:
            key = JWKRegistry.import_key(text, kind)
        except (JoseError, ValueError, TypeError):
            continue
        if isinstance(key, RSAKey | ECKey | OKPKey):
            return key
    raise ValueError("jwt_public_key holds no RSA, EC or Ed25519 public key in PEM form")


class KeySource:
    """The keys tokens may be signed with: one static key, or a JWKS URL's keys."""

    def __init__(
        self,
        *,
        jwks_url: str | None = None,
        key: _PublicKey | None = None,
        ttl_s: float = 300,
        timeout_s: float = 5,
        refetch_s: float = 30,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jwks_url = jwks_url
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.refetch_s = refetch_s
        self._clock = clock
        self._keys: dict[str | None, _PublicKey] = {} if key is None else {None: key}
        self._static = key is not None
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0  # how many times the JWKS was asked for

    def get(self, kid: str | None) -> _PublicKey | None:
        """The key named ``kid``; a token without a kid matches a lone key only."""
        if self._static:
            return self._keys[None]
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def _due(self, kid: str | None) -> bool:
        if self._static:
            return False
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at >= self.ttl_s
        if not stale and self.get(kid) is not None:
            return False
        return self._tried_at is None or now - self._tried_at >= self.refetch_s

    async def ensure(self, kid: str | None) -> None:
        """Fetch the JWKS when the cache is stale or lacks ``kid``, at most once per
        ``refetch_s``; while a fetch is under way, wait for it. A failed fetch keeps the
        keys already known."""
        # A fetch under way may bring the key this token needs: wait for it rather than
        # answer from the cache it is replacing (the page's first requests come at once).
        if not self._due(kid) and not self._lock.locked():
            return
        async with self._lock:
            if not self._due(kid):  # another request fetched meanwhile
                return
            self._tried_at = self._clock()
            self.fetches += 1
            try:
                keys = await self._fetch()
            except (httpx2.HTTPError, ValueError) as exc:
                log.warning("cannot fetch the JWKS at %s: %s", self.jwks_url, exc)
                return
            self._keys = keys
            self._fetched_at = self._clock()

    async def _fetch(self) -> dict[str | None, _PublicKey]:
        assert self.jwks_url is not None
        async with httpx2.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as client:
            answer = await client.get(self.jwks_url, headers={"accept": "application/json"})
        if answer.status_code != 200:
            raise ValueError(f"HTTP {answer.status_code}")
        if len(answer.content) > _MAX_JWKS:
            raise ValueError("the document is too large")
        document = answer.json()
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError("not a JWK set")
        keys: dict[str | None, _PublicKey] = {}
        for data in document["keys"]:
            # Public signing keys only: a symmetric ("oct") key in a JWKS would be a
            # shared secret published to the world.
            if not isinstance(data, dict) or data.get("use", "sig") != "sig":
                continue
            try:
                key = JWKRegistry.import_key(data)
            except (JoseError, ValueError, TypeError, KeyError):
                continue
            if isinstance(key, RSAKey | ECKey | OKPKey) and not key.is_private:
                keys[key.kid] = key
        if not keys:
            raise ValueError("it holds no usable public signing key")
        return keys


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.cookie = cookie
        self.algorithms = frozenset(algorithms)
        self.principal_claim = principal_claim
        self.roles_claim = roles_claim
        self._claims = jwt.JWTClaimsRegistry(
            now=lambda: int(clock()),
            leeway=leeway_s,
            iss={"essential": True, "value": issuer},
            aud={"essential": True, "value": audience},
            exp={"essential": True},
        )

    def _allowed_header(self, token: str) -> dict[str, Any] | None:
        header = _header_of(token)
        if header is None or header.get("alg") not in self.algorithms:
            return None
        kid = header.get("kid")
        return header if kid is None or isinstance(kid, str) else None

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
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not 0 < len(principal) <= _MAX_PRINCIPAL:
            return None
        return Identity(principal, roles_from(claims.get(self.roles_claim)))
