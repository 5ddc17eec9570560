"""The playground's "Decisions" list in a real browser (Debian chromium, Playwright)
against a real Parkway: the chat's audit trail, as its owner sees it."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.helpers.browser import ServerView, Tab
from tests.helpers.support import PUBLISH_TOOL, agent_doc, call, server_thread, text


def expect_listed(tab: Tab, call_id: str) -> None:
    """The Decisions list shows one decision: this tab's approval of ``call_id``."""
    decisions = tab.page.get_by_test_id("decisions")
    expect(decisions).to_be_visible()
    item = decisions.get_by_test_id("decision")
    expect(item).to_have_count(1)
    expect(item).to_have_attribute("data-call", call_id)
    expect(item.locator(".decision-who")).to_have_text("you")
    expect(item.locator(".decision-outcome")).to_have_text("approved")
    expect(item.locator(".decision-tool")).to_have_text("publish")
    expect(item.locator(".decision-source")).to_have_text("via browser")


def test_an_approval_made_in_the_browser_is_listed_among_the_decisions(
    browser: Browser, redis_url: str
) -> None:
    """Approving in the page records who decided what: the list appears once the call
    is settled (no reload), says "you", the outcome, the tool and the source, comes back
    after a reload, and shows nothing to another session opening the same chat."""
    agent = agent_doc(
        [
            [text("Publishing. "), call("publish", {"title": "Hello"})],
            [text("Result: {{last_tool_results}}")],
        ],
        tools=[PUBLISH_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("publish it")
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        expect(tab.page.get_by_test_id("decisions")).to_be_hidden()  # nothing decided yet

        tab.act(approval, "approve")
        tab.expect_state(approval, "approved")
        tab.expect_said("Result: ")
        call_id = Tab.call_id(approval)
        expect_listed(tab, call_id)
        tab.page.reload()  # rebuilt from the server
        expect(tab.page.get_by_test_id("composer")).to_be_visible()
        expect_listed(tab, call_id)

        with ServerView(tab) as view:
            audit = view.http.get(f"/api/chats/{tab.chat_id}/audit").json()
        [entry] = audit["entries"]
        assert (entry["toolCallId"], entry["outcome"]) == (call_id, "approved")
        assert entry["byYou"] is True and entry["source"] == "browser"

        other = Tab.new_context(browser, server.base_url).open(tab.chat_id)
        expect(other.page.get_by_test_id("banner")).to_be_visible()  # not their chat
        expect(other.page.get_by_test_id("decisions")).to_be_hidden()
        tab.assert_clean()
        other.assert_clean()
