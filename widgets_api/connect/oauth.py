"""Assembling the OAuth pieces at startup: providers (with discovery), the demo provider,
the token cipher, the connection store and the connect flow.

``transport``'s lifespan calls :func:`start_oauth` once Redis and the runner exist; the
runner gets the connection store as its :class:`parkway.runner.agent.credentials.Credentials`, and
the flow's settle listener.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2
from starlette.responses import JSONResponse
from starlette.routing import Router
from starlette.types import Receive, Scope, Send

from parkway.runner.engine import Runner
from parkway.runner.store import RedisClient
from parkway.widgets_api.connect.cipher import TokenCipher
from parkway.widgets_api.connect.connections import ConnectionStore
from parkway.widgets_api.connect.flow import ConnectFlow
from parkway.widgets_api.connect.providers import (
    ProviderConfigError,
    ProviderRegistry,
    ProviderSpec,
    build_provider,
    load_providers,
)
from parkway.widgets_api.demo_provider import DemoProvider

__all__ = [
    "DEMO_MOUNT",
    "DemoDispatch",
    "OAuthRuntime",
    "OAuthSettings",
    "check_providers",
    "start_oauth",
]

log = logging.getLogger(__name__)

DEMO_MOUNT = "/demo-oauth"
DEMO_CLIENT_ID = "parkway-demo"


@dataclass(frozen=True)
class OAuthSettings:
    """What the OAuth pieces need from the server's settings."""

    specs: tuple[ProviderSpec, ...]
    demo: bool
    base_url: str
    secret: str = field(repr=False)
    token_key: str | None = field(repr=False)
    allowed_origins: tuple[str, ...] = ()
    cookie_secure: bool = False
    flow_ttl_s: int = 600
    connection_ttl_s: int = 180 * 24 * 3600
    http_timeout_s: float = 10.0
    #: the path a host application mounts the app at (``/pw``; ``""`` at the root):
    #: callback URLs and the demo provider's issuer are under it
    prefix: str = ""


@dataclass
class OAuthRuntime:
    providers: ProviderRegistry
    connections: ConnectionStore
    flow: ConnectFlow
    demo: DemoProvider | None

    def close(self) -> None:
        if self.demo is not None:
            self.demo.close()


class DemoDispatch:
    """An ASGI endpoint under ``/demo-oauth/...`` that hands requests to the demo
    provider's routes once the lifespan has built it (404 when it is not enabled)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        router: Router | None = getattr(scope["app"].state, "demo_router", None)
        if router is None:
            body = {"error": {"code": "not_found", "message": "the demo provider is off"}}
            await JSONResponse(body, status_code=404)(scope, receive, send)
            return
        await router(scope, receive, send)


async def _fetch_json(url: str, timeout_s: float) -> Any:
    try:
        async with httpx2.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
            response = await client.get(url, headers={"accept": "application/json"})
    except httpx2.HTTPError as exc:
        raise ProviderConfigError(f"cannot fetch {url}: {type(exc).__name__}") from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ProviderConfigError(f"{url} answered HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise ProviderConfigError(f"{url} did not answer JSON") from None


def _fetcher(timeout_s: float) -> Callable[[str], Awaitable[Any]]:
    """Discovery's fetch: a metadata document, or None when it is not there (404)."""

    async def fetch(url: str) -> Any:
        return await _fetch_json(url, timeout_s)

    return fetch


def demo_client_secret(secret: str) -> str:
    """The demo client's secret, derived from the server's key (never configured)."""
    return hmac.new(secret.encode(), b"parkway.demo-oauth.client", hashlib.sha256).hexdigest()


async def check_providers(
    specs: tuple[ProviderSpec, ...], *, environ: Mapping[str, str], timeout_s: float
) -> None:
    """Resolve the configured providers once (discovery included) and raise
    :class:`ProviderConfigError` for the first unusable one: ``parkway serve`` calls it
    before serving, so a bad provider is a one-line error, not a failed startup."""

    await load_providers(specs, fetch=_fetcher(timeout_s), environ=environ)


async def start_oauth(
    settings: OAuthSettings,
    *,
    runner: Runner,
    redis: RedisClient,
    redis_url: str,
    environ: Mapping[str, str],
) -> OAuthRuntime | None:
    """Build everything, or return None when no provider is configured. Raises
    :class:`ProviderConfigError` for a provider that cannot be used (no S256 PKCE,
    metadata for another issuer, unreachable discovery)."""

    providers = await load_providers(
        settings.specs, fetch=_fetcher(settings.http_timeout_s), environ=environ
    )
    demo: DemoProvider | None = None
    if settings.demo and urlsplit(redis_url).scheme not in {"redis", "rediss", "unix"}:
        raise ProviderConfigError(
            "the demo OAuth provider needs a single Redis server (redis://, rediss:// or "
            "unix://), not a Cluster or Sentinel URL: turn it off with demo_oauth=false"
        )
    if settings.demo:
        root = f"{settings.base_url}{settings.prefix}"
        issuer = f"{root}{DEMO_MOUNT}"
        secret = demo_client_secret(settings.secret)
        demo = DemoProvider(
            redis_url=redis_url,
            issuer=issuer,
            client_id=DEMO_CLIENT_ID,
            client_secret=secret,
            redirect_uris=[f"{root}/connect/demo/callback"],
            route_mount=DEMO_MOUNT,
        )
        spec = ProviderSpec(
            name="demo",
            display_name="Demo account",
            issuer=issuer,
            client_id=DEMO_CLIENT_ID,
            client_secret=secret,
            scopes=["profile"],
            allowed_scopes=["email", "repo", "read:org"],
        )
        providers.add(build_provider(spec, metadata=demo.metadata(), environ={}))
    if len(providers) == 0:
        return None
    if settings.token_key is None:
        raise ProviderConfigError("OAuth providers are configured but no token key is set")
    connections = ConnectionStore(
        redis,
        TokenCipher.from_setting(settings.token_key),
        providers,
        ttl_s=settings.connection_ttl_s,
        http_timeout_s=settings.http_timeout_s,
    )
    flow = ConnectFlow(
        runner=runner,
        redis=redis,
        providers=providers,
        connections=connections,
        base_url=settings.base_url,
        prefix=settings.prefix,
        allowed_origins=settings.allowed_origins,
        cookie_secure=settings.cookie_secure,
        flow_ttl_s=settings.flow_ttl_s,
        http_timeout_s=settings.http_timeout_s,
    )
    runner.credentials = connections
    runner.settle_listeners.append(flow.on_settled)
    for provider in providers:
        log.info(
            "OAuth provider %s: issuer %s, PKCE %s, iss parameter %s",
            provider.name,
            provider.issuer,
            provider.pkce,
            "required" if provider.iss_parameter else "checked when sent",
        )
    return OAuthRuntime(providers, connections, flow, demo)
