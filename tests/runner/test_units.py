"""Pure pieces: canonical JSON, the parkedCallKey, templates, the scripted model and the
demo script, the encoder, settings (and one runner check that a scripted tool input is
filled before the tool runs)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import (
    END_OF_SCRIPT,
    NotPlainJSONError,
    Runner,
    ScriptedModel,
    TemplateError,
    canonical_json,
    load_template,
    parked_call_key,
    parse_agent_file,
)
from parkway.runner.demo import DEMO_AGENT, get_weather, publish_report
from parkway.runner.events import (
    CallParked,
    MessageFinished,
    TextDelta,
    ToolCallIssued,
    ToolSucceeded,
)
from parkway.runner.llm.model import (
    AssistantTurn,
    ModelRequest,
    ModelTextDelta,
    ModelToolCall,
    ToolResult,
    UserTurn,
)
from parkway.runner.parking import ParkedCall, decode_call, encode_call
from parkway.runner.store.history import (
    UNKNOWN_RESULT,
    assistant_entry,
    to_model_messages,
    user_entry,
)
from parkway.transport.aisdk.encoder import encode_event
from parkway.transport.settings import Settings, SettingsError
from parkway.widgets_api import describe_call
from tests.helpers.support import agent_doc, call, text


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
        (
            [{"type": "function", "name": "f", "ref": "parkway.runner.demo:nope"}],
            "has no attribute 'nope'",
        ),
        (
            [{"type": "function", "name": "f", "ref": "runner.no_such_module:f"}],
            "module 'runner.no_such_module' cannot be imported",
        ),
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


def test_a_ref_from_before_the_parkway_namespace_names_the_same_function() -> None:
    """Agent files and cassettes written when Parkway's packages were top-level say
    "runner.demo:get_weather"; it resolves to Parkway's function, not a second copy of the
    module imported from a checkout's folder."""
    tools = [{"type": "function", "name": "w", "ref": "runner.demo:get_weather"}]
    assert load_template({"tools": tools}).tools["w"].func is get_weather


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


# -- the scripted model's path placeholders and conditions ----------------------------


def _request(*results: tuple[str, Any], user: str = "hello", index: int = 0) -> ModelRequest:
    """A model input whose tool results are ``results`` (tool name, result), oldest first."""
    messages: list[Any] = [UserTurn(user)]
    for n, (tool, result) in enumerate(results):
        call_id = f"c{n}"
        messages.append(AssistantTurn("", (ModelToolCall(tool, {}, call_id),)))
        messages.append(ToolResult(call_id, tool, result))
    return ModelRequest("c", index, "", tuple(messages), ())


async def _said(parts: list[dict[str, Any]], request: ModelRequest) -> str:
    items = [item async for item in ScriptedModel([parts]).stream(request)]
    return "".join(i.text for i in items if isinstance(i, ModelTextDelta))


async def _calls(parts: list[dict[str, Any]], request: ModelRequest) -> list[ModelToolCall]:
    items = [item async for item in ScriptedModel([parts]).stream(request)]
    return [i for i in items if isinstance(i, ModelToolCall)]


async def test_result_placeholders_read_the_most_recent_result_as_plain_text() -> None:
    """A script speaks in sentences: strings print as-is, scalars as JSON, and only a
    whole object or list falls back to canonical JSON. The latest result of a tool wins,
    so a tool called again (the chosen city's weather) replaces the earlier answer."""
    request = _request(
        ("w", {"city": "Lisbon", "t": 21}),
        ("pick", {"choice": "Oslo"}),
        ("w", {"city": "Oslo", "t": 4.5, "snow": True, "tags": ["cold", "dark"]}),
    )
    text = (
        "{{result.w.city}} {{result.w.t}} {{result.w.snow}} {{result.w.tags.1}} "
        "{{result.w.tags}} {{result.pick}} / {{result.pick.choice}}"
    )
    assert await _said([{"text": text}], request) == (
        'Oslo 4.5 true dark ["cold","dark"] {"choice":"Oslo"} / Oslo'
    )


