"""Principals and sessions.

Every request resolves to a principal through an :class:`Authenticator`. The default,
:class:`SessionAuthenticator`, issues signed session tokens (``POST /api/sessions``) and
accepts them as a cookie (browsers) or a bearer token (other clients). Tokens are
HMAC-signed with the settings' secret key and expire after ``max_age_s``; no server-side
session state is kept.

The cookie's name is scoped to the server's key (``parkway_session_<tag>``, the tag a
keyed digest of a fixed label): browsers share a host's cookies across its ports, so
with one name a second server on the same host (another key) would replace the first
one's cookie with its own, and the first server's chats would seem lost. Servers that
share a key accept each other's tokens, so they may share the cookie too. The unscoped
name older servers set is still read when the scoped one is absent.

Threat answered: a chat is visible only to its owner, so a principal must not be
forgeable. A token is a random principal id signed with the server's key; guessing one
means forging the HMAC. A token is accepted only in the exact form it was issued in:
base64 decoding forgives padding, unused trailing bits and stray characters, so without
an exact comparison of the signature several strings would stand for one token, and a
token altered in any byte would still verify (docs/security.md, "Session tokens").

Each new principal names the client address that minted it, as a keyed digest of the
address (IPv6 addresses by their /64, which one host or home network holds whole):
``usr_<random>.<digest>``. The digest is signed with the principal, so it cannot be
chosen, and it does not show the address; the stores count what all the principals of
one address keep together (:func:`address_quotas`, runner/store/addresses.py), since
minting more sessions must not buy more storage. A principal that kept its session
keeps its address, wherever it is used from.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
from typing import Protocol

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import HTTPConnection

from parkway.runner.store import AddressQuotas
from parkway.transport.auth import (
    HeaderAuthenticator,
    Identity,
    JwtAuthenticator,
    KeySource,
    TrustedProxies,
    load_public_key,
)
from parkway.transport.settings import Settings, SettingsError

__all__ = [
    "COOKIE_NAME",
    "Authenticator",
    "SessionAuthenticator",
    "address_group",
    "address_quotas",
    "authenticator_from",
    "page_auth",
]

#: The unscoped name (older servers set it; still read) and the scoped names' prefix.
COOKIE_NAME = "parkway_session"

# payload.timestamp.signature, each part unpadded base64url (a compressed payload
# starts with an extra "."); nothing else.
_TOKEN_SHAPE = re.compile(r"\.?[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
# A principal minted with its address: usr_<random>.<16 hex digits of the address's digest>
_ADDRESSED = re.compile(r"usr_[A-Za-z0-9_-]+\.([0-9a-f]{16})")


class Authenticator(Protocol):
    """Resolves a request to a principal id (or an :class:`Identity`, which adds roles),
    or None when it carries no valid identity. Called on the event loop: it must not
    block (an authenticator that needs I/O does it beforehand, see
    :mod:`parkway.transport.auth`)."""

    def authenticate(self, conn: HTTPConnection) -> str | Identity | None: ...


class SessionAuthenticator:
    """Signed session tokens as cookie or bearer token."""

    def __init__(self, secret: str, *, max_age_s: int = 30 * 24 * 3600) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt="parkway.session.v1")
        self.max_age_s = max_age_s
        # 32 bits of a keyed digest: enough to tell a host's servers apart, and nothing
        # about the key (it is an HMAC of a fixed label).
        tag = hmac.new(secret.encode(), b"parkway.session.cookie-name", hashlib.sha256)
        self.cookie_name = f"{COOKIE_NAME}_{tag.hexdigest()[:8]}"
        self._address_key = hmac.new(secret.encode(), b"parkway.session.address\0", "sha256")

    def issue(self, principal: str | None = None, *, address: str = "") -> tuple[str, str]:
        """A (principal, token) pair; a new principal, of the client ``address``, unless
        one is given."""
        if not principal:
            digest = self._address_key.copy()
            digest.update(address_group(address).encode())
            principal = f"usr_{secrets.token_urlsafe(16)}.{digest.hexdigest()[:16]}"
        return principal, self._serializer.dumps({"p": principal})

    @staticmethod
    def address_of(principal: str) -> str | None:
        """The address a principal this authenticator issued was minted by (its digest),
        or None for one minted before principals named it."""
        found = _ADDRESSED.fullmatch(principal)
        return None if found is None else found.group(1)

    def verify(self, token: str) -> str | None:
        """The token's principal, or None unless ``token`` is byte for byte a token this
        key issued (and not expired)."""
        if len(token) > 1024 or not _TOKEN_SHAPE.fullmatch(token):
            return None
        value, _, signature = token.rpartition(".")
        # itsdangerous checks the HMAC of what the signature decodes to; compare the
        # encoded signature itself with the one this key makes, so only the canonical
        # encoding verifies.
        expected = self._serializer.make_signer(self._serializer.salt).get_signature(value)
        if not hmac.compare_digest(signature.encode("ascii"), expected):
            return None
        try:
            data = self._serializer.loads(token, max_age=self.max_age_s)
        except BadSignature:
            return None
        principal = data.get("p") if isinstance(data, dict) else None
        return principal if isinstance(principal, str) else None

    def authenticate(self, conn: HTTPConnection) -> str | None:
        header = conn.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            return self.verify(header[7:].strip())
        cookie = conn.cookies.get(self.cookie_name) or conn.cookies.get(COOKIE_NAME)
        return self.verify(cookie) if cookie else None


def address_group(address: str) -> str:
    """The address a quota counts ``address`` as: an IPv6 address's /64 network (a host
    or a home network is given a /64 whole, so each of its addresses is no other client),
    an IPv4 address itself (also when mapped into IPv6), anything else as it is."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def address_quotas(settings: Settings, authenticator: Authenticator) -> AddressQuotas | None:
    """What the anonymous sessions of one client address may store together (settings
    ``quota_address_stored_bytes``, ``quota_address_live_chats``), or None where nothing
    is counted per address: another kind of identity, or a local playground (one user,
    whose sessions the throttle does not limit either)."""
    if not isinstance(authenticator, SessionAuthenticator) or settings.local:
        return None
    return AddressQuotas(
        of=authenticator.address_of,
        stored_bytes=settings.quota_address_stored_bytes,
        live_chats=settings.quota_address_live_chats,
    )


