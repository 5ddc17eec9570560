"""The test models: schema-valid sample arguments for many kinds of schema, the test
model calling every tool once then summing up, and the function model's replies."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from datetime import date, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field
from redis.asyncio import Redis

from parkway.runner import (
    AgentFile,
    FunctionInfo,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelToolCall,
    Reply,
    Runtime,
    TestModel,
    ToolCall,
    ToolDescription,
    load_template,
)
from parkway.runner.llm import SampleError, sample
from tests.helpers.support import WEATHER_TOOL

FORMATS = Draft202012Validator.FORMAT_CHECKER  # draft 2020-12 formats (RFC 3339 times)


def check(schema: dict[str, Any], value: Any) -> None:
    """Fail with the first error when ``schema`` (formats included) refuses ``value``."""
    errors = list(Draft202012Validator(schema, format_checker=FORMATS).iter_errors(value))
    assert not errors, f"{value!r}: {errors[0].message}"


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: Annotated[str, Field(min_length=3, max_length=40)]
    postcode: Annotated[str, Field(pattern=r"^\d{4,5}[A-Z]{0,2}$")]


class Booking(BaseModel):
    """A pydantic model like those a tool signature compiles to."""

    who: Annotated[str, Field(json_schema_extra={"format": "email"})]
    when: datetime
    day: date
    ref: UUID
    guests: Annotated[int, Field(ge=1, le=8)]
    budget: Annotated[float, Field(gt=0, lt=1000, multiple_of=0.5)]
    mode: Literal["train", "plane"]
    colour: Colour
    address: Address
    stops: Annotated[list[Address], Field(min_length=2)]
    tags: Annotated[set[str], Field(max_length=3)] = set()
    note: str | None = None


SCHEMAS: dict[str, dict[str, Any]] = {
    "empty object": {"type": "object"},
    "required strings": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "formats": {
        "type": "object",
        "properties": {
            name: {"type": "string", "format": name}
            for name in ("date-time", "date", "time", "email", "uri", "uuid", "ipv4", "ipv6")
        },
        "required": ["date-time", "email", "uri", "uuid"],
    },
    "string lengths and patterns": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,}$"},
            "long": {"type": "string", "minLength": 20, "maxLength": 24},
            "short": {"type": "string", "maxLength": 2},
            "either": {"type": "string", "pattern": "^(yes|no)$"},
        },
        "required": ["code", "long", "short", "either"],
    },
    "numbers": {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 10, "maximum": 12},
            "odd": {"type": "integer", "exclusiveMinimum": 4, "multipleOf": 5},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "step": {"type": "number", "minimum": 0.25, "multipleOf": 0.1},
            "neg": {"type": "integer", "maximum": -3},
        },
        "required": ["n", "odd", "ratio", "step", "neg"],
    },
    "enums and consts": {
        "type": "object",
        "properties": {
            "size": {"enum": ["s", "m", "l"]},
            "kind": {"const": "fixed"},
            "flag": {"type": "boolean"},
            "nothing": {"type": "null"},
        },
        "required": ["size", "kind", "flag", "nothing"],
    },
    "nested and arrays": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 3,
                "uniqueItems": True,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer", "minimum": 1},
                        "name": {"type": "string"},
                    },
                    "required": ["id", "name"],
                },
            },
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "emails": {
                "type": "array",
                "items": {"type": "string", "format": "email"},
                "minItems": 2,
                "uniqueItems": True,
            },
            "has_seven": {"type": "array", "items": {"type": "integer"}, "contains": {"const": 7}},
        },
        "required": ["items", "pair", "emails", "has_seven"],
    },
    "unions and refs": {
        "type": "object",
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
            }
        },
        "properties": {
            "at": {"$ref": "#/$defs/Point"},
            "maybe": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Point"}]},
            "exactly_one": {
                "oneOf": [{"type": "integer", "minimum": 5}, {"type": "integer", "maximum": 1}]
            },
            "both": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
                ]
            },
            "typed_list": {"type": ["string", "null"], "minLength": 2},
        },
        "required": ["at", "maybe", "exactly_one", "both", "typed_list"],
    },
    "object sizes": {
        "type": "object",
        "additionalProperties": {"type": "integer"},
        "minProperties": 2,
    },
    "pydantic model": Booking.model_json_schema(),
}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_sample_arguments_are_valid_against_their_schema(name: str) -> None:
    """Whatever the schema says (types, formats, patterns, bounds, enums, nesting,
    references, unions), the sample passes a validator that checks formats too."""
    schema = SCHEMAS[name]
    for seed in range(3):
        check(schema, sample(schema, seed=seed))


def test_samples_are_deterministic_and_a_seed_varies_them() -> None:
    """The same schema and seed give the same arguments (a test can assert on them);
    another seed gives others."""
    schema = SCHEMAS["required strings"]
    assert sample(schema, seed=1) == sample(schema, seed=1)
    assert sample(schema, seed=1) != sample(schema, seed=2)


def test_a_sample_arrives_as_the_pydantic_model_it_was_made_for() -> None:
    """A schema pydantic wrote validates back into the model: the tool gets its typed
    argument."""
    booking = Booking.model_validate(sample(Booking.model_json_schema()))
    assert 1 <= booking.guests <= 8 and booking.mode in {"train", "plane"}
    assert len(booking.stops) >= 2


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"enum": []},
        False,
        {"$ref": "#/$defs/Missing"},
        {
            "type": "object",
            "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}},
            "required": ["x"],
        },
    ],
)
def test_an_unsatisfiable_schema_is_refused_with_its_location(schema: Any) -> None:
    """No value is invented that the schema refuses: the error says where it failed."""
    with pytest.raises(SampleError):
        sample(schema)


# -- TestModel through the runtime ----------------------------------------------------


def client_tool(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "client", "name": name, "description": name, "input_schema": schema}


async def test_the_test_model_calls_every_tool_once_with_valid_arguments(
    redis: Redis, redis_url: str
) -> None:
    """Every tool of the agent is called once in the first step, each with input its
    schema accepts (the client tools park with exactly that input); once all are
    answered, the model sums up every result."""
    names = {f"tool_{i}": schema for i, schema in enumerate(SCHEMAS.values())}
    template = load_template(
        {
            "instructions": "exercise the tools",
            "tools": [WEATHER_TOOL, *(client_tool(n, s) for n, s in names.items())],
        }
    )
    async with Runtime(AgentFile(template, model=TestModel()), redis_url=redis_url) as rt:
        first = await rt.send("c-test-model", "go")
        assert sorted(c.tool for c in first.parked) == sorted(names)
        for parked in first.parked:
            check(names[parked.tool], parked.input)
        ran = [e for e in first.events if e.kind == "tool-succeeded"]
        assert len(ran) == 1  # get_weather ran at once
        result = first
        for parked in first.parked:
            result = await rt.answer("c-test-model", parked.id, {"n": parked.tool}, resume=True)
        assert result.finish_reason == "stop"
        lines = result.text.splitlines()
        assert lines[0] == "Results:"
        assert lines[1].startswith("get_weather: {")
        assert sorted(lines[2:]) == sorted(f'{n}: {{"n":"{n}"}}' for n in names)


async def test_the_test_model_takes_chosen_tools_given_arguments_and_text(
    redis: Redis, redis_url: str
) -> None:
    """``tools`` restricts what it calls, ``args`` gives a tool's input, ``text``
    replaces the summary; a tool the agent lacks fails the run with a clear message."""
    template = load_template({"instructions": "x", "tools": [WEATHER_TOOL]})
    model = TestModel(tools=["get_weather"], args={"get_weather": {"city": "Lima"}}, text="ok")
    async with Runtime(AgentFile(template, model=model), redis_url=redis_url) as rt:
        result = await rt.send("c-test-args", "go")
        (issued,) = [e for e in result.events if e.kind == "tool-call-issued"]
        assert issued.input == {"city": "Lima"}  # type: ignore[union-attr]
        assert result.text == "ok"
    wrong = AgentFile(template, model=TestModel(tools=["nope"]))
    async with Runtime(wrong, redis_url=redis_url) as rt:
        failed = await rt.send("c-test-wrong", "go")
        assert failed.finish_reason == "error"
        assert failed.error is not None and "nope" in failed.error


# -- FunctionModel replies --------------------------------------------------------------


def request(messages: tuple[ModelMessage, ...] = ()) -> ModelRequest:
    return ModelRequest(
        chat_id="c",
        call_index=0,
        instructions="i",
        messages=messages,
        tools=(ToolDescription("t", "d", {"type": "object"}),),
    )


async def test_a_reply_may_mix_text_and_calls_in_order() -> None:
    """Text streams word by word, and calls come where the reply puts them."""

    def reply(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
        assert info.tool("t").description == "d"
        return ["one two ", ToolCall("t", {"a": 1}), "three"]

    events = [e async for e in FunctionModel(reply).stream(request())]
    assert [getattr(e, "text", None) for e in events[:2]] == ["one ", "two "]
    assert events[2] == ModelToolCall(name="t", input={"a": 1})
    assert events[-1].kind == "step-end"


async def test_a_reply_that_is_not_text_or_calls_is_a_type_error() -> None:
    """A wrong return is named, not silently dropped."""
    model = FunctionModel(lambda messages, info: [json])  # type: ignore[arg-type, list-item]
    with pytest.raises(TypeError, match="module"):
        _ = [e async for e in model.stream(request())]
