"""The provider double speaks each wire well enough for the real SDKs, via pydantic-ai.

Every test drives `pydantic_ai.direct.model_request_stream` with the real model class and
provider pointed at the double, so what passes here is what the openai, anthropic and
google-genai parsers accept. The round-trip tests pin the property Parkway relies on: a
resumed run sends thinking signatures, encrypted reasoning and provider call ids back
unchanged.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import pytest
from pydantic_ai.direct import model_request_stream, model_request_stream_sync
from pydantic_ai.exceptions import ModelAPIError, ModelConnectionError, ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ToolCallPart,
    ToolCallPartDelta,
    ToolReturnPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.google import GoogleProvider
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from tests.helpers.llm_double import (
    WIRES,
    Call,
    CutOff,
    Fail,
    Hang,
    ProviderDouble,
    Reset,
    StreamError,
    Turn,
)

# No SDK retries: a scripted failure must surface as the first request's error.
SETTINGS: ModelSettings = {"max_retries": 0}
WEATHER = ToolDefinition(
    name="get_weather",
    description="The weather in a city.",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
TOOLS = ModelRequestParameters(function_tools=[WEATHER])
# Base64 without "+", "/" or padding: google-genai sends Gemini signatures back as base64url.
SIGNATURE = "c2lnbmF0dXJlLTAx"
STREAMED_ARGS = ("openai-chat", "openai-responses", "anthropic")  # Gemini sends calls whole
# pydantic-ai's finish reason for a response that ends in tool calls: Responses reports
# `status: completed` and Gemini `STOP`, which both map to "stop".
TOOL_FINISH = {
    "openai-chat": "tool_call",
    "openai-responses": "stop",
    "anthropic": "tool_call",
    "gemini": "stop",
}


@pytest.fixture
def double() -> Iterator[ProviderDouble]:
    with ProviderDouble() as started:
        yield started


def model_for(wire: str, double: ProviderDouble) -> Model:
    """The real pydantic-ai model for `wire`, pointed at the double."""
    if wire == "openai-chat":
        chat = OpenAIProvider(base_url=double.openai_base_url, api_key="test-key")
        return OpenAIChatModel("gpt-4.1-mini", provider=chat)
    if wire == "openai-responses":
        # A reasoning model's profile makes pydantic-ai ask for `reasoning.encrypted_content`.
        responses = OpenAIProvider(base_url=double.openai_base_url, api_key="test-key")
        return OpenAIResponsesModel("gpt-5", provider=responses)
    if wire == "anthropic":
        anthropic = AnthropicProvider(api_key="test-key", base_url=double.base_url)
        return AnthropicModel("claude-sonnet-4-6", provider=anthropic)
    google = GoogleProvider(api_key="test-key", base_url=double.base_url)
    return GoogleModel("gemini-2.5-flash", provider=google)


async def stream(
    model: Model, messages: Sequence[ModelMessage] | None = None
) -> tuple[list[ModelResponseStreamEvent], ModelResponse]:
    history = list(messages or [ModelRequest.user_text_prompt("What is the weather?")])
    async with model_request_stream(
        model, history, model_settings=SETTINGS, model_request_parameters=TOOLS
    ) as response:
        events = [event async for event in response]
        return events, response.get()


async def consume(
    model: Model, seen: list[ModelResponseStreamEvent], first: asyncio.Event | None = None
) -> None:
    """Read a stream to its end, keeping the events seen and flagging the first."""
    hello = [ModelRequest.user_text_prompt("Hi")]
    async with model_request_stream(model, hello, model_settings=SETTINGS) as response:
        async for event in response:
            seen.append(event)
            if first is not None:
                first.set()


def consume_sync(model: Model) -> None:
    hello = [ModelRequest.user_text_prompt("Hi")]
    with model_request_stream_sync(model, hello, model_settings=SETTINGS) as response:
        list(response)


def text_deltas(events: list[ModelResponseStreamEvent]) -> list[str]:
    return [
        event.delta.content_delta
        for event in events
        if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)
    ]


def streamed_text(events: list[ModelResponseStreamEvent]) -> str:
    """The text the events carried: each text part's start, then its deltas."""
    starts = [
        e.part.content
        for e in events
        if isinstance(e, PartStartEvent) and isinstance(e.part, TextPart)
    ]
    return "".join(starts) + "".join(text_deltas(events))


