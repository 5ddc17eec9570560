"""An MCP tool's approval in the playground: Debian chromium driven by Playwright
against a real Parkway (uvicorn, Redis) whose agent offers the shop MCP server's tools
(tests/helpers/mcp/shop.py, on loopback in this process). Waits are on DOM state."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from playwright.sync_api import Browser, Route, expect

from tests.helpers.browser import Tab, screenshot
from tests.helpers.mcp import McpServerThread, shop_entry
from tests.helpers.mcp.shop import HOSTILE
from tests.helpers.support import call, server_thread, text


def test_an_mcp_approval_card_shows_the_server_tool_and_its_unverified_hints(
    browser: Browser, redis_url: str
) -> None:
    """The card names the server and the tool and words the server's annotations as
    its own unverified claims; approved, the tool runs once and the agent goes on."""
    agent = {
        "template": {"instructions": "shop", "tools": [], "mcps": []},
        "model": {
            "scripted": {
                "turns": [
                    [text("Cancelling. "), call("shop__cancel_order", {"order_id": "G-8"})],
                    [text("Done: {{result.shop__cancel_order.result}}")],
                ]
            }
        },
    }
    with McpServerThread() as shop:
        agent["template"]["mcps"] = [shop_entry(shop.url)]
        with server_thread(redis_url, agent) as server:
            tab = Tab.new_context(browser, server.base_url).open()
            tab.send("cancel G-8")
            approval = tab.widget("approval")
            tab.expect_state(approval, "pending")
            expect(approval.get_by_test_id("mcp-line")).to_have_text(
                "MCP server shop, tool cancel_order: the server says it may destroy data "
                "(unverified)"
            )
            assert shop.shop.executions == []
            tab.act(approval, "approve")
            tab.expect_state(approval, "approved")
            tab.expect_said("Done: order G-8 cancelled")
            tab.assert_clean()
        assert shop.shop.executions == [("cancel_order", {"order_id": "G-8"})]


def shop_agent(*turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "template": {"instructions": "shop", "tools": [], "mcps": []},
        "model": {"scripted": {"turns": list(turns)}},
    }


@contextmanager
def shop_chat(
    browser: Browser, redis_url: str, agent: dict[str, Any], *, legacy: bool = False, **entry: Any
) -> Iterator[Any]:
    """The shop MCP server (``legacy``: of the ``initialize`` era), a Parkway whose agent
    uses it (``entry``: more of its ``mcps`` entry), and a playground tab."""
    with McpServerThread(legacy=legacy) as shop:
        agent["template"]["mcps"] = [shop_entry(shop.url, **entry)]
        with server_thread(redis_url, agent) as server:
            yield shop, server, Tab.new_context(browser, server.base_url).open()


def test_an_mcp_form_is_a_real_form_checked_reviewed_and_sent(
    browser: Browser, redis_url: str
) -> None:
    """The card builds one section per request from the server's schemas: labelled
    controls (text, email, number, checkbox, select, checkboxes, date), defaults
    filled. A bad email and an out-of-range quantity are refused on the page with the
    field marked and nothing sent; fixed (the second request declined on its own, Enter
    in a field to review), the answer is shown for review, can be edited, and sent: the
    server receives the typed content and the decline on the retried call, the agent
    goes on with the tool's result, and the card shows what was answered."""
    agent = shop_agent(
        [call("shop__ask_details", {"item": "kettle"})],
        [text("Done: {{result.shop__ask_details.content}}")],
    )
    with shop_chat(browser, redis_url, agent) as (shop, _server, tab):
        tab.send("order a kettle")
        card = tab.widget("mcp-input")
        tab.expect_state(card, "pending")
        contact = card.locator('[data-request="contact"]')
        expect(contact.locator("legend").first).to_contain_text("Where should the kettle go?")
        expect(card.locator('[data-request="note"]')).to_contain_text("Anything else?")
        expect(contact.get_by_label("Name")).to_have_value("Ada")
        expect(contact.get_by_label("Quantity")).to_have_value("1")
        expect(contact.get_by_label("Gift wrap")).not_to_be_checked()
        expect(contact.get_by_label("Email")).to_have_attribute("type", "email")
        expect(contact.get_by_label("Delivery day")).to_have_attribute("type", "date")
        expect(contact.get_by_label("Size")).to_contain_text("Medium")
        email = contact.get_by_label("Email")
        email.fill("not-an-email")
        contact.get_by_label("Quantity").fill("9")
        contact.get_by_label("Website").fill("shop dot example")
        tab.act(card, "review")
        errors = contact.get_by_test_id("field-error")
        expect(errors.filter(has_text="email address")).to_be_visible()
        expect(errors.filter(has_text="at most 5")).to_be_visible()
        expect(errors.filter(has_text="required")).to_be_visible()  # Size
        expect(errors.filter(has_text="full address")).to_be_visible()
        expect(email).to_have_attribute("aria-invalid", "true")
        expect(email).to_be_focused()
        expect(card.get_by_test_id("widget-error")).to_contain_text("4 answers need fixing")
        expect(card.locator('[data-action="submit"]')).to_have_count(0)
        screenshot(tab.page, "mcp-form-errors")
        assert shop.shop.answers == []

        email.fill("ada@example.com")
        contact.get_by_label("Website").fill("")
        contact.get_by_label("Quantity").fill("2")
        contact.get_by_label("Gift wrap").check()
        contact.get_by_label("Size").select_option(label="Large")
        contact.get_by_label("Colour").select_option(label="Blue")
        contact.get_by_label("bag").check()
        contact.get_by_label("Delivery day").fill("2026-12-24")
        note = card.locator('[data-request="note"]')
        note.locator('[data-action="decline-one"]').click()
        expect(note).to_contain_text("You decline this request")
        contact.get_by_label("Quantity").press("Enter")  # Enter reviews, as the button does
        review = contact.locator("dl")
        expect(review.locator('[data-name="email"]')).to_have_text("ada@example.com")
        expect(review.locator('[data-name="size"]')).to_have_text("Large")
        expect(review.locator('[data-name="gift"]')).to_have_text("Yes")
        expect(review.locator('[data-name="extras"]')).to_have_text("bag")
        tab.act(card, "edit")
        contact.get_by_label("Quantity").fill("3")
        tab.act(card, "review")
        expect(review.locator('[data-name="quantity"]')).to_have_text("3")
        screenshot(tab.page, "mcp-form-review")
        tab.act(card, "submit")
        tab.expect_said("Done: ")
        tab.expect_said("3 kettle for ada@example.com")
        tab.expect_state(card, "answered")
        expect(card.locator('[data-request="contact"] [data-name="email"]')).to_have_text(
            "ada@example.com"
        )
        expect(card.locator('[data-request="note"]')).to_contain_text("Declined.")
        tab.assert_clean()
        assert shop.shop.answers == [
            (
                "kettle",
                {
                    "contact": {
                        "action": "accept",
                        "content": {
                            "email": "ada@example.com",
                            "name": "Ada",
                            "quantity": 3,
                            "gift": True,
                            "size": "l",
                            "colour": "blue",
                            "extras": ["bag"],
                            "day": "2026-12-24",
                        },
                    },
                    "note": {"action": "decline"},
                },
                "details-kettle",
            )
        ]