@pytest.mark.parametrize(
    "placeholder",
    [
        "{{result.nobody.city}}",  # no result of that tool
        "{{result.w.country}}",  # no such key
        "{{result.w.city.name}}",  # a path through a string
        "{{result.w.tags.9}}",  # past the end of a list
        "{{result.w.none}}",  # null counts as missing
    ],
)
async def test_a_missing_value_renders_its_fallback_or_nothing(placeholder: str) -> None:
    """A declined choice or a refused connection has no ``choice`` or ``account``: the
    text says the fallback, or nothing, and never ``null`` or a raw placeholder."""
    request = _request(("w", {"city": "Oslo", "tags": [], "none": None}))
    fallback = placeholder.replace("}}", "|somewhere else}}")
    assert await _said([{"text": f"[{placeholder}]"}], request) == "[]"
    assert await _said([{"text": f"[{fallback}]"}], request) == "[somewhere else]"


async def test_filled_text_is_never_read_as_a_placeholder_again() -> None:
    """Placeholders are filled in one pass: a user's message or a tool result that
    contains double braces is printed as written, not expanded."""
    request = _request(("w", {"city": "{{last_user_text}}"}), user="{{result.w.city}}")
    said = await _said([{"text": "{{result.w.city}} / {{last_user_text}} / {{other}}"}], request)
    assert said == "{{last_user_text}} / {{result.w.city}} / {{other}}"


async def test_tool_inputs_are_filled_at_any_depth_keeping_whole_values_typed() -> None:
    """Every string of a tool call's input is filled; a string that is exactly one
    placeholder takes the value itself, so a number stays a number and an object an
    object. Keys and non-string values are left alone."""
    request = _request(("pick", {"choice": "Oslo", "n": 3, "where": {"lat": 59.9}}))
    tool_input = {
        "city": "{{result.pick.choice}}",
        "title": "Weather in {{result.pick.choice}} ({{result.pick.n}})",
        "n": "{{result.pick.n}}",
        "where": "{{result.pick.where}}",
        "nested": [{"c": "{{result.pick.choice}}", "{{result.pick.choice}}": 1}, 7, None],
        "gone": "{{result.pick.missing}}",
        "default": "{{result.pick.missing|Lisbon}}",
    }
    [issued] = await _calls([{"tool_call": {"name": "t", "input": tool_input}}], request)
    assert issued.input == {
        "city": "Oslo",
        "title": "Weather in Oslo (3)",
        "n": 3,
        "where": {"lat": 59.9},
        "nested": [{"c": "Oslo", "{{result.pick.choice}}": 1}, 7, None],
        "gone": "",
        "default": "Lisbon",
    }
    assert tool_input["city"] == "{{result.pick.choice}}"  # the script itself is unchanged


@pytest.mark.parametrize(
    ("result", "truthy"),
    [
        ({"connected": True, "account": "ada"}, True),
        ({"connected": "yes"}, True),
        ({"connected": False, "reason": "declined"}, False),
        ({"connected": None}, False),
        ({"connected": 0}, False),
        ({"connected": ""}, False),
        ({"connected": []}, False),
        ({"status": "timeout"}, False),
        (None, False),  # no result of the tool at all
    ],
)
async def test_if_and_unless_pick_parts_by_the_truthiness_of_a_result(
    result: Any, truthy: bool
) -> None:
    """Conditions let one script answer every outcome of a parked call in sentences:
    ``if`` parts speak when the value is truthy, ``unless`` parts when it is not."""
    request = _request(*([("connect", result)] if result is not None else []))
    parts = [
        {"text": "Hi. "},
        {"if": "result.connect.connected", "text": "Connected as {{result.connect.account}}."},
        {"unless": "result.connect.connected", "text": "Not connected."},
        {
            "if": "result.connect.connected",
            "unless": "result.connect.account",
            "text": " (no account)",
        },
        {"unless": "result.connect.connected", "tool_call": {"name": "retry"}},
    ]
    said = await _said(parts, request)
    calls = await _calls(parts, request)
    if truthy:
        account = result.get("account")
        assert said == f"Hi. Connected as {account or ''}." + ("" if account else " (no account)")
        assert calls == []
    else:
        assert said == "Hi. Not connected."
        assert calls == [ModelToolCall(name="retry", input=None)]


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"text": "x", "if": "connected"}, "turns.0.0.if: .*must be result.<tool>.<path>"),
        ({"text": "x", "unless": "result.a..b"}, "turns.0.0.unless: .*must be result"),
        ({"text": "x", "when": "result.a"}, "turns.0.0.when: Extra inputs"),
        ({"text": "x", "if_": "result.a"}, "turns.0.0.if_: Extra inputs"),
        ({"text": "{{result}}"}, "turns.0.0.text: .*malformed placeholder '{{result}}'"),
        ({"text": "{{result.a b}}"}, "malformed placeholder"),
        (
            {"tool_call": {"name": "t", "input": {"a": ["{{result.x.}}"]}}},
            "turns.0.0.tool_call.input: .*malformed placeholder",
        ),
        ({"if": "result.a"}, "either"),
    ],
)
def test_scripts_with_malformed_conditions_or_placeholders_fail_at_load(
    part: dict[str, Any], message: str
) -> None:
    """A typo in a script must fail when the agent loads, naming the part, rather than
    print a raw placeholder to a user or silently drop a part."""
    with pytest.raises(TemplateError, match=message):
        ScriptedModel([[part]])


