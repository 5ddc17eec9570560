"""The demo OAuth provider, driven over real HTTP (uvicorn in a thread) by authlib's own
OAuth 2.0 client and a plain httpx "browser" that fills in the consent form."""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
import uvicorn
from authlib.integrations.base_client import OAuthError
from authlib.integrations.httpx_client import OAuth2Client
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from redis.asyncio import Redis
from starlette.applications import Starlette

from widgets_api.demo_provider import DemoProvider

CLIENT_ID = "parkway-demo"
SECRET = "s3cret-" + "x" * 24
REDIRECT = "http://127.0.0.1:9/connect/demo/callback"
TTL = 3600


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Clock:
    """An injectable clock: tests move time instead of waiting for it."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Provider:
    """A DemoProvider on a real uvicorn in a background thread."""

    def __init__(self, redis_url: str, clock: Clock, client_id: str = CLIENT_ID) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.issuer = f"{self.base}/demo-oauth"
        self.provider = DemoProvider(
            redis_url=redis_url,
            issuer=self.issuer,
            client_id=client_id,
            client_secret=SECRET,
            redirect_uris=[REDIRECT],
            access_token_ttl_s=TTL,
            clock=clock,
        )
        self.meta = self.provider.metadata()
        app = Starlette(routes=self.provider.routes())
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.clock = clock
        self.clients: list[OAuth2Client] = []

    def start(self) -> Provider:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.provider.close()
        for client in self.clients:
            client.close()

    def client(self, scope: str = "profile repo") -> OAuth2Client:
        client = OAuth2Client(
            CLIENT_ID,
            SECRET,
            scope=scope,
            redirect_uri=REDIRECT,
            code_challenge_method="S256",
            token_endpoint=self.meta["token_endpoint"],
            transport=httpx2.HTTPTransport(),
            timeout=10,
        )
        self.clients.append(client)
        return client

    def consent_page(self, browser: httpx.Client, **params: str) -> httpx.Response:
        return browser.get(self.meta["authorization_endpoint"], params=params)

    def start_flow(self, browser: httpx.Client, client: OAuth2Client) -> tuple[str, str, str]:
        """Open the consent page as a client would send the browser there: returns the
        page's consent id, the state and the PKCE verifier."""
        verifier = secrets.token_urlsafe(48)
        url, state = client.create_authorization_url(
            self.meta["authorization_endpoint"], code_verifier=verifier
        )
        page = browser.get(url)
        assert page.status_code == 200, page.text
        return consent_id(page), state, verifier

    def decide(
        self,
        browser: httpx.Client,
        consent: str,
        decision: str = "allow",
        account: str = "demo-user",
    ) -> httpx.Response:
        form = {"consent": consent, "account": account, "decision": decision}
        return browser.post(self.meta["authorization_endpoint"], data=form)

    def connect(
        self, browser: httpx.Client, client: OAuth2Client, account: str = "demo-user"
    ) -> dict[str, Any]:
        """The whole flow, Allow included: returns the token response."""
        consent, state, verifier = self.start_flow(browser, client)
        answer = self.decide(browser, consent, account=account)
        assert answer.status_code == 303, answer.text
        return dict(
            client.fetch_token(
                self.meta["token_endpoint"],
                authorization_response=answer.headers["location"],
                code_verifier=verifier,
                state=state,
            )
        )

    def userinfo(self, access_token: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {access_token}"}
        return httpx.get(self.meta["userinfo_endpoint"], headers=headers)

    def refresh(self, refresh_token: str, **extra: str) -> httpx.Response:
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token, **extra}
        return httpx.post(self.meta["token_endpoint"], data=data, auth=(CLIENT_ID, SECRET))


def consent_id(page: httpx.Response) -> str:
    found = re.search(r'name="consent" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def query(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


@contextlib.contextmanager
def serve(redis_url: str, clock: Clock | None = None, **kwargs: Any) -> Iterator[Provider]:
    provider = Provider(redis_url, clock or Clock(), **kwargs).start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def demo(redis_url: str, redis: Redis, clock: Clock) -> Iterator[Provider]:
    with serve(redis_url, clock) as provider:
        yield provider


@pytest.fixture
def browser() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=False, timeout=10) as client:
        yield client


# -- metadata and the happy path --------------------------------------------------------


