"""The connect flow over HTTP, against a real oidc-provider on loopback, including the
negative cases of shared/reference/oauth-security.md §5 (numbers in the docstrings).

Each test drives a real Parkway (uvicorn) with a "browser" (cookies kept per host,
redirects not followed) through start, the provider's real login and consent pages,
and the callback; it then checks what Redis recorded and what the provider was asked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import shutil
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from redis.asyncio import Redis

from runner.loop import Runner
from runner.sweeper import Sweeper
from tests.connect_rig import (
    BrokenTokenServer,
    Browser,
    Rig,
    connection_key,
    page_data,
    start_rig,
    stored_tokens,
    with_param,
)
from tests.oidc_peer import login_and_consent, oidc_peer
from tests.support import sse_chunks
from widgets_api.connect import outcome_summary

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(shutil.which("node") is None, reason="the `node` executable is not on PATH"),
]


@pytest.fixture(scope="module")
def rig(redis_url: str) -> Iterator[Rig]:
    yield from start_rig(redis_url, oidc_peer)


@pytest.fixture
def browser(rig: Rig, redis: Redis) -> Iterator[Browser]:
    del redis  # a clean database, and the keyspace check afterwards
    rig.peer.reset_stats()
    rig.broken.mode = "error_json"
    rig.broken.token_requests = 0
    user = rig.browser()
    try:
        yield user
    finally:
        user.close()


def code_requests(rig: Rig) -> int:
    return int(rig.peer.stats()["token_requests"].get("authorization_code", 0))


def authorize(browser: Browser, start: Any, decision: str = "allow") -> str:
    assert start.status_code == 303, start.text
    return login_and_consent(browser.http, start.headers["location"], decision=decision)  # type: ignore[arg-type]


def connect(browser: Browser, chat: str) -> tuple[str, Any]:
    """Park a call, run the whole flow; the call id and the callback response."""
    call = browser.park(chat)
    callback = browser.get(authorize(browser, browser.start("acme", chat, call)))
    return call, callback


def outcome_of(browser: Browser, chat: str, call: str) -> dict[str, Any] | None:
    found = browser.call(chat, call).get("outcome")
    return None if found is None else dict(found)


# -- the whole flow ---------------------------------------------------------------------


def test_connect_flow_settles_the_call_and_the_model_sees_only_a_reference(
    rig: Rig, browser: Browser, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The happy path end to end: start redirects to the configured authorization
    endpoint with PKCE S256, the callback stores the connection and settles the parked
    call in Redis itself, the agent continues with a reference, and the tokens appear in
    no log line, no response, no model input and nowhere in Redis unencrypted (§33)."""
    caplog.set_level(logging.DEBUG)
    call = browser.park("c-happy")
    start = browser.start("acme", "c-happy", call)
    assert start.status_code == 303
    assert start.headers["cache-control"] == "no-store"
    target = urlsplit(start.headers["location"])
    query = {k: v[0] for k, v in parse_qs(target.query).items()}
    assert f"{target.scheme}://{target.netloc}" == rig.peer.issuer
    assert query["redirect_uri"] == f"{rig.base_url}/connect/acme/callback"  # §3: exact
    assert query["code_challenge_method"] == "S256"
    assert len(query["code_challenge"]) == 43
    assert query["scope"] == "openid profile offline_access repo"  # configured + allowed ask
    assert len(query["state"]) >= 43
    assert any(c.name.startswith("parkway_flow_") for c in browser.http.cookies.jar)

    callback = browser.get(login_and_consent(browser.http, start.headers["location"]))
    assert callback.status_code == 200, callback.text
    assert callback.headers["referrer-policy"] == "no-referrer"  # §19
    assert callback.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in callback.headers["content-security-policy"]
    assert "http" not in callback.text.split("<script", 1)[0].split("</title>", 1)[1]
    data = page_data(callback)
    assert data["target"] == rig.base_url  # the recorded origin, never "*"
    assert data["message"] == {
        "type": "parkway:connect",
        "chatId": "c-happy",
        "toolCallId": call,
        "outcome": "connected",
    }
    for secret in (query["state"], parse_qs(urlsplit(str(callback.url)).query)["code"][0]):
        assert secret not in callback.text

    outcome = outcome_of(browser, "c-happy", call)
    assert outcome is not None and outcome["outcome"] == "output"
    reference = outcome["output"]
    assert reference["connected"] is True
    assert reference["provider"] == "acme" and reference["account"] == "alice"
    assert set(reference) == {"connected", "provider", "connection_id", "account", "scopes"}
    assert "repo" in reference["scopes"]
    assert code_requests(rig) == 1

    resumed = browser.post("/api/chats/c-happy/resume")
    assert resumed.status_code == 200, resumed.text
    said = "".join(c.get("delta", "") for c in sse_chunks(resumed.text))
    assert reference["connection_id"] in said

    listed = browser.get("/api/connections").json()["connections"]
    assert [c["id"] for c in listed] == [reference["connection_id"]]

    key = connection_key(browser.principal, reference["connection_id"])
    raw = on_redis(rig, lambda client: client.hgetall(key))
    tokens = stored_tokens(raw, browser.principal, reference["connection_id"])
    secrets = [tokens["access_token"], tokens["refresh_token"]]
    everything_in_redis = on_redis(rig, _dump)
    for secret in secrets:
        assert len(secret) > 20
        assert secret not in caplog.text
        assert all(secret not in body for body in browser.seen)
        assert secret not in rig.model.seen()
        assert secret not in everything_in_redis


