"""Code Mode in the playground: the code review card, the run's result and its artifacts,
the function library's diff card and panel, and what the page says when the server
cannot run code. In a real browser (Debian chromium, Playwright) against a real Parkway
(uvicorn, Redis) whose programs run in real bubblewrap.

The tests wait on DOM state, never on fixed sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, expect

from parkway.runner.canonical import canonical_json
from parkway.runner.demo import SALES_SUMMARY_CODE, get_sales
from tests.helpers.browser import ServerView, Tab
from tests.helpers.support import WEATHER_TOOL, agent_doc, call, server_thread, text

SALES_TOOL = {"type": "function", "name": "get_sales", "ref": "parkway.runner.demo:get_sales"}
CODE_TOOL = {"type": "platform", "op": "execute_code"}
SAVE_TOOL = {"type": "platform", "op": "save_function"}
MONTH = {"month": "2026-10"}
SALES_AGENT = agent_doc(
    [
        [text("Fetching the sales. "), call("get_sales", MONTH)],
        [
            text("Summarising them. "),
            call(
                "execute_code",
                {"code": SALES_SUMMARY_CODE, "inputs": ["{{result.get_sales.artifact_id}}"]},
            ),
        ],
        [text("Top city: {{result.execute_code.result.top_city}}.")],
    ],
    tools=[SALES_TOOL, CODE_TOOL],
)
AGENT_CODE = 'print("as the agent wrote it")\n'
# What the person runs instead: it calls one of the agent's server tools (policy allow)
# twice; both calls come as data parts with the code call's id, and both are listed.
EDITED_CODE = (
    'skies = [tools.call("get_weather", {"city": c})["sky"] for c in ("Oslo", "Paris")]\n'
    'print("edited by a human")\n'
    'result(" and ".join(skies))\n'
)
RISKY_CODE = "import shutil\nshutil.rmtree('/tmp')\n"
EDIT_AGENT = agent_doc(
    [
        [call("execute_code", {"code": AGENT_CODE})],
        [
            text("It said {{result.execute_code.result}}. "),
            call("execute_code", {"code": RISKY_CODE}),
        ],
        [text("Done.")],
    ],
    tools=[WEATHER_TOOL, CODE_TOOL],
)
FIRST_VERSION = (
    'def top_city(orders):\n    """The city with the most orders."""\n'
    '    return orders[0]["city"]\n'
)
SECOND_VERSION = (
    "from collections import Counter\n\n\n"
    'def top_city(orders):\n    """The city with the most orders."""\n'
    '    return Counter(o["city"] for o in orders).most_common(1)[0][0]\n'
)
DESCRIPTION = "The city with the most orders."
LIBRARY_AGENT = agent_doc(
    [
        [
            call(
                "save_function",
                {"name": "top_city", "code": FIRST_VERSION, "description": DESCRIPTION},
            )
        ],
        [
            call(
                "save_function",
                {"name": "top_city", "code": SECOND_VERSION, "description": DESCRIPTION},
            )
        ],
        [text("Saved version {{result.save_function.version}}.")],
    ],
    tools=[SAVE_TOOL],
)
# Markup (which the page must show as text), then 3,000 lines of 11 bytes: past the 16 KiB
# the model sees inline.
MARKUP = "<img src=x alt=injected>"
LONG_OUTPUT_CODE = f'print("{MARKUP}")\nfor n in range(3000):\n    print(f"line {{n:05d}}")\n'
LONG_OUTPUT_BYTES = len(MARKUP) + 1 + 3000 * 11
LONG_OUTPUT_AGENT = agent_doc(
    [[call("execute_code", {"code": LONG_OUTPUT_CODE})], [text("Over.")]], tools=[CODE_TOOL]
)
ONE_CALL_AGENT = agent_doc(
    [[call("execute_code", {"code": AGENT_CODE, "limits": {"timeout_s": 5}})], [text("Over.")]],
    tools=[CODE_TOOL],
)


@pytest.fixture
def bwrap() -> None:
    """The tests that run code need bubblewrap: never skipped quietly, and a failure
    when ``PARKWAY_REQUIRE_SANDBOX=1`` (CI sets it)."""
    if shutil.which("bwrap") is not None:
        return
    message = (
        "CODE MODE BROWSER TESTS DID NOT RUN: bubblewrap is not installed "
        "(apt-get install bubblewrap)"
    )
    if os.environ.get("PARKWAY_REQUIRE_SANDBOX") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def sales_summary() -> dict[str, Any]:
    """What SALES_SUMMARY_CODE computes, computed here."""
    orders = get_sales(MONTH)["orders"]
    totals: Counter[str] = Counter()
    for order in orders:
        totals[order["city"]] += order["amount_eur"]
    city, total = totals.most_common(1)[0]
    return {"orders": len(orders), "top_city": city, "top_total_eur": round(total, 2)}


def tool_block(tab: Tab, tool: str, nth: int = 0) -> Locator:
    """The ``nth`` call of ``tool`` in the transcript, its details opened."""
    details = tab.page.locator(f'details.tool[data-tool="{tool}"]').nth(nth)
    expect(details).to_be_attached()
    if details.get_attribute("open") is None:
        details.locator(":scope > summary").click()
    return details


def chip(details: Locator) -> Locator:
    return details.locator(":scope > summary .badge")


def fetch_from_page(tab: Tab, href: str) -> dict[str, Any]:
    """GET ``href`` with the page's own session, as its Download link would."""
    got: dict[str, Any] = tab.page.evaluate(
        """async (href) => {
            const response = await fetch(href);
            const body = await response.arrayBuffer();
            return {status: response.status, size: body.byteLength,
                    disposition: response.headers.get("content-disposition")};
        }""",
        href,
    )
    return got


