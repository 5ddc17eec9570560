"""OAuth providers: discovery, presets, PKCE and ``iss`` requirements, the scope
allow-list, and configuration errors that name the bad entry.

Discovery runs against a real OAuth provider on loopback (``tests/helpers/oidc_peer.py``) or a
loopback server serving a hostile document. Anchors: docs' threat model rows 3 and 15,
RFC 9700 §2.1.1 and §4.4, RFC 9207.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from parkway.widgets_api.connect.providers import (
    ProviderConfigError,
    ProviderRegistry,
    ProviderSpec,
    build_provider,
    discover,
    load_providers,
    parse_provider_specs,
)
from tests.helpers.oauth_support import (
    REG,
    SECRET,
    LoopbackServer,
    fetch_json,
    json_reply,
    needs_node,
    peer_registry,
)
from tests.helpers.oidc_peer import OidcPeer, oidc_peer


@pytest.fixture(scope="module")
def peer() -> Iterator[OidcPeer]:
    with oidc_peer([REG]) as running:
        yield running


METADATA = {
    "issuer": "https://id.acme.example",
    "authorization_endpoint": "https://id.acme.example/authorize",
    "token_endpoint": "https://id.acme.example/token",
}


@pytest.mark.parametrize("methods", [None, [], ["plain"]])
def test_provider_without_s256_is_refused_unless_state_only(methods: list[str] | None) -> None:
    """RFC 9700 §2.1.1: PKCE S256 or an explicit, visible decision to rely on state."""
    metadata = dict(METADATA)
    if methods is not None:
        metadata["code_challenge_methods_supported"] = methods  # type: ignore[assignment]
    spec = ProviderSpec(name="acme", issuer=METADATA["issuer"], client_id="c", client_secret="s")
    with pytest.raises(ProviderConfigError) as refused:
        build_provider(spec, metadata=metadata, environ={})
    assert "S256" in str(refused.value) and "state_only" in str(refused.value)
    relaxed = spec.model_copy(update={"pkce": "state_only"})
    assert build_provider(relaxed, metadata=metadata, environ={}).pkce == "state_only"
    ok = {**METADATA, "code_challenge_methods_supported": ["plain", "S256"]}
    assert build_provider(spec, metadata=ok, environ={}).pkce == "s256"


@needs_node
async def test_discovery_against_the_live_provider_fills_every_endpoint(peer: OidcPeer) -> None:
    """Metadata removes endpoint misconfiguration; the live peer is a real document."""
    metadata = await discover(peer.issuer, fetch_json)
    assert metadata["issuer"] == peer.issuer
    provider = (await peer_registry(peer)).get("acme")
    assert provider is not None
    assert provider.issuer == peer.issuer
    assert provider.token_endpoint == f"{peer.issuer}/token"
    assert provider.revocation_endpoint == f"{peer.issuer}/token/revocation"
    assert provider.iss_parameter is True
    assert provider.pkce == "s256"


async def test_discovery_refuses_metadata_naming_another_issuer() -> None:
    """A document for another issuer is how a mix-up attack starts (RFC 9700 §4.4)."""
    document = {
        **METADATA,
        "issuer": "https://evil.example",
        "code_challenge_methods_supported": ["S256"],
    }

    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        if path == "/.well-known/openid-configuration":
            return json_reply(document)
        return 404, "text/plain", b""

    with LoopbackServer(respond).running() as server:
        with pytest.raises(ProviderConfigError) as refused:
            await discover(server.url, fetch_json)
        spec = ProviderSpec(name="acme", issuer=server.url, client_id="c", client_secret="s")
        with pytest.raises(ProviderConfigError):
            await load_providers([spec], fetch=fetch_json, environ={})
    assert "https://evil.example" in str(refused.value)


def test_iss_parameter_follows_metadata_unless_configured() -> None:
    """RFC 9207 is enforced only where the provider promises to send ``iss``."""
    spec = ProviderSpec(name="acme", issuer=METADATA["issuer"], client_id="c", client_secret="s")
    base = {**METADATA, "code_challenge_methods_supported": ["S256"]}
    with_iss = {**base, "authorization_response_iss_parameter_supported": True}
    assert build_provider(spec, metadata=with_iss, environ={}).iss_parameter is True
    assert build_provider(spec, metadata=base, environ={}).iss_parameter is False
    forced = spec.model_copy(update={"iss_parameter": True})
    assert build_provider(forced, metadata=base, environ={}).iss_parameter is True


async def test_presets_resolve_without_network() -> None:
    """Presets must not depend on reaching the provider at startup."""

    async def no_network(url: str) -> Any:
        raise AssertionError(f"fetched {url}")

    specs = [
        ProviderSpec(name="gh", preset="github", client_id="c", client_secret_env="GH"),
        ProviderSpec(name="goog", preset="google", client_id="c", client_secret="s"),
    ]
    registry = await load_providers(specs, fetch=no_network, environ={"GH": "env-secret"})
    github, google = registry.get("gh"), registry.get("goog")
    assert github is not None and google is not None
    assert github.token_endpoint == "https://github.com/login/oauth/access_token"
    assert github.client_secret == "env-secret" and github.revocation_endpoint is None
    assert google.issuer == "https://accounts.google.com"
    assert google.revocation_endpoint == "https://oauth2.googleapis.com/revoke"
    assert registry.names() == {"gh": "GitHub", "goog": "Google"}


@pytest.mark.parametrize(
    ("entries", "where"),
    [
        (
            [{"name": "a", "client_id": "c"}, {"name": "b", "client_id": "c", "scopes": "repo"}],
            "oauth_providers[1] scopes",
        ),
        ([{"name": "a", "client_id": "c", "bogus": 1}], "oauth_providers[0] bogus"),
        ([{"name": "a"}], "oauth_providers[0] client_id"),
        ([{"name": "a", "client_id": "c", "pkce": "plain"}], "oauth_providers[0] pkce"),
    ],
)
def test_provider_spec_errors_name_the_entry_and_field(entries: list[Any], where: str) -> None:
    """An operator must be able to find the bad line in a list of providers."""
    with pytest.raises(ProviderConfigError) as refused:
        parse_provider_specs(json.dumps(entries))
    assert where in str(refused.value)


def test_provider_spec_file_and_json_errors() -> None:
    with pytest.raises(ProviderConfigError, match="not valid JSON"):
        parse_provider_specs("[{")
    with pytest.raises(ProviderConfigError, match="JSON array"):
        parse_provider_specs('{"name": "a"}')
    with pytest.raises(ProviderConfigError, match="cannot read"):
        parse_provider_specs("@/nonexistent/providers.json")
    assert parse_provider_specs(None) == [] and parse_provider_specs("  ") == []


def test_requested_scopes_stay_inside_the_allow_list() -> None:
    """The model may ask for scopes; only the operator decides which are grantable."""
    spec = ProviderSpec(name="gh", preset="github", client_id="c", client_secret="s")
    provider = build_provider(spec, metadata=None, environ={})
    asked = ["repo", "delete_repo", "admin:org", "read:user", "repo"]
    assert provider.requested_scopes(asked) == ("read:user", "repo")
    assert provider.requested_scopes() == ("read:user",)
    narrow = build_provider(
        spec.model_copy(update={"allowed_scopes": ["gist"]}), metadata=None, environ={}
    )
    assert narrow.requested_scopes(["repo", "gist"]) == ("read:user", "gist")


def test_provider_reprs_never_show_the_client_secret() -> None:
    """Providers and their specs end up in log lines and tracebacks."""
    spec = ProviderSpec(name="acme", preset="github", client_id="c", client_secret=SECRET)
    provider = build_provider(spec, metadata=None, environ={})
    assert SECRET not in repr(provider) and SECRET not in str(provider)
    assert SECRET not in repr(ProviderRegistry([provider]).names())
    assert SECRET not in repr(spec) and SECRET not in str(spec)
