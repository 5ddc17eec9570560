"""Start tickets: the connect flow for a page that authenticates with a bearer JWT it
holds in memory (the playground embedded by a host application), whose popup carries
neither a cookie nor an Authorization header.

A real Parkway (uvicorn, ``auth=jwt`` against a JWKS on loopback, Redis) with its
built-in demo OAuth provider. The page's requests are an HTTP client with the bearer
token; the popup is another client with no identity at all, keeping the cookies the
flow sets, and sending the ``Sec-Fetch-Site`` header a browser sends on a navigation.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc.jwk import RSAKey
from pydantic import SecretStr
from redis.asyncio import Redis

from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.jwks import AUDIENCE, ISSUER, JwksServer, sign
from tests.helpers.support import (
    CONNECT_EMBED,
    ServerThread,
    agent_doc,
    call,
    sse_chunks,
    text,
    user_message,
)

KEY = RSAKey.generate_key(2048, parameters={"kid": "tickets-1"})
AGENT = agent_doc(
    [
        [text("Connecting. "), call("request_connection", {"provider": "demo"})],
        [text("Connection: {{last_tool_results}}")],
    ],
    tools=[CONNECT_EMBED],
)
SAME_ORIGIN = {"sec-fetch-site": "same-origin"}


@pytest.fixture
def server(redis_url: str, redis: Redis) -> Iterator[ServerThread]:
    del redis  # a clean database, and the keyspace check afterwards
    with JwksServer() as jwks:
        jwks.publish(KEY)
        running = ServerThread(
            redis_url,
            AGENT,
            auth="jwt",
            jwt_jwks_url=jwks.url,
            jwt_issuer=ISSUER,
            jwt_audience=AUDIENCE,
            demo_oauth=True,
            token_key=SecretStr(TOKEN_KEY),
        ).start()
        try:
            yield running
        finally:
            running.stop()


class Page:
    """The embedded page's requests: the user's JWT as a bearer token, no cookie."""

    def __init__(self, server: ServerThread, subject: str) -> None:
        self.http = httpx.Client(
            base_url=server.base_url,
            headers={"authorization": f"Bearer {sign(KEY, sub=subject)}"},
            timeout=30,
        )

    def park(self, chat_id: str) -> tuple[str, dict[str, Any]]:
        """A chat whose turn parks on a demo connect call: its id and descriptor."""
        body = {"id": chat_id, "messages": [user_message("connect")], "trigger": "submit-message"}
        answer = self.http.post("/api/chat", json=body)
        assert answer.status_code == 200, answer.text
        [widget] = [
            c["data"] for c in sse_chunks(answer.text) if c["type"] == "data-parkway-widget"
        ]
        return str(widget["toolCallId"]), widget

    def ticket(self, chat_id: str, call_id: str, **extra: Any) -> httpx.Response:
        body = {"chatId": chat_id, "toolCallId": call_id, **extra}
        return self.http.post("/connect/demo/ticket", json=body)

    def start_url(self, chat_id: str, call_id: str) -> str:
        answer = self.ticket(chat_id, call_id)
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"] == "no-store"
        return str(answer.json()["startUrl"])

    def call(self, chat_id: str, call_id: str) -> dict[str, Any]:
        answer = self.http.get(f"/api/chats/{chat_id}/calls/{call_id}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def close(self) -> None:
        self.http.close()


def popup(server: ServerThread) -> httpx.Client:
    """A popup window: no identity, keeps the cookies it is given, follows nothing."""
    return httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False)


def consent(window: httpx.Client, location: str) -> str:
    """Allow at the demo provider's consent page; the callback URL it redirects to."""
    page = window.get(location)
    assert page.status_code == 200, page.text
    form = re.search(r'name="consent" value="([^"]+)"', page.text)
    assert form, page.text
    answer = window.post(
        location.split("?", maxsplit=1)[0],
        data={"consent": form.group(1), "account": "demo-user", "decision": "allow"},
    )
    assert answer.status_code == 303, answer.text
    return str(answer.headers["location"])


def test_a_ticket_lets_a_bearer_page_connect_through_a_popup_without_identity(
    server: ServerThread,
) -> None:
    """The page asks for a ticket with its bearer token; the popup, which has no
    identity, starts the flow with it, signs in at the provider and comes back to the
    callback, which settles the call for the ticket's principal and stores their
    connection. Without a ticket the same popup is "not signed in"."""
    alice = Page(server, "alice")
    try:
        call_id, widget = alice.park("t-whole")
        assert widget["ticketUrl"] == "/connect/demo/ticket"
        with popup(server) as window:
            # the descriptor's own link needs a signed-in principal: 401 in this popup
            assert window.get(widget["startUrl"], headers=SAME_ORIGIN).status_code == 401
            start_url = alice.start_url("t-whole", call_id)
            assert start_url.startswith(f"/connect/demo/start?chat=t-whole&call={call_id}&token=")
            started = window.get(start_url, headers=SAME_ORIGIN)
            assert started.status_code == 303, started.text
            assert started.headers["location"].startswith(f"{server.base_url}/demo-oauth/")
            callback = window.get(consent(window, started.headers["location"]))
            assert callback.status_code == 200, callback.text
        outcome = alice.call("t-whole", call_id)["outcome"]
        assert outcome["output"]["connected"] is True
        assert outcome["output"]["account"] == "demo-user"
        [connection] = alice.http.get("/api/connections").json()["connections"]
        assert connection["id"] == outcome["output"]["connection_id"]
        resumed = alice.http.post("/api/chats/t-whole/resume")
        assert connection["id"] in resumed.text
    finally:
        alice.close()