def test_code_review_shows_the_program_its_input_and_isolation_then_the_result(
    browser: Browser, redis_url: str, bwrap: None
) -> None:
    """A person can only approve code they can read: the card numbers and highlights
    the program, names the artifact it reads with its size, and shows the limits and
    isolation it would run under; once approved, the run's status and result appear,
    and the large tool result it read is downloadable from the page."""
    with server_thread(redis_url, SALES_AGENT) as server:
        token = httpx.post(f"{server.base_url}/api/sessions").json()["token"]
        sandbox = httpx.get(
            f"{server.base_url}/api/sandbox", headers={"authorization": f"Bearer {token}"}
        ).json()
        assert sandbox["available"], sandbox["reason"]
        tab = Tab.new_context(browser, server.base_url, build_kit=True).open()
        tab.send("summarise October's sales")
        card = tab.widget("code")
        tab.expect_state(card, "pending")
        tab.expect_waiting()

        # the program: numbered, highlighted, the server's escaped HTML and nothing else
        program = card.get_by_test_id("code-view")
        expected_lines = SALES_SUMMARY_CODE.rstrip("\n").split("\n")
        expect(program.locator(".code-ln")).to_have_text(
            [str(n + 1) for n in range(len(expected_lines))]
        )
        expect(program.locator(".code-text")).to_have_text(expected_lines)
        expect(program.locator(".tok-kn").first).to_have_text("from")
        expect(program.locator(".tok-k", has_text="for")).to_have_count(1)
        assert program.evaluate(
            "el => [...el.querySelectorAll('.code-text *')].every(n => n.tagName === 'SPAN')"
        )

        # the input: the get_sales artifact, with its size
        size = len(canonical_json(get_sales(MONTH)).encode())
        inputs = card.get_by_test_id("code-inputs")
        expect(inputs.locator(".code-input")).to_have_count(1)
        expect(
            inputs.locator('.code-input[data-found="true"] [data-field="input-size"]')
        ).to_contain_text(f"({size:,} bytes) · application/json · from get_sales")

        # the isolation, as the server probed it; the limits of this run: the page's
        # build kit (turned on in this tab) lets code run for 60 s (its sandbox permissions), and
        # the card says so: /api/sandbox and the docs say 10 s, the server's own limit
        layers = ", ".join(sandbox["isolation"]["layers"])
        expect(card.get_by_test_id("code-isolation")).to_have_text(f"Isolationbwrap: {layers}")
        expect(card.get_by_test_id("code-limits")).to_have_text(
            "Limits60 s wall clock (raised from the server's 10 s by the build kit) · 10 s CPU"
            " · 512 MiB memory · 16 processes · 64 MiB disk"
        )
        expect(card.get_by_test_id("code-unconfined")).to_have_count(0)
        expect(tab.page.get_by_test_id("sandbox-status")).to_have_text("Code: bwrap")

        tab.act(card, "approve")
        tab.expect_state(card, "approved")
        expect(card.get_by_test_id("code-status")).to_have_text("ok")
        result = card.locator('[data-field="result"]')
        expect(result).to_be_visible()
        assert json.loads(result.inner_text()) == sales_summary()
        tab.expect_said(f"Top city: {sales_summary()['top_city']}.")
        expect(chip(tool_block(tab, "execute_code"))).to_have_text("approved")

        # the get_sales result is a reference: its size, a preview, a working download
        sales = tool_block(tab, "get_sales")
        artifact = sales.get_by_test_id("artifact")
        expect(artifact.locator('[data-field="artifact-size"]')).to_have_attribute(
            "data-bytes", str(size)
        )
        expect(artifact.locator('[data-field="artifact-preview"]')).to_contain_text(
            '{"currency":"EUR"'
        )
        link = artifact.locator('[data-action="download"]')
        href = link.get_attribute("href")
        artifact_id = artifact.get_attribute("data-artifact-id")
        assert href == f"/api/chats/{tab.chat_id}/artifacts/{artifact_id}"
        got = fetch_from_page(tab, href)
        assert got["status"] == 200 and got["size"] == size
        assert got["disposition"] == f'attachment; filename="{artifact_id}.json"'
        tab.assert_clean()


