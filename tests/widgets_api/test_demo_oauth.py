"""The built-in demo OAuth provider behind the connect flow: what ``make run`` offers
with no external provider. A real Parkway (uvicorn) serves both the provider (mounted
at /demo-oauth) and the flow; the "browser" fills in the provider's consent form."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from tests.helpers.connect_rig import TOKEN_KEY, Browser, RecordingModel
from tests.helpers.support import CONNECT_EMBED, ServerThread

AGENT: dict[str, Any] = {
    "template": {"instructions": "demo connect", "tools": [CONNECT_EMBED]},
    "model": {"scripted": {"turns": []}},
}


@pytest.fixture
def server(redis_url: str, redis: Redis) -> Iterator[ServerThread]:
    del redis
    running = ServerThread(
        redis_url,
        AGENT,
        model=RecordingModel(),
        demo_oauth=True,
        token_key=SecretStr(TOKEN_KEY),
    ).start()
    try:
        yield running
    finally:
        running.stop()


def consent(browser: Browser, location: str, decision: str) -> str:
    page = browser.get(location)
    assert page.status_code == 200, page.text
    assert page.headers["x-frame-options"] == "DENY"
    form = re.search(r'name="consent" value="([^"]+)"', page.text)
    assert form, page.text
    answer = browser.http.post(
        location.split("?", maxsplit=1)[0],
        data={"consent": form.group(1), "account": "demo-user", "decision": decision},
    )
    assert answer.status_code == 303, answer.text
    return str(answer.headers["location"])


def test_demo_provider_completes_a_connect_and_the_agent_continues(
    server: ServerThread,
) -> None:
    """Start → the demo consent page → Allow → callback: the call settles connected
    (with ``iss`` checked, as the demo advertises RFC 9207), and the chat resumes."""
    browser = Browser(server.base_url).login()
    try:
        call = browser.park("d-1", provider="demo")
        descriptor = browser.call("d-1", call)["widget"]
        assert descriptor["providerName"] == "Demo account"
        assert descriptor["configured"] is True
        start = browser.get(descriptor["startUrl"])
        assert start.status_code == 303
        assert start.headers["location"].startswith(f"{server.base_url}/demo-oauth/authorize?")
        callback_url = consent(browser, start.headers["location"], "allow")
        query = parse_qs(urlsplit(callback_url).query)
        assert query["iss"] == [f"{server.base_url}/demo-oauth"]
        page = browser.get(callback_url)
        assert page.status_code == 200, page.text
        outcome = browser.call("d-1", call)["outcome"]
        assert outcome["output"]["account"] == "demo-user"
        resumed = browser.post("/api/chats/d-1/resume")
        assert outcome["output"]["connection_id"] in resumed.text
        [connection] = browser.get("/api/connections").json()["connections"]
        deleted = browser.http.delete(f"{server.base_url}/api/connections/{connection['id']}")
        assert deleted.status_code == 204
        assert browser.get("/api/connections").json()["connections"] == []
    finally:
        browser.close()


def test_demo_provider_deny_settles_denied(server: ServerThread) -> None:
    browser = Browser(server.base_url).login()
    try:
        call = browser.park("d-2", provider="demo")
        start = browser.start("demo", "d-2", call)
        callback_url = consent(browser, start.headers["location"], "deny")
        assert "error=access_denied" in callback_url
        assert browser.get(callback_url).status_code == 400
        assert browser.call("d-2", call)["outcome"] == {"outcome": "denied"}
    finally:
        browser.close()
