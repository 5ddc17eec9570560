"""How a connect flow fails, over HTTP against a real oidc-provider on loopback: the
provider's errors at the callback and the code exchange's failures (§9-§14 of
shared/reference/oauth-security.md §5). Each ends the parked call with a ``denied`` or
``error`` result, stores no connection, and keeps secrets out of the logs.

The rig is this folder's (``conftest.py``, ``tests/helpers/connect_rig.py``).
"""

from __future__ import annotations

import json
import logging
import shutil
from urllib.parse import parse_qs, urlsplit

import pytest
from redis.asyncio import Redis

from parkway.widgets_api.connect import outcome_summary
from tests.helpers.connect_rig import (
    BrokenTokenServer,
    Browser,
    Rig,
    authorize,
    code_requests,
    on_redis,
    outcome_of,
    page_data,
    with_param,
)
from tests.helpers.support import sse_chunks

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(shutil.which("node") is None, reason="the `node` executable is not on PATH"),
]


# -- code exchange failures (§9-§14) ----------------------------------------------------


def test_swapped_codes_fail_pkce_and_end_the_call_with_an_error(rig: Rig, browser: Browser) -> None:
    """§9 code injection: a code from another flow is redeemed with this flow's PKCE
    verifier; the provider answers invalid_grant, nothing is stored, the call ends in a
    retryable error result."""
    call_a = browser.park("c-swap-a")
    call_b = browser.park("c-swap-b")
    url_a = authorize(browser, browser.start("acme", "c-swap-a", call_a))
    url_b = authorize(browser, browser.start("acme", "c-swap-b", call_b))
    code_b = parse_qs(urlsplit(url_b).query)["code"][0]
    injected = browser.get(with_param(url_a, code=code_b))
    assert injected.status_code == 400
    assert "invalid_grant" in injected.text
    assert rig.peer.stats()["token_errors"].get("invalid_grant") == 1
    outcome = outcome_of(browser, "c-swap-a", call_a)
    assert outcome is not None and outcome["outcome"] == "error"
    assert "invalid_grant" in outcome["message"]
    assert browser.get("/api/connections").json()["connections"] == []
    assert page_data(injected)["message"]["outcome"] == "error"


def test_redirect_uri_changed_between_authorize_and_token_request_fails(
    rig: Rig, browser: Browser
) -> None:
    """§11: the token request must carry the authorization request's redirect_uri; a
    different one (a tampered flow record) makes the provider refuse, and the call ends
    with an error result."""
    call = browser.park("c-redirect")
    callback_url = authorize(browser, browser.start("acme", "c-redirect", call))

    async def tamper(client: Redis) -> None:
        [key] = [k async for k in client.scan_iter(match="pw:flow:*")]
        record = json.loads(await client.get(key))
        record["redirect_uri"] = record["redirect_uri"].replace("/callback", "/other")
        await client.set(key, json.dumps(record), keepttl=True)

    on_redis(rig, tamper)
    answer = browser.get(callback_url)
    assert answer.status_code == 400
    assert rig.peer.stats()["token_errors"].get("invalid_grant") == 1
    assert outcome_summary(outcome_of(browser, "c-redirect", call)) == "error"


def test_access_denied_settles_denied_without_a_token_request(rig: Rig, browser: Browser) -> None:
    """§12: the user presses Deny at the provider: the call settles "denied" (distinct
    from cancelled and error), no token request, and the state is spent."""
    call = browser.park("c-deny")
    callback_url = authorize(browser, browser.start("acme", "c-deny", call), decision="deny")
    assert "error=access_denied" in callback_url
    page = browser.get(callback_url)
    assert page.status_code == 400
    assert "did not allow access" in page.text
    assert page_data(page)["message"]["outcome"] == "denied"
    assert outcome_of(browser, "c-deny", call) == {"outcome": "denied"}
    assert code_requests(rig) == 0
    assert browser.get(callback_url).status_code == 400
    resumed = browser.post("/api/chats/c-deny/resume")
    said = "".join(c.get("delta", "") for c in sse_chunks(resumed.text))
    assert '"reason":"denied"' in said and '"retryable":false' in said


