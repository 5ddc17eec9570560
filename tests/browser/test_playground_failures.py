"""A message that gets no answer, in a real browser (Debian chromium driven by
Playwright) against a real Parkway (uvicorn, Redis): a provider refusing the request
(the provider double on loopback, through the real SDK), a run that fails on a bug, a
message refused or unreachable before its turn, one over the size limit. The user's
message is never lost: it stays in the chat with the error and Retry, or goes back
in the composer with the reason.

The tests wait on DOM state, never on fixed sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from playwright.sync_api import Browser, Route, expect

from parkway.runner.llm.model import (
    ModelEvent,
    ModelRequest,
    ModelStepEnd,
    ModelTextDelta,
    ModelUsage,
)
from tests.helpers.browser import ServerView, Tab
from tests.helpers.llm_double import Fail, ProviderDouble, Turn
from tests.helpers.model_rig import MODELS
from tests.helpers.support import PUBLISH_TOOL, agent_doc, call, server_thread, text

PUBLISH_AGENT = agent_doc(
    [
        [text("Publishing. "), call("publish", {"title": "Hello"})],
        [text("Result: {{last_tool_results}}")],
    ],
    tools=[PUBLISH_TOOL],
)


# -- the model fails ----------------------------------------------------------------------


def test_a_failed_turn_keeps_the_message_shows_why_and_retry_answers_once_it_recovers(
    browser: Browser, double: ProviderDouble, serve: Any
) -> None:
    """A provider refusing the request used to take the user's message out of the chat
    and leave only a red pill. The message stays, the error says why under it, with
    Retry; a reload still shows the message (the server kept it) and still offers
    Retry; once the provider answers again, Retry gets the answer, and the server's
    history holds the message once."""
    double.script("anthropic", [Fail(401), Fail(401), Turn(text="Back again.")])
    server = serve(MODELS["anthropic"])
    tab = Tab.new_context(browser, server.base_url).open()
    page = tab.page
    tab.send("hello there")
    user = page.get_by_test_id("message-user")
    error = user.get_by_test_id("message-error")
    retry = page.get_by_test_id("retry")
    expect(error).to_contain_text("anthropic: ")
    expect(error).to_contain_text("API key was refused (401)")
    expect(user).to_contain_text("hello there")
    expect(retry).to_be_visible()
    expect(page.get_by_test_id("composer")).to_have_value("")
    expect(page.get_by_test_id("message-assistant")).to_have_count(0)
    chat_id = tab.chat_id
    with ServerView(tab) as view:
        assert [m["role"] for m in view.chat(chat_id)["messages"]] == ["user"]

    page.reload()
    expect(user).to_contain_text("hello there")
    expect(error).to_contain_text("no answer")
    retry.click()  # the provider still refuses: the new error replaces the note
    expect(error).to_contain_text("API key was refused (401)")
    retry.click()
    tab.expect_said("Back again.")
    tab.expect_ready()
    expect(retry).to_have_count(0)
    expect(page.get_by_test_id("message-user")).to_have_count(1)
    with ServerView(tab) as view:
        stored = view.chat(chat_id)["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    page.reload()
    tab.expect_said("Back again.")
    expect(page.get_by_test_id("message-user")).to_have_count(1)
    expect(page.get_by_test_id("message-error")).to_have_count(0)
    assert len(double.requests_for("anthropic")) == 3
    tab.assert_clean()


class BrokenOnce:
    """A model whose first call raises an unexpected error (a bug, not a provider's
    refusal): the run ends before it stored anything, the user's message included."""

    def __init__(self) -> None:
        self.broken = True

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if self.broken:
            self.broken = False
            raise RuntimeError("a bug in a model adapter")
        yield ModelTextDelta("Fixed now.")
        yield ModelStepEnd(finish_reason="stop", usage=ModelUsage(1, 1))


