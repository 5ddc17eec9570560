"""Approvals by someone other than the requester, in the playground (docs/security.md,
"Approvals by others"): Debian chromium driven by Playwright against a real Parkway
(uvicorn, Redis) running a scripted agent whose tool needs the ``approver`` role.

Two browser contexts are two principals. The requester's is an ordinary session (the
page makes it); the approver's carries a session the test issues, with the server's key,
for a principal the server's ``approvers`` setting names, as an operator would name an
approver. The tests wait on DOM state, never on fixed sleeps.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager

import httpx
from playwright.sync_api import Browser, expect

from parkway.runner.canonical import canonical_json
from parkway.runner.demo import SALES_SUMMARY_CODE, get_sales
from parkway.transport.api.sessions import SessionAuthenticator
from tests.helpers import tools
from tests.helpers.browser import VIEWPORT, ServerView, Tab, console_errors
from tests.helpers.support import (
    PUBLISH_TOOL,
    TEST_SECRET,
    ServerThread,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

APPROVER = "usr_playground-approver"
OTHER_APPROVER = "usr_second-approver"
FOUR_EYES = {**PUBLISH_TOOL, "approvers": "approver", "self_approval": False}
AGENT = agent_doc(
    [
        [text("Publishing. "), call("publish", {"title": "{{last_user_text}}"})],
        [text("Result: {{last_tool_results}}")],
    ],
    tools=[FOUR_EYES],
)


def _server(redis_url: str) -> AbstractContextManager[ServerThread]:
    return server_thread(redis_url, AGENT, approvers=(APPROVER, OTHER_APPROVER))


def _approver_tab(browser: Browser, server: ServerThread) -> Tab:
    """A tab in its own context whose session is the named approver's."""
    sessions = SessionAuthenticator(TEST_SECRET)
    _, token = sessions.issue(APPROVER)
    context = browser.new_context(viewport=VIEWPORT)
    context.add_cookies([{"name": sessions.cookie_name, "value": token, "url": server.base_url}])
    return Tab(context, server.base_url)


def _bearer(server: ServerThread, principal: str | None = None) -> httpx.Client:
    """An HTTP client with a session of its own (``principal``, or a new one)."""
    _, token = SessionAuthenticator(TEST_SECRET).issue(principal)
    return httpx.Client(
        base_url=server.base_url, headers={"authorization": f"Bearer {token}"}, timeout=15
    )


