"""What the playground shows of a real LLM, in a real browser (Debian chromium driven by
Playwright) against a real Parkway (uvicorn, Redis): the model's reasoning, a tool call
whose input is still being written, the model and token usage under the message, and a
provider failure.

The model is a test double that implements the model interface for real
(:class:`DoubleModel`): it yields the events a provider adapter yields, and can stop at
a :class:`Pause` until the test releases it, so the test sees the page mid-stream. The
tests wait on DOM state, never on fixed sleeps. ``PARKWAY_SCREENSHOTS=1`` also writes
``docs/img/reasoning.png``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from playwright.sync_api import Browser, Locator, expect

from parkway.runner.errors import ModelError
from parkway.runner.llm.model import (
    ModelEvent,
    ModelReasoningDelta,
    ModelRequest,
    ModelStepEnd,
    ModelTextDelta,
    ModelToolCall,
    ModelToolInputDelta,
    ModelToolInputStart,
    ModelUsage,
    UserTurn,
)
from tests.helpers.browser import Tab, screenshot, wait_until
from tests.helpers.support import CONFIRM_TOOL, agent_doc, server_thread

MODEL_NAME = "double:test-model"
REFUSED = "double: the API key was refused (401)"
THOUGHT_1 = "The user wants a plan. "
THOUGHT_2 = "I should ask them to confirm before going on."
FIRST_USAGE = ModelUsage(120, 45, 12)
SECOND_USAGE = ModelUsage(30, 5, 0)
# An agent with one client tool; the model comes from the test.
AGENT = agent_doc([], tools=[CONFIRM_TOOL])


@dataclass
class Pause:
    """A point in a model's stream where it stops until the test calls :meth:`release`.
    threading.Events: the server runs its own event loop in another thread."""

    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


Step = ModelEvent | Pause | ModelError


class DoubleModel:
    """A model that answers the ``k``-th model call of a chat with ``turns[k]``: model
    events to yield, :class:`Pause` points to wait at, or a :class:`ModelError` to raise
    (a provider failure). A user message that says ``break`` fails the call with
    ``REFUSED``, whatever the turn."""

    def __init__(self, turns: Sequence[Sequence[Step]]) -> None:
        self.turns = [list(turn) for turn in turns]
        self.pauses = [item for turn in self.turns for item in turn if isinstance(item, Pause)]

    def release_all(self) -> None:
        for pause in self.pauses:
            pause.release()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if last_user_text(request) == "break":
            yield ModelTextDelta("Let me look. ")
            raise ModelError(REFUSED)
        if request.call_index >= len(self.turns):
            raise ModelError("double: the test gave no turn for this call")
        for item in self.turns[request.call_index]:
            if isinstance(item, Pause):
                item.reached.set()
                # A worker thread waits, so the server's event loop keeps running.
                await asyncio.to_thread(item.released.wait, 30)
            elif isinstance(item, ModelError):
                raise item
            else:
                yield item


def last_user_text(request: ModelRequest) -> str:
    turns = [m for m in request.messages if isinstance(m, UserTurn)]
    return turns[-1].text if turns else ""


def step_end(reason: str, usage: ModelUsage, *, reasoning: str = "") -> ModelStepEnd:
    """The step's end as a provider adapter reports it: the reasoning goes into the
    step's stored ``parts`` (where the provider's signature would travel too), which is
    what GET /api/chats/{id} shows after a reload."""
    parts = (
        ({"type": "reasoning", "text": reasoning, "sig": "double-signature"},) if reasoning else ()
    )
    return ModelStepEnd(finish_reason=reason, usage=usage, model=MODEL_NAME, parts=parts)


def reasoning(tab: Tab) -> Locator:
    return tab.messages.get_by_test_id("reasoning")


def footer(tab: Tab) -> Locator:
    return tab.messages.get_by_test_id("message-footer")


def test_reasoning_streams_into_a_closed_disclosure_and_the_footer_names_model_and_usage(
    browser: Browser, redis_url: str
) -> None:
    """A reasoning model thinks before it answers. The page shows the thinking as it
    streams, folded away under "Reasoning" so the answer stays readable, and under the
    message the model that answered and what the message cost; a reload shows both
    again from the server's record."""
    thinking = Pause()
    model = DoubleModel(
        [
            [
                ModelReasoningDelta(THOUGHT_1),
                thinking,
                ModelReasoningDelta(THOUGHT_2),
                ModelTextDelta("Here is your plan: "),
                ModelTextDelta("sleep, then coffee."),
                step_end("stop", FIRST_USAGE, reasoning=THOUGHT_1 + THOUGHT_2),
            ]
        ]
    )
    with server_thread(redis_url, AGENT, model=model) as server:
        try:
            tab = Tab.new_context(browser, server.base_url).open()
            tab.send("plan my day")
            wait_until(tab.page, thinking.reached.is_set)

            # Mid-thought: the disclosure is there, closed, and already holds the text.
            disclosure = reasoning(tab)
            expect(disclosure).to_have_attribute("data-state", "streaming")
            expect(disclosure).to_have_js_property("open", False)
            expect(disclosure.locator("summary")).to_contain_text("Reasoning")
            expect(disclosure.locator(".reasoning-text")).to_be_hidden()
            disclosure.locator("summary").click()
            expect(disclosure.locator(".reasoning-text")).to_have_text(THOUGHT_1)
            expect(footer(tab)).to_have_count(0)  # nothing known about the message yet

            thinking.release()
            tab.expect_ready()
            # The user's open disclosure stays open while the rest streams in.
            expect(disclosure).to_have_attribute("data-state", "done")
            expect(disclosure.locator(".reasoning-text")).to_have_text(THOUGHT_1 + THOUGHT_2)
            tab.expect_said("Here is your plan: sleep, then coffee.")
            expect(footer(tab)).to_have_text(f"{MODEL_NAME} · 120 in · 45 out · 12 reasoning")
            # The thinking comes before the answer, the footer after it.
            order = tab.page.locator('[data-testid="message-assistant"] > [data-key]').evaluate_all(
                "els => els.map(el => el.dataset.key.split(':')[0])"
            )
            assert order == ["reasoning", "text", "footer"], order
            screenshot(tab.page, "reasoning")

            tab.open(tab.chat_id)
            disclosure = reasoning(tab)
            expect(disclosure).to_have_attribute("data-state", "done")
            expect(disclosure).to_have_js_property("open", False)
            disclosure.locator("summary").click()
            expect(disclosure.locator(".reasoning-text")).to_have_text(THOUGHT_1 + THOUGHT_2)
            expect(footer(tab)).to_have_text(f"{MODEL_NAME} · 120 in · 45 out · 12 reasoning")
            tab.expect_said("Here is your plan: sleep, then coffee.")
            tab.assert_clean()
        finally:
            model.release_all()