@pytest.mark.parametrize(
    "suggestions",
    [[], "What can you do?", [""], ["  "], [1], ["x" * 201], ["a", "b", "c", "d", "e", "f"]],
)
def test_an_agent_files_suggestions_must_be_a_few_short_messages(suggestions: Any) -> None:
    """The playground shows an agent file's suggestions as buttons that send them: a
    bad value fails at load, saying what is allowed, rather than draw an empty or
    endless button."""
    document = {**DEMO_AGENT, "suggestions": suggestions}
    if suggestions == []:
        assert parse_agent_file(document).suggestions == ()
        return
    with pytest.raises(TemplateError, match="'suggestions' must be a list of at most 5"):
        parse_agent_file(document)


def test_the_demo_suggests_its_first_message() -> None:
    """The built-in demo offers a first message its script and a real model both fit."""
    assert parse_agent_file(DEMO_AGENT).suggestions == ("Help me file a weather report",)


async def test_the_runner_runs_a_tool_with_the_input_its_placeholders_filled(
    redis: Redis,
) -> None:
    """End to end on the real runner: the user's answer to a client tool reaches the
    next tool's input (the demo looks up the weather of the city the user chose)."""
    agent = parse_agent_file(
        agent_doc(
            [
                [call("pick", {"q": "city"})],
                [call("get_weather", {"city": "{{result.pick.choice}}"})],
                [
                    text(
                        "It is {{result.get_weather.temperature_c}} °C "
                        "in {{result.get_weather.city}}."
                    )
                ],
            ]
        )
    )
    runner = Runner(redis, agent.model, agent.template)
    first = await (await runner.start_turn("p1", "alice", "hi")).collect()
    [pending] = [e.call for e in first if isinstance(e, CallParked)]
    await runner.settle(
        "p1", "alice", pending.tool_call_id, {"outcome": "output", "output": {"choice": "Oslo"}}
    )
    events = await (await runner.resume("p1", "alice")).collect()
    [issued] = [e for e in events if isinstance(e, ToolCallIssued) and e.tool_name == "get_weather"]
    assert issued.input == {"city": "Oslo"}
    [ran] = [
        e for e in events if isinstance(e, ToolSucceeded) and e.tool_call_id == issued.tool_call_id
    ]
    assert ran.output == {"city": "Oslo", "temperature_c": 4, "sky": "snow"}
    assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == "It is 4 °C in Oslo."


async def _demo_conversation(answers: dict[str, Any]) -> list[str]:
    """Each assistant text of the built-in demo when the user answers with ``answers``
    (an approval's answer is the denial result, or absent to approve)."""
    model = parse_agent_file(DEMO_AGENT).model
    assert model is not None
    messages: list[Any] = [UserTurn("Plan my weather report")]
    texts: list[str] = []
    for index in range(6):
        items = [i async for i in model.stream(ModelRequest("c", index, "", tuple(messages), ()))]
        texts.append("".join(i.text for i in items if isinstance(i, ModelTextDelta)))
        calls = [
            ModelToolCall(i.name, i.input, f"c{index}-{n}")
            for n, i in enumerate(items)
            if isinstance(i, ModelToolCall)
        ]
        messages.append(AssistantTurn(texts[-1], tuple(calls)))
        for issued in calls:
            tools = {
                "get_weather": get_weather,
                "publish_report": publish_report,
                # the sales as their artifact reference; the code's summary as it ran
                "get_sales": lambda _: {"artifact_id": "art_x", "bytes": 61234},
                "execute_code": lambda _: {
                    "status": "ok",
                    "result": {"orders": 600, "top_city": "Lyon", "top_total_eur": 6543.5},
                },
            }
            if issued.name in answers:
                result = answers[issued.name]
            else:
                result = tools[issued.name](issued.input)
            messages.append(ToolResult(str(issued.id), issued.name, result))
    return texts


