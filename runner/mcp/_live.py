"""An older server's questions during a call: routed to the call's person, or cancelled.

A 2026-07-28 server asks for input in the result of the call itself
(``InputRequiredResult``): the caller gets that result and parks the call
(:mod:`parkway.runner.mcp.input`). An older server asks with an ``elicitation/create``
request in the middle of a call, which only a live wait can answer: the session declares
the capability and :meth:`LiveRouting.on_elicit` answers. A request says nothing of the
call it belongs to, so it goes to a call only when that is the one call in flight on the
session and the call brought a way to ask its person (``live``): anything else (two calls
in flight, a call nobody watches, a URL-mode request, more than
:data:`~parkway.runner.mcp.input.MAX_LIVE_QUESTIONS` in one call) is answered ``cancel``
at once, never routed to a person who might be someone else. While the person is asked,
the call's own timeout (``timeout_s``) stops; the wait is bounded by the entry's
``live_input_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from mcp.client.session import ClientRequestContext
from mcp_types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult, ErrorData

from parkway.runner.mcp.input import LIVE_CANCELLED, MAX_LIVE_QUESTIONS, LiveAsk

__all__ = ["InFlight", "LiveRouting"]

log = logging.getLogger(__name__)


@dataclass
class InFlight:
    """A call in flight on the session: how it asks its person (None: it cannot), and
    its own timer, which stops while the person is asked."""

    live: LiveAsk | None
    live_s: float = 0.0
    timer: asyncio.Timeout | None = None
    asked: int = 0


class LiveRouting:
    """The calls in flight on one server's session, and the routing of the server's
    ``elicitation/create`` requests to them (see the module doc)."""

    def __init__(self, server_name: str) -> None:
        self.server_name = server_name
        self._in_flight: dict[int, InFlight] = {}

    @contextlib.contextmanager
    def flight(self, live: LiveAsk | None, live_s: float) -> Iterator[InFlight]:
        """A call in flight for the duration of the block."""
        flight = InFlight(live, live_s)
        self._in_flight[id(flight)] = flight
        try:
            yield flight
        finally:
            self._in_flight.pop(id(flight), None)

    async def on_elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """A server's ``elicitation/create`` during a call (see the module doc): the
        person's answer when it can be routed to the one call in flight, else cancel."""
        del context
        flights = list(self._in_flight.values())
        if not isinstance(params, ElicitRequestFormParams):
            log.info("MCP server %s asked for a URL during a call: cancelled", self.server_name)
            return LIVE_CANCELLED
        if len(flights) != 1 or flights[0].live is None:
            log.info(
                "MCP server %s asked a question no one call's person can answer (%d calls "
                "in flight): cancelled", self.server_name, len(flights),
            )  # fmt: skip
            return LIVE_CANCELLED
        flight = flights[0]
        live = flight.live
        assert live is not None
        if flight.asked >= MAX_LIVE_QUESTIONS or flight.live_s <= 0:
            return LIVE_CANCELLED
        flight.asked += 1
        loop = asyncio.get_running_loop()
        timer = flight.timer
        when = None if timer is None else timer.when()
        left = None if when is None else when - loop.time()
        if timer is not None and not timer.expired():
            timer.reschedule(None)  # the call's clock stops while the person is asked
        try:
            async with asyncio.timeout(flight.live_s + 5):  # (the asker's own bound first)
                return await live(params)
        except Exception:
            log.warning("MCP server %s: a live question failed", self.server_name, exc_info=True)
            return LIVE_CANCELLED
        finally:
            # the call's clock runs again, unless the call ended meanwhile
            if timer is not None and left is not None and id(flight) in self._in_flight:
                with contextlib.suppress(RuntimeError):  # (its timeout block has ended)
                    timer.reschedule(loop.time() + max(left, 0.0))
