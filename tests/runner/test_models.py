"""Real models through their real SDKs, against a provider double on loopback.

Parkway's provider adapter (pydantic-ai's model layer over the openai, anthropic and
google-genai SDKs) talks HTTP to :class:`tests.helpers.llm_double.ProviderDouble`, which speaks
each provider's documented streaming wire. These tests drive the whole server over HTTP
(real uvicorn, real Redis) and check both sides: the AI SDK chunks a browser receives and
the request bodies the provider receives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.helpers.llm_double import Call, ProviderDouble, Turn
from tests.helpers.model_rig import MODELS, WIRES, agent, provider_env, reasoning, said
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    ServerThread,
    answered,
    sse_chunks,
    types,
)

# -- streaming: text, reasoning, usage ------------------------------------------------------


@pytest.mark.parametrize("provider", list(WIRES))
async def test_text_and_reasoning_stream_as_ai_sdk_parts_with_usage_and_model(
    provider: str, double: ProviderDouble, serve: Any
) -> None:
    """Each provider's thinking arrives as reasoning-start/-delta/-end before the answer's
    text, and the finish carries the model and the tokens, also in the chat's GET."""
    double.script(
        WIRES[provider],
        [Turn(reasoning=["Let me ", "think."], signature="c2lnLTE=", text=["Hello", " there."])],
    )
    server = serve(MODELS[provider])
    api = await Api(server.base_url).login()
    chunks = await api.say("c1", "hi")
    kinds = types(chunks)
    assert kinds.index("reasoning-start") < kinds.index("reasoning-end") < kinds.index("text-start")
    assert reasoning(chunks) == "Let me think."
    assert said(chunks) == "Hello there."
    finish = chunks[-1]
    assert finish["type"] == "finish" and finish["finishReason"] == "stop"
    metadata = finish["messageMetadata"]
    assert metadata["model"].startswith(f"{provider}:")
    assert metadata["usage"]["inputTokens"] == 11
    assert metadata["usage"]["outputTokens"] >= 7
    state = await api.state("c1")
    message = state["messages"][-1]
    assert message["metadata"] == metadata
    assert {"type": "reasoning", "text": "Let me think.", "state": "done"} in message["parts"]
    await api.aclose()


@pytest.mark.parametrize(
    ("finish", "expected"), [("length", "length"), ("content_filter", "content-filter")]
)
async def test_provider_finish_reasons_are_mapped(
    finish: str, expected: str, double: ProviderDouble, serve: Any
) -> None:
    double.script("anthropic", [Turn(text="cut sh", finish=finish)])
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    chunks = await api.say("f1", "hi")
    assert chunks[-1]["finishReason"] == expected
    await api.aclose()


# -- tool calls ---------------------------------------------------------------------------


