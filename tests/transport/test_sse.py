"""The SSE reader every Python client of Parkway's streams uses (tests, benchmarks,
cassettes, the docs' examples): the specification's parsing rules, fed in any pieces."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sse_starlette import ServerSentEvent

from parkway.transport.sse import SseDecoder, sse_chunks, sse_data


@pytest.mark.parametrize(
    ("body", "data"),
    [
        ("data: a\n\n", ["a"]),
        ("data:a\n\n", ["a"]),  # the space after the colon is optional
        ("data:  a \n\n", [" a "]),  # only one space goes, and none at the end
        ("data: a\r\n\r\ndata: b\r\rdata: c\n\n", ["a", "b", "c"]),  # CRLF, CR, LF
        ("data: a\ndata:\ndata: b\n\n", ["a\n\nb"]),  # lines of one event joined with \n
        ("data\n\n", [""]),  # a field without a colon has an empty value
        (": ping\n\n: comment\ndata: a\n\n", ["a"]),  # comments are no events
        ("event: x\nid: 7\nretry: 10\n\n", []),  # an event without data is none
        ("event: x\nid: 7\ndata: a\nretry: 10\n\n", ["a"]),  # other fields are dropped
        ("DATA: a\ndatum: b\n\n", []),  # field names are case-sensitive and exact
        ("\ufeffdata: a\n\n", ["a"]),  # a byte order mark may start the stream
        ("data: a\n\ndata: b\n", ["a"]),  # the body ends before b's event does
        ("data: a\u2028b\x85c\x0bd\n\n", ["a\u2028b\x85c\x0bd"]),  # no other line breaks
    ],
)
def test_events_are_read_by_the_specifications_rules(body: str, data: list[str]) -> None:
    """Parsers that strip all whitespace, split on blank lines only or treat the
    body's end as an event's would each read some stream differently from a browser."""
    assert sse_data(body) == data
    assert sse_data(body.encode()) == data


_LINE = st.sampled_from(
    ["data: a", "data:b", "data:  c", "data", ": ping", "event: x", "id: 1", "", "data: é😀"]
)
_BODY = st.lists(st.tuples(_LINE, st.sampled_from(["\n", "\r\n", "\r"])), max_size=12).map(
    lambda lines: "".join(line + end for line, end in lines).encode()
)


@given(body=_BODY, data=st.data())
def test_any_split_of_a_body_gives_the_same_events(body: bytes, data: st.DataObject) -> None:
    """A network hands the body over in arbitrary pieces: in the middle of a line, of a
    UTF-8 character, or between the CR and LF of one line end."""
    cuts = data.draw(st.sets(st.integers(min_value=0, max_value=len(body)), max_size=8))
    decoder = SseDecoder()
    pieces, start = [], 0
    for cut in sorted(cuts):
        pieces.append(body[start:cut])
        start = cut
    pieces.append(body[start:])
    assert [found for piece in pieces for found in decoder.feed(piece)] == sse_data(body)


def test_a_cr_at_the_end_of_a_piece_waits_for_the_next_byte() -> None:
    """It may be half of a CRLF; taken as a line end at once, the LF that follows would
    make a second, empty line (so a spurious end of event)."""
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"type":"start"}\r\n\r') == []
    assert decoder.feed(b"\n: ping\r\n\r\ndata: [DO") == ['{"type":"start"}']
    assert decoder.feed(b"NE]\n\n") == ["[DONE]"]


def test_what_sse_starlette_frames_reads_back() -> None:
    """The server frames with sse-starlette (CRLF, comments, several data lines); the
    reader gets each event's data back as it was given."""
    events = [
        ServerSentEvent(data='{"type":"start"}'),
        ServerSentEvent(comment="ping"),
        ServerSentEvent(data="two\nlines", event="x", id="1", retry=5),
        ServerSentEvent(data="[DONE]"),
    ]
    body = b"".join(event.encode() for event in events)
    assert sse_data(body) == ['{"type":"start"}', "two\nlines", "[DONE]"]


def test_chunks_are_the_json_objects_of_a_ui_message_stream() -> None:
    body = 'data: {"type":"start"}\r\n\r\n: ping\r\n\r\ndata: {"type":"finish"}\r\n\r\ndata: [DONE]\r\n\r\n'
    assert sse_chunks(body) == [{"type": "start"}, {"type": "finish"}]
    with pytest.raises(ValueError, match="not a JSON object"):
        sse_chunks("data: [1]\n\n")
