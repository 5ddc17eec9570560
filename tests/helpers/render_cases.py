"""The cases of the playground's client render tests: each tool of
tests/helpers/render_agent.py, how a person answers its card, and where the answer must
land (tests/browser/test_playground_client_renders.py runs them all; the installed
product's test, tests/product/test_installed_product.py, some of them against the
wheel). :func:`answer_each` plays them in one chat of a tab.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from playwright.sync_api import Locator, expect

from tests.helpers.browser import ServerView, Tab, console_errors

__all__ = ["CASES", "Case", "answer_each"]

DECLINED = {"connected": False, "reason": "declined", "retryable": False}
UNSUPPORTED = "This app cannot handle 'review_code' requests (widget kind 'code')."


def pick(option: str) -> Callable[[Locator], None]:
    def answer(card: Locator) -> None:
        card.get_by_role("button", name=option).click()

    return answer


def write(draft: Any, answer: Any) -> Callable[[Locator], None]:
    """Check the JSON editor starts from ``draft``, then send ``answer``."""

    def send(card: Locator) -> None:
        editor = card.locator('[data-field="output"]')
        expect(editor).to_have_value(json.dumps(draft, indent=2))
        editor.fill(json.dumps(answer))
        card.locator('[data-action="submit"]').click()

    return send


def not_now(card: Locator) -> None:
    card.locator('[data-action="decline"]').click()


def nothing(card: Locator) -> None:
    """The page answers on its own."""


@dataclass(frozen=True)
class Case:
    """One client tool: its card's kind, how a person answers it, the card's state
    then, the call's stored outcome and the result the model is given."""

    tool: str
    kind: str
    answer: Callable[[Locator], None]
    state: str
    outcome: dict[str, Any]
    result: Any
    waits: bool = True  # whether the call waits for the person ("Waiting for you")

    @classmethod
    def output(cls, tool: str, kind: str, answer: Any, output: Any) -> Case:
        return cls(tool, kind, answer, "answered", {"outcome": "output", "output": output}, output)


CASES = [
    # render="choice": str (the README's), a model, a TypedDict, a dict, a Literal
    Case.output("choose_project", "choice", pick("Gemini"), "Gemini"),
    Case.output("choose_model", "choice", pick("Gemini"), {"project": "Gemini"}),
    Case.output("choose_typed", "choice", pick("Apollo"), {"name": "Apollo"}),
    Case.output("choose_dict", "choice", pick("Gemini"), {"choice": "Gemini"}),
    Case.output("choose_literal", "choice", pick("Apollo"), "Apollo"),
    # render="client" (and none): the JSON editor, started from the schema's shape
    Case.output("ask_text", "client", write("", "Ada"), "Ada"),
    Case.output(
        "ask_ticket",
        "client",
        write({"title": "", "priority": 0}, {"title": "Fix", "priority": 2}),
        {"title": "Fix", "priority": 2},
    ),
    Case.output("ask_counts", "client", write({}, {"seats": 3}), {"seats": 3}),
    # render="connect": a dict or a model reads the connection result
    Case("connect_dict", "connect", not_now, "declined", {"outcome": "declined"}, DECLINED),
    Case("connect_model", "connect", not_now, "declined", {"outcome": "declined"}, DECLINED),
    # a client tool naming an approval's card: unsupported here, settled as an error
    Case(
        "review_code",
        "unsupported",
        nothing,
        "unsupported",
        {"outcome": "error", "message": UNSUPPORTED},
        {"error": UNSUPPORTED},
        waits=False,
    ),
]


def answer_each(tab: Tab, cases: list[Case]) -> None:
    """Ask each case's tool in the tab's chat, answer its card and see the run go on."""
    errors = console_errors(tab.page)
    with ServerView(tab) as server:
        for case in cases:
            cards = tab.page.locator(f'[data-testid^="widget-"][data-kind="{case.kind}"]')
            before = cards.count()
            tab.send(f"use {case.tool}")
            card = tab.widget(case.kind, nth=before)
            expect(card, case.tool).to_have_attribute("data-tool", case.tool)
            if case.waits:
                tab.expect_waiting()
            case.answer(card)
            tab.expect_state(card, case.state)
            tab.expect_said(f"{case.tool} got {json.dumps(case.result, sort_keys=True)}.")
            tab.expect_ready()
            view = server.call(tab.chat_id, tab.call_id(card))
            assert (view["status"], view["outcome"]) == ("settled", case.outcome), case.tool
    assert not errors, errors  # no answer refused (422), no script error
    tab.assert_clean()
