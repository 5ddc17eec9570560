"""SSE framing of a run's events, in one place (sse-starlette).

A response is a view over the chat's event log in Redis: it follows the run's entries
from its first one until the run ends. The run executes in its own task, so a client
that disconnects stops only its view, never the run; a client that reconnects (to any
worker) follows the same log again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from sse_starlette import EventSourceResponse

from parkway.runner.connection import is_redis_outage
from parkway.runner.events import Event
from parkway.runner.loop import Run, Runner
from parkway.runner.parking import ParkedCall
from parkway.transport.chunks import ErrorChunk
from parkway.transport.encoder import encode_event
from parkway.widgets_api.descriptors import describe_call

__all__ = ["STREAM_HEADERS", "Describer", "follow_response", "replay_response", "stream_response"]

log = logging.getLogger(__name__)

STREAM_HEADERS = {
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
PING_SECONDS = 15
LOG_START_TIMEOUT_S = 10.0
STORE_UNAVAILABLE = (
    "The server's store became unavailable while streaming. The chat is kept: reload, "
    "or reconnect to its stream, in a few seconds."
)


def _dump(chunk: dict[str, Any]) -> str:
    return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)


def _sse(chunks: AsyncIterator[dict[str, Any]]) -> EventSourceResponse:
    async def body() -> AsyncIterator[dict[str, str]]:
        try:
            async for chunk in chunks:
                yield {"data": _dump(chunk)}
        except Exception as exc:
            # The stream cannot go on (Redis went away mid-follow, or a bug): end it with
            # an error chunk the client shows, never a torn connection. The run itself
            # is not affected; a reconnect follows it again.
            if is_redis_outage(exc):
                log.warning("stream ended: Redis unavailable (%s)", exc)
                text = STORE_UNAVAILABLE
            else:
                ref = secrets.token_hex(4)
                log.exception("stream failed (ref %s)", ref)
                text = f"The stream failed (reference {ref}). Reload to see the chat."
            yield {"data": _dump(ErrorChunk(error_text=text).to_dict())}
        yield {"data": "[DONE]"}

    return EventSourceResponse(body(), headers=STREAM_HEADERS, ping=PING_SECONDS)


Describer = Callable[[str, ParkedCall], dict[str, Any]]


def _encoded(
    chat_id: str, events: AsyncIterator[Event], describer: Describer = describe_call
) -> AsyncIterator[dict[str, Any]]:
    def describe(call: Any) -> dict[str, Any]:
        return describer(chat_id, call)

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        async for event in events:
            yield encode_event(event, describe).to_dict()

    return chunks()


def stream_response(
    chat_id: str, runner: Runner, run: Run, describer: Describer = describe_call
) -> EventSourceResponse:
    """An AI SDK UI message stream response that follows ``run`` in the chat's log."""

    async def events() -> AsyncIterator[Event]:
        try:
            start = await asyncio.wait_for(asyncio.shield(run.log_start), LOG_START_TIMEOUT_S)
        except Exception:
            # The log cannot be written: the run still persists its steps, so stream its
            # events straight from this process rather than leave the client hanging.
            log.warning("chat %s: event log unavailable, streaming directly", chat_id)
            async for event in run.events():
                yield event
            return
        async for event in runner.follow(chat_id, start):
            yield event

    return _sse(_encoded(chat_id, events(), describer))


def follow_response(
    chat_id: str,
    runner: Runner,
    prefix: Iterable[dict[str, Any]],
    start_id: str,
    *,
    skip_start: bool,
    describer: Describer = describe_call,
) -> EventSourceResponse:
    """Ready-made chunks (the rebuilt start of a message), then a run followed live."""

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        for chunk in prefix:
            yield chunk
        async for chunk in _encoded(
            chat_id, runner.follow(chat_id, start_id, skip_start=skip_start), describer
        ):
            yield chunk

    return _sse(chunks())


def replay_response(chunks: list[dict[str, Any]]) -> EventSourceResponse:
    """An AI SDK UI message stream response of ready-made chunks (a replay)."""

    async def iterate() -> AsyncIterator[dict[str, Any]]:
        for chunk in chunks:
            yield chunk

    return _sse(iterate())
