"""What a new user's trial of the playground found, each fixed and held here: in a real
browser (Debian chromium driven by Playwright) against a real Parkway (uvicorn, Redis)
running scripted agents, with the built-in demo OAuth provider for sign-ins.

The tests wait on DOM state, never on fixed sleeps. ``PARKWAY_SCREENSHOTS=1`` also
writes ``docs/img/supersede-confirm.png``.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    Locator,
    Route,
    expect,
)
from pydantic import SecretStr

from parkway.runner.demo import DEMO_AGENT
from parkway.transport.api.sessions import SessionAuthenticator
from tests.helpers import support
from tests.helpers.browser import (
    VIEWPORT,
    ServerView,
    Tab,
    console_errors,
    screenshot,
    wait_until,
)
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.support import (
    CONFIRM_TOOL,
    CONNECT_EMBED,
    EDITABLE_PUBLISH_TOOL,
    PUBLISH_TOOL,
    agent_doc,
    call,
    server_thread,
    text,
)

# The built-in demo OAuth provider, as `make run` has it.
DEMO_PROVIDER: dict[str, Any] = {"demo_oauth": True, "token_key": SecretStr(TOKEN_KEY)}
CHOOSE_TOOL = next(t for t in DEMO_AGENT["template"]["tools"] if t.get("name") == "choose_option")
QUESTION = {"question": "Which city?", "options": ["Lisbon", "Oslo", "Paris"]}
PUBLISH_AGENT = agent_doc(
    [
        [text("Publishing. "), call("publish", {"title": "Hello"})],
        [text("Result: {{last_tool_results}}")],
    ],
    tools=[PUBLISH_TOOL],
)
# The same first step; the next turn answers whatever the user says.
SUPERSEDED_AGENT = agent_doc(
    [
        [text("Publishing. "), call("publish", {"title": "Hello"})],
        [text("New turn: {{last_user_text}}")],
    ],
    tools=[PUBLISH_TOOL],
)
DEMO_CONNECT_AGENT = agent_doc(
    [
        [
            text("I need your demo account. "),
            call("request_connection", {"provider": "demo", "scopes": ["repo"]}),
        ],
        [text("Connection: {{last_tool_results}}")],
    ],
    tools=[CONNECT_EMBED],
)
# What only the model should read: a card must never show it to the user.
FOR_THE_MODEL = "MODEL NOTE: call this when the user wants it."


def chip(tab: Tab, call_id: str) -> Locator:
    """The badge on a tool call's summary line."""
    return tab.page.get_by_test_id(f"tool-{call_id}").locator(":scope > summary .badge")


# -- the status pill ------------------------------------------------------------------


