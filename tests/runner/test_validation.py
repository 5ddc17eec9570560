"""The one-line message every package makes of a pydantic ValidationError."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from parkway.runner.validation import ECHO_MAX, describe_first_error


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[int]


def first_error(value: object, **kwargs: str) -> str:
    with pytest.raises(ValidationError) as failed:
        Body.model_validate(value)
    return describe_first_error(failed.value, **kwargs)


def test_the_message_names_where_the_first_problem_is_and_what_it_is() -> None:
    assert first_error({"items": [1, "x", "y"]}) == (
        "items.1: Input should be a valid integer, unable to parse string as an integer"
    )


def test_a_long_key_from_the_document_is_cut_short() -> None:
    """Keys come from the (possibly hostile) document: a 1 MB unknown key must not be
    sent back in a 422, nor written whole into a log line."""
    key = "k" * 1_000_000
    message = first_error({"items": [], key: 1})
    assert message == f"{'k' * ECHO_MAX}...: Extra inputs are not permitted"


def test_a_problem_with_the_whole_document_is_named_by_root() -> None:
    assert first_error([], root="body") == (
        "body: Input should be a valid dictionary or instance of Body"
    )
    assert first_error([]) == "Input should be a valid dictionary or instance of Body"