def test_a_ticket_starts_one_flow_only_from_the_pages_own_navigation(
    server: ServerThread,
) -> None:
    """A ticket names its principal and its call, so a ticket link sent to someone else
    would run the sender's flow in their browser (connecting the victim's account to the
    sender). It starts a flow only in a navigation the server's own origin made
    (``Sec-Fetch-Site: same-origin``, which pages cannot set), once, within its minute;
    an altered ticket, another call's, a descriptor's token without a session, or a
    ticket in someone else's session start nothing, and the call stays pending."""
    alice, bob = Page(server, "alice"), Page(server, "bob")
    try:
        call_id, widget = alice.park("t-refused")
        other_call, _ = alice.park("t-other")
        with popup(server) as window:
            start_url = alice.start_url("t-refused", call_id)
            for headers in ({}, {"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "none"}):
                refused = window.get(start_url, headers=headers)
                assert refused.status_code == 403, (headers, refused.text)
                assert "Start from the chat" in refused.text and "location" not in refused.headers
            # refused before it was spent: the page's own navigation still starts it, once
            assert window.get(start_url, headers=SAME_ORIGIN).status_code == 303
            assert window.get(start_url, headers=SAME_ORIGIN).status_code == 403

            query = parse_qs(urlsplit(alice.start_url("t-refused", call_id)).query)
            ticket = query["token"][0]
            altered = ticket[:-2] + ("A" if ticket[-2] != "A" else "B") + ticket[-1]
            other = parse_qs(urlsplit(alice.start_url("t-other", other_call)).query)["token"][0]
            descriptor = parse_qs(urlsplit(widget["startUrl"]).query)["token"][0]
            for token in (altered, other, descriptor, ""):
                url = f"/connect/demo/start?chat=t-refused&call={call_id}&token={token}"
                # nothing opens for this call without a session: nobody is signed in
                assert window.get(url, headers=SAME_ORIGIN).status_code == 401, token

            # alice's ticket where bob is signed in: bob has no such call
            fresh = alice.start_url("t-refused", call_id)
            assert bob.http.get(fresh, headers=SAME_ORIGIN).status_code == 404
            # and it expires: one minute
            tokens = server.app.state.connect.start_tokens
            try:
                tokens.clock = lambda: time.time() + 61
                assert window.get(fresh, headers=SAME_ORIGIN).status_code == 403
            finally:
                tokens.clock = time.time
            assert window.get(fresh, headers=SAME_ORIGIN).status_code == 303
        assert alice.call("t-refused", call_id)["status"] == "pending"
    finally:
        alice.close()
        bob.close()


def test_only_the_calls_owner_gets_a_ticket(server: ServerThread) -> None:
    """The ticket route checks the bearer's identity and the call like the start link
    does: no token is 401, another principal's call, a call that is no connect request
    and an unknown provider are 404, a call for another provider is 409, a body of
    another shape is 422."""
    alice, bob = Page(server, "alice"), Page(server, "bob")
    try:
        call_id, _ = alice.park("t-owner")
        anonymous = httpx.post(
            f"{server.base_url}/connect/demo/ticket",
            json={"chatId": "t-owner", "toolCallId": call_id},
        )
        assert anonymous.status_code == 401
        assert bob.ticket("t-owner", call_id).status_code == 404
        assert alice.ticket("t-owner", "call_unknown").status_code == 404
        assert (
            alice.http.post(
                "/connect/nowhere/ticket", json={"chatId": "t-owner", "toolCallId": call_id}
            ).status_code
            == 404
        )
        for body in ({"chatId": "t-owner"}, {"chatId": "t-owner", "toolCallId": 7},
                     {"chatId": "t-owner", "toolCallId": call_id, "retry": "yes"},
                     {"chatId": "t-owner", "toolCallId": call_id, "origin": "x"}):  # fmt: skip
            answer = alice.http.post("/connect/demo/ticket", json=body)
            assert answer.status_code == 422, body
        assert alice.ticket("t-owner", call_id, retry=False).status_code == 200
        retry = alice.ticket("t-owner", call_id, retry=True).json()["startUrl"]
        assert retry.endswith("&retry=1")
    finally:
        alice.close()
        bob.close()


def test_a_ticket_flow_finishes_only_in_the_popup_that_started_it(server: ServerThread) -> None:
    """The callback of a ticket flow has no identity to compare: the flow cookie the
    start set in the popup binds it. The callback URL opened in another browser is
    refused (400, the state spent); opened where someone else is signed in, 403."""
    alice = Page(server, "alice")
    try:
        for case in ("elsewhere", "someone else"):
            chat_id = "t-bound-" + case.replace(" ", "-")
            call_id, _ = alice.park(chat_id)
            with popup(server) as window, popup(server) as other:
                started = window.get(alice.start_url(chat_id, call_id), headers=SAME_ORIGIN)
                assert started.status_code == 303, started.text
                callback_url = consent(window, started.headers["location"])
                if case == "elsewhere":
                    assert other.get(callback_url).status_code == 400
                else:
                    bob = {"authorization": f"Bearer {sign(KEY, sub='bob')}"}
                    assert window.get(callback_url, headers=bob).status_code == 403
            assert alice.call(chat_id, call_id)["status"] == "pending"
    finally:
        alice.close()
