"""SSE framing of a run's events, in one place (sse-starlette).

The response is a view over the run: the run executes in its own task, so a client
that disconnects stops only its view, never the run, which still persists its result.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse

from runner.loop import Run
from transport.encoder import encode_event
from widgets_api.descriptors import describe_call

__all__ = ["STREAM_HEADERS", "replay_response", "stream_response"]

log = logging.getLogger(__name__)

STREAM_HEADERS = {
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
PING_SECONDS = 15


def _dump(chunk: dict[str, Any]) -> str:
    return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)


def stream_response(chat_id: str, run: Run) -> EventSourceResponse:
    """An AI SDK UI message stream response over ``run``'s events."""

    def describe(call: Any) -> dict[str, Any]:
        return describe_call(chat_id, call)

    async def body() -> AsyncIterator[dict[str, str]]:
        async for event in run.events():
            yield {"data": _dump(encode_event(event, describe).to_dict())}
        yield {"data": "[DONE]"}

    return EventSourceResponse(body(), headers=STREAM_HEADERS, ping=PING_SECONDS)


def replay_response(chunks: list[dict[str, Any]]) -> EventSourceResponse:
    """An AI SDK UI message stream response of ready-made chunks (a replay)."""

    async def body() -> AsyncIterator[dict[str, str]]:
        for chunk in chunks:
            yield {"data": _dump(chunk)}
        yield {"data": "[DONE]"}

    return EventSourceResponse(body(), headers=STREAM_HEADERS, ping=PING_SECONDS)