def test_status_pill_says_waiting_for_you_while_a_card_waits(
    browser: Browser, redis_url: str
) -> None:
    """ "Ready" while an approval waits reads as "nothing to do": the pill says the chat
    waits for the user until the card is answered, then "Ready" again."""
    with server_thread(redis_url, PUBLISH_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.expect_ready()
        tab.send("publish it")
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        tab.expect_waiting()
        tab.act(approval, "approve")
        tab.expect_said('Result: [{"result":{"published":"Hello"},"tool":"publish"}]')
        tab.expect_ready()
        expect(tab.page.get_by_test_id("chat-status")).to_have_text("Ready")
        tab.assert_clean()


# -- a new message while a card waits -------------------------------------------------


def test_a_new_message_asks_before_ending_a_waiting_approval_and_chip_and_card_agree(
    browser: Browser, redis_url: str
) -> None:
    """Sending while an approval waits ends it (the server cancels it): the page asks
    first, in the page, and "Don't send yet" sends nothing and keeps the text. Once
    sent, the tool chip and the card both say the request ended, before and after a
    reload: they are drawn from the one stored outcome."""
    with server_thread(redis_url, SUPERSEDED_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("publish it")
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        call_id = Tab.call_id(approval)
        confirm = tab.page.get_by_test_id("supersede-confirm")
        composer = tab.page.get_by_test_id("composer")

        tab.send("never mind")
        expect(confirm).to_be_visible()
        expect(confirm).to_contain_text("“Approve publish?” is still waiting for you")
        expect(confirm).to_contain_text("the agent is told it was cancelled")
        screenshot(tab.page, "supersede-confirm")
        confirm.locator('[data-action="keep-waiting"]').click()
        expect(confirm).to_be_hidden()
        expect(composer).to_have_value("never mind")
        tab.expect_state(approval, "pending")
        expect(tab.page.get_by_test_id("message-user")).to_have_count(1)
        with ServerView(tab) as server_view:
            assert server_view.call(tab.chat_id, call_id)["status"] == "pending"

        composer.press("Enter")
        confirm.locator('[data-action="send-anyway"]').click()
        tab.expect_said("New turn: never mind")
        tab.expect_state(approval, "ended")
        expect(approval).to_contain_text("a new message replaced it")
        expect(chip(tab, call_id)).to_have_text("ended")
        tab.expect_ready()

        tab.page.reload()
        rebuilt = tab.widget_of(call_id)
        tab.expect_state(rebuilt, "ended")
        expect(rebuilt).to_contain_text("a new message replaced it")
        expect(chip(tab, call_id)).to_have_text("ended")
        with ServerView(tab) as server_view:
            outcome = server_view.call(tab.chat_id, call_id)["outcome"]
        assert outcome == {"outcome": "cancelled", "reason": "superseded_by_user_message"}
        tab.assert_clean()


# -- connect: one source of truth ------------------------------------------------------


def test_a_denied_connect_says_not_connected_everywhere_even_after_a_retry_connects(
    browser: Browser, redis_url: str
) -> None:
    """A denied sign-in: the chip says "not connected" (not a green "done") like the
    card, and the card says what the agent was told. A Retry that then connects is shown
    beside that, never instead of it: the agent was told "denied", and the card says so."""
    with server_thread(redis_url, DEMO_CONNECT_AGENT, **DEMO_PROVIDER) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("connect me")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        call_id = Tab.call_id(widget)
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        popup = opened.value
        popup.locator("#deny").click()
        tab.expect_state(widget, "failed")
        tab.expect_said('Connection: [{"result":{"connected":false,"reason":"denied"')
        told = widget.get_by_test_id("connect-told")
        expect(told).to_have_text("The agent was told: not connected (denied).")
        expect(chip(tab, call_id)).to_have_text("not connected")
        expect(chip(tab, call_id)).to_have_class("badge badge-bad")
        tab.expect_ready()

        # the sign-in window is still open (on the refusal): Retry signs in again in it
        tab.act(widget, "retry")
        popup.locator('input[name="account"]').fill("ada")
        popup.locator("#allow").click()
        tab.expect_state(widget, "reconnected")
        expect(widget.get_by_test_id("connect-reconnected")).to_have_text(
            "Demo account connected ✓ (ada) after this request ended."
        )
        expect(widget).to_contain_text("The agent does not know: ask it to continue.")
        expect(told).to_have_text("The agent was told: not connected (denied).")
        expect(widget).to_contain_text("Connection not completed")
        expect(chip(tab, call_id)).to_have_text("not connected")
        with ServerView(tab) as server_view:
            assert server_view.call(tab.chat_id, call_id)["outcome"] == {"outcome": "denied"}
        tab.assert_clean()


def test_a_reload_while_the_sign_in_popup_is_open_still_shows_connecting(
    browser: Browser, redis_url: str
) -> None:
    """The popup outlives a reload of the page: the reloaded card picks the sign-in up
    again ("Connecting…", not a fresh Connect button) and completes when it does. The
    card says where to go on, in plain words."""
    with server_thread(redis_url, DEMO_CONNECT_AGENT, **DEMO_PROVIDER) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("connect me")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        call_id = Tab.call_id(widget)
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        popup = opened.value
        popup.locator("#allow").wait_for()
        tab.expect_state(widget, "connecting")
        expect(widget.get_by_test_id("connect-popup-hint")).to_have_text(
            "Complete the sign-in in the pop-up window."
        )

        tab.page.reload()
        rebuilt = tab.widget_of(call_id)
        tab.expect_state(rebuilt, "connecting")
        expect(rebuilt).to_contain_text("Connecting Demo account…")
        expect(rebuilt.get_by_test_id("connect-resumed")).to_be_visible()
        expect(rebuilt.locator('[data-action="connect"]')).to_have_count(0)
        tab.expect_waiting()

        popup.locator('input[name="account"]').fill("ada")
        popup.locator("#allow").click()
        tab.expect_state(rebuilt, "connected")
        expect(rebuilt.get_by_test_id("widget-notice")).to_have_count(0)  # this tab's own
        tab.expect_said('"account":"ada"')
        tab.expect_ready()
        tab.assert_clean()


def test_the_demo_consent_page_is_styled_and_lists_the_scopes_the_card_lists(
    browser: Browser, redis_url: str
) -> None:
    """The consent page asks for what the card said would be asked (the sign-in scope
    it always adds is named apart), and is a styled page under its strict CSP."""
    with server_thread(redis_url, DEMO_CONNECT_AGENT, **DEMO_PROVIDER) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("connect me")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        scopes = widget.get_by_test_id("connect-scopes")
        expect(scopes).to_have_text("Access requested: repo")
        card_scopes = (scopes.get_attribute("data-scopes") or "").split()
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        popup = opened.value
        refused: list[str] = []
        popup.on("console", lambda m: refused.append(m.text) if "Refused" in m.text else None)
        popup.locator("#allow").wait_for()
        listed = popup.locator("[data-scope]")
        expect(listed).to_have_count(len(card_scopes))
        assert [listed.nth(i).get_attribute("data-scope") for i in range(len(card_scopes))] == (
            card_scopes
        )
        expect(popup.locator("[data-sign-in]")).to_have_attribute("data-sign-in", "profile")
        expect(popup.locator("#allow")).to_have_css("background-color", "rgb(36, 87, 214)")
        expect(popup.locator("main")).to_have_css("border-radius", "10px")
        assert refused == []
        popup.locator("#allow").click()
        tab.expect_state(widget, "connected")
        tab.assert_clean()


# -- two tabs -------------------------------------------------------------------------


def test_a_tab_that_did_not_answer_says_the_call_was_answered_in_another_tab(
    browser: Browser, redis_url: str
) -> None:
    """Tab B must not show tab A's choice as if it were its own: idle, it says the call
    was answered in another tab; racing (its own answer held back until A won), it says
    another tab answered first, and shows A's choice, not B's."""
    agent = agent_doc(
        [
            [text("First. "), call("choose_option", QUESTION)],
            [text("Then. "), call("choose_option", {**QUESTION, "question": "And now?"})],
            [text("Done: {{last_tool_results}}")],
        ],
        tools=[CHOOSE_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        context = browser.new_context(viewport=VIEWPORT)
        a = Tab(context, server.base_url).open()
        a.send("ask me")
        first_a = a.widget("choice")
        a.expect_state(first_a, "pending")
        b = Tab(context, server.base_url).open(a.chat_id)
        first_b = b.widget_of(Tab.call_id(first_a))
        b.expect_state(first_b, "pending")

        first_a.get_by_role("button", name="Oslo").click()
        a.expect_state(first_a, "answered")
        expect(first_a).to_contain_text("You chose “Oslo”")
        b.expect_state(first_b, "answered")
        expect(first_b.get_by_test_id("widget-notice")).to_have_text("Answered in another tab.")
        expect(first_b).to_contain_text("You chose “Oslo”")

        second_a = a.widget("choice", nth=1)
        a.expect_state(second_a, "pending")
        second_b = b.widget_of(Tab.call_id(second_a))
        b.expect_state(second_b, "pending")
        held: list[Route] = []  # tab B's answer, held back until A has won

        def hold(route: Route) -> None:
            held.append(route)

        b.page.route("**/api/chat", hold)
        second_b.get_by_role("button", name="Paris").click()
        b.expect_state(second_b, "submitting")
        wait_until(b.page, lambda: held)
        second_a.get_by_role("button", name="Lisbon").click()
        a.expect_said('Done: [{"result":{"choice":"Lisbon"},"tool":"choose_option"}]')
        held[0].continue_()
        b.expect_state(second_b, "answered")
        expect(second_b.get_by_test_id("widget-notice")).to_have_text(
            "Answered in another tab first: that answer is shown, not yours."
        )
        expect(second_b).to_contain_text("You chose “Lisbon”")
        expect(second_b).not_to_contain_text("Paris")
        b.expect_said('Done: [{"result":{"choice":"Lisbon"},"tool":"choose_option"}]')
        a.page.reload()  # the same words as live, not "Chosen:"
        expect(a.widget_of(Tab.call_id(first_a))).to_contain_text("You chose “Oslo”")
        expect(a.widget_of(Tab.call_id(second_a))).to_contain_text("You chose “Lisbon”")
        a.assert_clean()
        b.assert_clean()


# -- cards ----------------------------------------------------------------------------


def test_an_approval_error_is_scrolled_into_view_and_an_approved_card_is_labelled(
    browser: Browser, redis_url: str
) -> None:
    """An error under the card's buttons must not stay hidden under the composer: it is
    brought into view. Once approved, the card is titled "Approved: …" and each JSON
    block says what it is."""
    agent = agent_doc(
        [
            [
                text("A long preamble.\n" * 30),  # the approval is far down the chat
                call("publish_editable", {"title": "Draft"}),
                call("choose_option", QUESTION),
            ],
            [text("Both: {{last_tool_results}}")],
        ],
        tools=[EDITABLE_PUBLISH_TOOL, CHOOSE_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("go")
        approval = tab.widget("approval")
        tab.expect_state(tab.widget("choice"), "pending")
        approve = approval.locator('[data-action="approve"]')
        approval.locator('[data-field="input"]').fill('{"title": ')
        # the Approve button at the very bottom of the chat, just above the composer
        approve.evaluate("el => el.scrollIntoView({block: 'end'})")
        approve.click()
        error = approval.get_by_test_id("widget-error")
        expect(error).to_contain_text("not valid JSON")
        wait_until(tab.page, lambda: shown_in_chat(error))

        approval.locator('[data-field="input"]').fill('{"title": "Final"}')
        approve.click()
        tab.widget("choice").get_by_role("button", name="Oslo").click()
        tab.expect_said("Both: ")
        tab.expect_state(approval, "approved")
        expect(approval.locator(".widget-title")).to_have_text("Approved: publish_editable")
        expect(approval.locator(".tool-label")).to_have_text(["Approved input", "Result"])
        expect(approval.locator('[data-field="approved-input"]')).to_contain_text('"Final"')
        expect(approval.locator('[data-field="result"]')).to_contain_text('"published": "Final"')
        tab.assert_clean()


def shown_in_chat(locator: Locator) -> bool:
    """Whether the element is wholly inside the chat's visible area (above the
    composer), give or take a rounding pixel."""
    return bool(
        locator.evaluate(
            """el => {
              const box = el.getBoundingClientRect();
              const chat = document.getElementById("scroller").getBoundingClientRect();
              return box.top >= chat.top - 1 && box.bottom <= chat.bottom + 1;
            }"""
        )
    )


def test_card_lines_are_written_for_the_user_not_the_tools_model_description(
    browser: Browser, redis_url: str
) -> None:
    """A tool's description is written for the model ("call this when…"); the cards say
    in the user's words what is asked of them instead."""
    agent = agent_doc(
        [
            [
                call("confirm", {"question": "Proceed?"}),
                call("publish", {"title": "Hello"}),
            ],
            [text("Answers: {{last_tool_results}}")],
        ],
        tools=[
            {**CONFIRM_TOOL, "description": FOR_THE_MODEL},
            {**PUBLISH_TOOL, "description": FOR_THE_MODEL},
        ],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("go")
        client = tab.widget("client")
        approval = tab.widget("approval")
        tab.expect_state(client, "pending")
        tab.expect_state(approval, "pending")
        expect(approval.get_by_test_id("widget-line")).to_have_text(
            "The agent wants to run publish. Check what will run, then approve or deny."
        )
        expect(client.get_by_test_id("widget-line")).to_contain_text("The agent asks this app")
        expect(tab.messages).not_to_contain_text("MODEL NOTE")
        tab.assert_clean()


# -- the composer ---------------------------------------------------------------------


def test_first_visit_logs_no_console_errors_and_suggests_what_to_type(
    browser: Browser, redis_url: str
) -> None:
    """A first visit has no session yet: the page makes one before asking for anything,
    so the console shows no 401, and the page's icon is its own (no 404). The empty chat
    suggests the agent's own first message (the agent file's ``suggestions``), in a
    button that sends it and in the composer's placeholder; an agent with none gets a
    neutral placeholder and no suggestion."""
    with server_thread(redis_url, DEMO_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url)
        errors = console_errors(tab.page)
        tab.open()
        expect(tab.page.get_by_test_id("agent-panel")).to_have_attribute("data-version", "1")
        suggestion = tab.page.get_by_test_id("suggestion")
        composer = tab.page.get_by_test_id("composer")
        expect(suggestion).to_have_text("Help me file a weather report")
        expect(composer).to_have_attribute(
            "placeholder", "Message the agent… (try “Help me file a weather report”)"
        )
        suggestion.click()  # sends it: no Enter needed
        expect(tab.page.get_by_test_id("message-user")).to_have_text(
            "Help me file a weather report"
        )
        expect(composer).to_have_value("")
        tab.expect_said("Hello! I'll check the weather")
        tab.expect_waiting()
        tab.page.reload()
        tab.expect_said("Hello! I'll check the weather")
        assert errors == []
        icon = httpx.get(f"{server.base_url}/favicon.svg")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.text.startswith("<svg")
        assert httpx.get(f"{server.base_url}/favicon.ico").status_code == 200
        tab.assert_clean()
    with server_thread(redis_url, PUBLISH_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        expect(tab.page.get_by_test_id("agent-panel")).to_have_attribute("data-version", "1")
        expect(tab.page.get_by_test_id("suggestion")).to_be_hidden()
        expect(tab.page.get_by_test_id("empty").locator("p").first).to_have_text(
            "Send the agent a message to start a chat.", use_inner_text=True
        )
        placeholder = tab.page.get_by_test_id("composer").get_attribute("placeholder")
        assert placeholder == "Message the agent…"
        tab.assert_clean()


# -- narrow screens -------------------------------------------------------------------


def test_a_narrow_screen_gets_one_usable_column(browser: Browser, redis_url: str) -> None:
    """At 400 px the chat fills the screen (no zero-height column, no sideways scroll),
    its cards are usable, and the agent panel is one tap away instead of squeezed in."""
    with server_thread(redis_url, DEMO_AGENT) as server:
        context = browser.new_context(viewport={"width": 400, "height": 720})
        tab = Tab(context, server.base_url).open()
        page = tab.page
        tab.send("Plan my weather report")
        choice = tab.widget("choice")
        tab.expect_state(choice, "pending")
        sizes = page.evaluate(
            """() => ({
              scrollWidth: document.documentElement.scrollWidth,
              clientWidth: document.documentElement.clientWidth,
              chat: document.querySelector('.chat').getBoundingClientRect().height,
            })"""
        )
        assert sizes["scrollWidth"] <= sizes["clientWidth"], sizes
        assert sizes["chat"] > 500, sizes
        expect(page.locator("#send")).to_be_in_viewport(ratio=1)
        expect(choice).to_be_in_viewport()
        expect(page.get_by_test_id("agent-panel")).to_be_hidden()
        choice.get_by_role("button", name="Oslo").click()
        tab.expect_said("You picked Oslo")

        toggle = page.locator('[data-action="toggle-agent"]')
        toggle.click()
        expect(page.get_by_test_id("agent-panel")).to_be_visible()
        expect(page.get_by_test_id("template-editor")).to_be_in_viewport()
        expect(page.get_by_test_id("messages")).to_be_hidden()
        toggle.click()
        expect(page.get_by_test_id("messages")).to_be_visible()
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= 400
        tab.assert_clean()


def test_a_reload_on_a_narrow_screen_scrolls_the_waiting_card_into_view(
    browser: Browser, redis_url: str
) -> None:
    """At 400 px the card that waits for the user was below the fold after a reload:
    its Approve and Deny buttons must be on screen without scrolling. The card's
    deadline and the Decisions list below it write times the same way."""
    with server_thread(redis_url, DEMO_AGENT, **DEMO_PROVIDER) as server:
        context = browser.new_context(viewport={"width": 400, "height": 720})
        tab = Tab(context, server.base_url).open()
        page = tab.page
        tab.send("Plan my weather report")
        tab.widget("choice").get_by_role("button", name="Oslo").click()
        connect = tab.widget("connect")
        tab.expect_state(connect, "pending")
        with page.expect_popup() as opened:
            tab.act(connect, "connect")
        opened.value.locator("#deny").click()
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        page.reload()
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        tab.expect_waiting()
        expect(approval.locator('[data-action="approve"]')).to_be_in_viewport(ratio=1)
        expect(approval.locator('[data-action="deny"]')).to_be_in_viewport(ratio=1)
        # one time format on the page: the card's deadline and the Decisions list's
        clock = r"\d\d?:\d\d(\s[AP]M)?"  # hours and minutes, as the locale writes them
        expect(approval.locator(".deadline")).to_have_text(re.compile(rf"^Expires at {clock}$"))
        expect(page.locator(".decision-time")).to_have_text([re.compile(rf"^{clock}$")] * 2)
        tab.assert_clean()


# -- sessions -------------------------------------------------------------------------


def test_a_second_local_server_does_not_take_over_the_first_ones_session(
    browser: Browser, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Browsers share a host's cookies across ports: two servers with their own keys on
    one host must each keep their own session cookie, or visiting the second one loses
    the first one's chats. Bearer tokens keep working."""
    first_cookie = SessionAuthenticator(support.TEST_SECRET).cookie_name
    with server_thread(redis_url, PUBLISH_AGENT) as first:
        monkeypatch.setattr(support, "TEST_SECRET", "another-test-secret-" + "y" * 32)
        with server_thread(redis_url, PUBLISH_AGENT) as second:
            context = browser.new_context(viewport=VIEWPORT)
            tab = Tab(context, first.base_url).open()
            tab.send("publish it")
            tab.expect_state(tab.widget("approval"), "pending")
            chat_id = tab.chat_id

            other = Tab(context, second.base_url).open()
            other.send("publish it")
            other.expect_state(other.widget("approval"), "pending")

            tab.open(chat_id)
            tab.expect_said("Publishing.")
            tab.expect_state(tab.widget("approval"), "pending")
            expect(tab.page.get_by_test_id("banner")).to_be_hidden()
            cookies = {c["name"]: c["value"] for c in context.cookies()}
            names = {name for name in cookies if name.startswith("parkway_")}
            assert len(names) == 2 and first_cookie in names, names
            bearer = {"authorization": f"Bearer {cookies[first_cookie]}"}
            read = httpx.get(f"{first.base_url}/api/chats/{chat_id}", headers=bearer)
            assert read.status_code == 200 and read.json()["messages"][0]["role"] == "user"
            tab.assert_clean()
            other.assert_clean()
