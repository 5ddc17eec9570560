"""The loopback OAuth/OIDC test provider (``tests/helpers/oidc``) behaves like a strict provider.

Parkway's OAuth tests lean on this peer for their negative cases (PKCE refusal, ``iss``,
rotation with reuse detection, revocation, narrowed grants, COOP popups), so each of
those behaviours is pinned here with a real client: authlib's ``OAuth2Client`` for the
token endpoint and a plain cookie-keeping httpx client for the user's pages.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from authlib.common.security import generate_token
from authlib.integrations.base_client import OAuthError
from authlib.integrations.httpx_client import OAuth2Client

from tests.helpers import oidc_peer as peer_module
from tests.helpers.oidc_peer import Decision, OidcPeer, OidcPeerError, login_and_consent, oidc_peer

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(shutil.which("node") is None, reason="the `node` executable is not on PATH"),
]

REDIRECT_URI = "http://127.0.0.1:5999/connect/test/callback"
BASIC = {"client_id": "parkway", "client_secret": "parkway-secret", "redirect_uris": [REDIRECT_URI]}
OTHER = {"client_id": "other", "client_secret": "other-secret", "redirect_uris": [REDIRECT_URI]}
CLIENTS = [BASIC, OTHER]
FULL_SCOPE = "openid profile email offline_access repo read:org"


@pytest.fixture(scope="module")
def peer() -> Iterator[OidcPeer]:
    with oidc_peer(CLIENTS) as running:
        yield running


@pytest.fixture
def browser() -> Iterator[httpx.Client]:
    """A fresh user agent: its own cookie jar, no session at the provider yet."""
    with httpx.Client(timeout=10) as client:
        yield client


class ClientFactory:
    """authlib clients for a test, closed (with their connection pools) at teardown."""

    def __init__(self) -> None:
        self.made: list[OAuth2Client] = []

    def __call__(
        self, registration: dict[str, Any] = BASIC, *, scope: str | None = FULL_SCOPE
    ) -> OAuth2Client:
        client = OAuth2Client(
            client_id=registration["client_id"],
            client_secret=registration["client_secret"],
            token_endpoint_auth_method=registration.get(
                "token_endpoint_auth_method", "client_secret_basic"
            ),
            scope=scope,
            redirect_uri=REDIRECT_URI,
            code_challenge_method="S256",
            timeout=10,
        )
        self.made.append(client)
        return client


@pytest.fixture
def oauth_client() -> Iterator[ClientFactory]:
    factory = ClientFactory()
    yield factory
    for client in factory.made:
        client.close()


def authorize(
    peer: OidcPeer,
    browser: httpx.Client,
    client: OAuth2Client,
    *,
    decision: Decision = "allow",
) -> tuple[str, str, str]:
    """Run the user's part; return (callback URL, state, code verifier)."""
    verifier = generate_token(48)
    url, state = client.create_authorization_url(f"{peer.issuer}/auth", code_verifier=verifier)
    callback = login_and_consent(browser, url, decision=decision)
    return callback, state, verifier


def connect(peer: OidcPeer, browser: httpx.Client, client: OAuth2Client) -> dict[str, Any]:
    callback, state, verifier = authorize(peer, browser, client)
    token = client.fetch_token(
        f"{peer.issuer}/token",
        authorization_response=callback,
        code_verifier=verifier,
        state=state,
    )
    return dict(token)


def params(url: str) -> dict[str, str]:
    return dict(httpx.URL(url).params)


def test_discovery_advertises_s256_only_and_the_iss_parameter(peer: OidcPeer) -> None:
    """Parkway enforces the RFC 9207 ``iss`` check only when the provider advertises it."""
    meta = httpx.get(f"{peer.issuer}/.well-known/openid-configuration", timeout=10).json()
    assert meta["issuer"] == peer.issuer == f"http://127.0.0.1:{peer.port}"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["revocation_endpoint"] == f"{peer.issuer}/token/revocation"
    assert meta["introspection_endpoint"] == f"{peer.issuer}/token/introspection"
    assert {"offline_access", "repo", "read:org"} <= set(meta["scopes_supported"])