async def test_the_demo_speaks_in_sentences_about_the_city_the_user_chose() -> None:
    """The demo is the first thing a user sees: every reply is a sentence (no raw JSON),
    and the report it asks to publish is about the chosen city and its weather."""
    connected = {
        "connected": True, "provider": "demo", "connection_id": "conn_1",
        "account": "ada", "scopes": ["repo"],
    }  # fmt: skip
    approved = await _demo_conversation(
        {"choose_option": {"choice": "Oslo"}, "request_connection": connected}
    )
    assert approved[1:] == [
        "Today in Lisbon: sunny, 21 °C. You picked Oslo, so the report will cover Oslo. "
        "To file it, I'd like a connection to your demo account.",
        "Connected as ada. Here is the report on Oslo for your approval.",
        "Published “Weather in Oslo” (6 words). "
        "One last stop: last month's sales, to show reviewed code.",
        "The sales came back as an artifact (61234 bytes), so here is a short program that "
        "summarises them, for your review.",
        "600 orders; Lyon sold the most (6543.5 €). That was the whole tour: a server tool, "
        "a choice, a connection, an approval and reviewed code.",
    ]
    declined = {"connected": False, "reason": "declined", "retryable": False}
    denied = await _demo_conversation(
        {
            "choose_option": {"choice": "Paris"},
            "request_connection": declined,
            "publish_report": {"approved": False, "reason": "denied"},
            "execute_code": {"approved": False, "reason": "denied"},
        }
    )
    assert denied[2:4] == [
        "No connection this time (declined); I'll publish without it. "
        "Here is the report on Paris for your approval.",
        "OK, the report stays unpublished (denied). "
        "One last stop: last month's sales, to show reviewed code.",
    ]
    assert denied[5] == (
        "The summary did not run (not approved). That was the whole tour: a server tool, "
        "a choice, a connection, an approval and reviewed code."
    )
    for said in approved + denied:
        assert "{" not in said and "null" not in said, said


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
    from parkway.runner import IncompatibleStateError

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
    from parkway.transport.aisdk.rebuild import replay_message

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


def test_replay_of_a_continued_message_leaves_out_the_output_its_run_sends() -> None:
    """A call that runs again with a person's answer (an MCP form): its part holds the
    answer, not its output, and the live run that follows sends the output. Rebuilt for
    that run it has no output of its own (one ``tool-output-available`` per call on the
    wire); rebuilt as a finished message, or for a call not named, it keeps it."""
    from parkway.transport.aisdk.rebuild import replay_message

    part = {
        "type": "tool-shop__ask",
        "toolCallId": "c1",
        "state": "output-available",
        "input": {"item": "pan"},
        "output": {"responses": {"where": {"action": "accept"}}},
    }
    message = {"id": "M", "parts": [{"type": "step-start"}, part]}

    def kinds(chunks: list[dict[str, Any]]) -> list[str]:
        return [c["type"] for c in chunks]

    assert kinds(replay_message(message, None, rerun={"c1"})) == [
        "start", "start-step", "tool-input-start", "tool-input-delta", "finish-step",
    ]  # fmt: skip
    assert "tool-output-available" in kinds(replay_message(message, None))
    assert "tool-output-available" in kinds(replay_message(message, "stop", rerun={"c1"}))


def test_settings_repr_hides_the_redis_password() -> None:
    settings = Settings.from_sources({"redis_url": "redis://:hunter2@db.internal:6379/0"}, {})
    assert "hunter2" not in repr(settings)
    assert "db.internal" in repr(settings)


def test_an_empty_approval_policy_name_is_refused() -> None:
    """An empty policy name must not silently turn approval off."""
    entry = {
        "type": "function",
        "name": "f",
        "ref": "parkway.runner.demo:get_weather",
        "needs_approval": "",
    }
    with pytest.raises(TemplateError, match="policy name"):
        load_template({"tools": [entry]})
