"""Wire chunks: the JSON each chunk type puts on the wire, key for key and in order."""

from __future__ import annotations

import json

import pytest

from parkway.transport.aisdk.chunks import (
    Chunk,
    DataChunk,
    ErrorChunk,
    FinishChunk,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
)

# Each chunk and the JSON Parkway has always sent for it (the real client's schema: an
# optional field is absent when unset, never null; input, output and data are always
# there, null included; nested nulls are values and stay).
WIRE = [
    (StartChunk(), '{"type":"start"}'),
    (StartChunk(message_id=None), '{"type":"start"}'),
    (StartChunk(message_id="msg_1"), '{"type":"start","messageId":"msg_1"}'),
    (StartStepChunk(), '{"type":"start-step"}'),
    (FinishStepChunk(), '{"type":"finish-step"}'),
    (FinishChunk(), '{"type":"finish"}'),
    (FinishChunk(finish_reason="stop"), '{"type":"finish","finishReason":"stop"}'),
    (FinishChunk(message_metadata={"usage": {"in": 1, "out": None}}), '{"type":"finish","messageMetadata":{"usage":{"in":1,"out":null}}}'),
    (FinishChunk(finish_reason="tool-calls", message_metadata={"model": "m"}), '{"type":"finish","finishReason":"tool-calls","messageMetadata":{"model":"m"}}'),
    (TextStartChunk(id="t1"), '{"type":"text-start","id":"t1"}'),
    (TextDeltaChunk(id="t1", delta="héllo"), '{"type":"text-delta","id":"t1","delta":"héllo"}'),
    (TextEndChunk(id="t1"), '{"type":"text-end","id":"t1"}'),
    (ReasoningStartChunk(id="r1"), '{"type":"reasoning-start","id":"r1"}'),
    (ReasoningDeltaChunk(id="r1", delta=""), '{"type":"reasoning-delta","id":"r1","delta":""}'),
    (ReasoningEndChunk(id="r1"), '{"type":"reasoning-end","id":"r1"}'),
    (ToolInputStartChunk(tool_call_id="c1", tool_name="pick"), '{"type":"tool-input-start","toolCallId":"c1","toolName":"pick"}'),
    (ToolInputDeltaChunk(tool_call_id="c1", input_text_delta='{"q":'), r'{"type":"tool-input-delta","toolCallId":"c1","inputTextDelta":"{\"q\":"}'),
    (ToolInputAvailableChunk(tool_call_id="c1", tool_name="pick", input=None), '{"type":"tool-input-available","toolCallId":"c1","toolName":"pick","input":null}'),
    (ToolInputAvailableChunk(tool_call_id="c1", tool_name="pick", input={"q": None, "n": [1.5, True]}), '{"type":"tool-input-available","toolCallId":"c1","toolName":"pick","input":{"q":null,"n":[1.5,true]}}'),
    (ToolInputErrorChunk(tool_call_id="c1", tool_name="nope", input=None, error_text="unknown tool"), '{"type":"tool-input-error","toolCallId":"c1","toolName":"nope","input":null,"errorText":"unknown tool"}'),
    (ToolApprovalRequestChunk(approval_id="apr_1", tool_call_id="c1"), '{"type":"tool-approval-request","approvalId":"apr_1","toolCallId":"c1"}'),
    (ToolOutputAvailableChunk(tool_call_id="c1", output=None), '{"type":"tool-output-available","toolCallId":"c1","output":null}'),
    (ToolOutputAvailableChunk(tool_call_id="c1", output={"status": None}), '{"type":"tool-output-available","toolCallId":"c1","output":{"status":null}}'),
    (ToolOutputErrorChunk(tool_call_id="c1", error_text="boom"), '{"type":"tool-output-error","toolCallId":"c1","errorText":"boom"}'),
    (ToolOutputDeniedChunk(tool_call_id="c1"), '{"type":"tool-output-denied","toolCallId":"c1"}'),
    (DataChunk(name="parkway-widget", data={"kind": "choice"}, id="c1"), '{"type":"data-parkway-widget","data":{"kind":"choice"},"id":"c1"}'),
    (DataChunk(name="committed-revision", data={"rev": 3}), '{"type":"data-committed-revision","data":{"rev":3}}'),
    (DataChunk(name="x", data=None, id=None), '{"type":"data-x","data":null}'),
    (ErrorChunk(error_text="oops"), '{"type":"error","errorText":"oops"}'),
]  # fmt: skip


@pytest.mark.parametrize(("chunk", "wire"), WIRE, ids=[w for _, w in WIRE])
def test_each_chunk_puts_the_same_json_on_the_wire(chunk: Chunk, wire: str) -> None:
    """The real client validates every chunk (a null optional or a missing ``output``
    fails the whole request), and recorded cassettes compare chunks key for key."""
    assert json.dumps(chunk.to_dict(), separators=(",", ":"), ensure_ascii=False) == wire


def test_every_chunk_type_is_pinned() -> None:
    """Control for the test above: a chunk type added later needs its wire form here."""
    assert {type(chunk) for chunk, _ in WIRE} == set(Chunk.__subclasses__())
