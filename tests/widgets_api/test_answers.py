"""What a client tool's card is told of the answer its tool takes
(widgets_api/answers.py): a choice card's ``answerShape``, the JSON editor's
``answerDraft``, in the descriptor a page draws from."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, TypeAdapter

from parkway.runner.parking import ParkedCall
from parkway.widgets_api.answers import answer_fields, draft_of
from parkway.widgets_api.descriptors import describe_call


class Project(BaseModel):
    project: str


class Line(BaseModel):
    sku: str
    quantity: int = 1


class Order(BaseModel):
    customer: str
    express: bool
    size: Literal["S", "M", "L"]
    lines: list[Line]
    billing: Line
    note: str | None = None
    rate: float = Field(default=0.5)


def _call(render: dict[str, Any] | None, output_schema: Any) -> ParkedCall:
    return ParkedCall(
        tool_call_id="c1", tool_name="pick", kind="client", input={"options": ["a"]},
        key="k", seq=1, message_id="m", created_at=1.0, deadline=9.0, render=render,
        output_schema=output_schema,
    )  # fmt: skip


def test_a_choice_descriptor_says_how_its_option_is_answered() -> None:
    """A page answers a choice with what the descriptor says; a tool answered with
    ``{"choice": option}`` gets no field at all, so its descriptors (and the cassettes
    that recorded them) stay as they were."""
    str_schema = TypeAdapter(str).json_schema()
    described = describe_call("chat", _call({"kind": "choice"}, str_schema))
    assert described["answerShape"] == {"as": "value"}
    model = describe_call("chat", _call({"kind": "choice"}, Project.model_json_schema()))
    assert model["answerShape"] == {"as": "field", "field": "project"}
    demo_schema = {"type": "object", "properties": {"choice": {"type": "string"}}}
    for schema in (None, demo_schema, TypeAdapter(dict[str, str]).json_schema()):
        assert "answerShape" not in describe_call("chat", _call({"kind": "choice"}, schema))


def test_a_choice_no_option_can_answer_gets_the_default_and_is_refused_on_settle() -> None:
    """Only a server tool's own render can park such a call (a tool's is checked at
    load): the descriptor still describes it, and the server's refusal is shown."""
    assert answer_fields("choice", {"type": "integer"}) == {}


def test_the_json_editor_starts_from_a_value_of_the_output_schemas_shape() -> None:
    """Instead of ``{}``, the fields to fill: each property with an empty value of its
    type, its default or its enum's first value; nested models and lists too."""
    draft = answer_fields("client", Order.model_json_schema())["answerDraft"]
    assert draft == {
        "customer": "",
        "express": False,
        "size": "S",
        "lines": [],
        "billing": {"sku": "", "quantity": 1},
        "note": None,
        "rate": 0.5,
    }
    assert not list(Draft202012Validator(Order.model_json_schema()).iter_errors(draft))
    described = describe_call("chat", _call(None, TypeAdapter(str).json_schema()))
    assert described["kind"] == "client" and described["answerDraft"] == ""
    assert "answerDraft" not in describe_call("chat", _call(None, None))


@pytest.mark.parametrize(
    ("schema", "draft"),
    [
        ({"type": "integer"}, 0),
        ({"type": ["null", "number"]}, 0),
        ({"type": "array", "items": {"type": "string"}}, []),
        ({"anyOf": [{"type": "null"}, {"type": "boolean"}]}, False),
        ({"const": "fixed"}, "fixed"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, {}),
        ({}, {}),
        ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, None),
        ({"$ref": "#/$defs/missing"}, None),
    ],
    ids=str,
)
def test_a_draft_of_any_schema_is_plain_json(schema: dict[str, Any], draft: Any) -> None:
    """Schemas are written by hand in templates: a loop or a dangling $ref gives a
    draft, never an error."""
    assert draft_of(schema) == draft


def test_other_kinds_get_neither() -> None:
    schema = Project.model_json_schema()
    for kind in ("connect", "mcp-form", "calendar"):
        described = describe_call("chat", _call({"kind": kind}, schema))
        assert "answerShape" not in described and "answerDraft" not in described
