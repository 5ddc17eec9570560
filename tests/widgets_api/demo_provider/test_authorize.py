"""The demo OAuth provider's metadata, its code flow end to end, and its authorization
endpoint (PKCE, redirect URI and client checks, the consent form), driven over real HTTP
(uvicorn in a thread) by authlib's own OAuth 2.0 client and a plain httpx "browser" that
fills in the consent form. Its token endpoint is in
``tests/widgets_api/demo_provider/test_tokens.py``."""

from __future__ import annotations

import re
import secrets

import httpx
import pytest
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from redis.asyncio import Redis

from parkway.widgets_api.demo_provider import DemoProvider
from tests.helpers.oauth_support import (
    DEMO_CLIENT_ID,
    DEMO_REDIRECT,
    DEMO_SECRET,
    DEMO_TTL,
    DemoProviderServer,
    location_params,
    serve_demo_provider,
)

# -- metadata and the happy path --------------------------------------------------------


async def test_metadata_is_served_at_both_well_known_locations(demo: DemoProviderServer) -> None:
    """Clients configure the provider from its metadata; RFC 8414 §3.1 puts it before the
    issuer's path, and the brief also serves it under the mount path."""
    for path in (
        "/demo-oauth/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/demo-oauth",
    ):
        served = httpx.get(demo.base + path).json()
        assert served == demo.meta
    meta = demo.meta
    assert meta["issuer"] == demo.issuer
    assert meta["authorization_endpoint"] == demo.issuer + "/authorize"
    assert meta["token_endpoint"] == demo.issuer + "/token"
    assert meta["revocation_endpoint"] == demo.issuer + "/revoke"
    assert meta["userinfo_endpoint"] == demo.issuer + "/userinfo"
    assert meta["response_types_supported"] == ["code"]
    assert meta["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["token_endpoint_auth_methods_supported"] == [
        "client_secret_basic",
        "client_secret_post",
    ]
    assert {"profile", "offline_access", "repo"} <= set(meta["scopes_supported"])
    assert demo.provider.mount_path == "/demo-oauth"


async def test_code_flow_with_pkce_issues_tokens_and_userinfo_names_the_typed_account(
    demo: DemoProviderServer, browser: httpx.Client, redis: Redis
) -> None:
    """The whole connect flow a Parkway connection performs, end to end."""
    client = demo.client()
    consent, state, verifier = demo.start_flow(browser, client)
    answer = demo.decide(browser, consent, account="alice.b-1")
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith(DEMO_REDIRECT + "?")
    params = location_params(location)
    assert params["state"] == state and params["iss"] == demo.issuer and params["code"]
    token = client.fetch_token(
        demo.meta["token_endpoint"],
        authorization_response=location,
        code_verifier=verifier,
        state=state,
    )
    assert token["token_type"] == "Bearer"
    assert token["expires_in"] == DEMO_TTL
    assert token["scope"] == "profile repo"
    assert token["refresh_token"] and token["access_token"] != token["refresh_token"]
    userinfo = client.get(demo.meta["userinfo_endpoint"])
    assert userinfo.status_code == 200
    assert userinfo.json() == {"sub": "alice.b-1", "preferred_username": "alice.b-1"}
    # Only digests are stored: no raw code or token in any key name or value.
    secrets_seen = [params["code"], token["access_token"], token["refresh_token"]]
    async for key in redis.scan_iter():
        assert key.startswith(b"pw:demo-oauth:")
        value = await redis.dump(key)
        for secret in secrets_seen:
            assert secret.encode() not in key and secret.encode() not in (value or b"")


