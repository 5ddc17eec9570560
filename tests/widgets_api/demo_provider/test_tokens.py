"""The demo OAuth provider's token side: code redemption, refresh rotation with reuse
detection, revocation and userinfo, driven over real HTTP (uvicorn in a thread) by
authlib's own OAuth 2.0 client and plain httpx requests."""

from __future__ import annotations

import secrets
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from authlib.integrations.base_client import OAuthError

from tests.helpers.oauth_support import (
    DEMO_CLIENT_ID,
    DEMO_REDIRECT,
    DEMO_SECRET,
    DEMO_TTL,
    Clock,
    DemoProviderServer,
    location_params,
)

# -- token endpoint -----------------------------------------------------------------------


async def test_code_replay_is_refused_and_revokes_what_the_first_use_issued(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """RFC 6749 §4.1.2: a code is single-use; a second use revokes its tokens."""
    client = demo.client()
    consent, state, verifier = demo.start_flow(browser, client)
    location = demo.decide(browser, consent).headers["location"]
    token = client.fetch_token(
        demo.meta["token_endpoint"],
        authorization_response=location,
        code_verifier=verifier,
        state=state,
    )
    with pytest.raises(OAuthError) as replay:
        client.fetch_token(
            demo.meta["token_endpoint"],
            authorization_response=location,
            code_verifier=verifier,
            state=state,
        )
    assert replay.value.error == "invalid_grant"
    assert demo.userinfo(token["access_token"]).status_code == 401
    assert demo.refresh(token["refresh_token"]).json()["error"] == "invalid_grant"


async def test_concurrent_redemptions_of_one_code_leave_no_live_tokens(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """A replay racing the first redemption must not leave the first one's grant alive:
    whichever order the steps take, the replay revokes what the code issued."""
    client = demo.client()
    consent, _, verifier = demo.start_flow(browser, client)
    params = location_params(demo.decide(browser, consent).headers["location"])
    form = {"grant_type": "authorization_code", "code": params["code"],
            "redirect_uri": DEMO_REDIRECT, "code_verifier": verifier}  # fmt: skip
    barrier = threading.Barrier(6)

    def attempt(_: int) -> httpx.Response:
        barrier.wait(10)
        return httpx.post(
            demo.meta["token_endpoint"], data=form, auth=(DEMO_CLIENT_ID, DEMO_SECRET)
        )

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(attempt, range(6)))
    won = [a.json() for a in answers if a.status_code == 200]
    assert len(won) <= 1
    assert all(a.json()["error"] == "invalid_grant" for a in answers if a.status_code != 200)
    for token in won:
        assert demo.userinfo(token["access_token"]).status_code == 401
        assert demo.refresh(token["refresh_token"]).json()["error"] == "invalid_grant"


async def test_a_wrong_pkce_verifier_is_refused_and_burns_the_code(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """Code injection (RFC 9700 §4.5): a stolen code is useless without the verifier."""
    client = demo.client()
    consent, state, verifier = demo.start_flow(browser, client)
    location = demo.decide(browser, consent).headers["location"]
    for attempt in (secrets.token_urlsafe(48), verifier):
        with pytest.raises(OAuthError) as refused:
            client.fetch_token(
                demo.meta["token_endpoint"],
                authorization_response=location,
                code_verifier=attempt,
                state=state,
            )
        assert refused.value.error == "invalid_grant"


async def test_a_code_expires_after_a_minute(
    demo: DemoProviderServer, browser: httpx.Client, clock: Clock
) -> None:
    """Codes must be short-lived (RFC 6749 §4.1.2)."""
    client = demo.client()
    consent, state, verifier = demo.start_flow(browser, client)
    location = demo.decide(browser, consent).headers["location"]
    clock.now += 61
    with pytest.raises(OAuthError) as refused:
        client.fetch_token(
            demo.meta["token_endpoint"],
            authorization_response=location,
            code_verifier=verifier,
            state=state,
        )
    assert refused.value.error == "invalid_grant"


async def test_a_consent_form_expires_after_ten_minutes(
    demo: DemoProviderServer, browser: httpx.Client, clock: Clock
) -> None:
    consent, _, _ = demo.start_flow(browser, demo.client())
    clock.now += 601
    assert demo.decide(browser, consent).status_code == 400


async def test_a_wrong_client_secret_is_invalid_client_401(demo: DemoProviderServer) -> None:
    """RFC 6749 §5.2: failed Basic authentication answers 401 with WWW-Authenticate."""
    data = {"grant_type": "authorization_code", "code": "x", "redirect_uri": DEMO_REDIRECT}
    answer = httpx.post(demo.meta["token_endpoint"], data=data, auth=(DEMO_CLIENT_ID, "wrong"))
    assert answer.status_code == 401
    assert answer.json()["error"] == "invalid_client"
    assert answer.headers["www-authenticate"].startswith("Basic")
    assert answer.headers["cache-control"] == "no-store"


# -- refresh, revocation, userinfo ------------------------------------------------------


async def test_refresh_rotates_and_reusing_a_rotated_token_revokes_the_grant(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """RFC 9700 §4.14 reuse detection: a replayed refresh token kills the whole grant."""
    first = demo.connect(browser, demo.client())
    second = demo.refresh(first["refresh_token"]).json()
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]
    assert second["expires_in"] == DEMO_TTL and second["scope"] == "profile repo"
    assert demo.userinfo(second["access_token"]).status_code == 200
    reused = demo.refresh(first["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert demo.refresh(second["refresh_token"]).json()["error"] == "invalid_grant"
    assert demo.userinfo(second["access_token"]).status_code == 401
    assert demo.userinfo(first["access_token"]).status_code == 401


async def test_concurrent_refreshes_of_one_token_let_one_win_and_then_revoke_the_grant(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """Two workers refreshing one token at once look like reuse: exactly one gets new
    tokens, the others get invalid_grant, and the grant (the winner's tokens too) dies.
    This is why Parkway must serialise refreshes per connection (oauth-security.md §1)."""
    token = demo.connect(browser, demo.client())
    barrier = threading.Barrier(6)

    def attempt(_: int) -> httpx.Response:
        barrier.wait(10)
        return demo.refresh(token["refresh_token"])

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(attempt, range(6)))
    won = [a.json() for a in answers if a.status_code == 200]
    assert len(won) == 1
    assert all(a.json()["error"] == "invalid_grant" for a in answers if a.status_code != 200)
    assert demo.refresh(won[0]["refresh_token"]).json()["error"] == "invalid_grant"
    assert demo.userinfo(won[0]["access_token"]).status_code == 401


async def test_refresh_may_narrow_the_scope_but_never_widen_it(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """RFC 6749 §6: no scope beyond what the resource owner granted."""
    token = demo.connect(browser, demo.client())
    wider = demo.refresh(token["refresh_token"], scope="profile repo email")
    assert wider.json()["error"] == "invalid_scope"
    narrower = demo.refresh(token["refresh_token"], scope="profile").json()
    assert narrower["scope"] == "profile"
    again = demo.refresh(narrower["refresh_token"], scope="profile repo").json()
    assert again["scope"] == "profile repo"  # the grant itself kept its scope


async def test_revoking_a_refresh_token_revokes_its_grant(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    """RFC 7009 §2.1: revoking a refresh token invalidates its access tokens too."""
    client = demo.client()
    token = demo.connect(browser, client)
    bad = httpx.post(
        demo.meta["revocation_endpoint"],
        data={"token": token["refresh_token"]},
        auth=(DEMO_CLIENT_ID, "wrong"),
    )
    assert bad.status_code == 401
    revoked = client.revoke_token(
        demo.meta["revocation_endpoint"],
        token=token["refresh_token"],
        token_type_hint="refresh_token",
    )
    assert revoked.status_code == 200
    assert demo.refresh(token["refresh_token"]).json()["error"] == "invalid_grant"
    assert demo.userinfo(token["access_token"]).status_code == 401
    again = client.revoke_token(demo.meta["revocation_endpoint"], token=token["refresh_token"])
    assert again.status_code == 200  # RFC 7009: an unknown token is not an error


async def test_revoking_an_access_token_leaves_the_grant(
    demo: DemoProviderServer, browser: httpx.Client
) -> None:
    client = demo.client()
    token = demo.connect(browser, client)
    revoked = client.revoke_token(demo.meta["revocation_endpoint"], token=token["access_token"])
    assert revoked.status_code == 200
    assert demo.userinfo(token["access_token"]).status_code == 401
    assert demo.refresh(token["refresh_token"]).status_code == 200


async def test_userinfo_refuses_a_missing_bad_or_expired_token(
    demo: DemoProviderServer, browser: httpx.Client, clock: Clock
) -> None:
    """RFC 6750 §3: 401 with a Bearer WWW-Authenticate challenge."""
    token = demo.connect(browser, demo.client())
    missing = httpx.get(demo.meta["userinfo_endpoint"])
    assert missing.status_code == 401 and "bearer" in missing.headers["www-authenticate"].lower()
    bad = demo.userinfo("not-a-token")
    assert bad.status_code == 401 and 'error="invalid_token"' in bad.headers["www-authenticate"]
    assert demo.userinfo(token["access_token"]).status_code == 200
    clock.now += DEMO_TTL
    expired = demo.userinfo(token["access_token"])
    assert expired.status_code == 401 and "invalid_token" in expired.headers["www-authenticate"]
