"""Pure pieces: canonical JSON, the parkedCallKey, templates, the encoder, settings."""

from __future__ import annotations

import math
from typing import Any

import pytest

from runner import (
    END_OF_SCRIPT,
    NotPlainJSONError,
    ScriptedModel,
    TemplateError,
    canonical_json,
    load_template,
    parked_call_key,
)
from runner.events import CallParked, MessageFinished, ToolCallIssued, ToolSucceeded
from runner.history import UNKNOWN_RESULT, assistant_entry, to_model_messages, user_entry
from runner.model import ModelRequest, ModelTextDelta, ModelToolCall, ToolResult
from runner.parking import ParkedCall, decode_call, encode_call
from transport.encoder import encode_event
from transport.settings import Settings, SettingsError
from widgets_api import describe_call


def test_canonical_json_sorts_keys_and_drops_whitespace() -> None:
    assert (
        canonical_json({"b": [1, {"z": 1, "a": None}], "a": "é"})
        == '{"a":"é","b":[1,{"a":null,"z":1}]}'
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, {1: "x"}, (1, 2), {"a": object()}, b"x"])
def test_values_that_are_not_plain_json_have_no_key(value: Any) -> None:
    """Fail closed: a value with no canonical form can never be matched loosely."""
    with pytest.raises(NotPlainJSONError):
        parked_call_key("t", value)


def test_parked_call_key_treats_absent_input_as_empty_object() -> None:
    assert parked_call_key("t", None) == parked_call_key("t", {}) == "t#{}"
    assert parked_call_key("t", {"b": 1, "a": 2}) == 't#{"a":2,"b":1}'


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (
            [{"type": "function", "name": "f", "ref": "nomodule:f"}],
            "tools[0] 'f': module 'nomodule'",
        ),
        ([{"type": "function", "name": "f", "ref": "runner.demo:nope"}], "has no attribute 'nope'"),
        ([{"type": "client", "name": "c"}], "tools[0] 'c': input_schema"),
        ([{"type": "client", "name": "c", "input_schema": {"type": 3}}], "not a valid JSON Schema"),
        ([{"type": "platform", "op": "nope"}], "unknown platform op 'nope'"),
        ([{"type": "weird", "name": "w"}], "unknown tool type 'weird'"),
        (
            [{"@ag.embed": {"@ag.references": {"workflow": {"slug": "__ag__nope"}}}}],
            "unknown reserved workflow",
        ),
        ([{"@ag.embed": {}}], "an @ag.embed entry must be"),
        ([{"type": "client", "name": "9bad", "input_schema": {}}], "must start with a letter"),
        (
            [
                {"type": "client", "name": "c", "input_schema": {}},
                {"type": "client", "name": "c", "input_schema": {}},
            ],
            "tools[1] 'c': duplicate tool name",
        ),
        ([{"type": "client", "name": "c", "input_schema": {}, "surprise": 1}], "surprise"),
        (["not an object"], "tools[0]: must be a JSON object"),
    ],
)
def test_invalid_templates_fail_at_load_naming_the_entry(tools: list[Any], message: str) -> None:
    with pytest.raises(TemplateError) as error:
        load_template({"tools": tools})
    assert message in str(error.value)


def test_request_connection_embed_resolves_to_a_connect_client_tool() -> None:
    """request_connection is a client tool with no server execute, rendered as connect."""
    template = load_template(
        {
            "tools": [
                {
                    "@ag.embed": {
                        "@ag.references": {"workflow": {"slug": "__ag__request_connection"}}
                    }
                }
            ]
        }
    )
    spec = template.tools["request_connection"]
    assert spec.kind == "client" and spec.func is None
    assert spec.render == {"kind": "connect"} and spec.parks


def test_unknown_top_level_template_keys_are_refused() -> None:
    with pytest.raises(TemplateError, match="tolls: Extra inputs"):
        load_template({"tools": [], "tolls": []})


async def test_scripted_model_fills_placeholders_and_runs_out_politely() -> None:
    model = ScriptedModel(
        [[{"text": "r={{last_tool_results}} u={{last_user_text}}"}, {"tool_call": {"name": "x"}}]]
    )
    messages = to_model_messages(
        [
            user_entry("hello", "u1"),
            assistant_entry(
                "m",
                "",
                [{"id": "c1", "name": "a", "input": {}}, {"id": "c2", "name": "b", "input": {}}],
            ),
            {"t": "result", "id": "c2", "name": "b", "result": 2, "status": "ok"},
            {"t": "result", "id": "c1", "name": "a", "result": 1, "status": "ok"},
        ]
    )
    request = ModelRequest("c", 0, "", messages, ())
    items = [item async for item in model.stream(request)]
    said = "".join(i.text for i in items if isinstance(i, ModelTextDelta))
    assert said == 'r=[{"result":1,"tool":"a"},{"result":2,"tool":"b"}] u=hello'
    assert items[-1] == ModelToolCall(name="x", input=None)
    later = [item async for item in model.stream(ModelRequest("c", 1, "", messages, ()))]
    assert later == [ModelTextDelta(END_OF_SCRIPT)]


def test_scripted_model_rejects_malformed_parts() -> None:
    with pytest.raises(TemplateError, match="either"):
        ScriptedModel([[{"text": "a", "tool_call": {"name": "x"}}]])


