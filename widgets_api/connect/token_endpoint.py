"""Calls to a provider's token endpoint: the authlib client every call is made with, and
the one place its failures become :class:`TokenExchangeError` (no token, secret or
response body in it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
from authlib.integrations.base_client import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client

from parkway.widgets_api.connect.providers import Provider

__all__ = ["TokenExchangeError", "call_token_endpoint", "oauth_client"]


class TokenExchangeError(Exception):
    """A token endpoint call failed. ``code`` is the OAuth error code or one of
    ``timeout``, ``network``, ``http_<status>``, ``invalid_response``; no token, secret or
    response body is ever in the message."""

    def __init__(self, code: str) -> None:
        super().__init__(f"token endpoint failed: {code}")
        self.code = code


def oauth_client(provider: Provider, *, timeout_s: float, **kwargs: Any) -> AsyncOAuth2Client:
    """An authlib client for ``provider``. No ``scope`` is set on it: a refresh must not
    ask for more than was granted, and authlib sends the client's scope when it has one."""
    return AsyncOAuth2Client(
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        token_endpoint_auth_method=provider.token_auth_method,
        revocation_endpoint_auth_method=provider.token_auth_method,
        timeout=timeout_s,
        follow_redirects=False,
        **kwargs,
    )


async def call_token_endpoint(operation: Callable[[], Any]) -> dict[str, Any]:
    """Run an authlib token request, mapping every failure to :class:`TokenExchangeError`."""
    try:
        token = await operation()
    except OAuthError as exc:
        raise TokenExchangeError(_error_code(exc.error)) from None
    except httpx2.TimeoutException:
        raise TokenExchangeError("timeout") from None
    except httpx2.HTTPStatusError as exc:
        raise TokenExchangeError(f"http_{exc.response.status_code}") from None
    except httpx2.HTTPError:
        raise TokenExchangeError("network") from None
    except ValueError:
        raise TokenExchangeError("invalid_response") from None
    if not isinstance(token, dict) or not isinstance(token.get("access_token"), str):
        raise TokenExchangeError("invalid_response")
    return dict(token)


def _error_code(value: Any) -> str:
    text = str(value or "error")
    return "".join(c for c in text if c.isalnum() or c == "_")[:64] or "error"