async def _dump(client: Redis) -> str:
    """Every value in the database, as text (strings, hashes, lists, sets)."""
    out = []
    async for key in client.scan_iter(count=1000):
        kind = (await client.type(key)).decode()
        if kind == "string":
            out.append(repr(await client.get(key)))
        elif kind == "hash":
            out.append(repr(await client.hgetall(key)))
        elif kind == "list":
            out.append(repr(await client.lrange(key, 0, -1)))
        elif kind == "set":
            out.append(repr(await client.smembers(key)))
        elif kind == "zset":
            out.append(repr(await client.zrange(key, 0, -1)))
        elif kind == "stream":
            out.append(repr(await client.xrange(key)))
    return "\n".join(out)


def test_each_start_has_a_fresh_state_and_challenge(rig: Rig, browser: Browser) -> None:
    """§3: state and PKCE challenge are never reused across calls or attempts."""
    seen = set()
    for chat in ("c-fresh-1", "c-fresh-2"):
        call = browser.park(chat)
        for _ in range(2):
            location = browser.start("acme", chat, call).headers["location"]
            query = parse_qs(urlsplit(location).query)
            seen.add(("state", query["state"][0]))
            seen.add(("challenge", query["code_challenge"][0]))
    assert len(seen) == 8


# -- start refusals (§1, §2, §5) --------------------------------------------------------


def test_start_refuses_strangers_unknown_calls_and_foreign_parameters(
    rig: Rig, browser: Browser
) -> None:
    """No session, another principal, an unknown call, a settled call, a return_to, an
    origin outside the allow-list, or another provider's path: an error page, never a
    redirect, and the call stays pending."""
    call = browser.park("c-refuse")
    anonymous = Browser(rig.base_url)
    stranger = rig.browser()
    try:
        assert anonymous.start("acme", "c-refuse", call).status_code == 401
        assert stranger.start("acme", "c-refuse", call).status_code == 404
    finally:
        anonymous.close()
        stranger.close()
    assert browser.start("acme", "c-refuse", "no-such-call").status_code == 404
    assert browser.start("acme", "c-nope", call).status_code == 404
    assert (
        browser.start("acme", "c-refuse", call, return_to="https://evil.example").status_code == 400
    )
    assert browser.start("acme", "c-refuse", call, next="/x").status_code == 400
    assert browser.start("acme", "c-refuse", call, origin="https://evil.example").status_code == 400
    assert browser.start("acme", "c-refuse", call, scope="admin").status_code == 400
    assert browser.start("other", "c-refuse", call).status_code == 400
    assert browser.start("nobody", "c-refuse", call).status_code == 404
    assert browser.call("c-refuse", call)["status"] == "pending"

    declined = browser.post(f"/api/chats/c-refuse/calls/{call}", json={"outcome": "declined"})
    assert declined.status_code == 200, declined.text
    ended = browser.start("acme", "c-refuse", call)
    assert ended.status_code == 409
    assert "location" not in ended.headers
    assert code_requests(rig) == 0


