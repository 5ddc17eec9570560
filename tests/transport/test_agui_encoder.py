"""The AG-UI encoder alone: runner events in, ag-ui-protocol events out (no I/O)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ag_ui.core import Event
from pydantic import TypeAdapter

from parkway.runner.events import (
    CallParked,
    DataPublished,
    MessageFinished,
    MessageStarted,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    RunFailed,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallIssued,
    ToolInputDelta,
    ToolInputRejected,
    ToolInputStarted,
    ToolSucceeded,
)
from parkway.runner.parking import ParkedCall
from parkway.transport.agui.encoder import AguiEncoder
from parkway.transport.agui.messages import interrupt_of

_EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def _call(call_id: str, name: str, kind: str = "client", **extra: Any) -> ParkedCall:
    return ParkedCall(
        tool_call_id=call_id,
        tool_name=name,
        kind=kind,  # type: ignore[arg-type]
        input={"q": 1},
        key=f'{name}#{{"q":1}}',
        seq=1,
        message_id="msg_1",
        created_at=time.time(),
        **extra,
    )


def _wire(
    encoder: AguiEncoder, events: list[Any], calls: Sequence[ParkedCall] = ()
) -> list[dict[str, Any]]:
    out = [*encoder.start()]
    for event in events:
        out.extend(encoder.encode(event))
    finished = encoder.finished
    out.extend(
        encoder.finish(
            calls,
            lambda pending: [interrupt_of(c, {"kind": "x"}) for c in pending],
            reason=finished.reason if finished else "stop",
            metadata=finished.metadata if finished else None,
        )
    )
    dumped = [json.loads(e.model_dump_json(by_alias=True)) for e in out]
    for event in dumped:
        _EVENTS.validate_python(event)
    return dumped


def test_a_step_with_reasoning_text_and_a_streamed_call() -> None:
    encoder = AguiEncoder("t1", "r1")
    events = [
        MessageStarted("msg_1"),
        StepStarted(),
        ReasoningStarted("t0-r0"),
        ReasoningDelta("t0-r0", "hmm"),
        ReasoningEnded("t0-r0"),
        TextStarted("t0"),
        TextDelta("t0", "Hello"),
        TextEnded("t0"),
        ToolInputStarted("call_1", "get_weather"),
        ToolInputDelta("call_1", '{"city":'),
        ToolInputDelta("call_1", '"Paris"}'),
        ToolCallIssued("call_1", "get_weather", {"city": "Paris"}),
        ToolSucceeded("call_1", {"temp": 20}),
        DataPublished("chart", {"x": 1}, part_id="call_1"),
        StepFinished(),
        StepStarted(),
        TextStarted("t1"),
        TextDelta("t1", "Done"),
        TextEnded("t1"),
        StepFinished(),
        MessageFinished("stop", {"model": "m", "usage": {"inputTokens": 3, "outputTokens": 4}}),
    ]
    wire = _wire(encoder, events)
    kinds = [e["type"] for e in wire]
    assert kinds == [
        "RUN_STARTED",
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "CUSTOM",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert wire[0]["protocolVersion"] == "1.0"
    assert wire[2]["messageId"] == "msg_1-r0"
    assert wire[7]["messageId"] == "msg_1" and wire[18]["messageId"] == "msg_1-1"
    assert wire[10]["parentMessageId"] == "msg_1"
    assert wire[14] == {
        "type": "TOOL_CALL_RESULT",
        "messageId": "call_1-result",
        "toolCallId": "call_1",
        "content": '{"temp":20}',
        "role": "tool",
    }
    assert wire[15]["name"] == "parkway.data"
    assert wire[15]["value"] == {"name": "chart", "data": {"x": 1}, "id": "call_1"}
    assert wire[-1]["outcome"] == {"type": "success"}
    assert wire[-1]["usage"] == [{"model": "m", "inputTokens": 3, "outputTokens": 4}]


def test_calls_with_no_streamed_input_and_rejected_input() -> None:
    encoder = AguiEncoder("t1", "r1", steps_before=2)
    wire = _wire(
        encoder,
        [
            MessageStarted("msg_1"),
            StepStarted(),
            ToolCallIssued("call_1", "lookup", {"a": [1, 2]}),
            ToolInputRejected("call_2", "nope", {}, "unknown tool"),
            StepFinished(),
            MessageFinished("tool-calls"),
        ],
        [_call("call_1", "lookup")],
    )
    assert [e["type"] for e in wire[1:5]] == [
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
    ]
    assert wire[2]["parentMessageId"] == "msg_1-2"  # the message's third step
    assert wire[3]["delta"] == '{"a":[1,2]}'
    rejected = [e for e in wire if e["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(rejected[0]["content"]) == {"error": "unknown tool"}
    [interrupt] = wire[-1]["outcome"]["interrupts"]
    assert interrupt["id"] == "call_1" and interrupt["reason"] == "client_tool"


def test_how_a_run_ends_by_what_it_parked() -> None:
    frontend = _call("call_f", "pick_color")
    approval = _call("call_a", "publish", kind="approval", approval_id="apr_1", deadline=1e9)
    parked = [MessageStarted("msg_1"), CallParked(frontend), MessageFinished("tool-calls")]
    only_frontend = _wire(AguiEncoder("t", "r", frontend={"pick_color"}), parked, [frontend])
    assert only_frontend[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["call_f"]}
    both = _wire(AguiEncoder("t", "r", frontend={"pick_color"}), parked, [frontend, approval])
    [interrupt] = both[-1]["outcome"]["interrupts"]
    assert interrupt["id"] == "call_a" and interrupt["reason"] == "tool_call"
    assert interrupt["expiresAt"] == "2001-09-09T01:46:40.000Z"
    assert interrupt["metadata"]["parkway"]["approvalId"] == "apr_1"
    stopped = _wire(AguiEncoder("t", "r"), [MessageStarted("m"), MessageFinished("interrupted")])
    assert stopped[-1]["outcome"] == {"type": "cancelled"}


def test_a_failed_run_ends_with_run_error_and_nothing_after() -> None:
    encoder = AguiEncoder("t", "r")
    wire = _wire(
        encoder,
        [
            MessageStarted("m"),
            StepStarted(),
            TextStarted("t0"),
            TextDelta("t0", "par"),
            RunFailed("The model is unavailable."),
        ],
    )
    assert [e["type"] for e in wire][-3:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_ERROR"]
    assert wire[-1] == {
        "type": "RUN_ERROR",
        "message": "The model is unavailable.",
        "code": "run_failed",
    }
    assert encoder.encode(TextDelta("t0", "more")) == []