def test_edited_code_is_what_runs_and_a_denial_carries_its_reason(
    browser: Browser, redis_url: str, bwrap: None
) -> None:
    """Edit is how a person fixes a program rather than refuse it: the edited code is
    what runs (its tool calls listed under it), the card and transcript say it was
    edited, and the server kept the edited input. Deny sends the person's reason."""
    with server_thread(redis_url, EDIT_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("run something")
        card = tab.widget("code")
        tab.expect_state(card, "pending")
        tab.act(card, "edit")
        editor = card.locator('textarea[data-field="code"]')
        expect(editor).to_have_value(AGENT_CODE)
        expect(card.get_by_test_id("code-view")).to_have_count(0)
        editor.fill(EDITED_CODE)
        tab.act(card, "approve")

        tab.expect_state(card, "approved")
        expect(card.get_by_test_id("code-approved")).to_have_text("Approved with edits ✓")
        expect(card.get_by_test_id("code-edited").locator(".code-text")).to_have_text(
            EDITED_CODE.rstrip("\n").split("\n")
        )
        expect(card.get_by_test_id("code-status")).to_have_text("ok")
        expect(card.locator('[data-field="stdout"]')).to_have_text("edited by a human\n")
        expect(card.locator('[data-field="result"]')).to_have_text('"snow and cloudy"')
        tab.expect_said("It said snow and cloudy.")
        first = tool_block(tab, "execute_code", 0)
        expect(chip(first)).to_have_text("approved, edited")
        expect(first).to_have_attribute("data-edited", "true")
        brokered = tab.page.get_by_test_id("code-tool-calls")
        expect(brokered.locator(".code-tool-call")).to_have_text(
            [
                'called get_weather({"city":"Oslo"}) → '
                '{"city":"Oslo","temperature_c":4,"sky":"snow"}',
                'called get_weather({"city":"Paris"}) → '
                '{"city":"Paris","temperature_c":14,"sky":"cloudy"}',
            ]
        )
        with ServerView(tab) as server_view:
            stored = server_view.call(tab.chat_id, Tab.call_id(card))
        assert stored["outcome"] == {"outcome": "approved", "input": {"code": EDITED_CODE}}

        # a reload lists the program's tool calls again (kept with the call's result)
        tab.open(tab.chat_id)
        expect(tab.page.get_by_test_id("code-tool-calls").locator(".code-tool-call")).to_have_count(
            2
        )
        expect(chip(tool_block(tab, "execute_code", 0))).to_have_text("approved, edited")

        expect(tab.page.locator('[data-kind="code"]')).to_have_count(2)
        risky = tab.widget("code")
        tab.expect_state(risky, "pending")
        risky.locator('[data-field="reason"]').fill("do not touch /tmp")
        tab.act(risky, "deny")
        tab.expect_state(risky, "denied")
        expect(risky.locator(".widget-result")).to_have_text("Denied: do not touch /tmp")
        tab.expect_said("Done.")
        tab.expect_ready()
        tab.assert_clean()


def test_a_long_stdout_is_cut_on_the_card_and_downloadable_whole(
    browser: Browser, redis_url: str, bwrap: None
) -> None:
    """Only the start of a long output goes to the model and the card; the whole of it is
    kept as an artifact, and the card links to it. What the program printed is text, even
    when it looks like markup."""
    with server_thread(redis_url, LONG_OUTPUT_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("print a lot")
        card = tab.widget("code")
        tab.act(card, "approve")
        tab.expect_state(card, "approved")
        expect(card.get_by_test_id("code-status")).to_have_text("ok")
        stdout = card.locator('[data-field="stdout"]')
        expect(stdout).to_contain_text(f"{MARKUP}\nline 00000\nline 00001\n")
        expect(stdout.locator("img")).to_have_count(0)
        assert len(stdout.text_content() or "") == 16 * 1024
        whole = card.get_by_test_id("artifact")
        expect(whole.locator(".artifact-label")).to_have_text("The whole stdout")
        expect(whole.locator('[data-field="artifact-size"]')).to_have_attribute(
            "data-bytes", str(LONG_OUTPUT_BYTES)
        )
        href = whole.locator('[data-action="download"]').get_attribute("href")
        assert href is not None
        got = fetch_from_page(tab, href)
        assert got["status"] == 200 and got["size"] == LONG_OUTPUT_BYTES
        tab.assert_clean()


def test_save_function_shows_the_change_and_the_panel_lists_each_version(
    browser: Browser, redis_url: str
) -> None:
    """Saving a function changes every later program of the agent, so it is reviewed
    like code: a new name says so, a new version is drawn as a diff against the saved
    one, and the agent panel lists what was saved, with each version's code."""
    with server_thread(redis_url, LIBRARY_AGENT) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        panel = tab.page.get_by_test_id("code-panel")
        expect(panel.get_by_test_id("library-note")).to_contain_text("No saved functions yet")
        tab.send("save it")
        card = tab.widget("library_change")
        tab.expect_state(card, "pending")
        expect(card.get_by_test_id("library-function")).to_have_text(f"top_city — {DESCRIPTION}")
        expect(card.get_by_test_id("library-new")).to_be_visible()
        expect(card.locator(".code-ln")).to_have_text(["1", "2", "3"])
        expect(card.locator(".tok-nf")).to_have_text("top_city")
        tab.act(card, "approve")
        tab.expect_state(card, "approved")
        expect(card.get_by_test_id("library-saved")).to_have_text("Saved top_city as version 1.")

        listed = panel.get_by_test_id("library-function")
        expect(listed).to_have_count(1)
        expect(listed).to_have_attribute("data-version", "1")
        expect(listed.locator(".library-signature")).to_have_text("top_city(orders)")
        expect(listed.locator(".library-version")).to_have_text("v1")
        expect(listed.locator(".library-description")).to_have_text(DESCRIPTION)

        expect(tab.page.locator('[data-kind="library_change"]')).to_have_count(2)
        second = tab.widget("library_change")
        diff = second.get_by_test_id("library-diff")
        expect(diff.locator('.diff-line[data-op="-"] .diff-text')).to_have_text(
            ['    return orders[0]["city"]']
        )
        expect(diff.locator('.diff-line[data-op="+"] .diff-text')).to_contain_text(
            ["from collections import Counter", "    return Counter("]
        )
        tab.act(second, "approve")
        tab.expect_said("Saved version 2.")
        expect(listed).to_have_attribute("data-version", "2")
        listed.locator('[data-action="show-versions"]').click()
        versions = listed.locator(".library-version-item")
        expect(versions).to_have_count(2)
        expect(versions.locator('[data-field="code"]')).to_have_text(
            [SECOND_VERSION, FIRST_VERSION], use_inner_text=False
        )
        tab.assert_clean()


def test_a_server_that_cannot_run_code_says_why_before_and_after_approval(
    browser: Browser, redis_url: str
) -> None:
    """Code never runs unconfined as a fallback: when bubblewrap cannot start, the card
    says so with the operator's fix before anyone approves, and approving answers
    "unavailable" with nothing run."""
    with server_thread(redis_url, ONE_CALL_AGENT, sandbox_bwrap="/nonexistent/bwrap") as server:
        tab = Tab.new_context(browser, server.base_url).open()
        status = tab.page.get_by_test_id("sandbox-status")
        expect(status).to_have_attribute("data-state", "unavailable")
        expect(status).to_contain_text("Code: unavailable — bubblewrap is not installed")
        tab.send("run it")
        card = tab.widget("code")
        tab.expect_state(card, "pending")
        expect(card.get_by_test_id("code-unavailable")).to_contain_text(
            "This server cannot run code: bubblewrap is not installed "
            "(no bwrap at /nonexistent/bwrap): apt-get install bubblewrap"
        )
        expect(card.get_by_test_id("code-unavailable")).not_to_contain_text("..")
        expect(card.get_by_test_id("code-limits")).to_have_count(0)
        tab.act(card, "approve")
        tab.expect_state(card, "approved")
        expect(card.get_by_test_id("code-status")).to_have_text("unavailable")
        expect(card.locator('[data-field="message"]')).to_contain_text(
            "bubblewrap is not installed"
        )
        expect(card.locator('[data-field="stdout"]')).to_have_count(0)
        expect(chip(tool_block(tab, "execute_code"))).to_have_text("unavailable")
        tab.assert_clean()


def test_an_unconfined_server_marks_every_review_and_the_call_asked_limits(
    browser: Browser, redis_url: str
) -> None:
    """An operator may run code without isolation on a single-user machine; the person
    approving must see that on every card, and the limits the call asks for."""
    with server_thread(redis_url, ONE_CALL_AGENT, sandbox="unconfined") as server:
        tab = Tab.new_context(browser, server.base_url).open()
        expect(tab.page.get_by_test_id("sandbox-status")).to_have_attribute(
            "data-state", "unconfined"
        )
        tab.send("run it")
        card = tab.widget("code")
        tab.expect_state(card, "pending")
        expect(card.get_by_test_id("code-unconfined")).to_have_text("UNCONFINED")
        expect(card.get_by_test_id("code-isolation")).to_contain_text("unconfined")
        expect(card.get_by_test_id("code-asked-limits")).to_have_text(
            "The call asks for 5 s wall clock (it may only lower the limits above)."
        )
        tab.assert_clean()
