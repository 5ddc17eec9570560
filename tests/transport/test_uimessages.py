"""Reading what an AI SDK client POSTs: typed parts, tolerant of what the server never
reads, strict about the envelope."""

from __future__ import annotations

from typing import Any

import pytest

from parkway.runner.engine.runner import Answer
from parkway.transport.aisdk.uimessages import parse_chat_post
from parkway.transport.errors import HTTPError


def post(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c", "messages": list(messages), "trigger": "submit-message"}


def assistant(*parts: Any) -> dict[str, Any]:
    return {"id": "m1", "role": "assistant", "parts": list(parts)}


def test_answers_are_read_among_parts_of_every_kind() -> None:
    """The real client sends many part types (reasoning, files, sources, data parts) and
    fields the server never reads; none of them may stop the answers being read."""
    body = post(
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]},
        assistant(
            {"type": "step-start"},
            {"type": "reasoning", "text": "hmm", "state": "done"},
            {"type": "file", "mediaType": "image/png", "url": "data:,"},
            {"type": "source-url", "sourceId": "s", "url": "https://example.com"},
            {"type": "data-parkway-widget", "id": "c1", "data": {"kind": "choice"}},
            {"no": "type at all"},
            {
                "type": "tool-pick",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"q": "colour"},
                "output": {"choice": "red"},
                "callProviderMetadata": {"x": 1},
            },
            {"type": "step-start"},
            {
                "type": "dynamic-tool",
                "toolName": "publish",
                "toolCallId": "c2",
                "state": "approval-responded",
                "input": None,
                "approval": {"id": "apr_1", "approved": True, "signature": "s"},
            },
            {
                "type": "tool-publish",
                "toolCallId": "c3",
                "state": "output-denied",
                "approval": {"id": "apr_2", "approved": False, "reason": "no thanks"},
            },
            {"type": "tool-fail", "toolCallId": "c4", "state": "output-error", "errorText": 42},
        ),
    )
    assert parse_chat_post(body).answers == (
        Answer("c1", "pick", {"q": "colour"}, {"outcome": "output", "output": {"choice": "red"}},
               match_by_key=False),
        Answer("c2", "publish", None, {"outcome": "approved"}, approval_id="apr_1"),
        Answer("c3", "publish", None, {"outcome": "denied", "reason": "no thanks"},
               approval_id="apr_2", has_input=False),
        Answer("c4", "fail", None, {"outcome": "error", "message": "42"}, has_input=False),
    )  # fmt: skip


@pytest.mark.parametrize(
    "part",
    [
        {"type": "tool-pick", "toolCallId": "c1", "state": ["output-available"]},
        {"type": "tool-pick", "toolCallId": "c1", "state": {"output": 1}},
        {"type": "tool-pick", "toolCallId": 7, "state": "output-available"},
        {"type": "dynamic-tool", "toolName": ["x"], "toolCallId": "c1", "state": "output-error"},
        {"type": "tool-pick", "toolCallId": "c1", "state": "output-available", "preliminary": 1},
        {"type": "tool-pick", "toolCallId": "c1", "state": "output-available", "providerExecuted": "y"},
        {"type": "tool-pick", "toolCallId": "c1", "state": "approval-responded", "approval": {"approved": "yes"}},
        {"type": "tool-pick", "toolCallId": "c1", "state": "output-denied", "approval": [False]},
    ],
)  # fmt: skip
def test_a_tool_part_with_odd_fields_is_no_answer(part: dict[str, Any]) -> None:
    """An answer is a claim the runner checks; a part that cannot be one is dropped, and
    a body with nothing else to do is a 422. (A list or object ``state`` used to be
    looked up in a set: a TypeError, so a 500.)"""
    with pytest.raises(HTTPError) as refused:
        parse_chat_post(post(assistant(part)))
    assert (refused.value.status, refused.value.code) == (422, "nothing_to_do")


def test_only_string_texts_make_the_user_message() -> None:
    body = post(
        {
            "id": "u1",
            "role": "user",
            "parts": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": 2},
                {"type": "text"},
                {"type": "reasoning", "text": "not said"},
                {"type": "text", "text": "three"},
            ],
        }
    )
    parsed = parse_chat_post(body)
    assert (parsed.user_text, parsed.user_message_id) == ("one\nthree", "u1")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (post(assistant({"type": "text"}, "text")), "messages.0.parts.1: Input should be a valid dictionary"),
        (post({"role": "robot", "parts": []}), "messages.0.role: Input should be 'user', 'assistant' or 'system'"),
        (post({"role": "user", "parts": {}}), "messages.0.parts: Input should be a valid list"),
        ({**post({"role": "user"}), "messageId": 5}, "messageId: Input should be a valid string"),
        ([], "body: Input should be a valid dictionary or instance of ChatBody"),
    ],
)  # fmt: skip
def test_a_malformed_envelope_is_a_422_naming_the_first_problem(body: Any, message: str) -> None:
    with pytest.raises(HTTPError) as refused:
        parse_chat_post(body)
    assert (refused.value.status, refused.value.code) == (422, "invalid_body")
    assert refused.value.message == message
