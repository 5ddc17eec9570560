"""Security findings of issue 10: canonical session tokens, repeated OAuth parameters on
the connect callback, and start tokens on the connect start link.

Real uvicorn and Redis; the connect tests drive a real oidc-provider on loopback (the
rig of tests/widgets_api/connect/) through the provider's own login and consent pages.
"""

from __future__ import annotations

import shutil
import string
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from redis.asyncio import Redis

from parkway.transport.api.sessions import COOKIE_NAME
from tests.helpers.connect_rig import Browser, Rig, start_rig
from tests.helpers.oidc_peer import login_and_consent, oidc_peer
from tests.helpers.support import ServerThread, agent_doc, sse_chunks, text, user_message

needs_node = pytest.mark.skipif(
    shutil.which("node") is None, reason="the `node` executable is not on PATH"
)
BASE64URL = string.ascii_letters + string.digits + "-_"


# -- session tokens are canonical ----------------------------------------------------------


@pytest.fixture
def server(redis_url: str, redis: Redis) -> Iterator[ServerThread]:
    del redis
    started = ServerThread(redis_url, agent_doc([[text("hi")]])).start()
    try:
        yield started
    finally:
        started.stop()


def _variants(token: str) -> Iterator[tuple[str, str]]:
    """Every position changed (two other characters, one outside the alphabet), removed
    and doubled; characters inserted before it and appended at the end."""
    for i, char in enumerate(token):
        index = BASE64URL.find(char)
        for other in {BASE64URL[(index + 1) % 64], BASE64URL[(index + 32) % 64], "~"} - {char}:
            yield f"change {i} to {other!r}", token[:i] + other + token[i + 1 :]
        yield f"remove {i}", token[:i] + token[i + 1 :]
        yield f"double {i}", token[:i] + char + token[i:]
        yield f"insert '=' at {i}", token[:i] + "=" + token[i:]
    for tail in ("=", "==", "A", ".", "!", "%3D", ".x"):
        yield f"append {tail!r}", token + tail