def test_a_second_start_invalidates_the_first_state(rig: Rig, browser: Browser) -> None:
    """§4: one live flow per call; the older state fails at the callback."""
    call = browser.park("c-second")
    first = browser.start("acme", "c-second", call)
    second = browser.start("acme", "c-second", call)
    old = browser.get(authorize(browser, first))
    assert old.status_code == 400
    assert browser.call("c-second", call)["status"] == "pending"
    new = browser.get(authorize(browser, second))
    assert new.status_code == 200, new.text
    assert code_requests(rig) == 1


# -- callback refusals (§6-§8, §15, §17) ------------------------------------------------


def test_missing_forged_or_replayed_state_makes_no_token_request(
    rig: Rig, browser: Browser
) -> None:
    """§6, §7: no state, an unknown state, or the same callback URL twice: refused with
    no token request; the code is redeemed once and the call settled once."""
    call = browser.park("c-replay")
    callback_url = authorize(browser, browser.start("acme", "c-replay", call))
    assert browser.get(with_param(callback_url, state=None)).status_code == 400
    assert browser.get(with_param(callback_url, state="forged" * 8)).status_code == 400
    assert code_requests(rig) == 0
    assert browser.get(callback_url).status_code == 200
    replay = browser.get(callback_url)
    assert replay.status_code == 400
    assert "already used" in replay.text
    assert code_requests(rig) == 1
    assert outcome_of(browser, "c-replay", call)["output"]["connected"] is True  # type: ignore[index]


def test_callback_without_the_flow_cookie_or_in_another_session_is_refused(
    rig: Rig, browser: Browser
) -> None:
    """§8: a callback link finished in a browser that did not start the flow (no
    per-flow cookie), or by another signed-in user: refused, nothing redeemed."""
    call = browser.park("c-cookie")
    callback_url = authorize(browser, browser.start("acme", "c-cookie", call))
    victim = Browser(rig.base_url)
    session = next(c.value for c in browser.http.cookies.jar if c.name == "parkway_session")
    victim.http.cookies.set("parkway_session", session or "")
    try:
        refused = victim.get(callback_url)  # the session, but not the flow cookie
        assert refused.status_code == 400
        assert "started elsewhere" in refused.text
    finally:
        victim.close()
    assert browser.get(callback_url).status_code == 400  # the state was spent
    assert code_requests(rig) == 0
    assert browser.call("c-cookie", call)["status"] == "pending"

    call2 = browser.park("c-cookie-2")
    callback_url = authorize(browser, browser.start("acme", "c-cookie-2", call2))
    other_user = rig.browser()
    try:
        for cookie in browser.http.cookies.jar:
            if cookie.name.startswith("parkway_flow_") and cookie.value:
                other_user.http.cookies.set(cookie.name, cookie.value, path=cookie.path)
        assert other_user.get(callback_url).status_code == 403
    finally:
        other_user.close()
    assert code_requests(rig) == 0


def test_iss_mismatch_missing_or_another_providers_callback_is_refused(
    rig: Rig, browser: Browser
) -> None:
    """§15 mix-up: the provider advertises RFC 9207, so a missing or different ``iss``
    is refused; a state issued for one provider arriving at another's callback too."""
    for chat, change in (("c-iss-1", {"iss": "https://evil.example"}), ("c-iss-2", {"iss": None})):
        call = browser.park(chat)
        callback_url = authorize(browser, browser.start("acme", chat, call))
        assert browser.get(with_param(callback_url, **change)).status_code == 400
        assert browser.call(chat, call)["status"] == "pending"
    call = browser.park("c-mixup")
    callback_url = authorize(browser, browser.start("acme", "c-mixup", call))
    moved = callback_url.replace("/connect/acme/callback", "/connect/other/callback")
    assert browser.get(moved).status_code == 400
    assert code_requests(rig) == 0


