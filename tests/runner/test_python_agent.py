"""Agents defined in Python (issue 30): ``Agent``, ``@agent.tool``, ``@agent.client_tool``.

Schemas come from signatures (checked against pydantic's own schema of the same
parameters), descriptions from docstrings in each style, arguments arrive typed, results
serialise, and a ``needs_approval`` function decides per call on the server. The turns
run through a real :class:`Runner` on a real Redis, driven by the scripted model, against
the template the agent compiles to: the same path a served agent takes.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from redis.asyncio import Redis

from parkway.runner import (
    Agent,
    AgentFile,
    InvalidOutcomeError,
    Runner,
    ScriptedModel,
    TemplateError,
    ToolContext,
    load_template,
)
from parkway.runner.agent.docstrings import read_docstring
from parkway.runner.agent.signatures import ToolSignature
from parkway.runner.events import ApprovalRequested, ToolInputRejected, ToolSucceeded
from tests.helpers import expenses_agent
from tests.helpers.expenses_agent import Currency, Expense, agent
from tests.helpers.runner_rig import finish, parked, said, turn
from tests.helpers.support import call, text

FORBID = ConfigDict(extra="forbid", protected_namespaces=())


def _runner(redis: Redis, turns: list[list[dict[str, Any]]]) -> Runner:
    """A runner over the expenses agent, its model the scripted ``turns``."""
    with agent.override(model={"scripted": {"turns": turns}}):
        compiled = agent.agent_file()
    assert isinstance(compiled.model, ScriptedModel)
    return Runner(redis, compiled.model, compiled.template)


def _results(events: list[Any]) -> Any:
    """What the scripted model said: its ``{{last_tool_results}}``, parsed."""
    return json.loads(said(events))


# -- schemas from signatures ------------------------------------------------------------


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    zip_code: Annotated[str, Field(pattern=r"^\d{5}$")]


def plain_kinds(
    name: str,
    count: int,
    ratio: float,
    mode: Literal["fast", "slow"],
    colour: Colour,
    when: datetime,
    tags: list[str],
    address: Address,
    limit: Annotated[int, Field(ge=1, le=10)] = 5,
    note: str | None = None,
) -> None:
    """No docstring sections: only types, constraints and defaults."""


def test_the_input_schema_is_pydantics_own_for_the_same_parameters() -> None:
    """The schema the model sees must be exactly what validates its input: pydantic's
    JSON Schema of a model with the same fields (extra arguments forbidden)."""
    expected = create_model(
        "plain_kinds",
        __config__=FORBID,
        name=(str, ...),
        count=(int, ...),
        ratio=(float, ...),
        mode=(Literal["fast", "slow"], ...),
        colour=(Colour, ...),
        when=(datetime, ...),
        tags=(list[str], ...),
        address=(Address, ...),
        limit=(Annotated[int, Field(ge=1, le=10)], 5),
        note=(str | None, None),
    ).model_json_schema()
    schema = ToolSignature.of(plain_kinds).input_schema
    assert schema == expected
    # and what that means, in case both sides changed together
    assert schema["additionalProperties"] is False
    assert schema["required"] == [
        "name", "count", "ratio", "mode", "colour", "when", "tags", "address",
    ]  # fmt: skip
    assert schema["properties"]["limit"] == {
        "default": 5, "maximum": 10, "minimum": 1, "title": "Limit", "type": "integer",
    }  # fmt: skip
    assert schema["properties"]["when"]["format"] == "date-time"
    assert schema["$defs"]["Address"]["properties"]["zip_code"]["pattern"] == r"^\d{5}$"


def test_the_context_parameter_is_left_out_of_the_schema() -> None:
    """``ctx: ToolContext`` is the server's to fill, never the model's to invent."""
    fields = ToolSignature.of(expenses_agent.file_expense).input_schema["properties"]
    assert set(fields) == {"expense", "category"}
    assert ToolSignature.of(expenses_agent.file_expense).takes_context


def test_a_client_tools_output_schema_is_its_return_annotation() -> None:
    [entry] = [e for e in agent.to_template()["tools"] if e["name"] == "choose_category"]
    assert entry["output_schema"] == TypeAdapter(expenses_agent.Choice).json_schema()
    assert entry["render"] == {"kind": "choice"}
    assert entry["input_schema"]["properties"]["options"]["minItems"] == 2


# -- descriptions from docstrings -------------------------------------------------------


def google(amount: float, note: str) -> None:
    """Pay an expense back.

    Args:
        amount: How much, in euros.
        note: Why,
            over two lines.

    Returns:
        Nothing.
    """


def numpy(amount: float, note: str) -> None:
    """Pay an expense back.

    Parameters
    ----------
    amount : float
        How much, in euros.
    note
        Why,
        over two lines.
    """


def sphinx(amount: float, note: str) -> None:
    """Pay an expense back.

    :param amount: How much, in euros.
    :param note: Why,
        over two lines.
    """


@pytest.mark.parametrize("func", [google, numpy, sphinx], ids=["google", "numpy", "sphinx"])
def test_each_docstring_style_describes_the_tool_and_its_parameters(func: Any) -> None:
    """Whatever style a team writes, the model gets the summary as the tool's
    description and each parameter's text on its property (sections are not leaked
    into the description)."""
    signature = ToolSignature.of(func)
    assert signature.description == "Pay an expense back."
    props = signature.input_schema["properties"]
    assert props["amount"]["description"] == "How much, in euros."
    assert props["note"]["description"] == "Why,\nover two lines."


def test_a_docstring_without_sections_is_the_description_whole() -> None:
    parts = read_docstring(plain_kinds)
    assert parts.description == "No docstring sections: only types, constraints and defaults."
    assert parts.parameters == {}


def annotated_wins(amount: Annotated[float, Field(description="From the annotation.")]) -> None:
    """Pay.

    Args:
        amount: From the docstring.
    """


def test_an_annotated_description_wins_over_the_docstring() -> None:
    props = ToolSignature.of(annotated_wins).input_schema["properties"]
    assert props["amount"]["description"] == "From the annotation."


# -- turns: typed arguments, results, errors --------------------------------------------

EXPENSE = {"amount": 42.5, "currency": "EUR", "spent_on": "2026-03-02"}


async def test_a_pydantic_argument_arrives_as_the_model_and_the_result_is_json(
    redis: Redis,
) -> None:
    """The tool receives an ``Expense`` (its date a ``date``, its currency the enum),
    not a dict; its dataclass result reaches the model as a JSON object."""
    expenses_agent.RECEIVED.clear()
    runner = _runner(
        redis,
        [[call("file_expense", {"expense": EXPENSE, "category": "travel"})],
         [text("{{last_tool_results}}")]],
    )  # fmt: skip
    events = await turn(runner, "py1")
    assert finish(events) == "stop"
    [received] = expenses_agent.RECEIVED
    assert received["chat"] == "py1"
    expense = received["expense"]
    assert isinstance(expense, Expense)
    assert expense.spent_on == date(2026, 3, 2) and expense.currency is Currency.EUR
    assert _results(events) == [
        {"tool": "file_expense", "result": {"expense_id": "exp-2026-03-02", "category": "travel"}}
    ]


async def test_invalid_arguments_are_a_correctable_input_error(redis: Redis) -> None:
    """An argument the signature refuses (a negative amount, an unknown category, an
    extra argument) is a tool-input error the model reads and corrects; the tool never
    runs."""
    expenses_agent.RECEIVED.clear()
    bad = {"expense": {**EXPENSE, "amount": -3}, "category": "travel"}
    runner = _runner(
        redis,
        [[call("file_expense", bad)], [call("file_expense", {"expense": EXPENSE, "x": 1})],
         [text("{{last_tool_results}}")]],
    )  # fmt: skip
    events = await turn(runner, "py2")
    first, second = (e.error for e in events if isinstance(e, ToolInputRejected))
    assert first.startswith("invalid input for tool 'file_expense' at expense/amount:")
    assert second.startswith("invalid input for tool 'file_expense' at (root):")
    assert "'x'" in second
    assert expenses_agent.RECEIVED == []
    assert finish(events) == "stop"


async def test_pydantic_checks_beyond_the_schema_are_input_errors_too(redis: Redis) -> None:
    """A date the JSON Schema's ``format`` lets through (formats are not asserted) is
    still refused by the typed argument, as an input error, before anything runs."""
    expenses_agent.RECEIVED.clear()
    runner = _runner(
        redis,
        [[call("file_expense", {"expense": {**EXPENSE, "spent_on": "the second of March"}})],
         [text("done")]],
    )  # fmt: skip
    events = await turn(runner, "py3")
    [rejected] = [e for e in events if isinstance(e, ToolInputRejected)]
    assert rejected.error.startswith("invalid input for tool 'file_expense' at expense.spent_on:")
    assert expenses_agent.RECEIVED == []


async def test_a_tool_error_reaches_the_model_as_the_tools_message(redis: Redis) -> None:
    runner = _runner(
        redis, [[call("refuse", {"reason": "no receipt"})], [text("{{last_tool_results}}")]]
    )
    events = await turn(runner, "py4")
    assert _results(events) == [{"tool": "refuse", "result": {"error": "refused: no receipt"}}]


# -- a per-call approval ----------------------------------------------------------------


async def test_a_conditional_approval_parks_only_above_its_threshold(redis: Redis) -> None:
    """``needs_approval=over_100_eur``: 80 EUR is paid at once, 250 EUR waits for a
    human, and on approval runs with exactly the approved input; the parked call is an
    ordinary approval (approval id, request event)."""
    expenses_agent.RECEIVED.clear()
    runner = _runner(
        redis,
        [[call("reimburse", {"amount": 80, "currency": "EUR"}),
          call("reimburse", {"amount": 250, "currency": "EUR"})],
         [text("{{last_tool_results}}")]],
    )  # fmt: skip
    first = await turn(runner, "py5")
    assert finish(first) == "tool-calls"
    [pending] = parked(first)
    assert pending.kind == "approval" and pending.input == {"amount": 250, "currency": "EUR"}
    assert [e.approval_id for e in first if isinstance(e, ApprovalRequested)] == [
        pending.approval_id
    ]
    assert pending.edit_schema is not None  # allow_edits=True
    assert [r["amount"] for r in expenses_agent.RECEIVED] == [80]
    assert [e.output for e in first if isinstance(e, ToolSucceeded)] == [
        {"expense_id": "exp-1", "total": 80.0}
    ]
    await runner.settle("py5", "alice", pending.tool_call_id, {"outcome": "approved"})
    second = await (await runner.resume("py5", "alice")).collect()
    assert [(r["amount"], r["currency"]) for r in expenses_agent.RECEIVED] == [
        (80, Currency.EUR),
        (250, Currency.EUR),
    ]
    assert finish(second) == "stop"


async def test_the_rule_sees_typed_arguments_and_another_currency_asks(redis: Redis) -> None:
    """The rule gets the validated enum (``currency is not Currency.EUR`` would be true
    for the raw string "EUR" and ask every time): 5 USD asks, 5 EUR does not."""
    expenses_agent.RECEIVED.clear()
    runner = _runner(
        redis,
        [[call("reimburse", {"amount": 5, "currency": "USD"}),
          call("reimburse", {"amount": 5, "currency": "EUR"})],
         [text("done")]],
    )  # fmt: skip
    [pending] = parked(await turn(runner, "py6"))
    assert pending.input["currency"] == "USD"
    assert [r["currency"] for r in expenses_agent.RECEIVED] == [Currency.EUR]
    await runner.settle("py6", "alice", pending.tool_call_id, {"outcome": "denied"})
    await (await runner.resume("py6", "alice")).collect()


def test_the_compiled_entry_names_the_rule_by_policy_and_ref() -> None:
    """The template stays plain JSON: the rule is reached through the ref."""
    [entry] = [e for e in agent.to_template()["tools"] if e["name"] == "reimburse"]
    assert entry["needs_approval"] == "per_call"
    assert entry["ref"] == "tests.helpers.expenses_agent:reimburse"
    spec = load_template(agent.to_template()).tool("reimburse")
    assert spec is not None and spec.approval_rule is not None
    ctx = ToolContext("c", "alice", "t", "reimburse")
    assert spec.asks_approval({"amount": 101, "currency": "EUR"}, ctx) is True
    assert spec.asks_approval({"amount": 100, "currency": "EUR"}, ctx) is False


def test_per_call_without_a_rule_is_refused_at_load() -> None:
    """A committed or hand-written template cannot claim a rule the function lacks."""
    entry = {"type": "function", "name": "x", "ref": "tests.helpers.tools:publish",
             "needs_approval": "per_call"}  # fmt: skip
    with pytest.raises(TemplateError, match="per_call"):
        load_template({"tools": [entry]})


# -- a client tool ----------------------------------------------------------------------


async def test_a_client_tool_parks_and_its_answer_must_match_the_return_type(
    redis: Redis,
) -> None:
    """The return annotation is the contract for the browser's answer: a wrong shape
    is refused at settle, the right one reaches the model."""
    runner = _runner(
        redis,
        [[call("choose_category", {"question": "Which?", "options": ["travel", "meals"]})],
         [text("{{last_tool_results}}")]],
    )  # fmt: skip
    [pending] = parked(await turn(runner, "py7"))
    assert pending.kind == "client" and pending.render == {"kind": "choice"}
    with pytest.raises(InvalidOutcomeError):
        await runner.settle(
            "py7", "alice", pending.tool_call_id, {"outcome": "output", "output": {"pick": 1}}
        )
    await runner.settle(
        "py7", "alice", pending.tool_call_id,
        {"outcome": "output", "output": {"choice": "travel"}},
    )  # fmt: skip
    events = await (await runner.resume("py7", "alice")).collect()
    assert _results(events) == [{"tool": "choose_category", "result": {"choice": "travel"}}]


# -- compiling --------------------------------------------------------------------------


def test_the_agent_compiles_to_a_template_and_an_agent_file() -> None:
    compiled = agent.agent_file()
    assert isinstance(compiled, AgentFile)
    assert compiled.name == "expenses" and compiled.model is None
    assert compiled.spec is not None and compiled.spec.name == "anthropic:claude-sonnet-4-6"
    assert list(compiled.template.tools) == [
        "file_expense", "reimburse", "refuse", "choose_category",
    ]  # fmt: skip
    assert json.loads(agent.template_json()) == agent.to_template()
    document = agent.agent_file_document()
    assert document["model"] == "anthropic:claude-sonnet-4-6"
    assert document["template"] == agent.to_template()


def test_override_swaps_the_model_for_the_block_only() -> None:
    scripted = ScriptedModel([[{"text": "hi"}]])
    with agent.override(model=scripted) as same:
        assert same is agent
        assert agent.agent_file().model is scripted
    assert agent.agent_file().model is None
    with pytest.raises(TypeError, match="model must be"):
        Agent("x", model=42)  # type: ignore[arg-type]


def test_switches_add_the_built_in_tools() -> None:
    built = Agent("ops", model="openai:gpt-5-mini", request_connection=True, commit_config=True)
    built.use_execute_code(needs_approval="ask")
    tools = built.to_template()["tools"]
    assert tools[0] == {
        "@ag.embed": {"@ag.references": {"workflow": {"slug": "__ag__request_connection"}}}
    }
    assert tools[1:] == [
        {"type": "platform", "op": "commit_config"},
        {"type": "platform", "op": "execute_code", "needs_approval": "ask"},
    ]
    assert list(load_template(built.to_template()).tools) == [
        "request_connection", "commit_config", "execute_code",
    ]  # fmt: skip


def test_a_function_no_worker_could_import_is_refused() -> None:
    """A ref must import by name on every worker: lambdas and nested functions are
    refused when declared, a function shadowed after decorating when compiled."""
    local = Agent("local", model="openai:gpt-5-mini")

    def nested(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="inside a function"):
        local.tool(nested)
    with pytest.raises(TypeError, match="lambda"):
        local.tool(lambda x: x)
    local.tool(name="refuse")(expenses_agent.refuse_expense)
    with pytest.raises(ValueError, match="already has a tool"):
        local.tool(name="refuse")(expenses_agent.refuse_expense)


def shadowed(x: int) -> int:
    """Decorated below, then replaced by another function of the same name."""
    return x


_SHADOW = Agent("shadow", model="openai:gpt-5-mini")
_SHADOW.tool(shadowed)


def shadowed(x: int) -> int:  # type: ignore[no-redef]
    return x + 1


def test_a_function_its_ref_no_longer_names_is_refused_when_compiled() -> None:
    with pytest.raises(TemplateError, match="does not name this function"):
        _SHADOW.to_template()


def test_signatures_that_cannot_be_tools_say_why() -> None:
    def star(*items: int) -> None: ...

    def ctx_late(x: int, ctx: ToolContext) -> None: ...

    with pytest.raises(TypeError, match=r"\*items"):
        ToolSignature.of(star)
    with pytest.raises(TypeError, match="only as the first parameter"):
        ToolSignature.of(ctx_late)
    with pytest.raises(TypeError, match="not on a client tool"):
        ToolSignature.of(expenses_agent.file_expense, allow_context=False)


def test_a_needs_approval_function_takes_only_the_tools_parameters() -> None:
    local = Agent("rules", model="openai:gpt-5-mini")
    with pytest.raises(TypeError, match="'total' is not one of"):
        local.tool(needs_approval=lambda total: total > 1)(expenses_agent.refuse_expense)


async def test_an_exported_typed_tool_is_bound_from_its_signature_when_served_alone(
    redis: Redis,
) -> None:
    """An agent file exported from an Agent names its typed functions with
    ``"arguments": "typed"``: served on its own, where no ``@agent.tool`` ran in this
    process, the function is still called with its own typed, validated arguments (an
    entry without it gets the input as one dict, as agent files always did)."""
    from parkway.runner import parse_agent_file

    entry = {"type": "function", "name": "add", "ref": "tests.helpers.tools:typed_add",
             "arguments": "typed"}  # fmt: skip
    doc = {
        "template": {"instructions": "", "tools": [entry]},
        "model": {
            "scripted": {"turns": [[call("add", {"a": 2})], [text("{{last_tool_results}}")]]}
        },
    }
    agent = parse_agent_file(doc)
    spec = agent.template.tool("add")
    assert spec is not None and set(spec.input_schema["properties"]) == {"a", "b"}
    runner = Runner(redis, agent.model, agent.template)
    events = await (await runner.start_turn("typed-alone", "alice", "go")).collect()
    assert said(events) == '[{"result":3,"tool":"add"}]'
