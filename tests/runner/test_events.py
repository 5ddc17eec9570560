"""Stored event batches: the form a chat's event log holds is fixed across versions."""

from __future__ import annotations

import json
import math
import typing

import pytest

from parkway.runner.errors import IncompatibleStateError
from parkway.runner.events import (
    ApprovalRequested,
    CallParked,
    DataPublished,
    Event,
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
    ToolDenied,
    ToolFailed,
    ToolInputDelta,
    ToolInputRejected,
    ToolInputStarted,
    ToolSucceeded,
    events_from_json,
    events_to_json,
)
from parkway.runner.parking import ParkedCall

# One log entry as Parkway wrote it before event batches were read through pydantic
# (json.dumps of each event's fields, compact, non-ASCII kept): every kind, optional
# fields both null and set, a parked call of each kind with its record nested as a string.
STORED = "[" + ",".join([
    r'{"message_id":"msg_1","kind":"message-started"}',
    r'{"kind":"step-started"}',
    r'{"reasoning_id":"r1","kind":"reasoning-started"}',
    r'{"reasoning_id":"r1","delta":"hmm","kind":"reasoning-delta"}',
    r'{"reasoning_id":"r1","kind":"reasoning-ended"}',
    r'{"text_id":"t1","kind":"text-started"}',
    r'{"text_id":"t1","delta":"héllo \"q\" \\ 😀","kind":"text-delta"}',
    r'{"text_id":"t1","kind":"text-ended"}',
    r'{"tool_call_id":"call_1","tool_name":"choose_option","kind":"tool-input-started"}',
    r'{"tool_call_id":"call_1","delta":"{\"options\":","kind":"tool-input-delta"}',
    r'{"tool_call_id":"call_1","tool_name":"choose_option","input":{"options":["Oslo","Lisbon"],"q":null},"kind":"tool-call-issued"}',
    r'{"tool_call_id":"call_3","tool_name":"t","input":null,"kind":"tool-call-issued"}',
    r'{"tool_call_id":"call_4","tool_name":"nope","input":{"x":1},"error":"unknown tool","kind":"tool-input-rejected"}',
    r'{"tool_call_id":"call_2","approval_id":"apr_1","kind":"approval-requested"}',
    r'{"kind":"call-parked","call":"{\"v\":1,\"id\":\"call_1\",\"tool\":\"choose_option\",\"kind\":\"client\",\"input\":{\"options\":[\"Oslo\",\"Lisbon\"],\"q\":null},\"key\":\"kkkkkkkk\",\"seq\":1,\"message_id\":\"msg_1\",\"created_at\":1700000000.25,\"deadline\":1700000600.5,\"render\":{\"widget\":\"choice\"},\"output_schema\":{\"type\":\"object\"},\"description\":\"Pick one\"}"}',
    r'{"kind":"call-parked","call":"{\"v\":1,\"id\":\"call_2\",\"tool\":\"publish\",\"kind\":\"approval\",\"input\":null,\"key\":\"k2\",\"seq\":2,\"message_id\":\"msg_1\",\"created_at\":1.0,\"approval_id\":\"apr_1\",\"result_style\":\"json\",\"edit_schema\":{\"type\":\"object\"},\"allow_edits\":true,\"auto_resume\":true}"}',
    r'{"tool_call_id":"call_5","output":{"ok":true,"n":1.5,"big":100000000000000000000},"kind":"tool-succeeded"}',
    r'{"tool_call_id":"call_6","output":null,"kind":"tool-succeeded"}',
    r'{"tool_call_id":"call_7","error":"boom","kind":"tool-failed"}',
    r'{"tool_call_id":"call_8","reason":null,"kind":"tool-denied"}',
    r'{"tool_call_id":"call_9","reason":"no thanks","kind":"tool-denied"}',
    r'{"name":"committed-revision","data":{"rev":3},"part_id":null,"kind":"data-published"}',
    r'{"name":"x","data":{},"part_id":"p1","kind":"data-published"}',
    r'{"kind":"step-finished"}',
    r'{"reason":"tool-calls","metadata":{"model":"m","usage":{"in":3}},"kind":"message-finished"}',
    r'{"reason":"stop","metadata":null,"kind":"message-finished"}',
    r'{"message":"The run failed (reference abcd).","kind":"run-failed"}',
]) + "]"  # fmt: skip

