"""The playground's agent panel, commit_config approvals and the connect widget's
retry / use-existing paths, in a real browser (Debian chromium, Playwright) against a
real Parkway (uvicorn, Redis) and, for sign-ins, a real OpenID provider on loopback.

The tests wait on DOM state, never on fixed sleeps. ``PARKWAY_SCREENSHOTS=1`` also
writes the README images in ``docs/img/``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from playwright.sync_api import Browser, Page, Request, expect
from redis.asyncio import Redis

from parkway.runner.engine.runner import Runner
from parkway.runner.engine.sweeper import Sweeper
from parkway.runner.llm.model import ModelEvent, ModelRequest, ModelTextDelta
from tests.helpers.browser import (
    ServerView,
    Tab,
    provider_rig,
    screenshot,
    sign_in_at_provider,
)
from tests.helpers.support import WEATHER_TOOL, agent_doc, call, server_thread, text

PATCH = {"summary": "say hello", "patch": {"instructions": "Say hello first."}}
# every registered platform op, then the reserved workflows (widgets_api/playground/overlay.py)
KIT_TOOLS = "get_weather,commit_config,execute_code,list_functions,save_function,request_connection"
# The agent a user builds: one tool of its own and a 5 s sandbox run time, which the
# build kit overrides while it is on.
SANDBOXED_AGENT = {
    "template": {
        "instructions": "test agent",
        "tools": [WEATHER_TOOL],
        "sandbox": {"permissions": {"max_runtime_s": 5}},
    },
    "model": {"scripted": {"turns": []}},
}
COMMITTING_AGENT = agent_doc(
    [
        [text("Changing myself. "), call("commit_config", PATCH)],
        [text("done: {{last_tool_results}}")],
    ],
    tools=[WEATHER_TOOL],  # commit_config comes from the build kit
)


class ToolNamesModel:
    """Answers with the names of the tools it was offered: what the run sees."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ModelTextDelta(",".join(t.name for t in request.tools))


class Posts:
    """The JSON bodies a page POSTs to one path, in order."""

    def __init__(self, page: Page, path: str) -> None:
        self.path = path
        self.bodies: list[dict[str, Any]] = []
        page.on("request", self._seen)

    def _seen(self, request: Request) -> None:
        if request.method == "POST" and request.url.endswith(self.path):
            self.bodies.append(json.loads(request.post_data or "null"))


def panel_of(tab: Tab, version: int = 1) -> Any:
    """The tab's agent panel, once it shows ``version``."""
    panel = tab.page.get_by_test_id("agent-panel")
    expect(panel).to_have_attribute("data-version", str(version))
    return panel


def agent_now(tab: Tab) -> dict[str, Any]:
    """``GET /api/agent`` with the tab's session."""
    with ServerView(tab) as server_view:
        response = server_view.http.get("/api/agent")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def has_kit(template: dict[str, Any]) -> bool:
    """Whether any of the build kit's additions is in ``template``."""
    tools = json.dumps(template.get("tools", []))
    return (
        "commit_config" in tools
        or "__ag__request_connection" in tools
        or "skills" in template
        or template.get("sandbox", {}).get("permissions", {}).get("max_runtime_s") == 60
    )


def sweep_later(redis_url: str, template: dict[str, Any], seconds: float = 3600) -> int:
    """Another worker's sweeper, its clock ``seconds`` ahead: times out what is due."""

    async def sweep() -> int:
        from parkway.runner.agent.template import load_template
        from parkway.runner.llm.scripted import ScriptedModel

        client = Redis.from_url(redis_url)
        try:
            runner = Runner(client, ScriptedModel([]), load_template(template))
            report = await Sweeper(runner, clock=lambda: time.time() + seconds).sweep_once()
            return int(report.settled)
        finally:
            await client.aclose()

    # Sync Playwright holds this thread's event loop: run the sweep on a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(sweep())).result(timeout=30)


# -- the agent panel and the build kit -------------------------------------------------