async def test_client_secret_post_authenticates_too(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """Metadata advertises both methods; both must work."""
    client = demo.client()
    client.token_endpoint_auth_method = "client_secret_post"
    assert demo.connect(browser, client)["access_token"]


# -- authorization endpoint -------------------------------------------------------------


@pytest.mark.parametrize(
    "pkce",
    [
        {},
        {"code_challenge": "a" * 43},  # the method defaults to plain (RFC 7636 §4.3)
        {"code_challenge": "a" * 43, "code_challenge_method": "plain"},
        {"code_challenge_method": "S256"},
    ],
    ids=["none", "no-method", "plain", "no-challenge"],
)
async def test_authorization_request_without_an_s256_challenge_is_refused(
    demo: DemoProviderServer, browser: httpx.Client, redis: Redis, pkce: dict[str, str]
) -> None:
    """RFC 9700 §2.1.1: PKCE with S256 for every client, even a confidential one."""
    params = {
        "response_type": "code",
        "client_id": DEMO_CLIENT_ID,
        "redirect_uri": DEMO_REDIRECT,
        "scope": "profile",
        "state": "st-1",
    }
    answer = demo.consent_page(browser, **params, **pkce)
    assert answer.status_code == 302
    refused = location_params(answer.headers["location"])
    assert answer.headers["location"].startswith(DEMO_REDIRECT + "?")
    assert refused["error"] == "invalid_request"
    assert refused["state"] == "st-1" and refused["iss"] == demo.issuer
    assert [k async for k in redis.scan_iter(match="pw:demo-oauth:consent:*")] == []


@pytest.mark.parametrize(
    ("client_id", "redirect_uri"),
    [
        (DEMO_CLIENT_ID, "http://127.0.0.1:9/connect/demo/callback/../evil"),
        (DEMO_CLIENT_ID, DEMO_REDIRECT + "?x=1"),
        (DEMO_CLIENT_ID, 'http://evil.example/"quoted"'),
        ("someone-else", DEMO_REDIRECT),
    ],
)
async def test_unverified_client_or_redirect_uri_gets_an_error_page_never_a_redirect(
    demo: DemoProviderServer, browser: httpx.Client, client_id: str, redirect_uri: str
) -> None:
    """RFC 6749 §4.1.2.1 and RFC 9700 §4.1: exact matching, and no open redirector."""
    challenge = create_s256_code_challenge(secrets.token_urlsafe(48))
    answer = demo.consent_page(
        browser,
        response_type="code",
        client_id=client_id,
        redirect_uri=redirect_uri,
        state="st",
        code_challenge=challenge,
        code_challenge_method="S256",
    )
    assert answer.status_code == 400
    assert "location" not in answer.headers
    assert answer.headers["content-type"].startswith("text/html")
    assert "request refused" in answer.text
    assert answer.headers["x-frame-options"] == "DENY"


async def test_deny_redirects_with_access_denied_state_and_iss(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """The client must be able to tell a refusal from a failure, and check the issuer."""
    consent, state, _ = demo.start_flow(browser, demo.client())
    answer = demo.decide(browser, consent, decision="deny", account="")
    assert answer.status_code == 303
    params = location_params(answer.headers["location"])
    assert params == {
        "error": "access_denied",
        "error_description": params["error_description"],
        "state": state,
        "iss": demo.issuer,
    }


async def test_consent_form_works_once_and_only_in_the_browser_that_loaded_it(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """A replayed or forwarded form post must not mint a second code."""
    consent, _, _ = demo.start_flow(browser, demo.client())
    with httpx.Client(follow_redirects=False, timeout=10) as stranger:
        assert demo.decide(stranger, consent).status_code == 400  # no binding cookie
    consent, _, _ = demo.start_flow(browser, demo.client())
    assert demo.decide(browser, consent).status_code == 303
    replay = demo.decide(browser, consent)
    assert replay.status_code == 400 and "location" not in replay.headers
    assert "already used" in replay.text


async def test_a_bad_account_name_is_refused_without_spending_the_form(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """The account name is checked server-side; the user can go back and fix it."""
    consent, _, _ = demo.start_flow(browser, demo.client())
    for bad in ("", "has space", "<b>x</b>", "x" * 41):
        assert demo.decide(browser, consent, account=bad).status_code == 400
    assert demo.decide(browser, consent, account="ok_name.1").status_code == 303


async def test_consent_page_cannot_be_framed_leaks_nothing_and_escapes_its_input(
    redis_url: str, redis: Redis, browser: httpx.Client
) -> None:
    """Clickjacking (RFC 9700 §4.16) and Referer leaks (§4.2) on the provider's page."""
    with serve_demo_provider(redis_url, client_id='<script>alert("x")</script>') as demo:
        client = demo.client()
        client.client_id = '<script>alert("x")</script>'
        url, _ = client.create_authorization_url(
            demo.meta["authorization_endpoint"], code_verifier=secrets.token_urlsafe(48)
        )
        page = browser.get(url)
    assert page.status_code == 200
    assert page.headers["x-frame-options"] == "DENY"
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text
    assert '<li data-scope="repo">' in page.text and 'data-sign-in="profile"' in page.text
    assert 'id="allow"' in page.text and 'id="deny"' in page.text
    assert 'name="account" value="demo-user"' in page.text
    assert not re.search(r"(src|href)=", page.text)  # nothing external


# -- configuration ----------------------------------------------------------------------


def test_the_issuer_must_be_https_or_loopback(redis_url: str) -> None:
    """Authorization responses must not cross the network in clear (RFC 9700 §2.6)."""
    for issuer in ("http://demo.example/demo-oauth", "https://demo.example/x?y=1"):
        with pytest.raises(ValueError, match="issuer"):
            DemoProvider(
                redis_url=redis_url,
                issuer=issuer,
                client_id=DEMO_CLIENT_ID,
                client_secret=DEMO_SECRET,
                redirect_uris=[DEMO_REDIRECT],
            )
