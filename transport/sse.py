"""Reading ``text/event-stream`` bodies: the client side of SSE, for the tests, the
benchmarks, cassettes and the docs' examples. (The server side is sse-starlette's.)

Written here rather than taken from httpx-sse: that works on httpx responses only, and
the load benchmark reads thousands of streams through bare h11 connections, so one
decoder fed bytes serves every reader. It follows the SSE specification's parsing rules
(WHATWG HTML, "Interpreting an event stream"): lines end with CRLF, LF or CR; a line
starting with ``:`` is a comment; a field's value loses one leading space after the
colon; ``data`` lines of one event are joined with ``\\n``; a blank line ends an event,
and an event without data is not one. Like the AI SDK client (eventsource-parser under
``parseJsonEventStream``), it hands out each event's data only: ``event``, ``id`` and
``retry`` fields are parsed and dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["DONE", "SseDecoder", "sse_chunks", "sse_data"]

# What an AI SDK UI message stream sends last; the client skips it.
DONE = "[DONE]"

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SseDecoder:
    """Incremental decoding: bytes in, each complete event's data out.

    Feed the body in pieces as they arrive, split anywhere (inside a line, between the
    CR and LF of a line end); each call returns the data of the events the piece
    completed. An event the body ends in the middle of is never returned. A CR that ends
    a piece waits for the next byte (it may be the first half of a CRLF), as it does in
    the AI SDK client's parser.
    """

    __slots__ = ("_buffer", "_data", "_first_line")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] | None = None  # the data lines of the event being read
        self._first_line = True  # a byte order mark may start the stream

    def feed(self, piece: bytes) -> list[str]:
        buffer = self._buffer + piece if self._buffer else piece
        found: list[str] = []
        start = 0
        for end in _LINE_END.finditer(buffer):
            if end.end() == len(buffer) and end.group() == b"\r":
                break
            data = self._line(buffer[start : end.start()])
            start = end.end()
            if data is not None:
                found.append(data)
        self._buffer = buffer[start:]
        return found

    def _line(self, line: bytes) -> str | None:
        """Take one line; the event's data if the line ends an event."""
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            data, self._data = self._data, None
            return None if data is None else "\n".join(data)
        name, _, value = line.partition(b":")
        if name != b"data":  # a comment (no name), or a field other than data
            return None
        if self._data is None:
            self._data = []
        # UTF-8 never encodes a character with a CR or LF byte, so a line decodes alone.
        self._data.append(value.removeprefix(b" ").decode("utf-8", errors="replace"))
        return None


def sse_data(body: str | bytes) -> list[str]:
    """The data of each event of a whole SSE body, in order."""
    return SseDecoder().feed(body.encode() if isinstance(body, str) else body)


def sse_chunks(body: str | bytes) -> list[dict[str, Any]]:
    """The chunks of an AI SDK UI message stream body: each event's data as a JSON
    object, ``[DONE]`` skipped. Raises ``ValueError`` for data that is not one."""
    chunks: list[dict[str, Any]] = []
    for data in sse_data(body):
        if data == DONE:
            continue
        value = json.loads(data)
        if not isinstance(value, dict):
            raise ValueError(f"an SSE chunk is not a JSON object: {data[:80]!r}")
        chunks.append(value)
    return chunks