def test_code_flow_with_pkce_grants_requested_scopes_and_a_refresh_token(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """The happy path every connect test builds on: code + PKCE, all scopes, a refresh token."""
    client = oauth_client()
    callback, state, verifier = authorize(peer, browser, client)
    answer = params(callback)
    assert answer["iss"] == peer.issuer
    assert answer["state"] == state
    token = client.fetch_token(
        f"{peer.issuer}/token",
        authorization_response=callback,
        code_verifier=verifier,
        state=state,
    )
    assert token["token_type"].lower() == "bearer"
    assert token["refresh_token"]
    assert token["id_token"]
    assert set(token["scope"].split()) == set(FULL_SCOPE.split())
    assert token["expires_in"] == 3600

    me = client.get(f"{peer.issuer}/me").json()
    assert me == {
        "sub": "alice",
        "preferred_username": "alice",
        "email": "alice@example.test",
        "email_verified": True,
    }


@pytest.mark.parametrize(
    ("challenge", "description"),
    [
        ({}, "PKCE"),
        ({"code_challenge": "x" * 43, "code_challenge_method": "plain"}, "code_challenge_method"),
    ],
    ids=["missing", "plain"],
)
def test_authorization_without_s256_challenge_is_refused(
    peer: OidcPeer, browser: httpx.Client, challenge: dict[str, str], description: str
) -> None:
    """PKCE is required for confidential clients too, so a client that drops it is caught."""
    query = {
        "response_type": "code",
        "client_id": BASIC["client_id"],
        "redirect_uri": REDIRECT_URI,
        "scope": "openid repo",
        "state": "s-1",
        **challenge,
    }
    response = browser.get(f"{peer.issuer}/auth", params=query)
    assert response.is_redirect
    answer = params(response.headers["location"])
    assert answer["error"] == "invalid_request"
    assert description in answer["error_description"]
    assert answer["state"] == "s-1"
    assert answer["iss"] == peer.issuer


def test_deny_on_consent_redirects_access_denied_with_iss(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """A user who presses Deny must reach the client as ``access_denied``, not as a hang."""
    callback, state, _ = authorize(peer, browser, oauth_client(), decision="deny")
    answer = params(callback)
    assert answer["error"] == "access_denied"
    assert answer["state"] == state
    assert answer["iss"] == peer.issuer
    assert "code" not in answer


def test_cancel_on_login_redirects_access_denied(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """Cancel at sign-in ends the flow the same way as Deny at consent."""
    callback, state, _ = authorize(peer, browser, oauth_client(), decision="cancel")
    answer = params(callback)
    assert answer["error"] == "access_denied"
    assert answer["state"] == state


def test_replayed_code_is_refused(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """A leaked or reloaded callback must not be redeemable a second time."""
    client = oauth_client()
    callback, state, verifier = authorize(peer, browser, client)
    client.fetch_token(
        f"{peer.issuer}/token", authorization_response=callback, code_verifier=verifier, state=state
    )
    with pytest.raises(OAuthError) as refused:
        client.fetch_token(
            f"{peer.issuer}/token",
            authorization_response=callback,
            code_verifier=verifier,
            state=state,
        )
    assert refused.value.error == "invalid_grant"


def test_wrong_code_verifier_is_refused(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """Code injection (a code from another flow) fails at the token endpoint because of PKCE."""
    client = oauth_client()
    callback, state, _ = authorize(peer, browser, client)
    with pytest.raises(OAuthError) as refused:
        client.fetch_token(
            f"{peer.issuer}/token",
            authorization_response=callback,
            code_verifier=generate_token(48),
            state=state,
        )
    assert refused.value.error == "invalid_grant"


def test_refresh_rotates_and_reusing_the_old_token_revokes_the_grant(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """Two refreshes racing with one token lose the whole grant: the failure Parkway's lock prevents."""
    client = oauth_client()
    first = connect(peer, browser, client)
    second = dict(
        client.refresh_token(f"{peer.issuer}/token", refresh_token=first["refresh_token"])
    )
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]

    with pytest.raises(OAuthError) as reused:
        client.refresh_token(f"{peer.issuer}/token", refresh_token=first["refresh_token"])
    assert reused.value.error == "invalid_grant"
    # Reuse detection revoked the grant: the rotated-to token is dead as well.
    with pytest.raises(OAuthError) as after:
        client.refresh_token(f"{peer.issuer}/token", refresh_token=second["refresh_token"])
    assert after.value.error == "invalid_grant"


def test_refresh_asking_for_more_scope_than_granted_is_refused(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """authlib resends the client's configured scope on refresh; a wider one must fail."""
    client = oauth_client(scope="openid offline_access repo")
    token = connect(peer, browser, client)
    with pytest.raises(OAuthError) as refused:
        client.refresh_token(
            f"{peer.issuer}/token", refresh_token=token["refresh_token"], scope="repo read:org"
        )
    assert refused.value.error == "invalid_scope"


def test_revocation_ends_refresh_and_access_tokens(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """Disconnect revokes at the provider; afterwards neither token works."""
    client = oauth_client()
    token = connect(peer, browser, client)
    assert client.introspect_token(
        f"{peer.issuer}/token/introspection", token=token["access_token"]
    ).json()["active"]

    response = client.revoke_token(
        f"{peer.issuer}/token/revocation",
        token=token["refresh_token"],
        token_type_hint="refresh_token",
    )
    assert response.status_code == 200
    with pytest.raises(OAuthError) as refused:
        client.refresh_token(f"{peer.issuer}/token", refresh_token=token["refresh_token"])
    assert refused.value.error == "invalid_grant"
    # Revoking the refresh token revokes its grant, and with it the access token.
    introspection = client.introspect_token(
        f"{peer.issuer}/token/introspection", token=token["access_token"]
    ).json()
    assert introspection == {"active": False}


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_client_authenticates_with_basic_or_post(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory, method: str
) -> None:
    """Both secret transports work, so Parkway may use either."""
    client = oauth_client({**BASIC, "token_endpoint_auth_method": method})
    assert connect(peer, browser, client)["access_token"]


def test_wrong_client_secret_is_invalid_client(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """A misconfigured secret must surface as ``invalid_client``, not as a grant problem."""
    client = oauth_client({**BASIC, "client_secret": "wrong"})
    callback, state, verifier = authorize(peer, browser, client)
    with pytest.raises(OAuthError) as refused:
        client.fetch_token(
            f"{peer.issuer}/token",
            authorization_response=callback,
            code_verifier=verifier,
            state=state,
        )
    assert refused.value.error == "invalid_client"


def test_code_issued_to_another_client_is_refused(
    peer: OidcPeer, browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """A code is bound to the client it was issued to."""
    victim = oauth_client()
    callback, state, verifier = authorize(peer, browser, victim)
    thief = oauth_client(OTHER)
    with pytest.raises(OAuthError) as refused:
        thief.fetch_token(
            f"{peer.issuer}/token",
            authorization_response=callback,
            code_verifier=verifier,
            state=state,
        )
    assert refused.value.error == "invalid_grant"


def test_coop_flag_puts_the_header_on_the_login_page(
    peer: OidcPeer, oauth_client: ClientFactory
) -> None:
    """The COOP provider is how the popup-severed-from-opener case is reproduced."""
    client = oauth_client()

    def login_page(running: OidcPeer) -> httpx.Response:
        url, _ = client.create_authorization_url(
            f"{running.issuer}/auth", code_verifier=generate_token(48)
        )
        with httpx.Client(timeout=10, follow_redirects=True) as browser:
            response = browser.get(url)
        assert 'id="login"' in response.text
        return response

    assert "cross-origin-opener-policy" not in login_page(peer).headers
    with oidc_peer(CLIENTS, coop=True) as coop_peer:
        response = login_page(coop_peer)
    assert response.headers["cross-origin-opener-policy"] == "same-origin"


def test_stats_count_token_and_revocation_requests_including_failures(
    browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """Tests assert "exactly one refresh was sent" with these counters, failures included."""
    with oidc_peer(CLIENTS) as peer:
        client = oauth_client()
        token = connect(peer, browser, client)
        client.refresh_token(f"{peer.issuer}/token", refresh_token=token["refresh_token"])
        with pytest.raises(OAuthError):
            client.refresh_token(f"{peer.issuer}/token", refresh_token="not-a-token")
        client.revoke_token(f"{peer.issuer}/token/revocation", token=token["access_token"])
        assert peer.stats() == {
            "token_requests": {"authorization_code": 1, "refresh_token": 2},
            "token_errors": {"invalid_grant": 1},
            "revocation_requests": 1,
            "introspection_requests": 0,
        }

        peer.reset_stats()
        assert peer.stats() == {
            "token_requests": {"authorization_code": 0, "refresh_token": 0},
            "token_errors": {},
            "revocation_requests": 0,
            "introspection_requests": 0,
        }


def test_grant_only_narrows_the_granted_scope(
    browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """Granted scope narrower than requested must be visible in the token response."""
    with oidc_peer(CLIENTS, grant_only="openid repo") as peer:
        token = connect(peer, browser, oauth_client())
    assert set(token["scope"].split()) == {"openid", "repo"}
    assert "refresh_token" not in token  # offline_access was not granted


def test_access_token_ttl_flag_sets_expires_in(
    browser: httpx.Client, oauth_client: ClientFactory
) -> None:
    """Short-lived access tokens drive the refresh-on-expiry tests."""
    with oidc_peer(CLIENTS, access_token_ttl=5) as peer:
        token = connect(peer, browser, oauth_client())
    assert token["expires_in"] == 5


def test_missing_node_modules_is_an_error_not_a_skip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A missing `npm ci` must fail loudly; silently skipped OAuth tests prove nothing."""
    monkeypatch.setattr(peer_module, "OIDC_DIR", tmp_path)
    with pytest.raises(OidcPeerError, match="npm ci"):
        OidcPeer.start(CLIENTS)