def test_build_kit_toggle_changes_what_the_run_sees_and_never_what_is_committed(
    browser: Browser, redis_url: str
) -> None:
    """The kit starts off for the user's own agent (only the built-in demo starts with
    it on): the model is offered what the deployed agent has. On, a turn runs with the
    kit's tools laid over the template, and the panel says loudly how many tools that
    adds. Off, the run sees the agent's own tools, and nothing is sent unless the user
    has edits. Either way the committed agent is untouched; a commit with the kit on
    sends only the user's template. The override hint shows what the kit replaces while
    it is on; "What the kit adds" lists only what the sandbox honours (no network); the
    toggle lasts for the tab (a reload keeps it, a new tab starts off again)."""
    with server_thread(redis_url, SANDBOXED_AGENT, model=ToolNamesModel()) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        chats = Posts(tab.page, "/api/chat")
        commits = Posts(tab.page, "/api/agent/commit")
        panel = panel_of(tab)
        before = agent_now(tab)
        toggle = panel.get_by_test_id("kit-toggle")
        warning = panel.get_by_test_id("kit-warning")
        hint = panel.get_by_test_id("override-hint")
        expect(toggle).not_to_be_checked()
        expect(warning).to_be_hidden()
        expect(hint).to_have_count(0)
        toggle.check()
        expect(warning).to_have_text(
            "On: the model sees 5 tools your agent does not have when deployed. Turn the"
            " kit off to try the agent as it ships."
        )
        expect(hint).to_have_text(
            "Build kit overrides sandbox.permissions.max_runtime_s (yours: 5) while it is on"
        )
        panel.get_by_test_id("kit-drawer").locator("summary").click()
        drawer = panel.get_by_test_id("kit-drawer")
        expect(
            drawer.get_by_test_id("kit-item").filter(has_text="platform:commit_config")
        ).to_contain_text("Removed on commit")
        expect(drawer).to_contain_text("workflow:__ag__request_connection")
        expect(drawer).to_contain_text("agent-authoring")
        expect(drawer).to_contain_text("permissions.max_runtime_s: 60")
        expect(drawer).not_to_contain_text("network")

        tab.send("which tools?")
        assistant = tab.page.get_by_test_id("message-assistant")
        expect(assistant.nth(0)).to_have_text(KIT_TOOLS)
        tab.expect_ready()
        screenshot(tab.page, "agent-panel")
        sent = chats.bodies[-1]["agentTemplate"]
        assert sent["sandbox"]["permissions"]["max_runtime_s"] == 60 and "skills" in sent
        assert "network" not in sent["sandbox"]["permissions"]

        toggle.uncheck()
        expect(hint).to_have_count(0)
        expect(warning).to_be_hidden()
        tab.send("and now?")
        expect(assistant.nth(1)).to_have_text("get_weather")
        tab.expect_ready()
        assert "agentTemplate" not in chats.bodies[-1]  # no edits, kit off: nothing sent
        assert agent_now(tab) == before

        tab.page.reload()
        panel = panel_of(tab)
        expect(toggle).not_to_be_checked()
        expect(hint).to_have_count(0)
        fresh = Tab(tab.context, server.base_url).open()
        expect(panel_of(fresh).get_by_test_id("kit-toggle")).not_to_be_checked()
        fresh.page.close()

        # Uncommitted edits with the kit off: this turn runs the edited template.
        editor = panel.get_by_test_id("template-editor")
        edited = {**before["template"], "instructions": "Be brief."}
        editor.fill(json.dumps(edited, indent=2))
        expect(panel.get_by_test_id("template-edited")).to_be_visible()
        tab.send("edited?")
        expect(assistant.nth(2)).to_have_text("get_weather")
        tab.expect_ready()
        assert chats.bodies[-1]["agentTemplate"] == edited
        assert agent_now(tab) == before

        toggle.check()
        expect(hint).to_have_count(1)
        panel.get_by_test_id("commit-summary").fill("brief")
        tab.act(panel, "commit")
        panel = panel_of(tab, 2)
        expect(panel.get_by_test_id("commit-message")).to_have_text("Committed version 2.")
        expect(panel.locator(".revision-summary").first).to_have_text("brief")
        assert commits.bodies == [{"template": edited, "expectedVersion": 1, "summary": "brief"}]
        head = agent_now(tab)
        assert head["version"] == 2 and head["summary"] == "brief"
        assert head["template"] == edited and not has_kit(head["template"])
        assert head["committedBy"] == "user"
        tab.assert_clean()


