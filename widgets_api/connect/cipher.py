"""Encryption of OAuth tokens at rest (AES-256-GCM).

The key comes from settings (``token_key``: one or more base64url-encoded 32-byte keys,
comma-separated; the first encrypts, all decrypt, so keys can be rotated). Each sealed
value is bound to where it is stored (the associated data names the principal and the
connection), so a ciphertext copied into another principal's record does not open.

Format: ``v1.<key id>.<base64url(nonce || ciphertext+tag)>``; the key id is the first
8 hex digits of the key's SHA-256, never the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["TokenCipher", "TokenKeyError", "generate_token_key"]

_NONCE = 12


class TokenKeyError(ValueError):
    """A token key is malformed, or a sealed value does not open with any key."""


def generate_token_key() -> str:
    """A new random key in the settings format."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def _decode_key(text: str) -> bytes:
    padded = text.strip() + "=" * (-len(text.strip()) % 4)
    try:
        key = base64.urlsafe_b64decode(padded)
    except (binascii.Error, ValueError):
        raise TokenKeyError("a token key must be base64url text") from None
    if len(key) != 32:
        raise TokenKeyError(f"a token key must decode to 32 bytes, not {len(key)}")
    return key


class TokenCipher:
    """Seals and opens small secrets with AES-GCM."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise TokenKeyError("at least one token key is needed")
        self._keys = {hashlib.sha256(k).hexdigest()[:8]: AESGCM(k) for k in keys}
        self._current = hashlib.sha256(keys[0]).hexdigest()[:8]

    @classmethod
    def from_setting(cls, text: str) -> TokenCipher:
        return cls([_decode_key(part) for part in text.split(",") if part.strip()])

    def seal(self, plaintext: bytes, context: str) -> str:
        nonce = os.urandom(_NONCE)
        sealed = self._keys[self._current].encrypt(nonce, plaintext, context.encode())
        body = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f"v1.{self._current}.{body}"

    def open(self, value: str, context: str) -> bytes:
        version, _, rest = value.partition(".")
        key_id, _, body = rest.partition(".")
        aead = self._keys.get(key_id)
        if version != "v1" or aead is None:
            raise TokenKeyError("the sealed value was made with an unknown key or format")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise TokenKeyError("the sealed value is not valid base64url") from None
        if len(raw) < _NONCE + 16:
            raise TokenKeyError("the sealed value is too short")
        try:
            return aead.decrypt(raw[:_NONCE], raw[_NONCE:], context.encode())
        except InvalidTag:
            raise TokenKeyError("the sealed value does not open (tampered or moved)") from None