def test_a_tool_call_being_written_shows_a_placeholder_until_its_widget_can_answer(
    browser: Browser, redis_url: str
) -> None:
    """A model writes a tool call's input token by token, which can take seconds. The
    page shows the call coming ("Preparing confirm…" with the partial input) but offers
    nothing to answer until the input is complete; then the real widget takes the
    placeholder's place, answers, and the run continues with updated usage."""
    writing = Pause()
    model = DoubleModel(
        [
            [
                ModelReasoningDelta("Better check with the user."),
                ModelTextDelta("One question first. "),
                ModelToolInputStart("k1", "confirm"),
                ModelToolInputDelta("k1", '{"question": "Pro'),
                writing,
                ModelToolInputDelta("k1", 'ceed?"}'),
                ModelToolCall("confirm", {"question": "Proceed?"}, stream_key="k1"),
                step_end("tool-calls", FIRST_USAGE, reasoning="Better check with the user."),
            ],
            [ModelTextDelta("Thanks, going ahead."), step_end("stop", SECOND_USAGE)],
        ]
    )
    with server_thread(redis_url, AGENT, model=model) as server:
        try:
            tab = Tab.new_context(browser, server.base_url).open()
            tab.send("start")
            wait_until(tab.page, writing.reached.is_set)

            placeholder = tab.messages.locator(".tool-preparing")
            expect(placeholder).to_be_visible()
            expect(placeholder).to_contain_text("Preparing confirm…")
            expect(placeholder.locator('[data-field="partial-input"]')).to_have_text(
                '{"question": "Pro'
            )
            tab.expect_said("One question first.")
            # Nothing answerable yet: no widget, no button anywhere in the messages.
            expect(tab.page.locator('[data-testid^="widget-"]')).to_have_count(0)
            expect(tab.messages.locator("button")).to_have_count(0)

            writing.release()
            widget = tab.widget("client")
            tab.expect_state(widget, "pending")
            expect(tab.messages.locator(".tool-preparing")).to_have_count(0)
            expect(widget.locator('[aria-label="Input"]')).to_contain_text('"question": "Proceed?"')
            tab.expect_waiting()
            expect(footer(tab)).to_have_text(f"{MODEL_NAME} · 120 in · 45 out · 12 reasoning")

            widget.get_by_label("Your answer (JSON)").fill('{"ok": true}')
            tab.act(widget, "submit")
            tab.expect_state(widget, "answered")
            tab.expect_said("Thanks, going ahead.")
            tab.expect_ready()
            # The same message, its totals now covering both model calls.
            expect(tab.page.get_by_test_id("message-assistant")).to_have_count(1)
            expect(footer(tab)).to_have_text(f"{MODEL_NAME} · 150 in · 50 out · 12 reasoning")
            tab.assert_clean()
        finally:
            model.release_all()