def test_invalid_templates_are_shown_and_never_sent(browser: Browser, redis_url: str) -> None:
    """Invalid JSON in the editor is an error beside it: Commit is off and a message is
    not sent (the text stays in the composer). A template the server refuses is a 422
    whose message the panel shows."""
    with server_thread(redis_url, SANDBOXED_AGENT, model=ToolNamesModel()) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        chats = Posts(tab.page, "/api/chat")
        panel = panel_of(tab)
        editor = panel.get_by_test_id("template-editor")
        editor.fill('{"instructions": ')
        expect(panel.get_by_test_id("template-error")).to_contain_text("Not a valid template")
        expect(panel.locator('[data-action="commit"]')).to_be_disabled()
        tab.send("hello?")
        expect(tab.page.get_by_test_id("banner")).to_contain_text(
            "The working template is not valid"
        )
        expect(tab.page.get_by_test_id("composer")).to_have_value("hello?")
        assert chats.bodies == []

        editor.fill(json.dumps({"instructions": "x", "tools": [{"type": "nope"}]}))
        expect(panel.get_by_test_id("template-error")).to_be_hidden()
        tab.act(panel, "commit")
        message = panel.get_by_test_id("commit-message")
        expect(message).to_have_attribute("data-tone", "bad")
        expect(message).not_to_be_empty()
        assert agent_now(tab)["version"] == 1
        tab.assert_clean()


def test_a_stale_commit_gets_the_conflict_message_and_reload_shows_the_winner(
    browser: Browser, redis_url: str
) -> None:
    """Two tabs read version 1; tab A commits; tab B's commit is refused (409), never
    merged: B says the agent changed elsewhere, and Reload shows A's revision."""
    with server_thread(redis_url, SANDBOXED_AGENT, model=ToolNamesModel()) as server:
        a = Tab.new_context(browser, server.base_url).open()
        b = Tab(a.context, server.base_url).open()
        panel_a, panel_b = panel_of(a), panel_of(b)
        template = agent_now(a)["template"]
        panel_a.get_by_test_id("template-editor").fill(
            json.dumps({**template, "instructions": "From A."})
        )
        panel_a.get_by_test_id("commit-summary").fill("tab A")
        a.act(panel_a, "commit")
        panel_of(a, 2)

        panel_b.get_by_test_id("template-editor").fill(
            json.dumps({**template, "instructions": "From B."})
        )
        b.act(panel_b, "commit")
        message = panel_b.get_by_test_id("commit-message")
        expect(message).to_contain_text("The agent changed elsewhere; reload")
        assert agent_now(b)["template"]["instructions"] == "From A."
        message.locator('[data-action="reload-agent"]').click()
        panel_b = panel_of(b, 2)
        expect(panel_b.get_by_test_id("template-editor")).to_have_value(
            json.dumps(agent_now(b)["template"], indent=2)
        )
        expect(panel_b.get_by_test_id("commit-message")).to_be_hidden()
        a.assert_clean()
        b.assert_clean()


# -- commit_config ---------------------------------------------------------------------


def test_commit_config_approval_shows_the_diff_and_the_new_revision_refreshes_the_panel(
    browser: Browser, redis_url: str
) -> None:
    """The agent's own change is approved knowingly: the card shows its summary and a
    line diff of the committed template against what would be committed. Approving
    commits it; the stream's data-committed-revision brings the panel to version 2, whose
    template has the patch and none of the build kit the run had."""
    with server_thread(redis_url, COMMITTING_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url, build_kit=True).open()
        panel = panel_of(tab)
        tab.send("change yourself")
        widget = tab.widget("approval")
        tab.expect_state(widget, "pending")
        expect(widget).to_have_attribute("data-tool", "commit_config")
        expect(widget.get_by_test_id("commit-summary-text")).to_have_text("say hello")
        diff = widget.get_by_test_id("commit-diff")
        expect(diff.locator(".diff-del")).to_have_text(['-  "instructions": "test agent",'])
        expect(diff.locator(".diff-add")).to_have_text(['+  "instructions": "Say hello first.",'])
        tab.expect_waiting()
        screenshot(tab.page, "commit-diff")
        assert agent_now(tab)["version"] == 1

        tab.act(widget, "approve")
        tab.expect_state(widget, "approved")
        tab.expect_said('done: [{"result":{"agentId":')
        panel = panel_of(tab, 2)
        expect(panel.get_by_test_id("template-editor")).to_have_value(re.compile("Say hello first"))
        expect(panel.locator(".revision-summary").first).to_have_text("say hello")
        head = agent_now(tab)
        assert head["template"] == {"instructions": "Say hello first.", "tools": [WEATHER_TOOL]}
        assert head["committedBy"] == "agent"
        tab.assert_clean()


