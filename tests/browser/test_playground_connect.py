"""The connect widget in a real browser: sign-in through a provider's popup, two flows in
one turn, completion by polling when the popup is severed, messages from other origins
ignored, and a closed popup checked with the server."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.helpers.browser import (
    OtherOrigin,
    ServerView,
    Tab,
    provider_rig,
    screenshot,
    sign_in_at_provider,
)
from tests.helpers.support import (
    CONNECT_EMBED,
    agent_doc,
    call,
    server_thread,
    text,
)

CONNECT_AGENT = agent_doc(
    [
        [
            text("I need GitHub first. "),
            call("request_connection", {"provider": "github", "scopes": ["repo"]}),
        ],
        [text("Connection: {{last_tool_results}}")],
    ],
    tools=[CONNECT_EMBED],
)


# -- the connect widget ---------------------------------------------------------------


def test_connect_signs_in_through_the_provider_popup_and_continues_the_chat(
    browser: Browser, redis_url: str
) -> None:
    """The whole flow: Connect opens the provider in a popup, the user signs in, the
    callback settles the call and posts a hint; the widget confirms with the server,
    shows the account, and continues the chat with exactly the recorded result."""
    with provider_rig(redis_url) as rig:
        tab = Tab.new_context(browser, rig.base_url).open()
        tab.send("connect me to acme")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        sign_in_at_provider(opened.value)
        tab.expect_state(widget, "connected")
        expect(widget).to_contain_text("connected ✓")
        expect(widget).to_have_attribute("data-hints", "1")
        tab.expect_said('Connection result: [{"result":{"account":')
        tab.expect_said('"connected":true')
        tab.expect_ready()
        screenshot(tab.page, "connect-connected")
        with ServerView(tab) as server_view:
            recorded = server_view.call(tab.chat_id, Tab.call_id(widget))["outcome"]
        assert recorded["outcome"] == "output" and recorded["output"]["connected"] is True
        tab.assert_clean()


def test_two_connect_flows_live_in_one_turn_each_with_its_own_popup(
    browser: Browser, redis_url: str
) -> None:
    """Several connect flows in one step: each widget has its own popup and listener,
    a hint from one popup never moves the other widget, and the chat continues once
    both calls are settled."""
    with provider_rig(redis_url) as rig:
        tab = Tab.new_context(browser, rig.base_url).open()
        tab.send("connect me to acme and other")
        first, second = tab.widget("connect", 0), tab.widget("connect", 1)
        tab.expect_state(first, "pending")
        tab.expect_state(second, "pending")
        with tab.page.expect_popup() as opened_first:
            tab.act(first, "connect")
        with tab.page.expect_popup() as opened_second:
            tab.act(second, "connect")
        tab.expect_state(first, "connecting")
        tab.expect_state(second, "connecting")
        sign_in_at_provider(opened_second.value)
        tab.expect_state(second, "connected")
        tab.expect_state(first, "connecting")  # the other popup's success is not its own
        sign_in_at_provider(opened_first.value)
        tab.expect_state(first, "connected")
        tab.expect_said('"provider":"acme"')
        tab.expect_said('"provider":"other"')
        tab.expect_ready()
        tab.assert_clean()


def test_connect_completes_by_polling_when_the_provider_severs_the_popup(
    browser: Browser, redis_url: str
) -> None:
    """A provider sending COOP cuts the popup off: the page sees it "closed" and no
    message can come back. The widget must not cancel; it keeps asking the server,
    which the callback settled, and completes."""
    with provider_rig(redis_url, coop=True) as rig:
        tab = Tab.new_context(browser, rig.base_url).open()
        tab.send("connect me to acme")
        widget = tab.widget("connect")
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        popup = opened.value
        popup.locator('#login input[name="login"]').wait_for()
        tab.expect_state(widget, "connecting")
        sign_in_at_provider(popup)
        tab.expect_state(widget, "connected")
        expect(widget).to_have_attribute("data-hints", "0")  # nothing came by postMessage
        tab.expect_said('"connected":true')
        tab.assert_clean()


def test_connect_widget_ignores_messages_from_other_origins_windows_and_calls(
    browser: Browser, redis_url: str
) -> None:
    """A fake "connected" from another origin (even from inside the widget's own
    popup), from another window, or naming another call changes nothing; the one
    message that passes every check is only a hint, and the server's "pending" wins."""
    with server_thread(redis_url, CONNECT_AGENT) as server, OtherOrigin() as other:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("connect me")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        call_id = Tab.call_id(widget)
        fake = {
            "type": "parkway:connect",
            "chatId": tab.chat_id,
            "toolCallId": call_id,
            "outcome": "connected",
        }
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        popup = opened.value
        tab.expect_state(widget, "connecting")
        tab.expect_waiting()
        screenshot(tab.page, "connect-connecting")

        popup.goto(other.url)  # the popup, now on another origin
        popup.evaluate("m => window.opener.postMessage(m, '*')", fake)
        tab.page.evaluate("m => window.postMessage(m, location.origin)", fake)  # not the popup
        popup.goto(f"{server.base_url}/healthz")  # the API origin again
        popup.evaluate(
            "m => window.opener.postMessage({...m, toolCallId: 'call_other'}, location.origin)",
            fake,
        )
        popup.evaluate(
            "m => window.opener.postMessage({...m, chatId: 'chat_other'}, location.origin)", fake
        )
        popup.evaluate("m => window.opener.postMessage(m, location.origin)", fake)
        expect(widget).to_have_attribute("data-hints", "1")
        tab.expect_state(widget, "connecting")
        with ServerView(tab) as server_view:
            assert server_view.call(tab.chat_id, call_id)["status"] == "pending"

        tab.act(widget, "cancel")
        tab.expect_state(widget, "failed")
        expect(widget).to_contain_text("Connection not completed")
        expect(widget.locator('[data-action="retry"]')).to_be_visible()
        tab.expect_said('Connection: [{"result":{"connected":false,"reason":"cancelled"')
        tab.expect_ready()
        screenshot(tab.page, "connect-failed")
        tab.assert_clean()


def test_closed_popup_is_checked_with_the_server_and_never_cancels_by_itself(
    browser: Browser, redis_url: str
) -> None:
    """popup.closed also reads true when a provider's COOP severs the popup while the
    user is still signing in: the widget keeps asking the server, and only after a
    grace period asks the user, leaving the call pending until they cancel."""
    with server_thread(redis_url, CONNECT_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("connect me")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        opened.value.close()
        expect(widget.get_by_test_id("popup-closed-hint")).to_be_visible()
        tab.expect_state(widget, "connecting")
        with ServerView(tab) as server_view:
            assert server_view.call(tab.chat_id, Tab.call_id(widget))["status"] == "pending"
        tab.act(widget, "cancel")
        tab.expect_state(widget, "failed")
        tab.expect_said('Connection: [{"result":{"connected":false,"reason":"cancelled"')
        tab.assert_clean()