def test_a_turn_that_failed_before_its_message_was_stored_puts_it_back_in_the_composer(
    browser: Browser, redis_url: str
) -> None:
    """When a run fails before the server stored the user's message, the chat does not
    have it: the page says so and puts it back in the composer (never silently drops
    it), with the run's error; sending it again works."""
    with server_thread(redis_url, PUBLISH_AGENT, model=BrokenOnce()) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        page = tab.page
        tab.send("hello there")
        banner = page.get_by_test_id("banner")
        expect(banner).to_contain_text("The run failed (reference")
        expect(banner).to_contain_text("Your message was not kept; it is back in the box below.")
        expect(banner).not_to_contain_text("a bug in a model adapter")
        expect(page.get_by_test_id("composer")).to_have_value("hello there")
        expect(page.get_by_test_id("message-user")).to_have_count(0)
        page.get_by_test_id("composer").press("Enter")
        tab.expect_said("Fixed now.")
        expect(page.get_by_test_id("message-user")).to_have_count(1)
        tab.assert_clean()


# -- refused before its turn --------------------------------------------------------------


def test_a_message_refused_or_unreachable_before_its_turn_stays_and_says_not_sent(
    browser: Browser, redis_url: str
) -> None:
    """A 429 or a network error means the server never took the message: the page says
    it was not sent and keeps it in the composer, so nothing typed is lost; once the
    server answers again, sending it works."""
    refusals = iter(["429", "abort"])

    def refuse(route: Route) -> None:
        if route.request.method != "POST":
            route.continue_()
            return
        kind = next(refusals, None)
        if kind == "429":
            body = {"error": {"code": "rate_limited", "message": "Too many requests."}}
            route.fulfill(status=429, json=body, headers={"retry-after": "1"})
        elif kind == "abort":
            route.abort("connectionrefused")
        else:
            route.continue_()

    with server_thread(redis_url, PUBLISH_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        page = tab.page
        page.route("**/api/chat", refuse)
        composer = page.get_by_test_id("composer")
        banner = page.get_by_test_id("banner")
        tab.send("publish it")
        expect(banner).to_contain_text("Too many requests. Your message was not sent")
        expect(composer).to_have_value("publish it")
        composer.press("Enter")
        expect(banner).to_contain_text("Could not reach the server")
        expect(banner).to_contain_text("Your message was not sent")
        expect(composer).to_have_value("publish it")
        expect(page.get_by_test_id("message-user")).to_have_count(0)
        composer.press("Enter")
        tab.expect_state(tab.widget("approval"), "pending")
        expect(page.get_by_test_id("message-user")).to_have_count(1)
        expect(banner).to_be_hidden()
        tab.assert_clean()


def test_an_oversized_message_is_refused_plainly_and_stays_in_the_composer(
    browser: Browser, redis_url: str
) -> None:
    """A message over the server's limit is not sent: the banner says so in plain words
    (not the raw limit text), the message stays in the composer and out of the
    transcript, and a chat the server never made does not go into the address bar."""
    with server_thread(redis_url, PUBLISH_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        composer = tab.page.get_by_test_id("composer")
        banner = tab.page.get_by_test_id("banner")
        huge = "x" * 100_001
        tab.send(huge)
        expect(banner).to_contain_text("Your message is too long to send")
        expect(banner).to_contain_text("at most 100,000 characters; yours has 100,001")
        expect(banner).not_to_contain_text("exceeds")
        expect(composer).to_have_value(huge)
        expect(tab.page.get_by_test_id("message-user")).to_have_count(0)
        assert "chat=" not in tab.page.url
        expect(tab.page.get_by_test_id("chat-id")).to_have_text("")
        tab.expect_ready()

        tab.send("publish it")  # a chat is made now, and a long message there fails alike
        tab.expect_state(tab.widget("approval"), "pending")
        chat_id = tab.chat_id
        tab.page.get_by_test_id("composer").fill(huge)
        tab.page.get_by_test_id("composer").press("Enter")
        tab.page.get_by_test_id("supersede-confirm").locator('[data-action="send-anyway"]').click()
        expect(banner).to_contain_text("Your message is too long to send")
        expect(composer).to_have_value(huge)
        expect(tab.page.get_by_test_id("message-user")).to_have_count(1)
        assert tab.chat_id == chat_id
        tab.expect_state(tab.widget("approval"), "pending")  # nothing was cancelled
        tab.assert_clean()
