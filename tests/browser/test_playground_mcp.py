"""An MCP tool's approval in the playground: Debian chromium driven by Playwright
against a real Parkway (uvicorn, Redis) whose agent offers the shop MCP server's tools
(tests/helpers/mcp/shop.py, on loopback in this process). Waits are on DOM state."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.helpers.browser import Tab
from tests.helpers.mcp import McpServerThread, shop_entry
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


def test_an_mcp_form_card_shows_the_question_and_sends_the_answer(
    browser: Browser, redis_url: str
) -> None:
    """An MCP tool asking for a form: the card shows the server's question and schema,
    its editor is prefilled with the answer's shape; sent, the server gets the answer
    on the retried call and the agent goes on with its result."""
    agent = {
        "template": {"instructions": "shop", "tools": [], "mcps": []},
        "model": {
            "scripted": {
                "turns": [
                    [call("shop__ask_person", {"item": "pan"})],
                    [text("Done: {{result.shop__ask_person.content}}")],
                ]
            }
        },
    }
    with McpServerThread() as shop:
        agent["template"]["mcps"] = [shop_entry(shop.url)]
        with server_thread(redis_url, agent) as server:
            tab = Tab.new_context(browser, server.base_url).open()
            tab.send("ship a pan")
            card = tab.widget("client")
            tab.expect_state(card, "pending")
            expect(card.locator('[data-request="where"]')).to_contain_text("Which warehouse?")
            editor = card.locator('[data-field="output"]')
            expect(editor).to_have_value(
                '{\n  "responses": {\n    "where": {\n      "action": "accept",\n'
                '      "content": {}\n    }\n  }\n}'
            )
            editor.fill('{"responses": {"where": {"action": "accept", "content": {"w": "north"}}}}')
            tab.act(card, "submit")
            expect(tab.messages.last).to_contain_text("pan ships from north")
            tab.assert_clean()
        assert shop.shop.answers == [
            ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
        ]
