"""The kinds of value settings take, and how each is read and checked."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_settings import NoDecode

from parkway.widgets_api.connect import TokenCipher, TokenKeyError

__all__ = [
    "JWT_ALGORITHMS",
    "AuthMode",
    "Count",
    "LongWait",
    "Names",
    "SecretSetting",
    "SettingsError",
    "Switch",
    "Timeout",
    "TokenKey",
    "loopback",
    "origin",
]

# The signature algorithms a JWT may use: asymmetric ones only. HMAC ("HS256" ...) would
# let anyone holding the verification key (public, with a JWKS) mint tokens, and
# "none" is no signature at all (docs/security.md, "Identities").
JWT_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "Ed25519"}
)


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names it and the fix."""


def origin(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in {"http", "https"} or not parts.netloc or parts.path not in {"", "/"}:
        raise ValueError(f"{value!r} is not an origin like https://app.example.com")
    return f"{parts.scheme}://{parts.netloc}".lower()


def _comma_separated(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",")]
    return value


def _switch(value: Any) -> Any:
    """The words a boolean setting takes, in any case; anything else is refused.
    Checked here because pydantic's own bool also takes t, f, y and n, which
    docs/operations.md does not promise."""
    if isinstance(value, bool) or value is None:
        return value
    word = str(value).strip().lower()
    if word in {"1", "true", "yes", "on"}:
        return True
    if word in {"0", "false", "no", "off"}:
        return False
    raise ValueError("must be one of 1, true, yes, on, 0, false, no, off")


def loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _token_key(value: SecretStr) -> SecretStr:
    try:
        TokenCipher.from_setting(value.get_secret_value())
    except TokenKeyError as exc:
        raise ValueError(str(exc)) from None
    return value


SecretSetting = Annotated[SecretStr, Field(min_length=32)]
TokenKey = Annotated[SecretStr, AfterValidator(_token_key)]
Switch = Annotated[bool, BeforeValidator(_switch)]
Names = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_comma_separated)]
Timeout = Annotated[float, Field(gt=0, le=120)]
LongWait = Annotated[float, Field(gt=0, le=3600)]
Count = Annotated[int, Field(ge=1)]
AuthMode = Literal["anonymous", "jwt", "header"]