def test_other_provider_errors_are_error_results_and_their_text_is_escaped(
    rig: Rig, browser: Browser
) -> None:
    """§13: server_error and friends settle an error result; error_description is the
    attacker's text and is shown escaped."""
    call = browser.park("c-error")
    location = browser.start("acme", "c-error", call).headers["location"]
    state = parse_qs(urlsplit(location).query)["state"][0]
    hostile = '<img src=x onerror="alert(1)">'
    page = browser.get(
        "/connect/acme/callback",
        params={
            "error": "server_error",
            "error_description": hostile,
            "state": state,
            "iss": rig.peer.issuer,
        },
    )
    assert page.status_code == 400
    assert hostile not in page.text
    assert "&lt;img src=x" in page.text
    outcome = outcome_of(browser, "c-error", call)
    assert outcome is not None and outcome["outcome"] == "error"
    assert "server_error" in outcome["message"]
    assert code_requests(rig) == 0


@pytest.mark.parametrize("mode", ["error_json", "http_500", "timeout", "non_json"])
def test_token_endpoint_failures_store_nothing(
    rig: Rig, browser: Browser, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """§14: an error JSON, a 500, a timeout or a non-JSON body from the token endpoint:
    an error result, no connection stored, the client secret and body in no log line."""
    caplog.set_level(logging.DEBUG)
    rig.broken.mode = mode
    chat = f"c-broken-{mode.replace('_', '-')}"
    call = browser.park(chat, provider="broken")
    start = browser.start("broken", chat, call)
    assert start.status_code == 303
    back = browser.get(start.headers["location"])  # the broken server answers at once
    page = browser.get(back.headers["location"])
    assert page.status_code == 400
    assert rig.broken.token_requests == 1
    outcome = outcome_of(browser, chat, call)
    assert outcome is not None and outcome["outcome"] == "error"
    expected = {"error_json": "invalid_grant", "http_500": "http_500", "timeout": "timeout"}
    assert expected.get(mode, "invalid_response") in outcome["message"]
    assert browser.get("/api/connections").json()["connections"] == []
    assert BrokenTokenServer.SECRET_BODY not in caplog.text
    assert "broken-client-secret" not in caplog.text


def test_a_lost_pkce_verifier_fails_closed_without_a_token_request(
    rig: Rig, browser: Browser
) -> None:
    """§10: a flow record without its verifier (lost, or written by a bug) never leads to
    a token request without PKCE; the call ends in an error result."""
    call = browser.park("c-verifier")
    callback_url = authorize(browser, browser.start("acme", "c-verifier", call))

    async def drop(client: Redis) -> None:
        [key] = [k async for k in client.scan_iter(match="pw:flow:*")]
        record = json.loads(await client.get(key))
        record["verifier"] = None
        await client.set(key, json.dumps(record), keepttl=True)

    on_redis(rig, drop)
    assert browser.get(callback_url).status_code == 400
    assert code_requests(rig) == 0
    outcome = outcome_of(browser, "c-verifier", call)
    assert outcome is not None and "missing_verifier" in outcome["message"]


def test_a_wrong_client_secret_is_an_error_result_and_stays_out_of_logs(
    rig: Rig, browser: Browser, caplog: pytest.LogCaptureFixture
) -> None:
    """§14 invalid_client: the provider refuses the client (401); nothing is stored and
    neither secret appears in a log line."""
    caplog.set_level(logging.DEBUG)
    call = browser.park("c-client", provider="wrongsecret")
    page = browser.get(authorize(browser, browser.start("wrongsecret", "c-client", call)))
    assert page.status_code == 400
    assert rig.peer.stats()["token_errors"].get("invalid_client") == 1
    outcome = outcome_of(browser, "c-client", call)
    assert outcome is not None and "invalid_client" in outcome["message"]
    assert browser.get("/api/connections").json()["connections"] == []
    assert "not-the-secret-" not in caplog.text
    assert "acme-client-secret" not in caplog.text
