"""The connect call's other ends, over HTTP against a real oidc-provider on loopback:
a cancel, a timeout, a retry, an existing connection answering a new request, and the
races between them (§16, §18, §24, §26 of shared/reference/oauth-security.md §5). The
server settles each call exactly once; a later callback never changes the outcome.

The rig is this folder's (``conftest.py``, ``tests/helpers/connect_rig.py``).
"""

from __future__ import annotations

import concurrent.futures
import shutil
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner.engine.runner import Runner
from parkway.runner.engine.sweeper import Sweeper
from tests.helpers.connect_rig import (
    Browser,
    Rig,
    authorize,
    code_requests,
    on_redis,
    outcome_of,
    page_data,
)

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(shutil.which("node") is None, reason="the `node` executable is not on PATH"),
]


def connect(browser: Browser, chat: str) -> tuple[str, Any]:
    """Park a call, run the whole flow; the call id and the callback response."""
    call = browser.park(chat)
    callback = browser.get(authorize(browser, browser.start("acme", chat, call)))
    return call, callback


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
        from parkway.runner.agent.template import load_template
        from parkway.runner.llm.scripted import ScriptedModel
        from tests.helpers.connect_rig import CONNECT_AGENT

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
    """The browser may report only that a connect failed."""
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
