"""Every built-in render kind of a client tool, with the return types a user writes, is
answered in the playground and the run goes on (a real chromium against a real Parkway
serving an agent defined in Python, tests/helpers/render_agent.py).

A choice returning ``str`` once answered ``{"choice": ...}`` from the page: the server
refused it (422) and the card waited for an answer it could never take, while
``Runtime.answer(..., "Apollo")`` passed. Here each tool is asked in turn in one chat,
its card answered as a person would, and the answer checked where it lands: the
call's stored outcome and the model's next words.
"""

from __future__ import annotations

from playwright.sync_api import Browser, expect
from redis.asyncio import Redis

from tests.helpers import render_agent
from tests.helpers.browser import Tab
from tests.helpers.render_cases import CASES, answer_each
from tests.helpers.support import server_thread


def test_every_built_in_render_kind_answers_each_return_type_and_the_run_resumes(
    browser: Browser, redis: Redis, redis_url: str
) -> None:
    """Each card is answered in the page with the value its tool's return type takes
    (the option itself for ``str``, ``{"project": ...}`` for a model, ...), the server
    accepts it, the call settles with it and the model reads it: nothing is left
    "Waiting for you"."""
    agent = render_agent.agent
    document = {"template": agent.to_template(), "model": {"scripted": {"turns": []}}}
    with server_thread(redis_url, document, model=agent.model) as server:
        tab = Tab.new_context(browser, server.base_url).open()
        answer_each(tab, CASES)
        choice = tab.widget_of(tab.call_id(tab.widget("choice", nth=0)))
        expect(choice).to_contain_text("You chose “Gemini”")  # the option, not JSON
