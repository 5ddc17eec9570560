"""How Parkway is served by uvicorn: its HTTP/1.1 protocol with a header read timeout.

uvicorn (h11 or httptools) closes an idle keep-alive connection after
``timeout_keep_alive``, but it arms that timer only once a response is complete and
cancels it on the first byte received; nothing limits how long the headers of a request
may take. A client that opens a connection and sends nothing, or trickles a header byte
every few seconds, holds its connection (and a file descriptor) for as long as it likes,
and the app never hears of it, as it sees a request only once its headers are complete.

:class:`HeaderTimeoutProtocol` adds that limit: a timer armed when a connection opens and
again when a response is complete, disarmed when the next request's headers are, and
never pushed back by the bytes that arrive meanwhile. On expiry the connection is closed
without an answer. The body has its own limit, enforced by the app's body reader
(``body_read_timeout_s``, see :mod:`parkway.transport.requests`).
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderTimeoutProtocol", "header_timeout_protocol"]

log = logging.getLogger(__name__)


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are not
    complete within ``header_read_timeout_s`` of its opening or of the previous response.

    Built on the h11 protocol (pure Python, a uvicorn dependency) because the timer hooks
    into when it creates a request: each complete request head starts a new
    ``RequestResponseCycle``. Use :func:`header_timeout_protocol` to choose the timeout.
    """

    header_read_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a request's headers are complete
            self._disarm()

    def on_response_complete(self) -> None:
        cycle = self.cycle
        self._arm()
        super().on_response_complete()  # may start a pipelined request at once
        if self.cycle is not cycle or self.transport.is_closing():
            self._disarm()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm()  # the connection is no longer HTTP/1.1's
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None and not self.transport.is_closing():
            self._header_timer = self.loop.call_later(
                self.header_read_timeout_s, self._headers_timed_out
            )

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            log.debug(
                "closing a connection from %s: no complete request headers within %g s",
                self.client[0] if self.client else "?",
                self.header_read_timeout_s,
            )
            self.transport.close()


def header_timeout_protocol(header_read_timeout_s: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class to give uvicorn as ``http=``, with this header timeout."""

    class Protocol(HeaderTimeoutProtocol):
        pass

    Protocol.header_read_timeout_s = header_read_timeout_s
    Protocol.__name__ = Protocol.__qualname__ = "HeaderTimeoutProtocol"
    return Protocol