def test_expired_state_is_refused_without_a_token_request(
    rig: Rig, browser: Browser, redis: Redis
) -> None:
    """§17: after the flow's TTL the state is gone; modelled by expiring its key."""
    del redis
    call = browser.park("c-expired")
    callback_url = authorize(browser, browser.start("acme", "c-expired", call))

    async def expire(client: Redis) -> int:
        flows = [k async for k in client.scan_iter(match="pw:flow:*")]
        for key in flows:
            await client.delete(key)  # what its TTL does at the end of the flow time
        return len(flows)

    assert on_redis(rig, expire) == 1
    assert browser.get(callback_url).status_code == 400
    assert code_requests(rig) == 0


def on_redis(rig: Rig, work: Any) -> Any:
    """Run ``work(client)`` with a client of its own (sync tests have no loop)."""

    async def run() -> Any:
        client = Redis.from_url(rig.server.settings.redis_url or "")
        try:
            return await work(client)
        finally:
            await client.aclose()

    return asyncio.run(run())


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


# -- the call's other ends: cancel, timeout, races (§16, §18, §24, §26) -------------------


def test_callback_after_cancel_is_refused_and_the_cancel_stands(rig: Rig, browser: Browser) -> None:
    """§24: the user cancels through the server; a later callback with that state is
    refused without redeeming the code, and the outcome stays "cancelled"."""
    call = browser.park("c-cancel")
    callback_url = authorize(browser, browser.start("acme", "c-cancel", call))
    cancel = browser.post(f"/api/chats/c-cancel/calls/{call}", json={"outcome": "cancelled"})
    assert cancel.status_code == 200, cancel.text
    assert browser.get(callback_url).status_code == 400
    assert code_requests(rig) == 0
    assert outcome_of(browser, "c-cancel", call) == {"outcome": "cancelled"}


def test_callback_after_timeout_stores_the_connection_and_keeps_the_timeout(
    rig: Rig, browser: Browser
) -> None:
    """§16 with the issue's rule: the call timed out while the user was at the provider;
    the connection the user authorised is stored (the agent's re-ask finds it), the
    recorded outcome stays "timeout", and the page says so."""
    call = browser.park("c-late")
    callback_url = authorize(browser, browser.start("acme", "c-late", call))
    assert sweep_later(rig) == 1
    page = browser.get(callback_url)
    assert page.status_code == 200
    assert "had already ended (timeout)" in page.text
    assert page_data(page)["message"]["outcome"] == "timeout"
    assert outcome_of(browser, "c-late", call) == {"outcome": "timeout"}
    [stored] = browser.get("/api/connections").json()["connections"]
    assert stored["provider"] == "acme"
    assert browser.start("acme", "c-late", call).status_code == 409  # only as a Retry


def sweep_later(rig: Rig, seconds: float = 3600) -> int:
    """Another worker's sweeper, its clock ``seconds`` ahead: times out what is due."""

    async def sweep(client: Redis) -> int:
        from runner.scripted import ScriptedModel
        from runner.template import load_template
        from tests.connect_rig import CONNECT_AGENT

        runner = Runner(client, ScriptedModel([]), load_template(CONNECT_AGENT["template"]))
        report = await Sweeper(runner, clock=lambda: time.time() + seconds).sweep_once()
        return int(report.settled)

    return int(on_redis(rig, sweep))


def test_retry_after_a_timeout_connects_without_resettling(rig: Rig, browser: Browser) -> None:
    """Retry after a failed or timed-out attempt starts a new flow for the same call;
    it stores the connection and leaves the recorded outcome alone. A retry of a call
    that succeeded, or of a pending one, is not a retry."""
    call = browser.park("c-retry")
    assert sweep_later(rig) == 1
    retry = browser.start("acme", "c-retry", call, retry="1")
    page = browser.get(authorize(browser, retry))
    assert page.status_code == 200, page.text
    assert "Ask the agent to continue" in page.text
    assert outcome_of(browser, "c-retry", call) == {"outcome": "timeout"}
    assert len(browser.get("/api/connections").json()["connections"]) == 1

    call2, callback = connect(browser, "c-retry-2")
    assert callback.status_code == 200
    assert browser.start("acme", "c-retry-2", call2, retry="1").status_code == 409