def test_a_call_without_a_result_reads_as_result_unknown() -> None:
    """If a worker died while a tool ran, the model is told the result is unknown rather
    than the call being silently run again."""
    messages = to_model_messages(
        [
            user_entry("hi", None),
            assistant_entry("m", "", [{"id": "c1", "name": "charge", "input": {}}]),
        ]
    )
    assert messages[-1] == ToolResult("c1", "charge", UNKNOWN_RESULT, is_error=True)


def _call(**over: Any) -> ParkedCall:
    base: dict[str, Any] = {
        "tool_call_id": "c1", "tool_name": "pick", "kind": "client", "input": {"q": 1},
        "key": 'pick#{"q":1}', "seq": 1, "message_id": "m", "created_at": 1.0, "deadline": 2.5,
        "render": {"kind": "choice", "size": "s"},
    }  # fmt: skip
    base.update(over)
    return ParkedCall(**base)  # type: ignore[arg-type]


def test_parked_call_records_round_trip_and_reject_unknown_versions() -> None:
    call = _call()
    assert decode_call(encode_call(call)) == call
    assert decode_call(encode_call(call), '{"outcome":"declined"}').outcome == {
        "outcome": "declined"
    }
    from runner import IncompatibleStateError

    with pytest.raises(IncompatibleStateError, match="version 2"):
        decode_call(encode_call(call).replace('"v":1', '"v":2'))


def test_encoder_omits_optional_fields_but_keeps_required_nulls() -> None:
    """The real client rejects null optionals and missing unknown-typed fields."""
    describe = lambda c: describe_call("chat", c)  # noqa: E731
    assert encode_event(ToolSucceeded("c1", None), describe).to_dict() == {
        "type": "tool-output-available",
        "toolCallId": "c1",
        "output": None,
    }
    assert encode_event(ToolCallIssued("c1", "t", None), describe).to_dict() == {
        "type": "tool-input-available", "toolCallId": "c1", "toolName": "t", "input": None,
    }  # fmt: skip
    assert encode_event(MessageFinished("stop"), describe).to_dict() == {
        "type": "finish",
        "finishReason": "stop",
    }
    widget = encode_event(CallParked(_call()), describe).to_dict()
    assert widget["type"] == "data-parkway-widget" and widget["id"] == "c1"
    assert widget["data"]["kind"] == "choice" and widget["data"]["render"] == {"size": "s"}
    assert widget["data"]["deadline"] == 2500


def test_settings_read_flags_over_environment_and_redact_the_secret() -> None:
    env = {
        "PARKWAY_PORT": "9000",
        "PARKWAY_SECRET_KEY": "k" * 40,
        "PARKWAY_ALLOWED_ORIGINS": "https://a.example, http://b.example:3000",
    }
    settings = Settings.from_sources({"port": 9100, "host": None}, env)
    assert settings.port == 9100 and settings.host == "127.0.0.1"
    assert settings.allowed_origins == ("https://a.example", "http://b.example:3000")
    assert "k" * 40 not in repr(settings)
    with pytest.raises(SettingsError, match="PARKWAY_PORT"):
        Settings.from_sources({}, {"PARKWAY_PORT": "eighty"})
    with pytest.raises(SettingsError, match="at least 32"):
        Settings.from_sources({}, {"PARKWAY_SECRET_KEY": "short"})
    with pytest.raises(SettingsError, match="redis://"):
        Settings.from_sources({"redis_url": "http://x"}, {})


def test_replay_rebuilds_finished_calls_without_re_firing_and_pending_ones_as_they_were() -> None:
    """The resume replay of a continued message: the answered call of step one comes back
    as input-start/delta/output (no onToolCall), the pending approval of step two as
    input-available plus its approval request."""
    from transport.replay import replay_message

    message = {
        "id": "M",
        "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "one", "state": "done"},
            {
                "type": "tool-pick",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"q": 1},
                "output": {"choice": "a"},
            },
            {"type": "step-start"},
            {
                "type": "tool-publish",
                "toolCallId": "c2",
                "state": "approval-requested",
                "input": {"t": 1},
                "approval": {"id": "apr"},
            },
            {"type": "data-parkway-widget", "id": "c2", "data": {"kind": "approval"}},
        ],
    }
    chunks = replay_message(message, "tool-calls")
    assert [c["type"] for c in chunks] == [
        "start", "start-step", "text-start", "text-delta", "text-end",
        "tool-input-start", "tool-input-delta", "tool-output-available", "finish-step",
        "start-step", "tool-input-available", "tool-approval-request", "data-parkway-widget",
        "finish-step", "finish",
    ]  # fmt: skip
    assert chunks[6] == {
        "type": "tool-input-delta",
        "toolCallId": "c1",
        "inputTextDelta": '{"q":1}',
    }
    assert chunks[11] == {"type": "tool-approval-request", "approvalId": "apr", "toolCallId": "c2"}


def test_settings_repr_hides_the_redis_password() -> None:
    settings = Settings.from_sources({"redis_url": "redis://:hunter2@db.internal:6379/0"}, {})
    assert "hunter2" not in repr(settings)
    assert "db.internal" in repr(settings)


def test_an_empty_approval_policy_name_is_refused() -> None:
    """An empty policy name must not silently turn approval off."""
    entry = {
        "type": "function",
        "name": "f",
        "ref": "runner.demo:get_weather",
        "needs_approval": "",
    }
    with pytest.raises(TemplateError, match="policy name"):
        load_template({"tools": [entry]})
