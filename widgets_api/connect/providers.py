"""OAuth providers: configuration, presets and discovery.

A provider is configured by ``issuer`` (its metadata is fetched at startup from the
issuer's well-known document and must name the same issuer), by explicit endpoints, or
by a preset (``github``, ``google``) that fills in the endpoints. Every provider uses
the authorization code grant with PKCE S256; a provider whose metadata does not list
S256 is refused at startup unless its configuration says ``"pkce": "state_only"``,
in which case the flow relies on the server-side, browser-bound ``state`` alone.

The configuration is a JSON array (settings ``oauth_providers``: the JSON itself or
``@path/to/file.json``). Each entry::

    {"name": "acme", "issuer": "https://id.acme.example", "client_id": "...",
     "client_secret_env": "ACME_SECRET", "scopes": ["openid", "profile"]}

See docs/security.md for every field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parkway.runner.validation import describe_first_error

__all__ = [
    "PRESETS",
    "Provider",
    "ProviderConfigError",
    "ProviderRegistry",
    "ProviderSpec",
    "build_provider",
    "discover",
    "load_providers",
    "parse_provider_specs",
]

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
AuthMethod = Literal["client_secret_basic", "client_secret_post"]
DEFAULT_ACCOUNT_CLAIMS = ("preferred_username", "login", "email", "name", "sub")
DEFAULT_SUBJECT_CLAIMS = ("sub", "id")


class ProviderConfigError(ValueError):
    """A provider's configuration is unusable; the message names the provider and fix."""


@dataclass(frozen=True, repr=False)
class Provider:
    """One configured provider, endpoints resolved. ``client_secret`` never shows in a
    repr."""

    name: str
    display_name: str
    client_id: str
    client_secret: str
    authorization_endpoint: str
    token_endpoint: str
    issuer: str | None = None
    revocation_endpoint: str | None = None
    userinfo_endpoint: str | None = None
    scopes: tuple[str, ...] = ()
    allowed_scopes: frozenset[str] = frozenset()
    pkce: Literal["s256", "state_only"] = "s256"
    iss_parameter: bool = False
    token_auth_method: AuthMethod = "client_secret_basic"  # noqa: S105 (a method name)
    authorize_params: Mapping[str, str] = field(default_factory=dict)
    account_claims: tuple[str, ...] = DEFAULT_ACCOUNT_CLAIMS
    subject_claims: tuple[str, ...] = DEFAULT_SUBJECT_CLAIMS

    def requested_scopes(self, asked: Iterable[str] = ()) -> tuple[str, ...]:
        """The configured scopes plus those the agent asked for that the configuration
        allows, in a stable order. Never anything from a request's query string."""
        out = list(self.scopes)
        for scope in asked:
            if scope in self.allowed_scopes and scope not in out:
                out.append(scope)
        return tuple(out)

    def __repr__(self) -> str:
        return f"Provider(name={self.name!r}, issuer={self.issuer!r}, client_id={self.client_id!r})"