@pytest.mark.parametrize("provider", list(WIRES))
async def test_parallel_server_client_and_approval_calls_park_and_resume_with_provider_ids(
    provider: str, double: ProviderDouble, serve: Any
) -> None:
    """A real model's mixed step behaves like a scripted one: the server tool runs, the
    client call and the approval park; tool input streams before it is available; the
    resume sends the provider back its own call ids, signatures and results."""
    wire = WIRES[provider]
    double.script(
        wire,
        [
            Turn(
                reasoning="Plan: weather, ask, publish.",
                signature="c2lnbmVkLXRoaW5raW5n",
                text="Working on it.",
                calls=[
                    Call("get_weather", {"city": "Oslo"}, id="prov_weather_1"),
                    Call("pick", {"q": "which city?"}, id="prov_pick_1"),
                    Call("publish", {"title": "Report"}, id="prov_publish_1"),
                ],
            ),
            Turn(text="All done."),
        ],
    )
    server = serve(MODELS[provider])
    api = await Api(server.base_url).login()
    chunks = await api.say("t1", "go")
    assert chunks[-1]["finishReason"] == "tool-calls"
    available = {c["toolName"]: c for c in chunks if c["type"] == "tool-input-available"}
    assert set(available) == {"get_weather", "pick", "publish"}
    if wire != "gemini":  # Gemini sends calls whole; the others stream their arguments
        for name, chunk in available.items():
            call_id = chunk["toolCallId"]
            starts = [i for i, c in enumerate(chunks) if c.get("toolCallId") == call_id]
            first = chunks[starts[0]]
            assert first["type"] == "tool-input-start" and first["toolName"] == name
            deltas = [
                c["inputTextDelta"]
                for c in chunks
                if c["type"] == "tool-input-delta" and c["toolCallId"] == call_id
            ]
            assert json.loads("".join(deltas)) == chunk["input"]
    outputs = [c for c in chunks if c["type"] == "tool-output-available"]
    assert [o["toolCallId"] for o in outputs] == [available["get_weather"]["toolCallId"]]
    assert any(c["type"] == "tool-approval-request" for c in chunks)
    # Parkway's own ids, never the provider's (which may repeat across steps).
    assert all(not c["toolCallId"].startswith("prov_") for c in available.values())

    pick_id = available["pick"]["toolCallId"]
    publish_id = available["publish"]["toolCallId"]
    settled = await api.settle("t1", pick_id, {"outcome": "output", "output": {"choice": "Oslo"}})
    assert settled.status_code == 200, settled.text
    settled = await api.settle("t1", publish_id, {"outcome": "approved"})
    assert settled.status_code == 200, settled.text
    resumed = await api.resume("t1")
    assert resumed.status_code == 200, resumed.text
    assert said(sse_chunks(resumed.text)) == "All done."

    first, second = double.requests_for(wire)
    body = json.dumps(second.body)
    if wire != "openai-chat":  # Chat Completions has no reasoning signatures
        assert "c2lnbmVkLXRoaW5raW5n" in body, "the reasoning signature went back unchanged"
    if wire != "gemini":
        for provider_id in ("prov_weather_1", "prov_pick_1", "prov_publish_1"):
            assert provider_id in body, f"{provider_id} went back as the call's id"
    assert "Oslo" in body and "published" in body
    await api.aclose()


async def test_invalid_tool_input_goes_back_to_the_model_and_is_never_parked(
    double: ProviderDouble, serve: Any
) -> None:
    """Arguments that are not JSON, or miss the schema, and an unknown tool, come back to
    the model as error results it can correct; nothing reaches a widget."""
    double.script(
        "openai-chat",
        [
            Turn(calls=[Call("pick", '{"q": "broken'), Call("nope", {"x": 1})]),
            Turn(calls=[Call("publish", {"wrong": True})]),
            Turn(text="Sorry, fixed."),
        ],
    )
    server = serve(MODELS["openai-compatible"])
    api = await Api(server.base_url).login()
    chunks = await api.say("bad", "go")
    errors = [c for c in chunks if c["type"] == "tool-input-error"]
    assert [e["toolName"] for e in errors] == ["pick", "nope", "publish"]
    assert "not valid JSON" in errors[0]["errorText"]
    assert not any(c["type"] == "data-parkway-widget" for c in chunks)
    assert said(chunks) == "Sorry, fixed."
    second = json.dumps(double.requests_for("openai-chat")[1].body)
    assert "not valid JSON" in second and "unknown tool" in second
    await api.aclose()


async def test_a_model_that_keeps_making_invalid_calls_is_stopped(
    double: ProviderDouble, serve: Any
) -> None:
    double.script("anthropic", [Turn(calls=[Call("nope", {})]) for _ in range(6)])
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    chunks = await api.say("loop", "go")
    assert "refused 4 times in a row" in said(chunks)
    assert len(double.requests_for("anthropic")) == 4
    assert (await api.state("loop"))["state"] == "idle"
    await api.aclose()