@pytest.fixture
def sync_loop() -> Iterator[None]:
    """pydantic-ai's sync API runs on the thread's current loop and creates one it never
    closes when there is none; giving it one to close keeps ResourceWarnings away."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


@pytest.mark.parametrize("wire", WIRES)
async def test_text_streams_as_several_deltas(double: ProviderDouble, wire: str) -> None:
    """Parkway forwards tokens as they come, so each wire must deliver text incrementally."""
    double.script(wire, [Turn(text=["The ", "weather ", "is ", "fine."], usage=(20, 9, 0))])

    events, response = await stream(model_for(wire, double))

    assert len(text_deltas(events)) >= 3
    assert streamed_text(events) == response.text == "The weather is fine."
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20, 9)
    recorded = double.requests_for(wire)[0]  # the SDK asked for a stream, as each wire says to
    asked = recorded.query.get("alt") == "sse" if wire == "gemini" else recorded.body["stream"]
    assert asked is True


@pytest.mark.parametrize("wire", WIRES)
async def test_usage_and_finish_reason_reach_the_final_response(
    double: ProviderDouble, wire: str
) -> None:
    """Usage (with reasoning tokens) and a length finish are what budgets and retries read."""
    double.script(wire, [Turn(text="Cut short", finish="length", usage=(30, 12, 5), model="m-1")])

    _, response = await stream(model_for(wire, double))

    assert response.finish_reason == "length"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.output_reasoning_tokens) == (30, 12, 5)
    assert response.model_name == "m-1"


@pytest.mark.parametrize("wire", WIRES)
async def test_content_filter_finish_is_reported(double: ProviderDouble, wire: str) -> None:
    """A filtered answer must not look like a normal stop to the runner."""
    double.script(wire, [Turn(text="I can't", finish="content_filter")])

    _, response = await stream(model_for(wire, double))

    assert response.finish_reason == "content_filter"


@pytest.mark.parametrize("wire", WIRES)
async def test_reasoning_arrives_as_a_thinking_part(double: ProviderDouble, wire: str) -> None:
    """Reasoning is streamed to the browser and its signature kept for the next request."""
    reasoning = ["Let me ", "check ", "the weather."]
    turn = Turn(
        reasoning=reasoning, signature=SIGNATURE, calls=[Call("get_weather", {"city": "Oslo"})]
    )
    double.script(wire, [turn])

    _, response = await stream(model_for(wire, double))

    thinking = next(part for part in response.parts if isinstance(part, ThinkingPart))
    call = next(part for part in response.parts if isinstance(part, ToolCallPart))
    assert thinking.content == "Let me check the weather."
    if wire == "anthropic":
        assert thinking.signature == SIGNATURE
    elif wire == "openai-responses":
        assert thinking.signature == SIGNATURE
        assert thinking.id is not None and thinking.id.startswith("rs_")
    elif wire == "gemini":  # the signature rides on the part after the thought
        assert thinking.signature is None
        assert call.provider_details == {"thought_signature": SIGNATURE}
    else:  # Chat Completions has no signature; `reasoning_content` names the field
        assert (thinking.id, thinking.signature) == ("reasoning_content", None)


@pytest.mark.parametrize("wire", STREAMED_ARGS)
async def test_tool_call_arguments_stream_in_pieces(double: ProviderDouble, wire: str) -> None:
    """Parkway streams tool input to the browser before the call completes."""
    double.script(wire, [Turn(calls=[Call("get_weather", {"city": "Reykjavik"})])])

    events, response = await stream(model_for(wire, double))

    pieces = [
        event.delta.args_delta
        for event in events
        if isinstance(event, PartDeltaEvent)
        and isinstance(event.delta, ToolCallPartDelta)
        and isinstance(event.delta.args_delta, str)
        and event.delta.args_delta
    ]
    assert len(pieces) >= 2
    (call,) = response.tool_calls
    assert call.args_as_dict() == {"city": "Reykjavik"}
    assert response.finish_reason == TOOL_FINISH[wire]


async def test_gemini_function_calls_arrive_whole(double: ProviderDouble) -> None:
    """Gemini's wire has no argument deltas, so the runner must not wait for any."""
    double.script("gemini", [Turn(calls=[Call("get_weather", {"city": "Reykjavik"})])])

    events, response = await stream(model_for("gemini", double))

    assert not [
        e
        for e in events
        if isinstance(e, PartDeltaEvent) and isinstance(e.delta, ToolCallPartDelta)
    ]
    assert response.tool_calls[0].args_as_dict() == {"city": "Reykjavik"}
    assert response.tool_calls[0].tool_call_id.startswith("pyd_ai_")  # Gemini sent no id