def authenticator_from(settings: Settings) -> Authenticator:
    """The authenticator the ``auth`` setting chooses (:meth:`Settings.resolve_auth`:
    anonymous sessions by default on a local playground only)."""
    mode = settings.resolve_auth()
    if mode == "jwt":
        assert settings.jwt_issuer is not None  # (the settings' own check)
        assert settings.jwt_audience is not None
        if settings.jwt_public_key is not None:
            try:
                key = load_public_key(settings.jwt_public_key)
            except (OSError, ValueError) as exc:
                raise SettingsError(
                    f"jwt_public_key (PARKWAY_JWT_PUBLIC_KEY): cannot read a key: {exc}"
                ) from None
            keys = KeySource(key=key)
        else:
            keys = KeySource(
                jwks_url=settings.jwt_jwks_url,
                ttl_s=settings.jwt_jwks_ttl_s,
                timeout_s=settings.jwt_jwks_timeout_s,
                refetch_s=settings.jwt_jwks_refetch_s,
            )
        return JwtAuthenticator(
            keys,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            algorithms=settings.jwt_algorithms,
            leeway_s=settings.jwt_leeway_s,
            principal_claim=settings.jwt_principal_claim,
            roles_claim=settings.jwt_roles_claim,
            cookie=settings.jwt_cookie,
            max_lifetime_s=settings.jwt_max_lifetime_s,
            typ=settings.jwt_typ,
        )
    if mode == "header":
        assert settings.auth_header is not None
        return HeaderAuthenticator(
            settings.auth_header,
            TrustedProxies(settings.trusted_proxies),
            roles_header=settings.auth_roles_header,
        )
    return SessionAuthenticator(settings.resolve_secret().get_secret_value())


def page_auth(authenticator: Authenticator) -> str:
    """How the playground page is told the server knows its users (its ``parkway-auth``
    meta tag, :data:`parkway.widgets_api.playground.page.PAGE_AUTH_MODES`): with anything
    but anonymous sessions it must not ask for one (``POST /api/sessions`` is a 404
    there), and a 401 means the user is not signed in."""
    if isinstance(authenticator, SessionAuthenticator):
        return "session"
    if isinstance(authenticator, JwtAuthenticator):
        return "jwt"
    if isinstance(authenticator, HeaderAuthenticator):
        return "header"
    return "host"
