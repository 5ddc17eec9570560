"""A provider double: fake LLM providers that speak their real streaming wires on loopback.

Parkway's tests fake only the outermost edge, and they fake it with a real implementation
of the interface. For LLMs that edge is the provider's HTTP API, so `ProviderDouble`
serves four documented streaming wires on 127.0.0.1:

- ``openai-chat``: OpenAI Chat Completions, ``POST /v1/chat/completions``;
- ``openai-responses``: OpenAI Responses, ``POST /v1/responses``;
- ``anthropic``: Anthropic Messages, ``POST /v1/messages``;
- ``gemini``: ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``.

The real provider SDKs (openai, anthropic, google-genai), driven through pydantic-ai's
model layer, parse what it sends, so a test exercises the same parsing, error mapping and
history replay (thinking signatures, encrypted reasoning, provider call ids) as
production. Each POST to a wire takes the next scripted reply from that wire's queue: a
`Turn` to stream, or a failure (`Fail`, `Reset`, `Hang`, `CutOff`, `StreamError`). Every
request is recorded, so a test can assert on exactly what the SDK sent. Only streaming
requests are served.

The server runs on its own event loop in a daemon thread, so sync tests and async tests
(each with a loop of its own) use it alike.
"""

from tests.helpers.llm_double.replies import (
    WIRES,
    Call,
    CutOff,
    Fail,
    Hang,
    Recorded,
    Reply,
    Reset,
    StreamError,
    Turn,
)
from tests.helpers.llm_double.server import ProviderDouble

__all__ = [
    "WIRES",
    "Call",
    "CutOff",
    "Fail",
    "Hang",
    "ProviderDouble",
    "Recorded",
    "Reply",
    "Reset",
    "StreamError",
    "Turn",
]
