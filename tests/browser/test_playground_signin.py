"""The playground on a server that issues no anonymous sessions: ``auth=jwt``, or a host
application's own authenticator (docs/embedding.md). The page used to ask for a session
anyway (``POST /api/sessions``, a 404 in the console on every load) and then said "Could
not reach the server: could not start a session (HTTP 404)", when the truth was that the
user was not signed in.

Debian chromium driven by Playwright against a real Parkway (uvicorn, Redis); the JWTs
are checked against a JWKS on loopback. The tests wait on DOM state, never on sleeps.
"""

from __future__ import annotations

from joserfc.jwk import RSAKey
from playwright.sync_api import Browser, Request, expect
from starlette.requests import HTTPConnection

from tests.helpers.browser import Tab, console_errors
from tests.helpers.jwks import AUDIENCE, ISSUER, JwksServer
from tests.helpers.support import agent_doc, server_thread, text

KEY = RSAKey.generate_key(2048, parameters={"kid": "signin-1"})
AGENT = agent_doc([[text("Hello.")]])


class HostCookieUser:
    """A host application's authenticator: its own sign-in cookie names the user."""

    def authenticate(self, conn: HTTPConnection) -> str | None:
        user = conn.cookies.get("host_user")
        return f"user:{user}" if user else None


def session_requests(tab: Tab) -> list[str]:
    """Every request the tab makes to ``/api/sessions`` from now on."""
    seen: list[str] = []

    def on_request(request: Request) -> None:
        if "/api/sessions" in request.url:
            seen.append(f"{request.method} {request.url}")

    tab.page.on("request", on_request)
    return seen


def test_under_jwt_auth_the_page_says_not_signed_in_and_how_to_hand_it_a_token(
    browser: Browser, redis_url: str
) -> None:
    """The page learns from the page itself (its ``parkway-auth`` meta tag) that the
    server knows users by their JWT: it asks for no session, so the console has no 404;
    the 401 of its first read says the user is not signed in, and the banner says how
    a token reaches the page (the host's ``parkway:token`` message), not that the
    server could not be reached."""
    with JwksServer() as jwks:
        jwks.publish(KEY)
        with server_thread(
            redis_url, AGENT, auth="jwt", jwt_jwks_url=jwks.url, jwt_issuer=ISSUER,
            jwt_audience=AUDIENCE,
        ) as server:  # fmt: skip
            tab = Tab.new_context(browser, server.base_url)
            errors = console_errors(tab.page)
            sessions = session_requests(tab)
            tab.open()
            banner = tab.page.get_by_test_id("banner")
            expect(banner).to_contain_text("You are not signed in.")
            expect(banner).to_contain_text('{type: "parkway:token", token: "<JWT>"}')
            expect(banner).to_contain_text("allowed_origins")
            expect(banner).not_to_contain_text("Could not reach the server")
            load_error = tab.page.get_by_test_id("agent-load-error")
            expect(load_error).to_contain_text("no valid bearer token")
            expect(tab.page.locator("html")).to_have_attribute("data-signed-out", "true")
            assert sessions == []
            assert not [e for e in errors if "404" in e], errors
            assert f"HTTP 401: GET {server.base_url}/api/agent" in errors
            tab.assert_clean()


def test_under_a_host_authenticator_the_page_asks_for_no_session_and_works_once_signed_in(
    browser: Browser, redis_url: str
) -> None:
    """A host application's own authenticator (here: its sign-in cookie): signed out,
    the page says so and asks for no session; once the host has signed the user in,
    the same page reads the agent and chats, with the host's cookie as it is."""
    with server_thread(redis_url, AGENT, authenticator=HostCookieUser()) as server:
        tab = Tab.new_context(browser, server.base_url)
        errors = console_errors(tab.page)
        sessions = session_requests(tab)
        tab.open()
        banner = tab.page.get_by_test_id("banner")
        expect(banner).to_contain_text(
            "You are not signed in. This server knows its users by the application it is "
            "part of: sign in there, then reload this page."
        )
        expect(tab.page.get_by_test_id("agent-load-error")).to_contain_text(
            "not signed in: sign in to the application that serves this API"
        )
        assert not [e for e in errors if "404" in e], errors

        tab.context.add_cookies([{"name": "host_user", "value": "ana", "url": server.base_url}])
        tab.page.reload()
        expect(tab.page.get_by_test_id("agent-panel")).to_have_attribute("data-version", "1")
        expect(banner).to_be_hidden()
        tab.send("hi")
        tab.expect_said("Hello.")
        tab.expect_ready()
        assert sessions == []
        assert not [e for e in errors if "404" in e], errors
        tab.assert_clean()