def test_a_tool_call_with_unreadable_input_replaces_its_placeholder_with_the_error(
    browser: Browser, redis_url: str
) -> None:
    """When the input the model wrote is not JSON, the call is refused
    (``tool-input-error``): the placeholder gives way to the call marked as an error,
    with nothing to answer, and the model goes on with the error as the call's result."""
    writing = Pause()
    model = DoubleModel(
        [
            [
                ModelToolInputStart("k1", "confirm"),
                ModelToolInputDelta("k1", '{"question": '),
                writing,
                ModelToolCall(
                    "confirm", {}, stream_key="k1", input_error="the input is not valid JSON"
                ),
                step_end("tool-calls", FIRST_USAGE),
            ],
            [ModelTextDelta("Sorry, my mistake."), step_end("stop", SECOND_USAGE)],
        ]
    )
    with server_thread(redis_url, AGENT, model=model) as server:
        try:
            tab = Tab.new_context(browser, server.base_url).open()
            tab.send("start")
            wait_until(tab.page, writing.reached.is_set)
            expect(tab.messages.locator(".tool-preparing")).to_contain_text("Preparing confirm…")

            writing.release()
            tab.expect_said("Sorry, my mistake.")
            tab.expect_ready()
            expect(tab.messages.locator(".tool-preparing")).to_have_count(0)
            call = tab.messages.locator('details.tool[data-tool="confirm"]')
            expect(call).to_be_visible()
            expect(call).to_have_attribute("data-state", "output-error")
            expect(call.locator(".badge")).to_have_text("error")
            expect(tab.page.locator('[data-testid^="widget-"]')).to_have_count(0)
            expect(tab.messages.locator("button")).to_have_count(0)
            tab.assert_clean()
        finally:
            model.release_all()


def test_a_provider_failure_shows_its_message_and_the_next_message_works(
    browser: Browser, redis_url: str
) -> None:
    """A provider refusing the key ends the stream with an error chunk. The user reads
    why in the message (the error names the provider and the cause) and can send the
    next message, which the model answers."""
    answer: list[Step] = [ModelTextDelta("Back again."), step_end("stop", SECOND_USAGE)]
    # Whether the failed call counts as a model call or not, the next one answers.
    model = DoubleModel([answer, answer])
    with server_thread(redis_url, AGENT, model=model) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("break")
        error = tab.messages.get_by_test_id("message-error")
        expect(error).to_have_text(REFUSED)
        expect(tab.page.get_by_test_id("chat-status")).to_have_attribute("data-status", "error")
        expect(tab.page.locator("#send")).to_be_enabled()

        tab.send("hello again")
        tab.expect_said("Back again.")
        tab.expect_ready()
        expect(tab.messages.get_by_test_id("message-error")).to_have_text(REFUSED)
        expect(tab.page.get_by_test_id("message-assistant")).to_have_count(2)
        tab.assert_clean()


def test_the_scripted_model_shows_no_footer_and_no_reasoning(
    browser: Browser, redis_url: str
) -> None:
    """The scripted demo model reports neither a model name nor usage: the page adds
    nothing under its messages rather than an empty or zero footer."""
    agent = agent_doc([[{"text": "Plain scripted answer."}]], tools=[CONFIRM_TOOL])
    with server_thread(redis_url, agent) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        tab.send("hi")
        tab.expect_said("Plain scripted answer.")
        tab.expect_ready()
        expect(footer(tab)).to_have_count(0)
        expect(reasoning(tab)).to_have_count(0)
        tab.assert_clean()
