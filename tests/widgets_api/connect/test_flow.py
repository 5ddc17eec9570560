"""The connect flow over HTTP, against a real oidc-provider on loopback: the whole flow,
and who may start and finish one, including the negative cases of
shared/reference/oauth-security.md §5 (numbers in the docstrings).

Each test drives a real Parkway (uvicorn) with a "browser" (cookies kept per host,
redirects not followed) through start, the provider's real login and consent pages,
and the callback; it then checks what Redis recorded and what the provider was asked.
How a flow fails is in ``tests/widgets_api/connect/test_failures.py``; the call's other ends
(cancel, timeout, retry, races) in ``tests/widgets_api/connect/test_settling.py``.
"""

from __future__ import annotations

import logging
import shutil
from urllib.parse import parse_qs, urlsplit

import pytest
from redis.asyncio import Redis

from tests.helpers.connect_rig import (
    Browser,
    Rig,
    authorize,
    code_requests,
    connection_key,
    on_redis,
    outcome_of,
    page_data,
    stored_tokens,
    with_param,
)
from tests.helpers.oidc_peer import login_and_consent
from tests.helpers.support import sse_chunks

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(shutil.which("node") is None, reason="the `node` executable is not on PATH"),
]


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
    session = next(c for c in browser.http.cookies.jar if c.name.startswith("parkway_session"))
    victim.http.cookies.set(session.name, session.value or "")
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
