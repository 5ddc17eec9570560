"""The callback's token exchange: the code (with the flow's PKCE verifier) for a token at
the provider's token endpoint, then the account it belongs to from the userinfo endpoint.

A grant whose account cannot be read is revoked at once: nothing is stored for it, so
nothing else would ever end it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from parkway.widgets_api.connect.connections import (
    ConnectionStore,
    TokenExchangeError,
    call_token_endpoint,
    oauth_client,
)
from parkway.widgets_api.connect.providers import Provider
from parkway.widgets_api.connect.records import FlowRecord

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

        async def fetch() -> Any:
            async with oauth_client(provider, timeout_s=self.http_timeout_s) as client:
                return await client.fetch_token(provider.token_endpoint, **extra)

        token = await call_token_endpoint(fetch)
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
