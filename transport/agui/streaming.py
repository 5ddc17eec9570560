"""SSE framing of AG-UI runs, with the official ``ag-ui-protocol`` encoder.

An AG-UI response is one run: ``RUN_STARTED``, what the run does, and ``RUN_FINISHED``
(or ``RUN_ERROR``), nothing after. Like the AI SDK stream, it is a view over the
chat's event log (:func:`parkway.transport.aisdk.streaming.run_events`): a client that
disconnects stops only its view, never the run.

When the runner's message ends, the run's outcome is built from the calls the chat has
pending then (read from Redis, so a log that lost its last entries still ends with the
right interrupts); the events of a run are encoded one step ahead of a slow client, and
a comment line keeps an idle connection open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder
from starlette.responses import StreamingResponse

from parkway.runner.events import Event
from parkway.runner.parking import ParkedCall
from parkway.transport.agui.encoder import AguiEncoder, Interrupts
from parkway.transport.aisdk import aclose, failure_text

__all__ = ["AGUI_HEADERS", "agui_response"]

log = logging.getLogger(__name__)

AGUI_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
PING_SECONDS = 15
AHEAD = 256
_PING = ": ping\n\n"
_END = ""

Pending = Callable[[], Awaitable[Sequence[ParkedCall]]]


async def _events(
    encoder: AguiEncoder,
    prefix: Sequence[BaseEvent],
    events: AsyncIterator[Event] | None,
    pending: Pending,
    interrupts: Interrupts,
) -> AsyncIterator[BaseEvent]:
    for event in encoder.start():
        yield event
    for event in prefix:
        yield event
    try:
        if events is not None:
            async for runner_event in events:
                for out in encoder.encode(runner_event):
                    yield out
                if encoder.ended or encoder.finished is not None:
                    break
        if encoder.ended:
            return
        finished = encoder.finished
        reason = finished.reason if finished is not None else "stop"
        try:
            calls = list(await pending()) if reason != "error" else []
        except Exception:
            log.warning("could not read the parked calls at a run's end", exc_info=True)
            calls = list(encoder.parked)
        for event in encoder.finish(
            calls,
            interrupts,
            reason=reason,
            metadata=finished.metadata if finished is not None else None,
        ):
            yield event
    except Exception as exc:
        for event in encoder.fail(failure_text(exc), "stream_failed"):
            yield event
    finally:
        if events is not None:
            await aclose(events)


async def _produce(source: AsyncIterator[BaseEvent], ready: asyncio.Queue[str]) -> None:
    wire = EventEncoder()
    try:
        async for event in source:
            await ready.put(wire.encode(event))
    finally:
        await ready.put(_END)
        await aclose(source)


def agui_response(
    encoder: AguiEncoder,
    *,
    events: AsyncIterator[Event] | None,
    pending: Pending,
    interrupts: Interrupts,
    prefix: Sequence[BaseEvent] = (),
) -> StreamingResponse:
    """One AG-UI run as an SSE response: ``RUN_STARTED``, ``prefix`` (a messages
    snapshot, say), the encoded ``events`` of a runner run (None: none), then the run's
    end, its outcome made from the calls ``pending`` returns."""

    async def body() -> AsyncIterator[str]:
        ready: asyncio.Queue[str] = asyncio.Queue(AHEAD)
        source = _events(encoder, prefix, events, pending, interrupts)
        producer = asyncio.create_task(_produce(source, ready))
        try:
            while True:
                try:
                    item = await asyncio.wait_for(ready.get(), PING_SECONDS)
                except TimeoutError:
                    yield _PING
                    continue
                chunk = [item]
                while item != _END and not ready.empty():
                    item = ready.get_nowait()
                    chunk.append(item)
                yield "".join(chunk)
                if item == _END:
                    break
            await producer
        finally:
            producer.cancel()

    return StreamingResponse(
        body(), media_type=EventEncoder().get_content_type(), headers=AGUI_HEADERS
    )