def test_server_text_in_an_mcp_form_is_shown_as_text_never_run(
    browser: Browser, redis_url: str
) -> None:
    """The message and the field titles are the MCP server's, untrusted: markup in them
    is shown literally, no element is made from it and no script of it runs."""
    agent = shop_agent([call("shop__ask_details", {"item": "kettle"})], [text("ok")])
    with shop_chat(browser, redis_url, agent) as (_shop, _server, tab):
        tab.send("order a kettle")
        card = tab.widget("mcp-input")
        tab.expect_state(card, "pending")
        contact = card.locator('[data-request="contact"]')
        expect(contact.locator("legend").first).to_contain_text(f"<b>{HOSTILE}</b>")
        expect(contact.locator("label").filter(has_text="Email")).to_contain_text(HOSTILE)
        expect(card.locator("img")).to_have_count(0)
        expect(card.locator("b")).to_have_count(0)
        assert tab.page.evaluate("() => window.__pwned === undefined")
        tab.assert_clean()


def test_an_mcp_form_declined_and_cancelled_reach_the_server_as_such(
    browser: Browser, redis_url: str
) -> None:
    """Decline is the person's explicit no, Cancel a dismissal: each settles the call
    and the server, on its retried call, reads that action for its request (and says
    what the model reads). Two chats, one each."""
    agent = shop_agent(
        [call("shop__ask_person", {"item": "pan"})],
        [text("Said: {{result.shop__ask_person.content}}")],
    )
    with shop_chat(browser, redis_url, agent) as (shop, server, tab):
        tab.send("ship a pan")
        card = tab.widget("mcp-input")
        tab.expect_state(card, "pending")
        expect(card.get_by_label("w")).to_be_visible()
        tab.act(card, "decline")
        tab.expect_state(card, "declined")
        tab.expect_said("not shipped: the person chose decline")
        other = Tab.new_context(browser, server.base_url).open()
        other.send("ship a pan")
        second = other.widget("mcp-input")
        other.expect_state(second, "pending")
        other.act(second, "cancel")
        other.expect_state(second, "ended")
        other.expect_said("not shipped: the person chose cancel")
        tab.assert_clean()
        other.assert_clean()
        assert [a[1] for a in shop.shop.answers] == [
            {"where": {"action": "decline"}},
            {"where": {"action": "cancel"}},
        ]


