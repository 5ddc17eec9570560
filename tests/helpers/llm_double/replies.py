"""What a test scripts for the double: replies, and what the double records."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]
_FINISHES = ("stop", "length", "content_filter")
WIRES = ("openai-chat", "openai-responses", "anthropic", "gemini")
_READ_TIMEOUT = 30.0  # seconds a client may take to send its request


@dataclass
class Call:
    """One tool call in a `Turn`."""

    name: str
    args: Json | str  # a str is sent as the raw arguments text, valid JSON or not
    id: str | None = None  # default: generated per wire; Gemini sends none unless given


@dataclass
class Turn:
    """One streamed model response.

    `text` and `reasoning` given as a str stream one delta per word; a list gives the
    deltas. `signature` is the Anthropic thinking signature, the Responses
    `encrypted_content` (sent only when the request's `include` asks for it, as OpenAI
    does) or the Gemini `thoughtSignature` (base64). With reasoning and no signature, an
    opaque base64 one is generated. `finish` is "auto" (the tool finish when there are
    calls, else a stop), "stop", "length" or "content_filter".
    """

    text: str | list[str] = ""
    reasoning: str | list[str] = ""
    signature: str | None = None
    calls: list[Call] = field(default_factory=list)
    finish: str = "auto"
    usage: tuple[int, int, int] = (11, 7, 0)  # input, output (reasoning included), reasoning
    model: str | None = None  # echoed model name; default: the one the request named
    pause_before_first: float = 0.0  # seconds between the response headers and the first event
    gate: threading.Event | None = None  # if set: send the first event, then wait for the gate

    def __post_init__(self) -> None:
        if self.finish not in ("auto", *_FINISHES):
            raise ValueError(f"Turn.finish={self.finish!r}: use 'auto' or one of {_FINISHES}")


@dataclass
class Fail:
    """An HTTP error reply; `body` defaults to the provider's own error JSON for `status`."""

    status: int
    body: Json | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Reset:
    """Read the request, then reset the TCP connection without sending a byte."""


@dataclass
class Hang:
    """Headers and these text deltas, then nothing until the client disconnects."""

    text: list[str] = field(default_factory=lambda: ["Thinking about it"])


@dataclass
class CutOff:
    """Headers and these text deltas, then the connection closes mid-body."""

    text: list[str] = field(default_factory=lambda: ["Partial"])


@dataclass
class StreamError:
    """Headers, these text deltas, then the wire's in-stream error event (not on Gemini)."""

    text: list[str] = field(default_factory=list)
    error_type: str = "overloaded_error"


Reply = Turn | Fail | Reset | Hang | CutOff | StreamError


@dataclass(frozen=True)
class Recorded:
    """One request the double received."""

    wire: str  # one of WIRES, or "unknown" for a path no wire serves
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Json