def test_an_existing_connection_answers_a_new_request_through_use(
    rig: Rig, browser: Browser
) -> None:
    """The agent asks again after a retry: the widget offers the stored connection, and
    ``use`` settles the new call with its reference, server-side. Someone else's
    connection, or one of another provider, is refused."""
    _, callback = connect(browser, "c-use-1")
    assert callback.status_code == 200
    [existing] = browser.get("/api/connections?provider=acme").json()["connections"]
    call = browser.park("c-use-2")
    stranger = rig.browser()
    try:
        refused = stranger.post(
            "/connect/acme/use",
            json={"chatId": "c-use-2", "toolCallId": call, "connectionId": existing["id"]},
        )
        assert refused.status_code == 404
    finally:
        stranger.close()
    assert (
        browser.post(
            "/connect/other/use",
            json={"chatId": "c-use-2", "toolCallId": call, "connectionId": existing["id"]},
        ).status_code
        == 404
    )
    used = browser.post(
        "/connect/acme/use",
        json={"chatId": "c-use-2", "toolCallId": call, "connectionId": existing["id"]},
    )
    assert used.status_code == 200, used.text
    assert used.json()["outcome"]["output"]["connection_id"] == existing["id"]
    assert browser.post("/connect/acme/use", json={"chatId": "c-use-2"}).status_code == 422


def test_a_client_cannot_claim_a_connection_the_server_did_not_record(
    rig: Rig, browser: Browser
) -> None:
    """DESIGN §3: the browser may report only that a connect failed."""
    call = browser.park("c-claim")
    forged = {"connected": True, "provider": "acme", "connection_id": "conn_x", "account": "a"}
    answer = browser.post(
        f"/api/chats/c-claim/calls/{call}", json={"outcome": "output", "output": forged}
    )
    assert answer.status_code == 403
    assert browser.call("c-claim", call)["status"] == "pending"


def test_callback_cancel_and_timeout_race_with_exactly_one_winner(
    rig: Rig, browser: Browser
) -> None:
    """§18: the callback, the widget's cancel and the sweeper's timeout, at once, for
    each of several calls: each call is settled exactly once, and every loser reports
    the winner's outcome."""
    rounds = 6
    winners: dict[str, int] = {}
    for index in range(rounds):
        chat = f"c-race-{index}"
        call = browser.park(chat)
        callback_url = authorize(browser, browser.start("acme", chat, call))
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            page = pool.submit(browser.http.get, callback_url)
            cancel = pool.submit(
                browser.http.post,
                f"{rig.base_url}/api/chats/{chat}/calls/{call}",
                json={"outcome": "cancelled"},
            )
            swept = pool.submit(sweep_later, rig)
        page_r, cancel_r, swept_n = page.result(), cancel.result(), swept.result()
        outcome = outcome_of(browser, chat, call)
        assert outcome is not None
        fresh = [
            page_r.status_code == 200 and 'outcome": "connected' in page_r.text,
            cancel_r.status_code == 200,
            swept_n == 1,
        ]
        assert sum(fresh) == 1, (page_r.text, cancel_r.text, swept_n, outcome)
        if fresh[0]:
            winner = "connected"
            assert outcome["output"]["connected"] is True
        elif fresh[1]:
            winner = "cancelled"
            assert outcome == {"outcome": "cancelled"}
        else:
            winner = "timeout"
            assert outcome == {"outcome": "timeout"}
        if not fresh[1]:
            assert cancel_r.status_code == 409
            assert cancel_r.json()["error"]["outcome"] == outcome
        winners[winner] = winners.get(winner, 0) + 1
    assert sum(winners.values()) == rounds


def test_two_tabs_finishing_the_same_flow_redeem_the_code_once(rig: Rig, browser: Browser) -> None:
    """§18: the same callback URL opened twice at once: one succeeds, one is refused,
    one token request, one settlement."""
    call = browser.park("c-tabs")
    callback_url = authorize(browser, browser.start("acme", "c-tabs", call))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: browser.http.get(callback_url), range(2)))
    assert sorted(a.status_code for a in answers) == [200, 400]
    assert code_requests(rig) == 1
    assert len(browser.get("/api/connections").json()["connections"]) == 1


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
