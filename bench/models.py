"""Real-model benchmarks: the provider adapter's own cost, and the latency it adds.

- **Adapter overhead**: from asking the adapter for a step to the provider request being
  handed to the HTTP transport (history conversion, pydantic-ai's request mapping, the
  SDK's body build), at a given history size, with no network: the transport is an
  in-process ``MockTransport`` that answers at once.
- **First token**: a real Parkway (``python -m bench.serve`` in its own process, the
  bench's Redis) on an Anthropic model whose provider is a minimal SSE server on
  loopback in this process. The server notes the time just before it writes the first
  text token; the client notes when the first ``text-delta`` chunk arrives from
  Parkway. Both clocks are this process's ``perf_counter``.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import httpx2
from anthropic import AsyncAnthropic
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

from bench.http_level import _Server
from bench.stats import Latency
from parkway.runner.llm import parse_model_spec
from parkway.runner.llm.adapter import ProviderModel
from parkway.runner.llm.model import (
    AssistantTurn,
    ModelMessage,
    ModelRequest,
    ModelTextDelta,
    ModelToolCall,
    ToolDescription,
    ToolResult,
    UserTurn,
)

__all__ = ["ModelsResult", "run_models"]

_TOOL = ToolDescription(
    "get_weather",
    "Today's weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def history(size: int) -> tuple[ModelMessage, ...]:
    """``size`` messages: cycles of a user turn, a step calling a tool with a provider id
    and a thinking signature, the tool's result, and an answer."""
    out: list[ModelMessage] = []
    cycle = 0
    while len(out) < size:
        call_id = f"call_{cycle:04d}"
        pid = f"toolu_{cycle:020d}"
        parts = (
            {"type": "reasoning", "text": "Look it up.", "sig": "c2ln" * 40, "pn": "anthropic"},
            {"type": "text", "text": "Checking."},
            {"type": "call", "pn": "anthropic"},
        )
        out += [
            UserTurn(f"What is the weather in city {cycle}? " + "Tell me more. " * 10),
            AssistantTurn(
                "Checking.",
                (ModelToolCall("get_weather", {"city": f"c{cycle}"}, call_id, provider_id=pid),),
                parts,
                {"provider": "anthropic", "model": "claude-bench", "rid": f"msg_{cycle}"},
            ),
            ToolResult(call_id, "get_weather", {"city": f"c{cycle}", "temperature_c": 20}),
            AssistantTurn("It is 20 degrees. " * 8),
        ]
        cycle += 1
    return tuple(out[:size])


def _anthropic_body(text: str) -> bytes:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_b",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-bench",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {k}\ndata: {json.dumps(v)}\n\n" for k, v in events).encode()


@dataclass
class ModelsResult:
    sizes: list[int]
    overhead: dict[int, Latency] = field(default_factory=dict)
    first_token: Latency = field(default_factory=Latency)
    # The part of first_token spent before Parkway's runner sees the token: the SDK's
    # SSE parsing and pydantic-ai's event stream.
    adapter_first_token: Latency = field(default_factory=Latency)
    first_token_samples: int = 0


async def _overhead(size: int, iterations: int) -> Latency:

    arrived: list[float] = []
    body = _anthropic_body("ok")

    def handler(request: httpx2.Request) -> httpx2.Response:
        arrived.append(time.perf_counter())
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = AsyncAnthropic(
        api_key="bench",
        base_url="http://bench.invalid",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    spec = parse_model_spec("anthropic:claude-bench")
    model = ProviderModel(
        spec, AnthropicModel("claude-bench", provider=AnthropicProvider(anthropic_client=client))
    )
    request = ModelRequest("bench", 0, "You are a benchmark.", history(size), (_TOOL,))
    latency = Latency()
    for index in range(iterations + 20):
        arrived.clear()
        started = time.perf_counter()
        stream = model.stream(request)
        async for _ in stream:
            pass
        if index >= 20:
            latency.add(arrived[0] - started)
    return latency


class _Provider:
    """A minimal Anthropic SSE server: headers and the message start at once, then, a
    short while later, the first token, timed just before it is written."""

    def __init__(self) -> None:
        self.sent_at: list[float] = []
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            body = _anthropic_body("Hello")
            first, rest = body.split(b"event: content_block_delta", 1)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"connection: close\r\n\r\n" + first
            )
            await writer.drain()
            await asyncio.sleep(0.05)  # Parkway has read the preamble and waits
            self.sent_at.append(time.perf_counter())
            writer.write(b"event: content_block_delta" + rest)
            await writer.drain()
        finally:
            writer.close()


async def _adapter_first_token(samples: int) -> Latency:
    """From the provider's first token on the wire to the adapter yielding it."""
    provider = _Provider()
    await provider.start()
    client = AsyncAnthropic(
        api_key="bench", base_url=f"http://127.0.0.1:{provider.port}", max_retries=0
    )
    spec = parse_model_spec("anthropic:claude-bench")
    model = ProviderModel(
        spec, AnthropicModel("claude-bench", provider=AnthropicProvider(anthropic_client=client))
    )
    request = ModelRequest("bench", 0, "You are a benchmark.", history(2), (_TOOL,))
    latency = Latency()
    try:
        for index in range(samples + 10):
            async for event in model.stream(request):
                if isinstance(event, ModelTextDelta) and index >= 10:
                    latency.add(time.perf_counter() - provider.sent_at[-1])
    finally:
        await client.close()
        if provider.server is not None:
            provider.server.close()
    return latency


async def _first_token(redis_url: str, samples: int) -> Latency:
    provider = _Provider()
    await provider.start()
    os.environ["ANTHROPIC_API_KEY"] = "bench-key"
    os.environ["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{provider.port}"
    agent = {"template": {"instructions": "bench", "tools": []}, "model": "anthropic:claude-bench"}
    latency = Latency()
    # Parkway in its own process, as in production: in a thread of this one it would
    # wait for the GIL while the client and the provider run (up to the 5 ms switch
    # interval), which is this process's cost, not Parkway's.
    with tempfile.TemporaryDirectory() as folder:
        server = _Server(redis_url, agent, Path(folder))
        server.spawn()
        try:
            await server.wait_until_healthy()
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
                token = (await http.post("/api/sessions")).json()["token"]
                http.headers["authorization"] = f"Bearer {token}"
                for index in range(samples + 10):
                    body = {
                        "id": f"bench-model-{index}",
                        "messages": [
                            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
                        ],
                    }
                    async with http.stream("POST", "/api/chat", json=body) as response:
                        seen = False
                        async for line in response.aiter_lines():
                            if not seen and '"type":"text-delta"' in line:
                                arrived = time.perf_counter()
                                seen = True
                                if index >= 10:
                                    latency.add(arrived - provider.sent_at[-1])
        finally:
            server.stop()
            if provider.server is not None:
                provider.server.close()
    return latency


async def run_models(
    redis_url: str, sizes: list[int], *, iterations: int, samples: int
) -> ModelsResult:
    result = ModelsResult(sizes)
    for size in sizes:
        result.overhead[size] = await _overhead(size, iterations)
    result.first_token = await _first_token(redis_url, samples)
    result.adapter_first_token = await _adapter_first_token(samples)
    result.first_token_samples = samples
    return result
