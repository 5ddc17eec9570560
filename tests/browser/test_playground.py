"""The playground page in a real browser: Debian chromium driven by Playwright against a
real Parkway (uvicorn, Redis) running scripted agents.

The tests wait on DOM state (``data-state`` of widgets, text in the message list), never
on fixed sleeps. ``PARKWAY_SCREENSHOTS=1`` also writes the widget screenshots in
``docs/img/``. Connect-widget tests use the OAuth-free parts of the flow; tests of a
full sign-in add a provider on loopback and drive the popup the same way.
"""

from __future__ import annotations

from typing import Any

import httpx
from playwright.sync_api import Browser, Route, expect
from pydantic import SecretStr
from redis.asyncio import Redis

from parkway.runner.demo import DEMO_AGENT
from tests.helpers import tools
from tests.helpers.browser import (
    VIEWPORT,
    ServerView,
    Tab,
    screenshot,
    wait_until,
)
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.support import (
    CONFIRM_TOOL,
    EDITABLE_PUBLISH_TOOL,
    PUBLISH_TOOL,
    agent_doc,
    call,
    server_thread,
    text,
)

CHOOSE_TOOL = next(t for t in DEMO_AGENT["template"]["tools"] if t.get("name") == "choose_option")
HOLOGRAM_TOOL = {
    "type": "client",
    "name": "show_hologram",
    "description": "Project a hologram in the user's room.",
    "input_schema": {"type": "object"},
    "render": {"kind": "hologram"},
}
QUESTION = {"question": "Which city?", "options": ["Lisbon", "Oslo", "Paris"]}
GATED_TOOL = {
    "type": "function",
    "name": "gated",
    "ref": "tests.helpers.tools:gated",
    "input_schema": {"type": "object"},
}


def executions(chat_id: str) -> list[dict[str, Any]]:
    return [e for e in tools.EXECUTIONS if e["chat"] == chat_id]


# -- the page itself ------------------------------------------------------------------