@pytest.mark.parametrize("wire", WIRES)
async def test_parallel_calls_keep_their_provider_ids(double: ProviderDouble, wire: str) -> None:
    """Each parked call is keyed by the provider's id, so ids must survive parsing."""
    calls = [
        Call("get_weather", {"city": "Oslo"}, id="call_a1"),
        Call("get_weather", {"city": "Rome"}, id="call_b2"),
    ]
    double.script(wire, [Turn(text="Checking both.", calls=calls)])

    _, response = await stream(model_for(wire, double))

    assert [(c.tool_call_id, c.args_as_dict()) for c in response.tool_calls] == [
        ("call_a1", {"city": "Oslo"}),
        ("call_b2", {"city": "Rome"}),
    ]
    assert response.finish_reason == TOOL_FINISH[wire]


@pytest.mark.parametrize("wire", WIRES)
async def test_history_sends_signatures_and_call_ids_back_unchanged(
    double: ProviderDouble, wire: str
) -> None:
    """A resumed run replays the parked response; the provider rejects it if the thinking
    signature, encrypted reasoning or call id changed on the way through Parkway."""
    call_id = "toolu_01A" if wire == "anthropic" else "call_01A"
    first = Turn(
        reasoning="I should look.",
        signature=SIGNATURE,
        calls=[Call("get_weather", {"city": "Oslo"}, id=call_id)],
    )
    double.script(wire, [first, Turn(text="It is sunny in Oslo.")])
    model = model_for(wire, double)
    question = ModelRequest.user_text_prompt("Weather in Oslo?")
    _, response = await stream(model, [question])
    answer = ToolReturnPart(tool_name="get_weather", content="sunny", tool_call_id=call_id)

    _, final = await stream(model, [question, response, ModelRequest(parts=[answer])])

    assert final.text == "It is sunny in Oslo."
    body = double.requests_for(wire)[1].body
    if wire == "openai-chat":
        assistant, tool = body["messages"][1], body["messages"][2]
        assert assistant["tool_calls"][0]["id"] == call_id
        assert assistant["reasoning_content"] == "I should look."
        assert (tool["role"], tool["tool_call_id"]) == ("tool", call_id)
    elif wire == "openai-responses":
        reasoning, function_call, output = body["input"][1:4]
        thinking = next(part for part in response.parts if isinstance(part, ThinkingPart))
        assert "reasoning.encrypted_content" in double.requests_for(wire)[0].body["include"]
        assert reasoning["type"] == "reasoning"
        assert (reasoning["id"], reasoning["encrypted_content"]) == (thinking.id, SIGNATURE)
        assert (function_call["type"], function_call["call_id"]) == ("function_call", call_id)
        assert function_call["id"].startswith("fc_")
        assert (output["type"], output["call_id"]) == ("function_call_output", call_id)
    elif wire == "anthropic":
        thinking_block, tool_use = body["messages"][1]["content"]
        (tool_result,) = body["messages"][2]["content"]
        assert thinking_block == {
            "type": "thinking",
            "thinking": "I should look.",
            "signature": SIGNATURE,
        }
        assert (tool_use["type"], tool_use["id"]) == ("tool_use", call_id)
        assert (tool_result["type"], tool_result["tool_use_id"]) == ("tool_result", call_id)
    else:
        thought, function_call = body["contents"][1]["parts"]
        (function_response,) = body["contents"][2]["parts"]
        assert thought == {"text": "I should look.", "thought": True}
        assert function_call["thoughtSignature"] == SIGNATURE
        assert function_call["functionCall"]["id"] == call_id
        assert function_response["functionResponse"]["id"] == call_id


@pytest.mark.parametrize("wire", WIRES)
async def test_unauthorised_raises_model_http_error(double: ProviderDouble, wire: str) -> None:
    """A bad key must fail the turn with the status, not retry or hang."""
    double.script(wire, [Fail(401)])

    with pytest.raises(ModelHTTPError) as raised:
        await stream(model_for(wire, double))

    assert raised.value.status_code == 401


@pytest.mark.parametrize("wire", WIRES)
async def test_rate_limit_carries_retry_after(double: ProviderDouble, wire: str) -> None:
    """The runner backs off by the provider's own `retry-after`."""
    double.script(wire, [Fail(429, headers={"retry-after": "2"})])

    with pytest.raises(ModelHTTPError) as raised:
        await stream(model_for(wire, double))

    assert (raised.value.status_code, raised.value.retry_after) == (429, 2)


@pytest.mark.parametrize("wire", WIRES)
async def test_reset_connection_is_a_connection_error(double: ProviderDouble, wire: str) -> None:
    """A dropped connection is a transient failure category, not an HTTP error."""
    double.script(wire, [Reset()])

    with pytest.raises(ModelConnectionError):
        await stream(model_for(wire, double))

    assert double.requests_for(wire)[0].body  # recorded though never answered