CHOICE = ParkedCall(
    tool_call_id="call_1",
    tool_name="choose_option",
    kind="client",
    input={"options": ["Oslo", "Lisbon"], "q": None},
    key="kkkkkkkk",
    seq=1,
    message_id="msg_1",
    created_at=1700000000.25,
    deadline=1700000600.5,
    render={"widget": "choice"},
    description="Pick one",
    output_schema={"type": "object"},
)
APPROVAL = ParkedCall(
    tool_call_id="call_2",
    tool_name="publish",
    kind="approval",
    input=None,
    key="k2",
    seq=2,
    message_id="msg_1",
    created_at=1.0,
    approval_id="apr_1",
    allow_edits=True,
    edit_schema={"type": "object"},
    auto_resume=True,
    result_style="json",
)
EVENTS: list[Event] = [
    MessageStarted("msg_1"),
    StepStarted(),
    ReasoningStarted("r1"),
    ReasoningDelta("r1", "hmm"),
    ReasoningEnded("r1"),
    TextStarted("t1"),
    TextDelta("t1", 'héllo "q" \\ 😀'),
    TextEnded("t1"),
    ToolInputStarted("call_1", "choose_option"),
    ToolInputDelta("call_1", '{"options":'),
    ToolCallIssued("call_1", "choose_option", {"options": ["Oslo", "Lisbon"], "q": None}),
    ToolCallIssued("call_3", "t", None),
    ToolInputRejected("call_4", "nope", {"x": 1}, "unknown tool"),
    ApprovalRequested("call_2", "apr_1"),
    CallParked(CHOICE),
    CallParked(APPROVAL),
    ToolSucceeded("call_5", {"ok": True, "n": 1.5, "big": 10**20}),
    ToolSucceeded("call_6", None),
    ToolFailed("call_7", "boom"),
    ToolDenied("call_8"),
    ToolDenied("call_9", "no thanks"),
    DataPublished("committed-revision", {"rev": 3}),
    DataPublished("x", {}, "p1"),
    StepFinished(),
    MessageFinished("tool-calls", {"model": "m", "usage": {"in": 3}}),
    MessageFinished("stop"),
    RunFailed("The run failed (reference abcd)."),
]


def test_a_batch_an_earlier_version_stored_reads_back_as_the_same_events() -> None:
    """Event logs outlive a deploy: a worker of the new version must follow (and replay)
    runs that a worker of the old one logged."""
    assert events_from_json(STORED) == EVENTS
    assert events_from_json(STORED.encode()) == EVENTS  # as redis-py hands it over


def test_a_batch_is_written_byte_for_byte_as_before() -> None:
    """During a rolling deploy old and new workers share the same logs; the same bytes
    mean neither can be surprised by what the other wrote."""
    assert events_to_json(EVENTS) == STORED


def test_the_stored_batch_covers_every_event_kind() -> None:
    """Control for the two tests above: a kind added later needs its stored form here."""
    kinds = {cls.kind for cls in typing.get_args(Event)}
    assert {event.kind for event in EVENTS} == kinds


def test_a_field_a_later_version_adds_is_ignored() -> None:
    """A newer worker may log a field this one does not know; the event still reads."""
    stored = '[{"text_id":"t1","delta":"x","kind":"text-delta","lang":"en"}]'
    assert events_from_json(stored) == [TextDelta("t1", "x")]


def test_non_finite_numbers_keep_their_value_through_the_log() -> None:
    """A tool output holding an infinity is logged as the bare constant Python's json
    module writes and reads, so followers see the value the run saw."""
    event = ToolSucceeded("c1", {"hi": math.inf, "lo": -math.inf})
    text = events_to_json([event])
    assert text == json.dumps([event.__dict__], separators=(",", ":"))
    assert events_from_json(text) == [event]


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ('[{"kind":"text-exploded"}]', "0: Input tag 'text-exploded'"),
        ('[{"text_id":"t1","kind":"text-delta"}]', "0.text-delta.delta: Field required"),
        ('[{"kind":"call-parked","call":{"v":1}}]', "must be its stored record"),
        ('{"kind":"step-started"}', "Input should be a valid array"),
        ("[{", "Invalid JSON"),
    ],
)
def test_a_batch_this_code_cannot_read_fails_closed(stored: str, problem: str) -> None:
    """A follower reading a damaged or foreign entry gets a StateError naming the problem
    (the stream ends with an error chunk), never a KeyError from deep inside."""
    with pytest.raises(IncompatibleStateError, match="a stored event batch is malformed") as exc:
        events_from_json(stored)
    assert problem in str(exc.value)


def test_a_parked_call_record_of_another_version_fails_closed() -> None:
    """The record inside a call-parked event is checked like the stored record itself."""
    stored = events_to_json([CallParked(CHOICE)]).replace(r"\"v\":1", r"\"v\":2")
    with pytest.raises(IncompatibleStateError, match="schema version 2"):
        events_from_json(stored)