def test_a_session_token_altered_in_any_byte_is_refused(server: ServerThread) -> None:
    """A token must verify only as issued: base64 decoding forgave padding, unused
    trailing bits and stray characters in the signature, so altered tokens still
    authenticated. Every single-byte change, removal, insertion and several appendages,
    as a bearer token: 401; the token itself: 200."""
    with httpx.Client(base_url=server.base_url, timeout=15) as http:
        issued = http.post("/api/sessions")
        assert issued.status_code == 201, issued.text
        token = issued.json()["token"]
        http.cookies.clear()
        ok = http.get("/api/agent", headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200, ok.text
        accepted = []
        tried = 0
        for what, variant in _variants(token):
            tried += 1
            response = http.get("/api/agent", headers={"authorization": f"Bearer {variant}"})
            if response.status_code != 401:
                accepted.append((what, response.status_code))
        assert tried > 5 * len(token)
        assert accepted == []


def test_a_session_cookie_must_be_canonical_too(server: ServerThread) -> None:
    """The cookie goes through the same check: the signature's other spellings (its
    last character's unused bits, padding) are refused."""
    with httpx.Client(base_url=server.base_url, timeout=15) as http:
        token = http.post("/api/sessions").json()["token"]
        http.cookies.clear()
        value, _, signature = token.rpartition(".")
        # 20 signature bytes in 27 characters: the last one carries 2 unused bits
        last = BASE64URL.index(signature[-1])
        spellings = [
            f"{value}.{signature[:-1]}{BASE64URL[(last & ~3) | bits]}"
            for bits in range(4)
            if (last & ~3) | bits != last
        ]
        for variant in [*spellings, token + "=", token + "A"]:
            response = http.get("/api/agent", headers={"cookie": f"{COOKIE_NAME}={variant}"})
            assert response.status_code == 401, variant
        ok = http.get("/api/agent", headers={"cookie": f"{COOKIE_NAME}={token}"})
        assert ok.status_code == 200


# -- the connect flow ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rig(redis_url: str) -> Iterator[Rig]:
    if shutil.which("node") is None:
        pytest.skip("the `node` executable is not on PATH")
    yield from start_rig(redis_url, oidc_peer)


@pytest.fixture
def browser(rig: Rig, redis: Redis) -> Iterator[Browser]:
    del redis  # a clean database, and the keyspace check afterwards
    rig.peer.reset_stats()
    user = rig.browser()
    try:
        yield user
    finally:
        user.close()


def code_requests(rig: Rig) -> int:
    return int(rig.peer.stats()["token_requests"].get("authorization_code", 0))


def authorize(browser: Browser, start: httpx.Response) -> str:
    assert start.status_code == 303, start.text
    return login_and_consent(browser.http, start.headers["location"])


def repeated(url: str, name: str, value: str) -> str:
    """``url`` with one more ``name=value`` in its query."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=f"{parts.query}&{urlencode({name: value})}"))


@pytest.mark.node
@needs_node
def test_a_callback_repeating_any_oauth_parameter_is_refused(rig: Rig, browser: Browser) -> None:
    """``iss=evil&iss=good`` was accepted: one reader took one copy, another the other.
    A repeated state, code, iss, error or error_description is 400 before the state is
    looked up: no token request, the call still pending, and the provider's real answer
    still completes the flow."""
    call = browser.park("c-dup")
    callback_url = authorize(browser, browser.start("acme", "c-dup", call))
    query = parse_qs(urlsplit(callback_url).query)
    assert {"state", "code", "iss"} <= set(query)
    cases = {
        "state": query["state"][0],
        "code": "another-code",
        "iss": "https://evil.example",
        "error": "access_denied",
        "error_description": "<b>nope</b>",
    }
    for name, value in cases.items():
        url = callback_url if name in query else repeated(callback_url, name, "x")
        refused = browser.get(repeated(url, name, value))
        assert refused.status_code == 400, (name, refused.text)
        assert "repeats a parameter" in refused.text
    same_twice = repeated(callback_url, "iss", query["iss"][0])
    assert browser.get(same_twice).status_code == 400
    assert code_requests(rig) == 0
    assert browser.call("c-dup", call)["status"] == "pending"
    assert browser.get(callback_url).status_code == 200
    assert code_requests(rig) == 1


@pytest.mark.node
@needs_node
def test_a_forced_navigation_to_start_is_refused(rig: Rig, browser: Browser) -> None:
    """With a provider that remembers consent, a cross-site navigation to the start
    link (the session cookie rides along) completed a connect with no user gesture.
    Without the start token the page that shows the widget holds: 403, a page saying
    to start from the chat, no redirect, nothing asked of the provider, the call
    pending. The widget's own link still works."""
    first = browser.park("c-consented")
    assert browser.get(authorize(browser, browser.start("acme", "c-consented", first))).is_success
    rig.peer.reset_stats()

    call = browser.park("c-forced")
    forced = browser.start("acme", "c-forced", call, token=None)
    assert forced.status_code == 403
    assert "location" not in forced.headers
    assert "Start from the chat" in forced.text
    for token in ("", "x" * 40, "v1.00000000.AAAA"):
        assert browser.start("acme", "c-forced", call, token=token).status_code == 403
    assert code_requests(rig) == 0
    assert browser.call("c-forced", call)["status"] == "pending"
    # the widget's link: the provider remembers the consent, the flow completes at once
    assert browser.get(authorize(browser, browser.start("acme", "c-forced", call))).is_success
    assert browser.call("c-forced", call)["status"] == "settled"


@pytest.mark.node
@needs_node
def test_a_start_token_is_bound_to_its_session_and_call(rig: Rig, browser: Browser) -> None:
    """A token starts only the call it was issued for, in a session that owns it:
    another session's token (for its own call) or a token for another call of the same
    user is 403; a victim's token in another session finds no call (404)."""
    call = browser.park("c-mine")
    other_call = browser.park("c-mine-2")
    stranger = rig.browser()
    try:
        theirs = stranger.park("c-theirs")
        their_token = stranger.start_token("c-theirs", theirs)
        assert their_token
        refused = browser.start("acme", "c-mine", call, token=their_token)
        assert refused.status_code == 403
        mine = browser.start_token("c-mine", call)
        assert mine
        assert stranger.start("acme", "c-mine", call, token=mine).status_code == 404
        assert stranger.start("acme", "c-theirs", theirs, token=their_token).status_code == 303
    finally:
        stranger.close()
    other_token = browser.start_token("c-mine-2", other_call)
    assert browser.start("acme", "c-mine", call, token=other_token).status_code == 403
    assert browser.start("acme", "c-mine", call, token=mine).status_code == 303


@pytest.mark.node
@needs_node
def test_a_start_token_starts_one_flow_and_expires(rig: Rig, browser: Browser) -> None:
    """Single use, whatever its spelling (the nonce sealed inside is what is spent, so
    another base64 spelling of a spent token is spent too), and dead after the flow
    TTL. A descriptor served again (a reload, the stream) carries a fresh token."""
    call = browser.park("c-once")
    token = browser.start_token("c-once", call)
    assert token
    assert browser.start("acme", "c-once", call, token=token).status_code == 303
    reused = browser.start("acme", "c-once", call, token=token)
    assert reused.status_code == 403
    prefix, last = token[:-1], BASE64URL.index(token[-1])
    for bits in range(4):
        respelled = prefix + BASE64URL[(last & ~3) | bits]
        assert browser.start("acme", "c-once", call, token=respelled).status_code == 403

    fresh = browser.start_token("c-once", call)
    assert fresh and fresh != token
    tokens = rig.server.app.state.connect.start_tokens
    try:
        tokens.clock = lambda: time.time() + tokens.ttl_s + 1
        assert browser.start("acme", "c-once", call, token=fresh).status_code == 403
    finally:
        tokens.clock = time.time
    assert browser.start("acme", "c-once", call, token=fresh).status_code == 303
    twice = f"/connect/acme/start?{urlencode({'chat': 'c-once', 'call': call})}"
    twice += f"&token={fresh}&token={fresh}"
    assert browser.get(twice).status_code == 400


@pytest.mark.node
@needs_node
def test_the_streamed_descriptor_and_a_reloaded_one_both_start(rig: Rig, browser: Browser) -> None:
    """The widget reads its descriptor from the stream, or after a reload from
    GET /api/chats/{id}: each carries its own token, and each works once."""
    body = {"id": "c-stream", "messages": [user_message("connect me to acme")]}
    response = browser.post("/api/chat", json={**body, "trigger": "submit-message"})
    assert response.status_code == 200, response.text
    [streamed] = [
        c["data"] for c in sse_chunks(response.text) if c["type"] == "data-parkway-widget"
    ]
    reloaded = next(
        c["widget"] for c in browser.get("/api/chats/c-stream").json()["calls"] if c["widget"]
    )
    assert streamed["startUrl"] != reloaded["startUrl"]
    assert "&token=" in streamed["startUrl"]
    assert browser.get(streamed["startUrl"]).status_code == 303
    assert browser.get(reloaded["startUrl"]).status_code == 303
    assert browser.get(streamed["startUrl"]).status_code == 403
