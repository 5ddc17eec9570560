"""SSE framing of a run's events, in one place (sse-starlette).

A response is a view over the chat's event log in Redis: it follows the run's entries
from its first one until the run ends. The run executes in its own task, so a client
that disconnects stops only its view, never the run; a client that reconnects (to any
worker) follows the same log again.

The chunks are encoded by a task of their own, one step ahead of the client: whatever
is ready when the response next sends goes out in one write (a log entry holds a batch
of a run's events, often its whole turn), where one write per chunk cost a system call
and a pass through the ASGI stack each. A run's stream ends (``[DONE]``) as soon as its
last chunk is out; following the log is wound up after that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from typing import Any, Final

from sse_starlette import EventSourceResponse, ServerSentEvent

from parkway.runner.engine import Run, Runner
from parkway.runner.events import Event
from parkway.runner.parking import ParkedCall
from parkway.runner.store import is_redis_outage
from parkway.transport.aisdk.chunks import ErrorChunk
from parkway.transport.aisdk.encoder import encode_event
from parkway.widgets_api.descriptors import describe_call

__all__ = [
    "STREAM_HEADERS",
    "Describer",
    "aclose",
    "failure_text",
    "follow_response",
    "replay_response",
    "run_events",
    "stream_response",
]

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
SEP = "\r\n"  # sse-starlette's default line separator, named for the frames built here
DONE: Final = "[DONE]"
# How many chunks may be encoded ahead of a client that does not read; past that the
# encoder (and the log follower behind it) waits, as it would for each send.
AHEAD = 256
# The chunks a run's terminal events (MessageFinished, RunFailed) encode to: nothing
# follows them in a followed run (see :func:`parkway.runner.eventlog.followers.follow`).
_LAST_OF_A_RUN = frozenset({"finish", "error"})

Chunks = AsyncGenerator[dict[str, Any], None]


def _dump(chunk: dict[str, Any]) -> str:
    return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)


def failure_text(exc: Exception) -> str:
    """The error chunk's text for a stream that cannot go on, logged here."""
    if is_redis_outage(exc):
        log.warning("stream ended: Redis unavailable (%s)", exc)
        return STORE_UNAVAILABLE
    ref = secrets.token_hex(4)
    log.exception("stream failed (ref %s)", ref, exc_info=exc)
    return f"The stream failed (reference {ref}). Reload to see the chat."


async def _encode(chunks: Chunks, ready: asyncio.Queue[str], *, run: bool) -> None:
    """Put each chunk's data on ``ready``, then ``[DONE]``; for a ``run``, ``[DONE]``
    right after its last chunk. ``chunks`` is closed only then, so what winding up a
    log follower takes (a round trip to unsubscribe) does not hold up the client."""
    try:
        try:
            async for chunk in chunks:
                await ready.put(_dump(chunk))
                if run and chunk.get("type") in _LAST_OF_A_RUN:
                    break
        except Exception as exc:
            # The stream cannot go on (Redis went away mid-follow, or a bug): end it with
            # an error chunk the client shows, never a torn connection. The run itself
            # is not affected; a reconnect follows it again.
            await ready.put(_dump(ErrorChunk(error_text=failure_text(exc)).to_dict()))
        await ready.put(DONE)
    finally:
        await chunks.aclose()


async def aclose(iterator: AsyncIterator[Any]) -> None:
    """Close ``iterator`` now, if it is a generator: one left unfinished (a follower
    stopped at its run's last event) would otherwise be closed only once collected."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


def _frames(data: list[str]) -> bytes:
    """Server-sent events, one per item of ``data``, as sse-starlette frames them."""
    return b"".join(ServerSentEvent(item, sep=SEP).encode() for item in data)


def _sse(chunks: Chunks, *, run: bool = False) -> EventSourceResponse:
    async def body() -> AsyncIterator[bytes]:
        ready: asyncio.Queue[str] = asyncio.Queue(AHEAD)
        encoder = asyncio.create_task(_encode(chunks, ready, run=run))
        try:
            data = [""]
            while data[-1] != DONE:
                data = [await ready.get()]
                while not ready.empty():
                    data.append(ready.get_nowait())
                yield _frames(data)
            await encoder  # the follower wound up before the response ends
        finally:
            encoder.cancel()  # the client left first (nothing to cancel otherwise)

    return EventSourceResponse(body(), headers=STREAM_HEADERS, ping=PING_SECONDS, sep=SEP)


Describer = Callable[[str, ParkedCall], dict[str, Any]]


def _encoded(
    chat_id: str, events: AsyncIterator[Event], describer: Describer = describe_call
) -> Chunks:
    def describe(call: Any) -> dict[str, Any]:
        return describer(chat_id, call)

    async def chunks() -> Chunks:
        try:
            async for event in events:
                yield encode_event(event, describe).to_dict()
        finally:
            await aclose(events)

    return chunks()


async def run_events(chat_id: str, runner: Runner, run: Run) -> AsyncIterator[Event]:
    """The events of ``run``, followed in the chat's log from its first entry (any wire
    streams a run this way, so a client may follow it from another worker too)."""
    try:
        start = await asyncio.wait_for(asyncio.shield(run.log_start), LOG_START_TIMEOUT_S)
    except Exception:
        # The log cannot be written: the run still persists its steps, so stream its
        # events straight from this process rather than leave the client hanging.
        log.warning("chat %s: event log unavailable, streaming directly", chat_id)
        async for event in run.events():
            yield event
        return
    follower = runner.follow(chat_id, start)
    try:
        async for event in follower:
            yield event
    finally:
        await aclose(follower)


def stream_response(
    chat_id: str, runner: Runner, run: Run, describer: Describer = describe_call
) -> EventSourceResponse:
    """An AI SDK UI message stream response that follows ``run`` in the chat's log."""
    return _sse(_encoded(chat_id, run_events(chat_id, runner, run), describer), run=True)


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

    async def chunks() -> Chunks:
        for chunk in prefix:
            yield chunk
        follower = runner.follow(chat_id, start_id, skip_start=skip_start)
        encoded = _encoded(chat_id, follower, describer)
        try:
            async for chunk in encoded:
                yield chunk
        finally:
            await encoded.aclose()

    return _sse(chunks(), run=True)


def replay_response(chunks: list[dict[str, Any]]) -> EventSourceResponse:
    """An AI SDK UI message stream response of ready-made chunks (a replay)."""

    async def iterate() -> Chunks:
        for chunk in chunks:
            yield chunk

    return _sse(iterate())
