"""An agent defined in Python whose client tools are every built-in render kind with
the return types a user writes, for the playground's tests of them
(tests/browser/test_playground_client_renders.py, and from the installed wheel
tests/product/test_installed_product.py, which copies this file into a folder outside
the repository and serves it with ``parkway serve --agent render_agent:agent``: it
imports nothing but Parkway, pydantic and typing_extensions).

Its model is a function: the message ``use <tool>`` calls that tool (a choice with the
options :data:`OPTIONS`, any other with a question), and once the call is answered it
says ``<tool> got <the result as JSON>.``, the result the model was given.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel
from typing_extensions import TypedDict

from parkway.runner import Agent, FunctionInfo, FunctionModel, ModelMessage, Reply, ToolCall

OPTIONS = ["Apollo", "Gemini"]


def clerk(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
    """Call the tool the user names; then say what it answered."""
    results = info.results_since_user()
    if results:
        last = results[-1]
        return f"{last.tool_name} got {json.dumps(last.result, sort_keys=True)}."
    name = info.last_user_text.removeprefix("use ").strip()
    if "options" in info.tool(name).input_schema.get("properties", {}):
        return ToolCall(name, {"options": OPTIONS})
    return ToolCall(name, {"question": f"What does {name} answer?"})


agent = Agent("renders", instructions="Ask the person.", model=FunctionModel(clerk))


# -- render="choice" ----------------------------------------------------------------------


@agent.client_tool(render="choice")  # the README's example, as written there
def choose_project(options: list[str]) -> str:
    """Ask which project to book it on."""
    raise NotImplementedError


class Project(BaseModel):
    project: str


@agent.client_tool(render="choice")
def choose_model(options: list[str]) -> Project:
    """A choice returning a model: its one field, whatever its name, holds the option."""
    raise NotImplementedError


class Picked(TypedDict):
    name: str


@agent.client_tool(render="choice")
def choose_typed(options: list[str]) -> Picked:
    """A choice returning a TypedDict."""
    raise NotImplementedError


@agent.client_tool(render="choice")
def choose_dict(options: list[str]) -> dict[str, str]:
    """A choice returning a dict: the option under "choice"."""
    raise NotImplementedError


@agent.client_tool(render="choice")
def choose_literal(options: list[str]) -> Literal["Apollo", "Gemini"]:
    """A choice returning one of a Literal's strings."""
    raise NotImplementedError


# -- render="client" (the JSON editor) ----------------------------------------------------


@agent.client_tool(render="client")
def ask_text(question: str) -> str:
    """A JSON answer that is a string."""
    raise NotImplementedError


class Ticket(BaseModel):
    title: str
    priority: int


@agent.client_tool  # no render: the JSON editor too
def ask_ticket(question: str) -> Ticket:
    """A JSON answer that is a model."""
    raise NotImplementedError


@agent.client_tool(render="client")
def ask_counts(question: str) -> dict[str, int]:
    """A JSON answer that is a dict."""
    raise NotImplementedError


# -- render="connect" ---------------------------------------------------------------------


@agent.client_tool(render={"kind": "connect", "provider": "acme"})
def connect_dict(question: str) -> dict[str, Any]:
    """A connect card whose answer is read as a dict."""
    raise NotImplementedError


class Connection(BaseModel):
    connected: bool
    reason: str | None = None
    connection_id: str | None = None


@agent.client_tool(render={"kind": "connect", "provider": "acme"})
def connect_model(question: str) -> Connection:
    """A connect card whose answer is read as a model."""
    raise NotImplementedError


# -- an approval's card kind, which no client call can be answered with --------------------


@agent.client_tool(render="code")
def review_code(question: str) -> str:
    """Named for a custom front end's widget; the playground says it cannot draw it."""
    raise NotImplementedError