def test_an_approver_approves_from_the_approvals_view_and_the_requesters_chat_goes_on(
    browser: Browser, redis_url: str
) -> None:
    """The requester's card says it waits for an approver and offers no buttons (the
    server would refuse their answer); the approver's page offers an Approvals view
    listing the call (tool, requester, chat, input), opens it as the same card and
    approves it by keyboard; the item leaves the list, the requester's chat goes on by
    itself and its card names who approved. Neither page logs an error."""
    with _server(redis_url) as server:
        a = Tab.new_context(browser, server.base_url).open()
        a_errors = console_errors(a.page)
        a.send("Hello")
        card = a.widget("approval")
        a.expect_state(card, "awaiting")
        expect(card).to_have_attribute("aria-label", "Waiting for an approver: publish")
        expect(card.get_by_test_id("awaiting-approver")).to_contain_text(
            "Someone with the “approver” role decides this, not you."
        )
        expect(card.locator('[data-action="approve"], [data-action="deny"]')).to_have_count(0)
        call_id = Tab.call_id(card)
        chat_id = a.chat_id
        chip = a.page.get_by_test_id(f"tool-{call_id}").locator(":scope > summary .badge")
        expect(chip).to_have_text("waiting for an approver")
        # the requester has nothing to approve: no Approvals button on their page
        expect(a.page.get_by_test_id("approvals-toggle")).to_be_hidden()
        with ServerView(a) as requester:
            requested_by = requester.chat(chat_id)["calls"][0]["requestedBy"]

        b = _approver_tab(browser, server).open()
        b_errors = console_errors(b.page)
        toggle = b.page.get_by_test_id("approvals-toggle")
        expect(toggle).to_be_visible()
        expect(toggle).to_have_attribute("aria-label", "Approvals: 1 waiting for you")
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(b.page.get_by_test_id("composer")).to_be_hidden()  # the view replaces the chat
        items = b.page.get_by_test_id("approval-item")
        expect(items).to_have_count(1)
        item = items.first
        expect(item.locator('[data-field="requested-by"]')).to_have_text(f"from {requested_by}")
        expect(item.locator('[data-field="chat"]')).to_have_text(chat_id)
        expect(item.locator('[data-field="preview"]')).to_have_text('{"title":"Hello"}')
        review = item.get_by_role("button", name=f"Review publish requested by {requested_by}")
        review.focus()
        b.page.keyboard.press("Enter")
        opened = b.widget_of(call_id)
        b.expect_state(opened, "pending")
        expect(opened.locator('pre[aria-label="Input"]')).to_contain_text('"title": "Hello"')
        approve = opened.get_by_role("button", name="Approve")
        approve.focus()
        b.page.keyboard.press("Enter")
        b.expect_state(opened, "approved")
        expect(opened.get_by_test_id("approved-line")).to_have_text("Approved ✓")
        expect(items).to_have_count(0)
        expect(b.page.get_by_test_id("approvals-empty")).to_be_visible()

        # the requester's page notices, goes on, and says who approved
        a.expect_state(card, "approved")
        expect(card.get_by_test_id("approved-line")).to_have_text(f"Approved by {APPROVER} ✓")
        a.expect_said('Result: [{"result":{"published":"Hello"},"tool":"publish"}]')
        a.expect_ready()
        assert len([e for e in tools.EXECUTIONS if e["chat"] == chat_id]) == 1

        # closing the view gives the approver their chat back
        b.page.get_by_role("button", name="Back to the chat").click()
        expect(b.page.get_by_test_id("composer")).to_be_visible()
        expect(toggle).to_be_hidden()  # nothing left to approve
        assert a_errors == [] and b_errors == []
        a.assert_clean()
        b.assert_clean()


def test_the_approvals_view_pages_newest_first_and_shows_who_won_a_conflict(
    browser: Browser, redis_url: str
) -> None:
    """Past a page of approvals, More reads the next page with the cursor; the list
    is newest first. When another approver answers first, this approver's answer is
    a 409: the card shows the winner's outcome and who decided, and the item leaves
    the list."""
    with _server(redis_url) as server, _bearer(server) as requester:
        titles = [f"Report {n}" for n in range(21)]  # one more than a page
        for n, title in enumerate(titles):
            body = {"id": f"chat-{n}", "messages": [user_message(title)]}
            response = requester.post("/api/chat", json={**body, "trigger": "submit-message"})
            assert response.status_code == 200, response.text
            assert any(c["type"] == "tool-approval-request" for c in sse_chunks(response.text))

        b = _approver_tab(browser, server).open()
        toggle = b.page.get_by_test_id("approvals-toggle")
        expect(toggle).to_have_attribute("aria-label", "Approvals: 20 or more waiting for you")
        toggle.click()
        previews = b.page.get_by_test_id("approval-item").locator('[data-field="preview"]')
        expect(previews).to_have_count(20)
        expect(previews.first).to_have_text('{"title":"Report 20"}')
        more = b.page.get_by_role("button", name="Show more approvals")
        more.click()
        expect(previews).to_have_count(21)
        expect(previews.last).to_have_text('{"title":"Report 0"}')
        expect(more).to_be_hidden()

        newest = b.page.locator('[data-testid="approval-item"][data-chat="chat-20"]')
        call_id = newest.get_attribute("data-call")
        newest.get_by_role("button", name="Review").click()
        opened = b.widget_of(str(call_id))
        b.expect_state(opened, "pending")
        with _bearer(server, OTHER_APPROVER) as other:
            won = other.post(
                f"/api/chats/chat-20/calls/{call_id}", json={"outcome": "denied", "reason": "no"}
            )
            assert won.status_code == 200, won.text
        opened.get_by_role("button", name="Approve").click()
        b.expect_state(opened, "denied")
        expect(opened.get_by_test_id("widget-notice")).to_have_text(
            f"Someone else answered first: denied by {OTHER_APPROVER}. "
            "Your answer was not recorded."
        )
        expect(opened.get_by_test_id("denied-line")).to_have_text(f"Denied by {OTHER_APPROVER}: no")
        expect(newest).to_have_count(0)
        expect(previews).to_have_count(20)
        b.assert_clean()