def test_one_request_of_several_can_be_cancelled_alone_and_answered_after_all(
    browser: Browser, redis_url: str
) -> None:
    """In a call with two requests, "Cancel this one" leaves that one unanswered (its
    required fields are not checked), "Answer it after all" brings its form back, and
    cancelled again it reaches the server as cancel beside the other's answer."""
    agent = shop_agent(
        [call("shop__ask_details", {"item": "mug"})],
        [text("Done: {{result.shop__ask_details.content}}")],
    )
    with shop_chat(browser, redis_url, agent) as (shop, _server, tab):
        tab.send("order a mug")
        card = tab.widget("mcp-input")
        tab.expect_state(card, "pending")
        contact = card.locator('[data-request="contact"]')
        contact.locator('[data-action="cancel-one"]').click()
        expect(contact).to_contain_text("the server is told it was cancelled")
        expect(contact).to_have_attribute("data-skipped", "cancel")
        contact.locator('[data-action="answer-one"]').click()
        expect(contact.get_by_label("Name")).to_be_visible()
        contact.locator('[data-action="cancel-one"]').click()
        card.locator('[data-request="note"]').get_by_label("Comment").fill("fragile")
        tab.act(card, "review")
        tab.act(card, "submit")
        tab.expect_said("Done: ")
        tab.expect_said("no details: the person chose cancel")
        tab.expect_state(card, "answered")
        expect(card.locator('[data-request="contact"]')).to_contain_text("Cancelled.")
        tab.assert_clean()
    assert shop.shop.answers == [
        ("mug", {"contact": {"action": "cancel"},
                 "note": {"action": "accept", "content": {"comment": "fragile"}}}, "details-mug"),
    ]  # fmt: skip


def test_an_mcp_link_card_names_the_host_opens_a_popup_then_accepts(
    browser: Browser, redis_url: str
) -> None:
    """A URL elicitation: the card names the host the link leads to; "I finished" is
    offered once the page was opened in a popup; then the server is called again and
    the agent goes on with its result."""
    agent = shop_agent([call("shop__ask_url")], [text("Said: {{result.shop__ask_url.content}}")])
    with shop_chat(browser, redis_url, agent) as (shop, _server, tab):

        def stub(route: Route) -> None:
            route.fulfill(status=200, content_type="text/html", body="<title>authorise</title>ok")

        tab.context.route("https://shop.example/**", stub)
        tab.send("authorise")
        card = tab.widget("mcp-input")
        tab.expect_state(card, "pending")
        expect(card).to_contain_text("Authorise the shop")
        expect(card.get_by_test_id("mcp-host")).to_have_text("shop.example")
        expect(card.locator('[data-action="finished"]')).to_be_disabled()
        with tab.page.expect_popup() as opened:
            tab.act(card, "open")
        popup = opened.value
        popup.wait_for_load_state()
        assert popup.url == "https://shop.example/authorise"
        popup.close()
        expect(card.locator('[data-action="finished"]')).to_be_enabled()
        tab.act(card, "finished")
        tab.expect_said("Said: ")
        tab.expect_said("authorised")
        tab.assert_clean()
        assert shop.shop.url_calls == 2


def test_a_link_the_server_completes_updates_the_open_page_without_a_click(
    browser: Browser, redis_url: str
) -> None:
    """A 2025-11-25 server says the link was visited (notifications/elicitation/complete):
    the page that shows the card, untouched, sees the call answered and the agent's
    continuation, with no reload and no "I finished"."""
    agent = shop_agent([call("shop__ask_url")], [text("Said: {{result.shop__ask_url.content}}")])
    with shop_chat(browser, redis_url, agent, legacy=True) as (shop, _server, tab):
        tab.send("authorise")
        card = tab.widget("mcp-input")
        tab.expect_state(card, "pending")
        assert shop.shop.url_session is not None
        session, loop = shop.shop.url_session  # the server's own loop, in its thread
        asyncio.run_coroutine_threadsafe(session.send_elicit_complete("e-1"), loop).result(10)
        tab.expect_said("authorised")
        tab.expect_state(card, "answered")
        tab.assert_clean()
        assert shop.shop.url_calls == 2