async def test_metadata_is_served_at_both_well_known_locations(demo: Provider) -> None:
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
    demo: Provider, browser: httpx.Client, redis: Redis
) -> None:
    """The whole connect flow a Parkway connection performs, end to end."""
    client = demo.client()
    consent, state, verifier = demo.start_flow(browser, client)
    answer = demo.decide(browser, consent, account="alice.b-1")
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith(REDIRECT + "?")
    params = query(location)
    assert params["state"] == state and params["iss"] == demo.issuer and params["code"]
    token = client.fetch_token(
        demo.meta["token_endpoint"],
        authorization_response=location,
        code_verifier=verifier,
        state=state,
    )
    assert token["token_type"] == "Bearer"
    assert token["expires_in"] == TTL
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


async def test_client_secret_post_authenticates_too(demo: Provider, browser: httpx.Client) -> None:
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
    demo: Provider, browser: httpx.Client, redis: Redis, pkce: dict[str, str]
) -> None:
    """RFC 9700 §2.1.1: PKCE with S256 for every client, even a confidential one."""
    params = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": REDIRECT,
        "scope": "profile",
        "state": "st-1",
    }
    answer = demo.consent_page(browser, **params, **pkce)
    assert answer.status_code == 302
    refused = query(answer.headers["location"])
    assert answer.headers["location"].startswith(REDIRECT + "?")
    assert refused["error"] == "invalid_request"
    assert refused["state"] == "st-1" and refused["iss"] == demo.issuer
    assert [k async for k in redis.scan_iter(match="pw:demo-oauth:consent:*")] == []


@pytest.mark.parametrize(
    ("client_id", "redirect_uri"),
    [
        (CLIENT_ID, "http://127.0.0.1:9/connect/demo/callback/../evil"),
        (CLIENT_ID, REDIRECT + "?x=1"),
        (CLIENT_ID, 'http://evil.example/"quoted"'),
        ("someone-else", REDIRECT),
    ],
)
async def test_unverified_client_or_redirect_uri_gets_an_error_page_never_a_redirect(
    demo: Provider, browser: httpx.Client, client_id: str, redirect_uri: str
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
    demo: Provider, browser: httpx.Client
) -> None:
    """The client must be able to tell a refusal from a failure, and check the issuer."""
    consent, state, _ = demo.start_flow(browser, demo.client())
    answer = demo.decide(browser, consent, decision="deny", account="")
    assert answer.status_code == 303
    params = query(answer.headers["location"])
    assert params == {
        "error": "access_denied",
        "error_description": params["error_description"],
        "state": state,
        "iss": demo.issuer,
    }


async def test_consent_form_works_once_and_only_in_the_browser_that_loaded_it(
    demo: Provider, browser: httpx.Client
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
    demo: Provider, browser: httpx.Client
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
    with serve(redis_url, client_id='<script>alert("x")</script>') as demo:
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
    assert "asks for: profile, repo" in page.text
    assert 'id="allow"' in page.text and 'id="deny"' in page.text
    assert 'name="account" value="demo-user"' in page.text
    assert not re.search(r"(src|href)=", page.text)  # nothing external


# -- token endpoint -----------------------------------------------------------------------


async def test_code_replay_is_refused_and_revokes_what_the_first_use_issued(
    demo: Provider, browser: httpx.Client
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
    demo: Provider, browser: httpx.Client
) -> None:
    """A replay racing the first redemption must not leave the first one's grant alive:
    whichever order the steps take, the replay revokes what the code issued."""
    client = demo.client()
    consent, _, verifier = demo.start_flow(browser, client)
    params = query(demo.decide(browser, consent).headers["location"])
    form = {"grant_type": "authorization_code", "code": params["code"],
            "redirect_uri": REDIRECT, "code_verifier": verifier}  # fmt: skip
    barrier = threading.Barrier(6)

    def attempt(_: int) -> httpx.Response:
        barrier.wait(10)
        return httpx.post(demo.meta["token_endpoint"], data=form, auth=(CLIENT_ID, SECRET))

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(attempt, range(6)))
    won = [a.json() for a in answers if a.status_code == 200]
    assert len(won) <= 1
    assert all(a.json()["error"] == "invalid_grant" for a in answers if a.status_code != 200)
    for token in won:
        assert demo.userinfo(token["access_token"]).status_code == 401
        assert demo.refresh(token["refresh_token"]).json()["error"] == "invalid_grant"