class ProviderSpec(BaseModel):
    """One entry of the ``oauth_providers`` setting, as written by an operator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    preset: Literal["github", "google"] | None = None
    display_name: str | None = Field(default=None, max_length=64)
    issuer: str | None = None
    discovery: bool | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    userinfo_endpoint: str | None = None
    client_id: str = Field(min_length=1, max_length=512)
    client_secret: str | None = Field(default=None, max_length=4096, repr=False)
    client_secret_env: str | None = None
    scopes: list[str] | None = None
    allowed_scopes: list[str] | None = None
    pkce: Literal["s256", "state_only"] = "s256"
    iss_parameter: bool | None = None
    token_auth_method: AuthMethod | None = None
    authorize_params: dict[str, str] | None = None
    account_claims: list[str] | None = None
    subject_claims: list[str] | None = None


# Facts from each provider's documentation: endpoints, and which claim names the
# account. Presets use no discovery (nothing is fetched at startup for them).
PRESETS: dict[str, dict[str, Any]] = {
    "github": {
        "display_name": "GitHub",
        "authorization_endpoint": "https://github.com/login/oauth/authorize",
        "token_endpoint": "https://github.com/login/oauth/access_token",
        "userinfo_endpoint": "https://api.github.com/user",
        "scopes": ["read:user"],
        "allowed_scopes": ["repo", "read:org", "user:email", "gist", "workflow"],
        "account_claims": ["login"],
        "subject_claims": ["id"],
    },
    "google": {
        "display_name": "Google",
        "issuer": "https://accounts.google.com",
        "authorization_endpoint": "https://accounts.google.com/o/oauth2/v2/auth",
        "token_endpoint": "https://oauth2.googleapis.com/token",
        "revocation_endpoint": "https://oauth2.googleapis.com/revoke",
        "userinfo_endpoint": "https://openidconnect.googleapis.com/v1/userinfo",
        "scopes": ["openid", "email"],
        "allowed_scopes": [
            "profile",
            "https://www.googleapis.com/auth/calendar.readonly",
            "https://www.googleapis.com/auth/drive.readonly",
        ],
        "authorize_params": {"access_type": "offline", "prompt": "consent"},
        "account_claims": ["email", "sub"],
        "subject_claims": ["sub"],
    },
}


def _url(value: str | None, what: str, name: str) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    loopback = parts.hostname in {"127.0.0.1", "localhost", "::1"}
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise ProviderConfigError(
            f"provider {name!r}: {what} {value!r} must be an https URL (http only on loopback)"
        )
    if parts.fragment:
        raise ProviderConfigError(f"provider {name!r}: {what} must not have a fragment")
    return value


def parse_provider_specs(raw: str | None) -> list[ProviderSpec]:
    """The ``oauth_providers`` setting: a JSON array, or ``@file`` holding one."""
    if raw is None or not raw.strip():
        return []
    text = raw.strip()
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise ProviderConfigError(f"oauth_providers: cannot read {text[1:]!r}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ProviderConfigError("oauth_providers is not valid JSON") from None
    if not isinstance(data, list):
        raise ProviderConfigError("oauth_providers must be a JSON array of providers")
    specs = []
    for index, entry in enumerate(data):
        try:
            specs.append(ProviderSpec.model_validate(entry))
        except ValidationError as exc:
            problem = describe_first_error(exc, root="(entry)")
            raise ProviderConfigError(f"oauth_providers[{index}] {problem}") from None
    return specs


Fetch = Callable[[str], Any]  # async: url -> parsed JSON or None when absent


def _metadata_urls(issuer: str) -> list[str]:
    base = issuer.rstrip("/")
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    urls = [f"{base}/.well-known/openid-configuration"]
    if path:  # RFC 8414 §3.1: the well-known segment goes before the issuer's path
        urls.append(f"{origin}/.well-known/oauth-authorization-server{path}")
    urls.append(f"{base}/.well-known/oauth-authorization-server")
    return urls


async def discover(issuer: str, fetch: Fetch) -> dict[str, Any]:
    """The issuer's metadata (OpenID discovery, then RFC 8414), checked to name the same
    issuer (a document for another issuer is how a mix-up starts)."""
    for url in _metadata_urls(issuer):
        data = await fetch(url)
        if data is None:
            continue
        if not isinstance(data, dict):
            raise ProviderConfigError(f"metadata at {url} is not a JSON object")
        if data.get("issuer") != issuer:
            raise ProviderConfigError(
                f"metadata at {url} names issuer {data.get('issuer')!r}, not {issuer!r}"
            )
        return data
    raise ProviderConfigError(f"no metadata found for issuer {issuer!r}")


def build_provider(
    spec: ProviderSpec,
    *,
    metadata: Mapping[str, Any] | None,
    environ: Mapping[str, str],
) -> Provider:
    """Resolve one spec (preset, then metadata, then explicit fields) into a provider."""
    name = spec.name
    if not NAME.match(name):
        raise ProviderConfigError(
            f"provider name {name!r}: use 1-32 of a-z, 0-9, '_' and '-', starting alnum"
        )
    base: dict[str, Any] = dict(PRESETS[spec.preset]) if spec.preset else {}
    meta = dict(metadata or {})
    secret = spec.client_secret
    if secret is None and spec.client_secret_env:
        secret = environ.get(spec.client_secret_env)
        if not secret:
            raise ProviderConfigError(
                f"provider {name!r}: environment variable {spec.client_secret_env} is empty"
            )
    if not secret:
        raise ProviderConfigError(
            f"provider {name!r}: give client_secret_env (or client_secret) for the client"
        )

    def pick(key: str) -> Any:
        explicit = getattr(spec, key, None)
        if explicit is not None:
            return explicit
        if key in meta:
            return meta[key]
        return base.get(key)

    authorization = _url(pick("authorization_endpoint"), "authorization_endpoint", name)
    token = _url(pick("token_endpoint"), "token_endpoint", name)
    if authorization is None or token is None:
        raise ProviderConfigError(
            f"provider {name!r}: needs an issuer with metadata, a preset, or both "
            "authorization_endpoint and token_endpoint"
        )
    issuer = spec.issuer or base.get("issuer")
    if metadata is not None and spec.pkce == "s256":
        methods = meta.get("code_challenge_methods_supported") or []
        if "S256" not in methods:
            raise ProviderConfigError(
                f"provider {name!r} does not advertise PKCE S256 "
                f"(code_challenge_methods_supported: {methods!r}); refusing it. If it "
                'really has no PKCE, set "pkce": "state_only" to rely on state alone'
            )
    iss_parameter = spec.iss_parameter
    if iss_parameter is None:
        iss_parameter = bool(meta.get("authorization_response_iss_parameter_supported"))
    scopes = pick("scopes") or []
    allowed = set(pick("allowed_scopes") or []) | set(scopes)
    auth_method = spec.token_auth_method
    if auth_method is None:
        supported = meta.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        auth_method = (
            "client_secret_basic" if "client_secret_basic" in supported else "client_secret_post"
        )
    return Provider(
        name=name,
        display_name=spec.display_name or base.get("display_name") or name.capitalize(),
        client_id=spec.client_id,
        client_secret=secret,
        authorization_endpoint=authorization,
        token_endpoint=token,
        issuer=issuer,
        revocation_endpoint=_url(pick("revocation_endpoint"), "revocation_endpoint", name),
        userinfo_endpoint=_url(pick("userinfo_endpoint"), "userinfo_endpoint", name),
        scopes=tuple(scopes),
        allowed_scopes=frozenset(allowed),
        pkce=spec.pkce,
        iss_parameter=iss_parameter,
        token_auth_method=auth_method,
        authorize_params=dict(pick("authorize_params") or {}),
        account_claims=tuple(pick("account_claims") or DEFAULT_ACCOUNT_CLAIMS),
        subject_claims=tuple(pick("subject_claims") or DEFAULT_SUBJECT_CLAIMS),
    )


class ProviderRegistry:
    """The configured providers by name."""

    def __init__(self, providers: Sequence[Provider] = ()) -> None:
        self._by_name: dict[str, Provider] = {}
        for provider in providers:
            self.add(provider)

    def add(self, provider: Provider) -> None:
        if provider.name in self._by_name:
            raise ProviderConfigError(f"provider {provider.name!r} is configured twice")
        self._by_name[provider.name] = provider

    def get(self, name: str) -> Provider | None:
        return self._by_name.get(name)

    def names(self) -> dict[str, str]:
        """Provider name -> display name (what widget descriptors show)."""
        return {p.name: p.display_name for p in self._by_name.values()}

    def __iter__(self) -> Any:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)


async def load_providers(
    specs: Sequence[ProviderSpec], *, fetch: Fetch, environ: Mapping[str, str]
) -> ProviderRegistry:
    """Build the registry, fetching metadata where a spec names an issuer without a
    preset (or asks for discovery). Raises :class:`ProviderConfigError`."""
    registry = ProviderRegistry()
    for spec in specs:
        use_discovery = spec.discovery
        if use_discovery is None:
            use_discovery = spec.issuer is not None and spec.preset is None
        metadata = None
        if use_discovery:
            if spec.issuer is None:
                raise ProviderConfigError(f"provider {spec.name!r}: discovery needs an issuer")
            _url(spec.issuer, "issuer", spec.name)
            metadata = await discover(spec.issuer, fetch)
        registry.add(build_provider(spec, metadata=metadata, environ=environ))
    return registry
