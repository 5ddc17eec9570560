"""The demo provider's client, codes and tokens: authlib's client, authorization code
and token mixins, implemented by duck typing on frozen dataclasses.

Also what the one client may ask for: its scopes and its ways to authenticate.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

__all__ = [
    "AUTHORIZE_PARAMS",
    "AUTH_METHODS",
    "DEFAULT_SCOPE",
    "PKCE_PARAMS",
    "SCOPES",
    "Client",
    "Code",
    "Token",
]

SCOPES = ("profile", "email", "offline_access", "repo", "read:org")
DEFAULT_SCOPE = "profile"  # what a request without `scope` is given (RFC 6749 §3.3)
AUTH_METHODS = ("client_secret_basic", "client_secret_post")
AUTHORIZE_PARAMS = ("response_type", "client_id", "redirect_uri", "scope", "state")
PKCE_PARAMS = ("code_challenge", "code_challenge_method")


@dataclass(frozen=True, repr=False)
class Client:
    client_id: str
    secret: bytes
    redirect_uris: tuple[str, ...]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        return None  # every request must name its redirect_uri; it is compared exactly

    def get_allowed_scope(self, scope: str | None) -> str:
        return " ".join(dict.fromkeys((scope or "").split())) or DEFAULT_SCOPE

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return hmac.compare_digest(client_secret.encode(), self.secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in AUTH_METHODS

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass(frozen=True)
class Code:
    grant_id: str
    client_id: str
    redirect_uri: str
    scope: str
    account: str
    code_challenge: str
    code_challenge_method: str
    expires_at: float
    digest: str = ""  # of the code itself (the key), not stored in the record

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass(frozen=True)
class Token:
    """An access token, or a refresh token (which stands for its grant)."""

    kind: str  # "access_token" | "refresh_token"
    digest: str
    grant_id: str
    client_id: str
    account: str
    scope: str
    expires_at: float = 0.0
    expired: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def is_expired(self) -> bool:
        return self.expired

    def is_revoked(self) -> bool:
        return False  # revoked tokens are deleted, so never found

    def record(self) -> str:
        fields = ("grant_id", "client_id", "account", "scope", "expires_at")
        return json.dumps({name: getattr(self, name) for name in fields})