def test_the_approvals_view_lines_up_its_list_with_its_heading_and_the_opened_card(
    browser: Browser, redis_url: str
) -> None:
    """On a wide screen the view's column is centred, and the list of approvals used to
    stay at the left edge while its heading and the card opened below it were centred.
    Every part of the view shares one column: the same left and right edges."""
    with _server(redis_url) as server, _bearer(server) as requester:
        body = {"id": "wide-1", "messages": [user_message("Hello")], "trigger": "submit-message"}
        assert requester.post("/api/chat", json=body).status_code == 200
        b = _approver_tab(browser, server)
        b.page.set_viewport_size({"width": 1500, "height": 800})
        b.open()
        b.page.get_by_test_id("approvals-toggle").click()
        item = b.page.get_by_test_id("approval-item")
        item.get_by_role("button", name=re.compile("^Review publish")).click()
        b.expect_state(b.widget_of(str(item.get_attribute("data-call"))), "pending")
        edges = b.page.evaluate(
            """() => Object.fromEntries([
                ["heading", ".approvals > .panel-head"],
                ["list", ".approvals-list"],
                ["card", ".approvals-detail"],
            ].map(([name, selector]) => {
                const box = document.querySelector(selector).getBoundingClientRect();
                return [name, [Math.round(box.left), Math.round(box.right)]];
            }))"""
        )
        view = b.page.get_by_test_id("approvals").bounding_box()
        assert view is not None
        assert edges["heading"][0] > view["x"] + 100, (edges, view)  # centred: wide margins
        assert edges["list"] == edges["heading"] == edges["card"], edges
        b.assert_clean()


SALES_TOOL = {"type": "function", "name": "get_sales", "ref": "parkway.runner.demo:get_sales"}
REVIEW_AGENT = agent_doc(
    [
        [text("Fetching. "), call("get_sales", {"month": "2026-10"})],
        [
            text("Summarising. "),
            call(
                "execute_code",
                {"code": SALES_SUMMARY_CODE, "inputs": ["{{result.get_sales.artifact_id}}"]},
            ),
        ],
        [text("Done.")],
    ],
    tools=[SALES_TOOL, {"type": "platform", "op": "execute_code"}],
)


def test_an_approver_reviewing_code_sees_the_inputs_it_would_read(
    browser: Browser, redis_url: str
) -> None:
    """The approver of someone else's code reads what the code would read: the review
    card opened from the Approvals view lists its input artifact with its size and
    source, as the requester's own card would, and no "could not be read"."""
    with server_thread(
        redis_url, REVIEW_AGENT, approvers=(APPROVER,), code_self_approval=False
    ) as server:
        a = Tab.new_context(browser, server.base_url).open()
        a.send("summarise October")
        card = a.widget("code")
        a.expect_state(card, "awaiting")
        call_id = Tab.call_id(card)

        b = _approver_tab(browser, server).open()
        b.page.get_by_test_id("approvals-toggle").click()
        item = b.page.get_by_test_id("approval-item")
        expect(item).to_have_count(1)
        item.get_by_role("button", name=re.compile("^Review execute_code")).click()
        review = b.widget_of(call_id)
        b.expect_state(review, "pending")
        size = len(canonical_json(get_sales({"month": "2026-10"})).encode())
        found = review.locator('.code-input[data-found="true"] [data-field="input-size"]')
        expect(found).to_contain_text(f"({size:,} bytes) · application/json · from get_sales")
        expect(review).not_to_contain_text("could not be read")
        a.assert_clean()
        b.assert_clean()