async def test_a_wrong_pkce_verifier_is_refused_and_burns_the_code(
    demo: Provider, browser: httpx.Client
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
    demo: Provider, browser: httpx.Client, clock: Clock
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
    demo: Provider, browser: httpx.Client, clock: Clock
) -> None:
    consent, _, _ = demo.start_flow(browser, demo.client())
    clock.now += 601
    assert demo.decide(browser, consent).status_code == 400


async def test_a_wrong_client_secret_is_invalid_client_401(demo: Provider) -> None:
    """RFC 6749 §5.2: failed Basic authentication answers 401 with WWW-Authenticate."""
    data = {"grant_type": "authorization_code", "code": "x", "redirect_uri": REDIRECT}
    answer = httpx.post(demo.meta["token_endpoint"], data=data, auth=(CLIENT_ID, "wrong"))
    assert answer.status_code == 401
    assert answer.json()["error"] == "invalid_client"
    assert answer.headers["www-authenticate"].startswith("Basic")
    assert answer.headers["cache-control"] == "no-store"


# -- refresh, revocation, userinfo ------------------------------------------------------


async def test_refresh_rotates_and_reusing_a_rotated_token_revokes_the_grant(
    demo: Provider, browser: httpx.Client
) -> None:
    """RFC 9700 §4.14 reuse detection: a replayed refresh token kills the whole grant."""
    first = demo.connect(browser, demo.client())
    second = demo.refresh(first["refresh_token"]).json()
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]
    assert second["expires_in"] == TTL and second["scope"] == "profile repo"
    assert demo.userinfo(second["access_token"]).status_code == 200
    reused = demo.refresh(first["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert demo.refresh(second["refresh_token"]).json()["error"] == "invalid_grant"
    assert demo.userinfo(second["access_token"]).status_code == 401
    assert demo.userinfo(first["access_token"]).status_code == 401


async def test_concurrent_refreshes_of_one_token_let_one_win_and_then_revoke_the_grant(
    demo: Provider, browser: httpx.Client
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
    demo: Provider, browser: httpx.Client
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
    demo: Provider, browser: httpx.Client
) -> None:
    """RFC 7009 §2.1: revoking a refresh token invalidates its access tokens too."""
    client = demo.client()
    token = demo.connect(browser, client)
    bad = httpx.post(
        demo.meta["revocation_endpoint"],
        data={"token": token["refresh_token"]},
        auth=(CLIENT_ID, "wrong"),
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
    demo: Provider, browser: httpx.Client
) -> None:
    client = demo.client()
    token = demo.connect(browser, client)
    revoked = client.revoke_token(demo.meta["revocation_endpoint"], token=token["access_token"])
    assert revoked.status_code == 200
    assert demo.userinfo(token["access_token"]).status_code == 401
    assert demo.refresh(token["refresh_token"]).status_code == 200


async def test_userinfo_refuses_a_missing_bad_or_expired_token(
    demo: Provider, browser: httpx.Client, clock: Clock
) -> None:
    """RFC 6750 §3: 401 with a Bearer WWW-Authenticate challenge."""
    token = demo.connect(browser, demo.client())
    missing = httpx.get(demo.meta["userinfo_endpoint"])
    assert missing.status_code == 401 and "bearer" in missing.headers["www-authenticate"].lower()
    bad = demo.userinfo("not-a-token")
    assert bad.status_code == 401 and 'error="invalid_token"' in bad.headers["www-authenticate"]
    assert demo.userinfo(token["access_token"]).status_code == 200
    clock.now += TTL
    expired = demo.userinfo(token["access_token"])
    assert expired.status_code == 401 and "invalid_token" in expired.headers["www-authenticate"]


def test_the_issuer_must_be_https_or_loopback(redis_url: str) -> None:
    """Authorization responses must not cross the network in clear (RFC 9700 §2.6)."""
    for issuer in ("http://demo.example/demo-oauth", "https://demo.example/x?y=1"):
        with pytest.raises(ValueError, match="issuer"):
            DemoProvider(
                redis_url=redis_url,
                issuer=issuer,
                client_id=CLIENT_ID,
                client_secret=SECRET,
                redirect_uris=[REDIRECT],
            )