def test_a_revision_committed_while_the_user_edits_keeps_the_edits_and_says_so(
    browser: Browser, redis_url: str
) -> None:
    """data-committed-revision must not throw away uncommitted edits: the panel says a
    new revision exists, and Reload shows it."""
    with server_thread(redis_url, COMMITTING_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url, build_kit=True).open()
        panel = panel_of(tab)
        editor = panel.get_by_test_id("template-editor")
        mine = {"instructions": "Mine.", "tools": [WEATHER_TOOL]}
        editor.fill(json.dumps(mine))
        tab.send("change yourself")
        widget = tab.widget("approval")
        expect(widget.get_by_test_id("commit-diff").locator(".diff-add")).to_have_count(1)
        tab.act(widget, "approve")
        tab.expect_state(widget, "approved")
        notice = panel.get_by_test_id("agent-notice")
        expect(notice).to_contain_text("A new revision 2 was committed; reload to see it")
        expect(panel).to_have_attribute("data-version", "1")
        expect(editor).to_have_value(json.dumps(mine))
        notice.locator('[data-action="reload-agent"]').click()
        panel_of(tab, 2)
        expect(editor).to_have_value(re.compile("Say hello first"))
        expect(notice).to_be_hidden()
        tab.assert_clean()


# -- connect: denial, timeout and retry, an existing connection ------------------------


def test_connect_denied_at_the_provider_ends_the_request_with_retry(
    browser: Browser, redis_url: str
) -> None:
    """The user presses Deny on the provider's consent page: the server records the
    refusal as the call's result, and the widget says the connection was not completed,
    with Retry."""
    with provider_rig(redis_url) as rig:
        tab = Tab.new_context(browser, rig.base_url).open()
        tab.send("connect me to acme")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        with tab.page.expect_popup() as opened:
            tab.act(widget, "connect")
        sign_in_at_provider(opened.value, decision="deny")
        tab.expect_state(widget, "failed")
        expect(widget).to_contain_text("Connection not completed")
        expect(widget).to_contain_text("Access was not allowed at Acme.")
        expect(widget.locator('[data-action="retry"]')).to_be_visible()
        tab.expect_said('Connection result: [{"result":{"connected":false,"reason":"denied",')
        with ServerView(tab) as server_view:
            recorded = server_view.call(tab.chat_id, Tab.call_id(widget))["outcome"]
        assert recorded == {"outcome": "denied"}
        tab.assert_clean()


def test_retry_after_a_timeout_is_confirmed_by_the_servers_connection_list(
    browser: Browser, redis_url: str
) -> None:
    """A call times out (another worker's sweeper); the widget shows it ended. Retry
    signs in in a popup: a forged "connected" message from the popup proves nothing,
    only a connection the server stored after Retry was pressed turns the widget to
    connected. The call's recorded outcome stays the timeout."""
    from tests.helpers.connect_rig import CONNECT_AGENT

    with provider_rig(redis_url) as rig:
        tab = Tab.new_context(browser, rig.base_url).open()
        tab.send("connect me to acme")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        tab.expect_waiting()
        call_id = Tab.call_id(widget)
        assert sweep_later(redis_url, CONNECT_AGENT["template"]) == 1
        tab.expect_state(widget, "failed")
        expect(widget).to_contain_text("The connection request timed out.")
        tab.expect_said("Connection result: ")
        tab.expect_ready()

        with tab.page.expect_popup() as opened:
            tab.act(widget, "retry")
        popup = opened.value
        popup.locator('#login input[name="login"]').wait_for()
        tab.expect_state(widget, "retrying")
        forged = {
            "type": "parkway:connect",
            "chatId": tab.chat_id,
            "toolCallId": call_id,
            "outcome": "connected",
        }
        popup.goto(f"{rig.base_url}/healthz")  # the API origin, in the widget's own popup
        popup.evaluate("m => window.opener.postMessage(m, location.origin)", forged)
        expect(widget).to_have_attribute("data-hints", "1")
        tab.expect_state(widget, "retrying")

        # the widget's start link was spent when the popup opened: a fresh one, as a
        # reloaded page would have it
        with ServerView(tab) as server_view:
            start_url = server_view.call(tab.chat_id, call_id)["widget"]["startUrl"]
        popup.goto(f"{rig.base_url}{start_url}&retry=1")
        sign_in_at_provider(popup)
        tab.expect_state(widget, "reconnected")
        expect(widget.get_by_test_id("connect-reconnected")).to_have_text(
            "Acme connected ✓ (alice) after this request ended."
        )
        # the card keeps saying what the agent was told: the stored outcome
        expect(widget.get_by_test_id("connect-told")).to_have_text(
            "The agent was told: not connected (timeout)."
        )
        tab.expect_ready()
        screenshot(tab.page, "connect-retry")
        with ServerView(tab) as server_view:
            assert server_view.call(tab.chat_id, call_id)["outcome"] == {"outcome": "timeout"}
            listed = server_view.http.get("/api/connections?provider=acme").json()
        assert [(c["account"], c["status"]) for c in listed["connections"]] == [("alice", "active")]
        tab.assert_clean()