@pytest.mark.parametrize("wire", WIRES)
async def test_stream_cut_after_tokens_raises_after_the_tokens(
    double: ProviderDouble, wire: str
) -> None:
    """Tokens already forwarded stay forwarded; the cut still fails the turn."""
    double.script(wire, [CutOff(text=["Partial ", "answer"])])
    seen: list[ModelResponseStreamEvent] = []

    with pytest.raises(ModelConnectionError):
        await consume(model_for(wire, double), seen)

    assert streamed_text(seen) == "Partial answer"


@pytest.mark.parametrize("wire", ["anthropic", "openai-responses", "openai-chat"])
async def test_in_stream_error_is_marked_in_stream(double: ProviderDouble, wire: str) -> None:
    """An error after a 200 must be told apart from one before the stream opened."""
    double.script(wire, [StreamError(text=["Hel"])])

    with pytest.raises(ModelAPIError) as raised:
        await stream(model_for(wire, double))

    assert raised.value.in_stream is True


@pytest.mark.parametrize("wire", WIRES)
async def test_cancelling_a_hung_stream_disconnects_the_provider(
    double: ProviderDouble, wire: str
) -> None:
    """A cancelled run must close the provider stream rather than leak it."""
    double.script(wire, [Hang(text=["Thinking ", "about it"])])
    started = asyncio.Event()

    task = asyncio.create_task(consume(model_for(wire, double), [], started))
    await asyncio.wait_for(started.wait(), 10)
    assert double.disconnected == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await double.wait_disconnect(timeout=5.0)
    assert double.disconnected == 1


@pytest.mark.usefixtures("sync_loop")
def test_a_sync_caller_sees_the_disconnect(double: ProviderDouble) -> None:
    """Sync tests use the same double; closing a sync stream early is a disconnect too."""
    double.script("anthropic", [Hang()])
    messages = [ModelRequest.user_text_prompt("Hi")]

    with model_request_stream_sync(
        model_for("anthropic", double), messages, model_settings=SETTINGS
    ) as response:
        next(iter(response))

    assert double.wait_disconnect_sync(timeout=5.0)


async def test_gate_holds_the_reply_after_its_first_event(double: ProviderDouble) -> None:
    """A gated turn lets a test act while a stream is open but unfinished: closing it then
    is a disconnect, which it could not be had the whole reply already been sent."""
    double.script("anthropic", [Turn(text="Never sent", gate=threading.Event())])

    async with model_request_stream(
        model_for("anthropic", double),
        [ModelRequest.user_text_prompt("Hi")],
        model_settings=SETTINGS,
    ):
        pass  # open: pydantic-ai has read the first event, message_start, and stops here

    assert await double.wait_disconnect(timeout=5.0)


async def test_opening_the_gate_releases_the_rest(double: ProviderDouble) -> None:
    """Once the gate opens, the reply completes as an ungated one would."""
    gate = threading.Event()
    double.script("anthropic", [Turn(text="Released now", gate=gate)])

    async with model_request_stream(
        model_for("anthropic", double),
        [ModelRequest.user_text_prompt("Hi")],
        model_settings=SETTINGS,
    ) as response:
        gate.set()
        events = [event async for event in response]

    assert streamed_text(events) == "Released now"
    assert double.disconnected == 0


async def test_a_client_leaving_during_the_pause_is_a_disconnect(double: ProviderDouble) -> None:
    """`pause_before_first` holds the first event back: a run cancelled while waiting for its
    first token closes the stream, which the double sees as a disconnect."""
    double.script("openai-chat", [Turn(text="Too late", pause_before_first=60.0)])
    task = asyncio.create_task(consume(model_for("openai-chat", double), []))
    async with asyncio.timeout(10):
        while not double.requests:  # wait for the request to arrive, not for a duration
            await asyncio.sleep(0.01)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await double.wait_disconnect(timeout=5.0)


async def test_an_exhausted_script_answers_500_naming_the_wire(double: ProviderDouble) -> None:
    """A test that under-scripts fails loudly instead of hanging."""
    with pytest.raises(ModelHTTPError) as raised:
        await stream(model_for("anthropic", double))

    assert raised.value.status_code == 500
    assert "ran out" in str(raised.value.body)


@pytest.mark.usefixtures("sync_loop")
def test_reset_forgets_script_requests_and_disconnects(double: ProviderDouble) -> None:
    """One double can serve several phases of a test without leaking state between them."""
    double.script("gemini", [Turn(text="unused")])
    with pytest.raises(ModelHTTPError):  # the anthropic script is empty
        consume_sync(model_for("anthropic", double))
    assert len(double.requests) == 1

    double.reset()

    assert (double.requests, double.disconnected) == ([], 0)
    with pytest.raises(ModelHTTPError):  # the gemini reply was forgotten too
        consume_sync(model_for("gemini", double))
