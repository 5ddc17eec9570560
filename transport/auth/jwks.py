"""The keys bearer JWTs may be signed with: one configured public key, or a JWKS URL's.

A JWKS is fetched over HTTP and kept for ``ttl_s``. A token naming a ``kid`` the cached
set lacks (the issuer rotated its keys) asks for a new fetch, and fetches are at least
``refetch_s`` apart, so tokens with made-up kids cannot make the server hammer the
issuer. A failed fetch keeps the keys already known.

Threat answered: anyone can send a token naming an unknown kid (no valid signature
needed), so anyone can start a fetch, and the issuer's answer may be slow or hostile
(a byte every few seconds, an endless body). So:

- the whole fetch (connecting, the headers, the body) has one deadline, ``timeout_s``,
  not a timeout per read that a trickle resets forever;
- the body is read as it comes and the fetch stops at ``MAX_JWKS`` bytes (a declared
  length past it is refused unread); a compressed answer is refused, since it could
  inflate past any cap within one read (the request asks for ``identity``);
- a request whose kid is in the cached set never waits for a fetch: when the cache is
  past its TTL, the refresh runs in the background while the cached keys still answer;
- a request whose kid is unknown waits for the fetch under way (it may bring that key:
  the page's first requests after a rotation come together), but never past the
  fetch's deadline; it is then answered from what the cache holds (no key: 401).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, JWKRegistry, OKPKey, RSAKey

__all__ = ["MAX_JWKS", "KeySource", "PublicKey", "load_public_key"]

log = logging.getLogger(__name__)

PublicKey = RSAKey | ECKey | OKPKey

#: A JWKS document past this size is refused (a real one holds a few keys: a few KiB).
MAX_JWKS = 512 * 1024


def load_public_key(value: str) -> PublicKey:
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
    """The keys tokens may be signed with: one static key, or a JWKS URL's keys (see the
    module's docstring for how fetches are paced and bounded)."""

    def __init__(
        self,
        *,
        jwks_url: str | None = None,
        key: PublicKey | None = None,
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
        self._keys: dict[str | None, PublicKey] = {} if key is None else {None: key}
        self._static = key is not None
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._fetching: asyncio.Task[None] | None = None
        self.fetches = 0  # how many times the JWKS was asked for

    def get(self, kid: str | None) -> PublicKey | None:
        """The key named ``kid``; a token without a kid matches a lone key only."""
        if self._static:
            return self._keys[None]
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def _due(self, known: bool) -> bool:
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at >= self.ttl_s
        if not stale and known:
            return False
        return self._tried_at is None or now - self._tried_at >= self.refetch_s

    def _under_way(self) -> asyncio.Task[None] | None:
        task = self._fetching
        # A task of another event loop (a closed one: tests, a restarted app) is over.
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return None
        return task

    async def ensure(self, kid: str | None) -> None:
        """Make the key ``kid`` names available if it can be: start a fetch when the
        cache is stale or lacks ``kid`` (at most once per ``refetch_s``), and wait for
        the fetch under way only when ``kid`` is not in the cache, never longer than
        that fetch's deadline. A cached kid returns at once."""
        if self._static:
            return
        known = self.get(kid) is not None
        fetching = self._under_way()
        if fetching is None and self._due(known):
            self._tried_at = self._clock()
            self.fetches += 1
            fetching = self._fetching = asyncio.get_running_loop().create_task(
                self._refresh(), name="parkway-jwks-fetch"
            )
        if fetching is None or known:
            return
        # Shielded: a waiter whose client goes away must not cancel the shared fetch;
        # the fetch ends at its own deadline whoever waits.
        await asyncio.shield(fetching)

    async def idle(self) -> None:
        """Wait for the fetch under way, if any (it ends at its deadline)."""
        fetching = self._under_way()
        if fetching is not None:
            await asyncio.shield(fetching)

    async def _refresh(self) -> None:
        """One fetch, within ``timeout_s`` in all; the cache is replaced only by a
        usable set."""
        try:
            async with asyncio.timeout(self.timeout_s):
                keys = await self._fetch()
        except TimeoutError:
            log.warning(
                "cannot fetch the JWKS at %s: no complete answer within %s s",
                self.jwks_url,
                self.timeout_s,
            )
            return
        except (httpx2.HTTPError, ValueError) as exc:
            log.warning("cannot fetch the JWKS at %s: %s", self.jwks_url, exc)
            return
        self._keys = keys
        self._fetched_at = self._clock()

    async def _fetch(self) -> dict[str | None, PublicKey]:
        assert self.jwks_url is not None
        headers = {"accept": "application/json", "accept-encoding": "identity"}
        async with (
            httpx2.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as client,
            client.stream("GET", self.jwks_url, headers=headers) as answer,
        ):
            if answer.status_code != 200:
                raise ValueError(f"HTTP {answer.status_code}")
            encoding = answer.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                raise ValueError(f"the answer is compressed ({encoding}); identity was asked")
            declared = answer.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_JWKS:
                raise ValueError(f"the document is larger than {MAX_JWKS // 1024} KiB")
            body = bytearray()
            async for chunk in answer.aiter_raw():
                body += chunk
                if len(body) > MAX_JWKS:  # leaving the block closes the connection
                    raise ValueError(f"the document is larger than {MAX_JWKS // 1024} KiB")
        return _keys_in(bytes(body))


def _keys_in(body: bytes) -> dict[str | None, PublicKey]:
    """The public signing keys of a JWKS document."""
    document = json.loads(body)
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWK set")
    keys: dict[str | None, PublicKey] = {}
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