def test_an_mcp_form_comes_back_after_a_reload_and_can_be_answered(
    browser: Browser, redis_url: str
) -> None:
    """The card is built from the call's descriptor alone, so a reload (the chat's view
    from the server) shows the same form, which is then answered as usual."""
    agent = shop_agent(
        [call("shop__ask_person", {"item": "pan"})],
        [text("Said: {{result.shop__ask_person.content}}")],
    )
    with shop_chat(browser, redis_url, agent) as (shop, _server, tab):
        tab.send("ship a pan")
        tab.expect_state(tab.widget("mcp-input"), "pending")
        tab.page.reload()
        card = tab.widget("mcp-input")
        tab.expect_state(card, "pending")
        expect(card.locator('[data-request="where"] legend')).to_have_text("Which warehouse?")
        field = card.get_by_label("w")
        expect(field).to_have_attribute("aria-required", "true")
        field.fill("north")
        field.press("Enter")
        expect(card.locator('dd[data-name="w"]')).to_have_text("north")
        tab.act(card, "submit")
        tab.expect_said("pan ships from north")
        tab.assert_clean()
        assert shop.shop.answers == [
            ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
        ]


def test_a_live_question_is_a_form_under_its_running_call_answered_in_time(
    browser: Browser, redis_url: str
) -> None:
    """An older server's question during its tool shows under the running call: the
    server's message, a checked form, the seconds left. An empty required field is
    refused on the page; filled and sent, the server gets the answer, the tool's result
    reaches the agent and the card says it was answered."""
    agent = shop_agent(
        [call("shop__ask_live", {"item": "kettle"})],
        [text("Done: {{result.shop__ask_live.result}}")],
    )
    with shop_chat(browser, redis_url, agent, legacy=True) as (shop, _server, tab):
        tab.send("order a kettle")
        card = tab.page.locator('[data-kind="live-question"]')
        expect(card).to_have_attribute("data-state", "open")
        expect(card.locator(".mcp-message")).to_have_text("Where should the kettle ship from?")
        expect(card.get_by_test_id("live-deadline")).to_contain_text("s left")
        tab.act(card, "send")
        expect(card.get_by_test_id("field-error")).to_contain_text("required")
        assert shop.shop.live == []
        card.get_by_label("Warehouse").fill("north")
        screenshot(tab.page, "live-question")
        tab.act(card, "send")
        tab.expect_said("Done: kettle ships from north")
        expect(card).to_have_attribute("data-state", "answered")
        expect(card.get_by_test_id("live-result")).to_have_text("Answer sent ✓")
        tab.assert_clean()
    assert shop.shop.live == [("accept", {"warehouse": "north"})]


def test_a_live_question_nobody_answers_ends_and_the_tool_goes_on(
    browser: Browser, redis_url: str
) -> None:
    """Unanswered within the entry's live_input_s, the card says the wait ended (the
    server was told cancel) and the agent goes on with the tool's own result."""
    agent = shop_agent(
        [call("shop__ask_live", {"item": "pot"})],
        [text("Done: {{result.shop__ask_live.result}}")],
    )
    with shop_chat(browser, redis_url, agent, legacy=True, live_input_s=1) as (shop, _, tab):
        tab.send("order a pot")
        card = tab.page.locator('[data-kind="live-question"]')
        expect(card).to_be_attached()
        tab.expect_said("Done: no warehouse (cancel)")
        expect(card).to_have_attribute("data-state", "expired")
        expect(card.get_by_test_id("live-result")).to_contain_text("The wait ended")
        expect(card.locator('[data-action="send"]')).to_have_count(0)
        tab.assert_clean()
    assert shop.shop.live == [("cancel", None)]


def test_a_live_question_comes_back_after_a_reload_and_can_be_answered(
    browser: Browser, redis_url: str
) -> None:
    """Reloaded while the call waits, the page follows the running run and shows the
    question again; answered from there, the tool's result arrives."""
    agent = shop_agent(
        [call("shop__ask_live", {"item": "lamp"})],
        [text("Done: {{result.shop__ask_live.result}}")],
    )
    with shop_chat(browser, redis_url, agent, legacy=True) as (shop, _server, tab):
        tab.send("order a lamp")
        expect(tab.page.locator('[data-kind="live-question"]')).to_have_attribute(
            "data-state", "open"
        )
        tab.page.reload()
        card = tab.page.locator('[data-kind="live-question"]')
        expect(card).to_have_attribute("data-state", "open")
        card.get_by_label("Warehouse").fill("east")
        tab.act(card, "send")
        tab.expect_said("Done: lamp ships from east")
        expect(card).to_have_attribute("data-state", "answered")
        tab.assert_clean()
    assert shop.shop.live == [("accept", {"warehouse": "east"})]