def test_page_is_served_with_a_strict_csp_and_a_fixed_static_allow_list(
    redis: Redis, redis_url: str
) -> None:
    """The page shows tool inputs and outputs the model chose: a strict CSP keeps any
    of them from running script, no other site may frame it, and only the page's own
    files are served (no path ever reaches the file system). No COOP: the connect
    widget needs its popup handle."""
    with server_thread(redis_url, DEMO_AGENT) as server:
        page = httpx.get(f"{server.base_url}/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "cross-origin-opener-policy" not in page.headers
        assert "<script" in page.text and 'src="static/playground.js"' in page.text
        assert "<script>" not in page.text and " style=" not in page.text

        script = httpx.get(f"{server.base_url}/static/playground.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert script.headers["x-content-type-options"] == "nosniff"
        for module in ["playground-base.js", "agent-panel.js", "commit-diff.js", "overlay.js"]:
            served = httpx.get(f"{server.base_url}/static/{module}")
            assert served.status_code == 200, module
            assert served.headers["content-type"].startswith("text/javascript")
        css = httpx.get(f"{server.base_url}/static/playground.css")
        assert css.headers["content-type"].startswith("text/css")
        for name in ["page.py", "..%2Fpage.py", "nope.js", "%2E%2E%2F__init__.py", "PLAYGROUND.JS"]:
            response = httpx.get(f"{server.base_url}/static/{name}")
            assert response.status_code == 404, name
            assert response.json()["error"]["code"] == "not_found"


# -- widgets, end to end --------------------------------------------------------------


# The built-in demo OAuth provider, as `make run` has it (the test servers use an
# external Redis, where it is off by default).
DEMO_PROVIDER: dict[str, Any] = {"demo_oauth": True, "token_key": SecretStr(TOKEN_KEY)}


def test_demo_conversation_goes_through_choice_connect_and_approval_widgets(
    browser: Browser, redis_url: str
) -> None:
    """The built-in demo, as a user sees it: streamed text and a server tool, then a
    choice, a connection (declined with "Not now"), an approval of a report on the
    chosen city; each answer continues the same assistant message, in sentences, until
    the agent's final answer."""
    with server_thread(redis_url, DEMO_AGENT, **DEMO_PROVIDER) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("Plan my weather report")
        tab.expect_said("Hello! I'll check the weather")
        weather = tab.page.locator('[data-tool="get_weather"]').first
        expect(weather).to_have_attribute("data-state", "output-available")
        expect(weather.locator(".badge")).to_have_text("done")

        choice = tab.widget("choice")
        tab.expect_state(choice, "pending")
        expect(choice).to_contain_text("Which city should the report cover?")
        tab.expect_waiting()
        screenshot(tab.page, "choice")
        choice.get_by_role("button", name="Oslo").click()
        tab.expect_state(choice, "answered")
        tab.expect_said("You picked Oslo, so the report will cover Oslo.")

        connect = tab.widget("connect")
        tab.expect_state(connect, "pending")
        expect(connect.get_by_role("button", name="Connect Demo account")).to_be_visible()
        tab.expect_waiting()
        screenshot(tab.page, "connect")
        tab.act(connect, "decline")
        tab.expect_state(connect, "declined")
        tab.expect_said("No connection this time (declined); I'll publish without it.")

        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        expect(approval).to_contain_text("Approve publish_report?")
        expect(approval.locator('[data-field="input"]')).to_have_value(
            '{\n  "title": "Weather in Oslo",\n  "body": "Today in Oslo: snow, 4 °C."\n}'
        )
        tab.expect_waiting()
        screenshot(tab.page, "approval")
        tab.act(approval, "approve")
        tab.expect_state(approval, "approved")
        tab.expect_said("Published “Weather in Oslo” (6 words).")

        code = tab.widget("code")
        tab.expect_state(code, "pending")
        tab.expect_said("so here is a short program that summarises them, for your review.")
        tab.expect_waiting()
        screenshot(tab.page, "code-review")
        tab.act(code, "approve")
        tab.expect_state(code, "approved")
        tab.expect_said("600 orders;")
        tab.expect_said("That was the whole tour")
        tab.expect_ready()
        code.scroll_into_view_if_needed()
        screenshot(tab.page, "code-result")
        # One assistant message across all five round trips.
        expect(tab.page.get_by_test_id("message-assistant")).to_have_count(1)
        screenshot(tab.page, "chat")
        tab.assert_clean()


def test_demo_agent_connects_through_the_built_in_demo_provider(
    browser: Browser, redis_url: str
) -> None:
    """What ``make run`` shows: the demo agent's connect step completes locally in a
    real popup on the built-in demo provider (its consent page, Allow), the callback
    settles the call, and the conversation runs to its end."""
    with server_thread(redis_url, DEMO_AGENT, **DEMO_PROVIDER) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("Plan my weather report")
        choice = tab.widget("choice")
        tab.expect_state(choice, "pending")
        choice.get_by_role("button", name="Lisbon").click()
        connect = tab.widget("connect")
        tab.expect_state(connect, "pending")
        with tab.page.expect_popup() as opened:
            tab.act(connect, "connect")
        popup = opened.value
        popup.locator('input[name="account"]').fill("ada")
        popup.locator("#allow").click()
        tab.expect_state(connect, "connected")
        expect(connect).to_contain_text("ada")
        tab.expect_said("Connected as ada. Here is the report on Lisbon for your approval.")
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        tab.act(approval, "approve")
        tab.expect_said("Published “Weather in Lisbon”")
        code = tab.widget("code")
        tab.act(code, "approve")
        tab.expect_said("That was the whole tour")
        tab.expect_ready()
        screenshot(tab.page, "demo-connected")
        tab.assert_clean()


def test_approve_with_edits_runs_exactly_the_edited_input(browser: Browser, redis_url: str) -> None:
    """An editable approval: invalid JSON is caught in the page; the edited input is
    what the tool runs with (settled through the call's statusUrl, since the AI SDK's
    approval response cannot carry an input)."""
    agent = agent_doc(
        [
            [text("Publishing. "), call("publish_editable", {"title": "Draft"})],
            [text("Result: {{last_tool_results}}")],
        ],
        tools=[EDITABLE_PUBLISH_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("publish it")
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        editor = approval.locator('[data-field="input"]')
        editor.fill('{"title": ')
        tab.act(approval, "approve")
        expect(approval.get_by_role("alert")).to_contain_text("not valid JSON")
        tab.expect_state(approval, "pending")

        editor.fill('{"title": "Final"}')
        tab.act(approval, "approve")
        tab.expect_state(approval, "approved")
        expect(approval).to_contain_text("Approved with edits")
        tab.expect_said('Result: [{"result":{"published":"Final"},"tool":"publish_editable"}]')
        assert [e["input"] for e in executions(tab.chat_id)] == [{"title": "Final"}]
        tab.assert_clean()


def test_deny_with_a_reason_reaches_the_model_and_nothing_runs(
    browser: Browser, redis_url: str
) -> None:
    """Deny sends the reason with the approval response; the tool never runs and the
    model sees the denial with that reason."""
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
        expect(approval.locator("pre")).to_contain_text('"title": "Hello"')
        approval.get_by_label("Reason (optional, sent with a denial)").fill("not today")
        tab.act(approval, "deny")
        tab.expect_state(approval, "denied")
        expect(approval).to_contain_text("Denied: not today")
        tab.expect_said(
            'Result: [{"result":{"approved":false,"reason":"not today"},"tool":"publish"}]'
        )
        screenshot(tab.page, "approval-denied")
        assert executions(tab.chat_id) == []
        with ServerView(tab) as server_view:
            call_view = server_view.call(tab.chat_id, Tab.call_id(approval))
        assert call_view["outcome"] == {"outcome": "denied", "reason": "not today"}
        tab.assert_clean()


def test_unknown_render_kind_says_so_and_settles_the_call_with_an_error(
    browser: Browser, redis_url: str
) -> None:
    """A client tool whose render kind the page has no widget for must not leave the
    agent waiting: the page says it cannot handle it, settles the call with an error,
    and the chat continues with that error as the tool's result."""
    agent = agent_doc(
        [
            [text("Let me show you. "), call("show_hologram", {"scene": "moon"})],
            [text("Outcome: {{last_tool_results}}")],
        ],
        tools=[HOLOGRAM_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("show me")
        widget = tab.widget("unsupported")
        tab.expect_state(widget, "unsupported")
        expect(widget).to_contain_text("This app cannot handle that request")
        tab.expect_said(
            'Outcome: [{"result":{"error":"This app cannot handle \'show_hologram\' requests'
        )
        expect(widget).to_contain_text("The agent was told it could not be done.")
        tab.expect_ready()
        screenshot(tab.page, "unsupported")
        with ServerView(tab) as server_view:
            outcome = server_view.call(tab.chat_id, Tab.call_id(widget))["outcome"]
        assert outcome["outcome"] == "error" and "hologram" in outcome["message"]
        tab.assert_clean()


def test_generic_client_widget_checks_json_answers_and_can_decline(
    browser: Browser, redis_url: str
) -> None:
    """A client tool with no render kind gets the generic widget: a JSON answer
    (checked in the page before it is sent) or Decline."""
    agent = agent_doc(
        [
            [call("confirm", {"question": "Proceed?"})],
            [text("Got: {{last_tool_results}}. "), call("confirm", {"question": "Again?"})],
            [text("Then: {{last_tool_results}}")],
        ],
        tools=[CONFIRM_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("ask me")
        first = tab.widget("client")
        tab.expect_state(first, "pending")
        answer = first.get_by_label("Your answer (JSON)")
        answer.fill("{not json")
        tab.act(first, "submit")
        expect(first.get_by_role("alert")).to_contain_text("Not valid JSON")
        tab.expect_state(first, "pending")
        answer.fill('{"ok": true}')
        tab.expect_waiting()
        screenshot(tab.page, "client")
        tab.act(first, "submit")
        tab.expect_state(first, "answered")
        tab.expect_said('Got: [{"result":{"ok":true},"tool":"confirm"}]')

        second = tab.widget("client", nth=1)
        tab.expect_state(second, "pending")
        tab.act(second, "decline")
        tab.expect_state(second, "declined")
        tab.expect_said('Then: [{"result":{"status":"declined"},"tool":"confirm"}]')
        tab.assert_clean()


def test_a_step_with_two_parked_calls_is_sent_once_both_are_answered(
    browser: Browser, redis_url: str
) -> None:
    """Like sendAutomaticallyWhen: an answer waits in the page until every pending call
    of the step has one, then one POST carries both and the run resumes once."""
    agent = agent_doc(
        [
            [
                text("Two things. "),
                call("choose_option", QUESTION),
                call("publish", {"title": "Hi"}),
            ],
            [text("Both: {{last_tool_results}}")],
        ],
        tools=[CHOOSE_TOOL, PUBLISH_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("go")
        choice = tab.widget("choice")
        approval = tab.widget("approval")
        tab.expect_state(approval, "pending")
        choice.get_by_role("button", name="Paris").click()
        tab.expect_state(choice, "queued")
        with ServerView(tab) as server_view:
            assert server_view.call(tab.chat_id, Tab.call_id(choice))["status"] == "pending"
        tab.act(approval, "approve")
        tab.expect_said(
            'Both: [{"result":{"choice":"Paris"},"tool":"choose_option"},'
            '{"result":{"published":"Hi"},"tool":"publish"}]'
        )
        tab.expect_state(choice, "answered")
        tab.expect_state(approval, "approved")
        tab.assert_clean()


# -- reloads and other tabs -----------------------------------------------------------


def test_reload_mid_park_rebuilds_the_live_widget_and_answering_continues(
    browser: Browser, redis_url: str
) -> None:
    """The chat id lives in the URL: a reload rebuilds the chat from the server, the
    parked call's widget is live again, and answering it continues the chat."""
    agent = agent_doc(
        [
            [text("Pick one. "), call("choose_option", QUESTION)],
            [text("You picked: {{last_tool_results}}")],
        ],
        tools=[CHOOSE_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("let me choose")
        choice = tab.widget("choice")
        tab.expect_state(choice, "pending")
        call_id = Tab.call_id(choice)
        chat_id = tab.chat_id

        tab.page.reload()
        assert tab.chat_id == chat_id
        rebuilt = tab.widget_of(call_id)
        tab.expect_state(rebuilt, "pending")
        tab.expect_said("let me choose")
        tab.expect_said("Pick one.")
        rebuilt.get_by_role("button", name="Lisbon").click()
        tab.expect_state(rebuilt, "answered")
        tab.expect_said('You picked: [{"result":{"choice":"Lisbon"},"tool":"choose_option"}]')
        tab.assert_clean()


def test_two_tabs_racing_on_one_approval_agree_on_the_single_winner(
    browser: Browser, redis_url: str
) -> None:
    """Tab A approves while tab B's denial is still on its way: exactly one answer
    wins (the tool runs once), and tab B shows A's outcome, not its own."""
    agent = agent_doc(
        [
            [text("Publishing. "), call("publish", {"title": "Hello"})],
            [text("Result: {{last_tool_results}}")],
        ],
        tools=[PUBLISH_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        context = browser.new_context(viewport=VIEWPORT)
        a = Tab(context, server.base_url).open()
        a.send("publish it")
        approval_a = a.widget("approval")
        a.expect_state(approval_a, "pending")
        call_id = Tab.call_id(approval_a)
        b = Tab(context, server.base_url).open(a.chat_id)
        approval_b = b.widget_of(call_id)
        b.expect_state(approval_b, "pending")

        held: list[Route] = []  # tab B's answer POST, held back until A has won

        def hold(route: Route) -> None:
            held.append(route)

        b.page.route("**/api/chat", hold)
        approval_b.get_by_label("Reason (optional, sent with a denial)").fill("too risky")
        b.act(approval_b, "deny")
        b.expect_state(approval_b, "submitting")
        wait_until(b.page, lambda: held)

        a.act(approval_a, "approve")
        a.expect_state(approval_a, "approved")
        a.expect_said('Result: [{"result":{"published":"Hello"},"tool":"publish"}]')

        held[0].continue_()
        b.expect_state(approval_b, "approved")
        expect(approval_b.get_by_test_id("widget-notice")).to_contain_text(
            "Answered in another tab first"
        )
        b.expect_said('Result: [{"result":{"published":"Hello"},"tool":"publish"}]')
        assert len(executions(a.chat_id)) == 1
        with ServerView(a) as server_view:
            assert server_view.call(a.chat_id, call_id)["outcome"] == {"outcome": "approved"}
        a.assert_clean()
        b.assert_clean()


def test_a_call_nobody_answers_shows_request_ended_and_the_chat_goes_on(
    browser: Browser, redis_url: str
) -> None:
    """Nothing hangs: when the server times a call out, the open page notices (it polls
    the call's status), shows a neutral "request ended", and continues the chat so the
    agent gets the timeout; a reload shows the same."""
    timed = {**CHOOSE_TOOL, "deadline_s": 3}
    agent = agent_doc(
        [
            [text("Pick. "), call("choose_option", QUESTION)],
            [text("After: {{last_tool_results}}")],
        ],
        tools=[timed],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("ask me")
        choice = tab.widget("choice")
        tab.expect_state(choice, "pending")
        tab.expect_state(choice, "ended", timeout_ms=20_000)
        expect(choice).to_contain_text("nobody answered in time")
        tab.expect_said('After: [{"result":{"status":"timeout"},"tool":"choose_option"}]')
        tab.expect_ready()
        screenshot(tab.page, "ended")
        tab.page.reload()
        tab.expect_state(tab.widget_of(Tab.call_id(choice)), "ended")
        tab.assert_clean()


def test_a_new_message_supersedes_a_pending_widget(browser: Browser, redis_url: str) -> None:
    """Typing instead of answering starts a new turn (once the user confirms it); the
    old call ends (the server cancels it) and its widget says so instead of staying
    answerable."""
    agent = agent_doc(
        [
            [text("Pick. "), call("choose_option", QUESTION)],
            [text("New turn: {{last_user_text}}")],
        ],
        tools=[CHOOSE_TOOL],
    )
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("ask me")
        choice = tab.widget("choice")
        tab.expect_state(choice, "pending")
        tab.send("never mind")
        tab.page.get_by_test_id("supersede-confirm").locator('[data-action="send-anyway"]').click()
        tab.expect_said("New turn: never mind")
        tab.expect_state(choice, "ended")
        expect(choice).to_contain_text("a new message replaced it")
        tab.page.reload()
        tab.expect_state(tab.widget_of(Tab.call_id(choice)), "ended")
        tab.assert_clean()


def test_reload_during_a_run_follows_it_live(browser: Browser, redis_url: str) -> None:
    """A reload while a server tool runs rebuilds the message so far from the resume
    stream and follows the run live to its end."""
    agent = agent_doc(
        [
            [text("Working on it. "), call("gated", {})],
            [text("Finished: {{last_tool_results}}")],
        ],
        tools=[GATED_TOOL],
    )
    tools.GATE.clear()
    try:
        with server_thread(redis_url, agent) as server:
            try:
                tab = Tab.new_context(browser, server.base_url).open()
                tab.send("work")
                gated = tab.page.locator('[data-tool="gated"]')
                expect(gated).to_have_attribute("data-state", "input-available")
                tab.page.reload()
                tab.expect_said("Working on it.")
                expect(gated).to_have_attribute("data-state", "input-available")
                expect(tab.page.get_by_test_id("chat-status")).to_have_attribute(
                    "data-status", "streaming"
                )
                tools.GATE.set()
                tab.expect_said('Finished: [{"result":{"passed":true},"tool":"gated"}]')
                tab.expect_ready()
                tab.assert_clean()
            finally:
                tools.GATE.set()  # never leave the server's tool thread blocked
    finally:
        tools.GATE.clear()