# -- cold resume on another process ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["anthropic", "openai", "google"])
async def test_park_sigkill_and_resume_on_another_process_sends_the_provider_its_state(
    provider: str, double: ProviderDouble, redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Process A parks a real model's step (thinking with a signature, a client call with
    the provider's id) and is killed with SIGKILL; process B resumes from Redis alone and
    sends the provider exactly what it needs: the signature and call id unchanged."""
    wire = WIRES[provider]
    double.script(
        wire,
        [
            Turn(
                reasoning="I should ask.",
                signature="Y29sZC1zaWduYXR1cmU=",
                calls=[Call("pick", {"q": "city"}, id="prov_cold_1")],
            ),
            Turn(text="You picked it."),
        ],
    )
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps(agent(MODELS[provider])))
    env = provider_env(double)
    first = ParkwayProcess(redis_url, agent_file, env=env).start()
    try:
        api = await Api(first.base_url).login()
        chunks = await api.say("cold", "hi")
        await api.aclose()
    finally:
        first.kill()
    assert chunks[-1]["finishReason"] == "tool-calls"
    second = ParkwayProcess(redis_url, agent_file, env=env).start()
    try:
        other = api.same_user(second.base_url)
        response = await other.chat("cold", answered(chunks, {"choice": "Lisbon"}, tool="pick"))
        await other.aclose()
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    assert said(sse_chunks(response.text)) == "You picked it."
    body = json.dumps(double.requests_for(wire)[1].body)
    assert "Y29sZC1zaWduYXR1cmU=" in body
    if wire != "gemini":
        assert "prov_cold_1" in body
    assert "Lisbon" in body


async def test_the_templates_llm_chooses_the_model_and_serve_model_overrides_it(
    double: ProviderDouble, redis: Redis, redis_url: str
) -> None:
    """A committed template's ``llm`` (what commit_config changes) picks the model of new
    turns; ``--model`` wins over it."""
    scripted = {
        "template": {"instructions": "t", "tools": []},
        "model": {"scripted": {"turns": [[{"text": "scripted"}]] * 3}},
    }
    double.script("anthropic", [Turn(text="from claude")])
    double.script("gemini", [Turn(text="from gemini")])
    server = ServerThread(redis_url, scripted).start()
    try:
        api = await Api(server.base_url).login()
        assert said(await api.say("m1", "hi")) == "scripted"
        agent_view = (await api.http.get("/api/agent")).json()
        template = {**agent_view["template"], "llm": "anthropic:claude-test"}
        commit = await api.http.post(
            "/api/agent/commit",
            json={"template": template, "expectedVersion": agent_view["version"]},
        )
        assert commit.status_code in {200, 201}, commit.text
        assert said(await api.say("m2", "hi")) == "from claude"
        await api.aclose()
    finally:
        server.stop()
    server = ServerThread(redis_url, scripted, model="google:gemini-test").start()
    try:
        api = await Api(server.base_url).login()
        assert said(await api.say("m3", "hi")) == "from gemini"
        await api.aclose()
    finally:
        server.stop()


async def test_a_real_models_request_connection_parks_and_a_partial_answer_does_not_resume(
    double: ProviderDouble, serve: Any
) -> None:
    """An agent asks for a connection mid-run: the call parks with its connect widget,
    answering one of two parked calls does not resume, and the model receives the
    definite outcome of each (here: declined, and a choice) under its own call ids."""
    double.script(
        "anthropic",
        [
            Turn(
                text="I need access.",
                calls=[
                    Call(
                        "request_connection",
                        {"provider": "demo", "scopes": ["repo"], "reason": "File it."},
                        id="toolu_conn",
                    ),
                    Call("pick", {"q": "which?"}, id="toolu_pick"),
                ],
            ),
            Turn(text="Understood, no connection."),
        ],
    )
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    chunks = await api.say("conn", "go")
    widgets = {c["data"]["kind"] for c in chunks if c["type"] == "data-parkway-widget"}
    assert "connect" in widgets
    ids = {c["toolName"]: c["toolCallId"] for c in chunks if c["type"] == "tool-input-available"}
    declined = await api.settle(
        "conn",
        ids["request_connection"],
        {"outcome": "output", "output": {"connected": False, "reason": "declined"}},
    )
    assert declined.status_code == 200, declined.text
    early = await api.resume("conn")
    assert early.status_code == 409, early.text  # one call is still pending
    assert len(double.requests_for("anthropic")) == 1
    await api.settle("conn", ids["pick"], {"outcome": "output", "output": {"choice": "b"}})
    resumed = await api.resume("conn")
    assert said(sse_chunks(resumed.text)) == "Understood, no connection."
    body = json.dumps(double.requests_for("anthropic")[1].body)
    assert "toolu_conn" in body and "toolu_pick" in body
    assert "declined" in body
    await api.aclose()


# -- units: names, settings, conversion ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"name": "anthropic:claude-x", "settings": {"timeout": 5}}, "server settings"),
        ({"name": "anthropic:claude-x", "settings": {"openai_store": False}}, "another provider"),
        ({"name": "openai:gpt-x", "settings": {"temperature": 3}}, "from 0 to 2"),
        ({"name": "openai:gpt-x", "settings": {"thinking": "lots"}}, "thinking"),
        ({"name": "openai:gpt-x", "settings": {"colour": "red"}}, "unknown setting"),
        ({"name": "openai:gpt-x", "extra": 1}, "unexpected key"),
        (42, "expected"),
    ],
)
def test_bad_model_specs_are_refused_naming_the_problem(value: Any, words: str) -> None:
    from parkway.runner.errors import TemplateError
    from parkway.runner.llm import parse_model_spec

    with pytest.raises(TemplateError, match=words):
        parse_model_spec(value)


def test_a_model_spec_keeps_its_settings_and_its_own_providers_options() -> None:
    from parkway.runner.llm import parse_model_spec

    spec = parse_model_spec(
        {
            "name": "anthropic:claude-x",
            "settings": {"thinking": "low", "max_tokens": 100, "anthropic_thinking": {}},
        }
    )
    assert spec.name == "anthropic:claude-x"
    assert dict(spec.settings) == {"thinking": "low", "max_tokens": 100, "anthropic_thinking": {}}


def test_stored_parts_rebuild_the_providers_response_and_empty_steps_are_left_out() -> None:
    """What a step stored (signature, ids, provider details, the provider's call id) comes
    back in the pydantic-ai response; a step that said nothing is not sent at all."""
    from pydantic_ai.messages import ModelResponse, ThinkingPart, ToolCallPart, ToolReturnPart

    from parkway.runner.llm.convert import to_messages
    from parkway.runner.llm.model import (
        AssistantTurn,
        ModelRequest,
        ModelToolCall,
        ToolResult,
        UserTurn,
    )

    turn = AssistantTurn(
        "Checking.",
        (ModelToolCall("pick", {"q": "a"}, "call_parkway", provider_id="toolu_1"),),
        (
            {"type": "reasoning", "text": "hm", "sig": "SIG", "pn": "anthropic"},
            {"type": "text", "text": "Checking."},
            {"type": "call", "id": "item_1", "pd": {"thought_signature": "TS"}},
        ),
        {"provider": "anthropic", "model": "claude-x", "rid": "msg_1"},
    )
    request = ModelRequest(
        "c",
        2,
        "be brief",
        (
            UserTurn("hi"),
            AssistantTurn(""),  # stopped before it said anything
            UserTurn("again"),
            turn,
            ToolResult("call_parkway", "pick", {"choice": "a"}),
        ),
        (),
    )
    messages = to_messages(request)
    assert [type(m).__name__ for m in messages] == ["ModelRequest", "ModelResponse", "ModelRequest"]
    response = messages[1]
    assert isinstance(response, ModelResponse)
    thinking, _, call = response.parts
    assert isinstance(thinking, ThinkingPart) and thinking.signature == "SIG"
    assert thinking.provider_name == "anthropic"
    assert isinstance(call, ToolCallPart)
    assert call.tool_call_id == "toolu_1" and call.id == "item_1"
    assert call.provider_details == {"thought_signature": "TS"}
    assert response.provider_response_id == "msg_1"
    [result] = messages[2].parts
    assert isinstance(result, ToolReturnPart) and result.tool_call_id == "toolu_1"
    assert messages[2].instructions == "be brief"