def test_a_new_request_offers_the_existing_connection_and_use_settles_it(
    browser: Browser, redis_url: str
) -> None:
    """After one connect, the next request for the same provider (in a new chat)
    offers "Use alice": the server settles the call with that connection, and the chat
    continues with exactly that result, without a popup."""
    with provider_rig(redis_url) as rig:
        tab = Tab.new_context(browser, rig.base_url).open()
        tab.send("connect me to acme")
        first = tab.widget("connect")
        with tab.page.expect_popup() as opened:
            tab.act(first, "connect")
        sign_in_at_provider(opened.value)
        tab.expect_state(first, "connected")
        tab.expect_said('"connected":true')
        tab.expect_ready()
        with ServerView(tab) as server_view:
            [existing] = server_view.http.get("/api/connections?provider=acme").json()[
                "connections"
            ]

        tab.open()  # New chat
        tab.send("connect me to acme")
        second = tab.widget("connect")
        tab.expect_state(second, "pending")
        use = second.get_by_role("button", name="Use alice")
        expect(use).to_have_attribute("data-connection", existing["id"])
        tab.expect_waiting()
        screenshot(tab.page, "connect-use")
        use.click()
        tab.expect_state(second, "connected")
        expect(second.get_by_test_id("connect-account")).to_have_text("Account: alice")
        tab.expect_said(f'"connection_id":"{existing["id"]}"')
        tab.expect_ready()
        with ServerView(tab) as server_view:
            recorded = server_view.call(tab.chat_id, Tab.call_id(second))["outcome"]
        assert recorded["outcome"] == "output"
        assert recorded["output"]["connection_id"] == existing["id"]
        tab.assert_clean()


def test_a_blocked_popup_offers_a_tab_link_and_the_timeout_still_ends_the_call(
    browser: Browser, redis_url: str
) -> None:
    """§25: ``window.open`` returns null (a popup blocker): the widget offers "Continue
    in a new tab" with the start URL, never cancels anything itself, and when nobody
    finishes, the server's timeout ends the call and the widget shows it."""
    from tests.helpers.connect_rig import CONNECT_AGENT

    with provider_rig(redis_url) as rig:
        context = browser.new_context(viewport={"width": 1000, "height": 700})
        context.add_init_script("window.open = () => null;")
        tab = Tab(context, rig.base_url).open()
        tab.send("connect me to acme")
        widget = tab.widget("connect")
        tab.expect_state(widget, "pending")
        tab.expect_waiting()
        tab.act(widget, "connect")
        link = widget.locator('[data-action="open-tab"]')
        expect(link).to_be_visible()
        expect(link).to_have_attribute("href", re.compile(r"^/connect/acme/start\?chat="))
        call_id = Tab.call_id(widget)
        with ServerView(tab) as server:
            assert server.call(tab.chat_id, call_id)["status"] == "pending"
        assert sweep_later(redis_url, CONNECT_AGENT["template"]) == 1
        tab.expect_state(widget, "failed")
        with ServerView(tab) as server:
            assert server.call(tab.chat_id, call_id)["outcome"] == {"outcome": "timeout"}
        tab.assert_clean()


# -- the build kit in plain words -------------------------------------------------------


def test_the_kit_says_what_it_adds_and_code_status_shows_only_for_an_agent_that_runs_code(
    browser: Browser, redis_url: str
) -> None:
    """The panel says in plain words what the build kit lets the agent do. The
    sandbox's status matters only to an agent that runs code: with the kit on it is the
    kit's execute_code, and the panel says so; with the kit off, an agent without
    execute_code shows no sandbox status at all."""
    with server_thread(redis_url, COMMITTING_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url, build_kit=True).open()
        panel = tab.page.get_by_test_id("agent-panel")
        expect(panel).to_have_attribute("data-version", "1")
        note = panel.get_by_test_id("kit-note")
        expect(note).to_have_text(
            "While on, new turns run with the kit laid over your template, so the agent can"
            " also change its own template, run code (up to 60 s a run), save functions for"
            " later and ask to connect your accounts. Commits never include it."
        )
        status = panel.get_by_test_id("sandbox-status")
        why = panel.get_by_test_id("sandbox-note")
        expect(status).to_be_visible()
        expect(why).to_have_text("The build kit adds execute_code: your template has none.")
        panel.get_by_test_id("kit-toggle").uncheck()
        expect(status).to_be_hidden()
        expect(why).to_have_text("This agent runs no code: its template has no execute_code tool.")
        tab.assert_clean()
