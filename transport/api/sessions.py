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
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Protocol

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import HTTPConnection

__all__ = ["COOKIE_NAME", "Authenticator", "SessionAuthenticator"]

#: The unscoped name (older servers set it; still read) and the scoped names' prefix.
COOKIE_NAME = "parkway_session"

# payload.timestamp.signature, each part unpadded base64url (a compressed payload
# starts with an extra "."); nothing else.
_TOKEN_SHAPE = re.compile(r"\.?[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class Authenticator(Protocol):
    """Resolves a request to a principal id, or None when it carries no valid identity."""

    def authenticate(self, conn: HTTPConnection) -> str | None: ...


class SessionAuthenticator:
    """Signed session tokens as cookie or bearer token."""

    def __init__(self, secret: str, *, max_age_s: int = 30 * 24 * 3600) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt="parkway.session.v1")
        self.max_age_s = max_age_s
        # 32 bits of a keyed digest: enough to tell a host's servers apart, and nothing
        # about the key (it is an HMAC of a fixed label).
        tag = hmac.new(secret.encode(), b"parkway.session.cookie-name", hashlib.sha256)
        self.cookie_name = f"{COOKIE_NAME}_{tag.hexdigest()[:8]}"

    def issue(self, principal: str | None = None) -> tuple[str, str]:
        """A (principal, token) pair; a new principal unless one is given."""
        principal = principal or f"usr_{secrets.token_urlsafe(16)}"
        return principal, self._serializer.dumps({"p": principal})

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
