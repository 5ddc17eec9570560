"""Client tools' built-in render kinds and the return types a user writes agree
(runner/agent/renders.py): a choice answers in the shape its output schema wants, a
return type no widget answer can be is refused when the tool is declared, and a JSON
template's client tool entry is judged by the same rule."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, TypeAdapter
from redis.asyncio import Redis
from typing_extensions import TypedDict

from parkway.runner import (
    Agent,
    FunctionInfo,
    FunctionModel,
    ModelMessage,
    Reply,
    Runtime,
    TemplateError,
    ToolCall,
)
from parkway.runner.agent import (
    RenderMismatch,
    choice_answer,
    load_template,
    load_template_json,
    render_mismatch,
)
from parkway.runner.canonical import canonical_json
from parkway.runner.store import chat_keys


class Project(BaseModel):
    project: str


class Noted(BaseModel):
    colour: Literal["red", "blue"]
    note: str | None = None


class Picked(TypedDict):
    name: str


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Two(BaseModel):
    first: str
    second: str


class Count(BaseModel):
    count: int


class Loose(BaseModel):
    a: str | None = None
    b: str | None = None


class Connection(BaseModel):
    connected: bool
    connection_id: str | None = None


class Account(BaseModel):
    connected: bool
    account: str


# (return type, the option "red" as the choice widget sends it)
CHOICE_ANSWERS: list[tuple[Any, Any]] = [
    (str, "red"),
    (str | None, "red"),
    (Literal["red", "blue"], "red"),
    (Colour, "red"),
    (Project, {"project": "red"}),
    (Project | None, {"project": "red"}),
    (Noted, {"colour": "red"}),
    (Picked, {"name": "red"}),
    (dict[str, str], {"choice": "red"}),
    (dict[str, Any], {"choice": "red"}),
]
# (render kind, return type, words the refusal says of the type)
REFUSED: list[tuple[str, Any, str]] = [
    ("choice", int, "it is an integer"),
    ("choice", list[str], "it is an array"),
    ("choice", Literal[1, 2], "none a string"),
    ("choice", Two, "it requires 2 fields (first, second)"),
    ("choice", Count, "its required field 'count' is an integer"),
    ("choice", Loose, "2 optional string fields (a, b)"),
    ("choice", dict[str, int], "an object with no string field"),
    ("connect", str, "it refuses a connection reference"),
    ("connect", Account, "it refuses a declined connection"),
]
ACCEPTED: list[tuple[str, Any]] = [
    *[("choice", returns) for returns, _ in CHOICE_ANSWERS],
    ("connect", dict[str, Any]),
    ("connect", Connection),
    ("client", int),
    ("client", Two),
    ("calendar", int),  # a custom front end's kind: its answers are its own business
]


def _schema(returns: Any) -> dict[str, Any]:
    return TypeAdapter(returns).json_schema()


def _declare(agent: Agent, kind: str | dict[str, Any], returns: Any, name: str = "pick") -> None:
    """``@agent.client_tool(render=kind)`` on ``def pick(options: list[str]) -> returns``
    (the annotation set by hand: this module's annotations are strings)."""

    def pick(options: list[str]) -> Any:
        raise NotImplementedError

    pick.__annotations__ = {"options": list[str], "return": returns}
    pick.__name__ = pick.__qualname__ = name
    agent.client_tool(render=kind)(pick)


def _entry(kind: str, returns: Any) -> dict[str, Any]:
    return {
        "type": "client",
        "name": "pick",
        "input_schema": {"type": "object"},
        "output_schema": _schema(returns),
        "render": {"kind": kind},
    }


@pytest.mark.parametrize(("returns", "answer"), CHOICE_ANSWERS, ids=str)
def test_a_choice_answers_in_the_shape_its_return_type_takes(returns: Any, answer: Any) -> None:
    """The option picked becomes what the output schema accepts (the check a settle
    makes, so the browser's answer is never refused) and what the function's return
    type reads: the string itself, or an object with it in its one string field."""
    shaped = choice_answer(_schema(returns)).of("red")
    assert shaped == answer
    assert not list(Draft202012Validator(_schema(returns)).iter_errors(shaped))
    TypeAdapter(returns).validate_python(shaped)


def test_a_choice_with_no_output_schema_answers_as_it_always_has() -> None:
    """No annotation (any answer): ``{"choice": option}``, what the demo's tool and the
    pages written before answer shapes expect; a page that gets no shape sends the same."""
    answer = choice_answer(None)
    assert answer.of("Oslo") == {"choice": "Oslo"} and answer.is_default
    assert choice_answer({"type": "object"}).of("Oslo") == {"choice": "Oslo"}
    assert choice_answer(_schema(str)).shape() == {"as": "value"}
    assert choice_answer(_schema(Project)).shape() == {"as": "field", "field": "project"}


@pytest.mark.parametrize(("kind", "returns", "why"), REFUSED, ids=str)
def test_decoration_refuses_a_return_type_its_widget_cannot_answer(
    kind: str, returns: Any, why: str
) -> None:
    """A tool its own widget can never answer would leave every call waiting for an
    answer the server refuses (a choice returning int: 422 on each click). The error
    names the tool, the kind, the return type, why and what would work."""
    agent = Agent("shop")
    start = f"^client tool 'pick': render={kind!r} cannot answer"
    with pytest.raises(ValueError, match=start) as refused:
        _declare(agent, kind, returns)
    message = str(refused.value)
    assert why in message, message
    assert "return dict[str, Any]" in message if kind == "connect" else "return str" in message
    assert agent.tool_names() == []


def test_the_refusal_names_the_return_type_as_written() -> None:
    agent = Agent("shop")
    with pytest.raises(ValueError, match=r"returning Literal\[1, 2\] \(it is one of \[1, 2\]"):
        _declare(agent, "choice", Literal[1, 2])
    with pytest.raises(ValueError, match=r"^client tool 'pick_two': render='choice' .* Two \("):
        _declare(agent, {"kind": "choice", "size": "s"}, Two, name="pick_two")


@pytest.mark.parametrize(("kind", "returns"), [(k, r) for k, r, _ in REFUSED] + ACCEPTED, ids=str)
def test_a_template_entry_is_judged_as_the_decorator_judges_it(kind: str, returns: Any) -> None:
    """The same tool written as a JSON template's client entry is refused at load
    exactly when the decorator refuses it, with the entry named: both forms agree."""
    agent = Agent("shop")
    try:
        _declare(agent, kind, returns)
    except ValueError:
        decorated = False
    else:
        decorated = True
    mismatch = render_mismatch({"kind": kind}, _schema(returns))
    refusal = None
    try:
        load_template({"tools": [_entry(kind, returns)]})
    except TemplateError as exc:
        refusal = str(exc)
    assert decorated == (refusal is None) == (mismatch is None)
    if mismatch is not None:
        assert isinstance(mismatch, RenderMismatch)
        assert refusal == f"tools[0] 'pick': {mismatch.for_template()}"
    if decorated:
        assert agent.to_template()["tools"][0]["output_schema"] == _schema(returns)


def test_the_template_refusal_says_what_would_work() -> None:
    with pytest.raises(TemplateError) as refused:
        load_template({"tools": [_entry("choice", int)]})
    assert str(refused.value) == (
        "tools[0] 'pick': render kind 'choice' cannot answer its output_schema: it is an "
        "integer; give an output_schema that is a string (or an enum of strings), an object "
        "with one required string property, an object of string values, or none at all "
        '(the answer is then {"choice": option})'
    )


def test_a_schema_that_loops_or_points_outside_is_read_without_failing() -> None:
    """Template authors write schemas by hand: a $ref cycle or a remote $ref is refused
    with a reason, never a recursion error."""
    looping = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    with pytest.raises(ValueError, match="too deep"):
        choice_answer(looping)
    with pytest.raises(ValueError, match="outside the schema"):
        choice_answer({"$ref": "https://example.com/schema.json"})
    with pytest.raises(ValueError, match="names nothing"):
        choice_answer({"$ref": "#/$defs/missing"})


# -- the runtime takes the same answers -----------------------------------------------------


def _picker(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
    results = info.results_since_user()
    if results:
        return repr(results[-1].result)
    return ToolCall(info.last_user_text, {"options": ["Apollo", "Gemini"]})


shop = Agent("picker", model=FunctionModel(_picker))


@shop.client_tool(render="choice")
def choose_project(options: list[str]) -> str:
    """The README's example."""
    raise NotImplementedError


@shop.client_tool(render="choice")
def choose_model(options: list[str]) -> Project:
    raise NotImplementedError


async def test_runtime_answer_takes_what_the_page_sends_and_a_model_instance(
    redis: Redis, redis_url: str
) -> None:
    """``Runtime.answer`` and the page's choice widget agree: the value the page sends
    for each return type settles through the runtime as it does over HTTP, and a model
    instance of the return type is sent as its JSON."""
    async with Runtime(shop, redis_url=redis_url) as rt:
        for chat, tool, answer in [
            ("r-str", "choose_project", choice_answer(_schema(str)).of("Apollo")),
            ("r-model", "choose_model", choice_answer(_schema(Project)).of("Apollo")),
            ("r-instance", "choose_model", Project(project="Apollo")),
        ]:
            parked = (await rt.send(chat, tool)).call(tool)
            done = await rt.answer(chat, parked.id, answer, resume=True)
            expected = "Apollo" if tool == "choose_project" else {"project": "Apollo"}
            assert done.text == repr(expected), (chat, done.text)


# -- what an older Parkway stored still loads ---------------------------------------------


def test_a_stored_template_is_read_back_without_the_render_check() -> None:
    """A template written before the render check (a chat's snapshot, a committed
    revision) loads as stored; authoring the same template is refused."""
    document = {"tools": [_entry("choice", int)]}
    with pytest.raises(TemplateError):
        load_template(document)
    assert "pick" in load_template(document, stored=True).tools
    assert "pick" in load_template_json(canonical_json(document), stored=True).tools


@shop.client_tool(render="choice")
def pick_number(options: list[str]) -> str:
    raise NotImplementedError


async def test_a_run_parked_under_an_older_parkway_resumes_after_the_upgrade(
    redis: Redis, redis_url: str
) -> None:
    """A chat parked with a template an older Parkway accepted (a choice returning an
    integer, answered by a front end of its own) is resumed: its stored snapshot is not
    judged again by a check added since. (The call's own record keeps the schema it was
    parked with; the resume loads the snapshot.)"""
    async with Runtime(shop, redis_url=redis_url) as rt:
        parked = (await rt.send("older", "pick_number")).call("pick_number")
        meta = chat_keys("older").meta
        snapshot = json.loads(await redis.hget(meta, "template"))
        (entry,) = [t for t in snapshot["tools"] if t.get("name") == "pick_number"]
        entry["output_schema"] = {"type": "integer"}  # as an older Parkway let it be
        with pytest.raises(TemplateError):
            load_template(snapshot)
        await redis.hset(meta, "template", canonical_json(snapshot))
        done = await rt.answer("older", parked.id, "7", resume=True)
        assert done.text == "'7'"
