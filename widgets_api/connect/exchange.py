"""The callback's token exchange: the code (with the flow's PKCE verifier) for a token at
the provider's token endpoint, then the account it belongs to from the userinfo endpoint.

A grant whose account cannot be read is revoked at once: nothing is stored for it, so
nothing else would ever end it.

A flow for a resource (RFC 8707: an MCP server's canonical URL) sends ``resource`` on the
token request too. Its access token is for that resource, not the userinfo endpoint, so
the account is read from the ID token the same token response carries: received straight
from the token endpoint the flow record names (OpenID Connect Core §3.1.3.7 lets TLS to
it stand in for the signature check), and only its ``iss`` (the provider's) and ``aud``
(this client) are required. Without one, the account is the provider's name alone and
the connection has no subject (each sign-in is a new connection).
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import Any

from parkway.widgets_api.connect.connections import ConnectionStore
from parkway.widgets_api.connect.providers import Provider
from parkway.widgets_api.connect.records import FlowRecord
from parkway.widgets_api.connect.token_endpoint import (
    TokenExchangeError,
    call_token_endpoint,
    oauth_client,
)

__all__ = ["Exchange"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Exchange:
    """Token exchange with one configured provider at a time; raises
    ``TokenExchangeError`` for every failure (its ``code`` is safe to show)."""

    connections: ConnectionStore
    http_timeout_s: float

    async def redeem(
        self, provider: Provider, flow: FlowRecord, code: str
    ) -> tuple[dict[str, Any], str, str | None]:
        """The token, the account name and the subject (when the provider gives one)."""
        if provider.pkce == "s256" and not flow.verifier:
            raise TokenExchangeError("missing_verifier")  # fail closed, never without it
        extra: dict[str, Any] = {"code": code, "redirect_uri": flow.redirect_uri}
        if flow.verifier:
            extra["code_verifier"] = flow.verifier
        if flow.resource:
            extra["resource"] = flow.resource

        async def fetch() -> Any:
            async with oauth_client(provider, timeout_s=self.http_timeout_s) as client:
                return await client.fetch_token(provider.token_endpoint, **extra)

        token = await call_token_endpoint(fetch)
        if flow.resource:
            account, subject = _id_token_account(provider, token)
            return token, account, subject
        try:
            account, subject = await self._account(provider, token)
        except TokenExchangeError:
            await self._revoke_quietly(provider, token)  # nothing is stored: end the grant
            raise
        return token, account, subject

    async def _revoke_quietly(self, provider: Provider, token: dict[str, Any]) -> None:
        try:
            await self.connections.revoke(provider, token)
        except Exception as exc:
            log.warning(
                "revoking an unused grant at %s failed (%s)", provider.name, type(exc).__name__
            )

    async def _account(self, provider: Provider, token: dict[str, Any]) -> tuple[str, str | None]:
        if provider.userinfo_endpoint is None:
            return f"{provider.display_name} account", None
        async with oauth_client(provider, timeout_s=self.http_timeout_s, token=token) as client:
            try:
                response = await client.get(
                    provider.userinfo_endpoint, headers={"accept": "application/json"}
                )
                info = response.json() if response.status_code == 200 else None
            except Exception:
                info = None
        if not isinstance(info, dict):
            raise TokenExchangeError("userinfo_failed")

        def first(claims: tuple[str, ...]) -> str | None:
            for claim in claims:
                value = info.get(claim)
                if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                    return str(value)[:200]
            return None

        subject = first(provider.subject_claims)
        return first(provider.account_claims) or subject or "account", subject


def _id_token_account(provider: Provider, token: dict[str, Any]) -> tuple[str, str | None]:
    """The account and subject of a resource flow's ID token (see the module doc)."""
    fallback = (f"{provider.display_name} account", None)
    raw = token.get("id_token")
    if not isinstance(raw, str) or raw.count(".") != 2:
        return fallback
    try:
        payload = raw.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return fallback
    audience = claims.get("aud") if isinstance(claims, dict) else None
    audiences = audience if isinstance(audience, list) else [audience]
    if claims.get("iss") != provider.issuer or provider.client_id not in audiences:
        log.warning("connect: the ID token of %s names another issuer or client", provider.name)
        return fallback

    def first(names: tuple[str, ...]) -> str | None:
        for name in names:
            value = claims.get(name)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)[:200]
        return None

    subject = first(provider.subject_claims)
    return first(provider.account_claims) or subject or fallback[0], subject
