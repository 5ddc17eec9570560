"""How Parkway is served by uvicorn: its fastest HTTP/1.1 protocol and event loop, with a
header read timeout and a bounded request head.

uvicorn (h11 or httptools) closes an idle keep-alive connection after
``timeout_keep_alive``, but it arms that timer only once a response is complete and
cancels it on the first byte received; nothing limits how long the headers of a request
may take. A client that opens a connection and sends nothing, or trickles a header byte
every few seconds, holds its connection (and a file descriptor) for as long as it likes,
and the app never hears of it, as it sees a request only once its headers are complete.

:class:`HeaderTimer` adds that limit: a timer armed when a connection opens and again
when a response is complete, disarmed when the next request's headers are, and never
pushed back by the bytes that arrive meanwhile. On expiry the connection is closed
without an answer. The body has its own limit, enforced by the app's body reader
(``body_read_timeout_s``, see :mod:`parkway.transport.api.requests`).

Two protocols carry it: :class:`HttpToolsHeaderTimeoutProtocol` on uvicorn's httptools
protocol (a C parser, llhttp: the fast one, used whenever httptools is installed) and
:class:`H11HeaderTimeoutProtocol` on its h11 protocol (pure Python, always there).
httptools buffers a request head of any size, where h11 stops at
``h11_max_incomplete_event_size`` (16 KiB) with a 400; the httptools protocol here
stops at the same size, so a fast client cannot fill the worker's memory with one
endless header line before the timer fires. :func:`header_timeout_protocol` picks the
protocol and :func:`event_loop` the loop (uvloop where it is installed).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from typing import Literal, cast

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "PROTOCOLS",
    "H11HeaderTimeoutProtocol",
    "HeaderTimer",
    "event_loop",
    "header_timeout_protocol",
]

log = logging.getLogger(__name__)

HttpChoice = Literal["auto", "httptools", "h11"]


class HeaderTimer:
    """The header read timer of one connection: closes it, unanswered, once it has been
    armed for ``timeout_s`` (see the module's docstring for when it is armed)."""

    __slots__ = ("_client", "_handle", "_loop", "_timeout_s", "_transport")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        transport: asyncio.Transport,
        timeout_s: float,
        client: tuple[str, int] | None,
    ) -> None:
        self._loop = loop
        self._transport = transport
        self._timeout_s = timeout_s
        self._client = client
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """Start the timer, unless it runs already (bytes never push it back)."""
        if self._handle is None and not self._transport.is_closing():
            self._handle = self._loop.call_later(self._timeout_s, self._expired)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expired(self) -> None:
        self._handle = None
        if not self._transport.is_closing():
            log.debug(
                "closing a connection from %s: no complete request headers within %g s",
                self._client[0] if self._client else "?",
                self._timeout_s,
            )
            self._transport.close()


class H11HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are not
    complete within ``header_read_timeout_s`` of its opening or of the previous response.

    h11 reports a complete request head as a new ``RequestResponseCycle``: each one
    disarms the timer. Use :func:`header_timeout_protocol` to choose the timeout.
    """

    header_read_timeout_s: float = 10.0
    _timer: HeaderTimer

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer = HeaderTimer(self.loop, transport, self.header_read_timeout_s, self.client)
        self._timer.arm()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a request's headers are complete
            self._timer.disarm()

    def on_response_complete(self) -> None:
        cycle = self.cycle
        self._timer.arm()
        super().on_response_complete()  # may start a pipelined request at once
        if self.cycle is not cycle or self.transport.is_closing():
            self._timer.disarm()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._timer.disarm()  # the connection is no longer HTTP/1.1's
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.disarm()
        super().connection_lost(exc)


PROTOCOLS: dict[str, type[asyncio.Protocol]] = {"h11": H11HeaderTimeoutProtocol}
"""The header-timeout protocols this installation has, by uvicorn's ``http`` names."""

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is a dependency; h11 serves without it
    pass
else:
    __all__ += ["HttpToolsHeaderTimeoutProtocol"]

    class HttpToolsHeaderTimeoutProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with the same header read timeout, and a request
        head (request line and headers) of at most ``h11_max_incomplete_event_size``
        bytes, as on h11: past it, 400 and the connection is closed.

        The parser reports a complete head in ``on_headers_complete`` (which starts, or
        queues, the request's cycle): that disarms the timer. The head's size is counted
        in the reads that arrive while one is awaited, since llhttp keeps a partial
        header to itself until it ends (the read in which the previous request ends is
        not counted, so one read may come on top). A pipelined head past the limit while
        a response is under way closes the connection: a 400 would land inside it.
        """

        header_read_timeout_s: float = 10.0
        _timer: HeaderTimer
        _head_bytes = 0
        _awaiting_head = True

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            size = self.config.h11_max_incomplete_event_size
            self._max_head = DEFAULT_MAX_INCOMPLETE_EVENT_SIZE if size is None else size
            self._timer = HeaderTimer(self.loop, transport, self.header_read_timeout_s, self.client)
            self._timer.arm()

        def data_received(self, data: bytes) -> None:
            if self._awaiting_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if (
                self._awaiting_head
                and self._head_bytes > self._max_head
                and not self.transport.is_closing()
            ):
                message = "Invalid HTTP request received."  # what h11's limit answers
                self.logger.warning(message)
                if self.cycle is None or self.cycle.response_complete:
                    self.send_400_response(message)
                else:  # a pipelined head, while a response is under way: no room for a 400
                    self.transport.close()

        def on_headers_complete(self) -> None:
            self._awaiting_head = False
            self._head_bytes = 0
            self._timer.disarm()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._awaiting_head = True  # the next request's head, counted from the next read
            super().on_message_complete()

        def on_response_complete(self) -> None:
            queued = bool(self.pipeline)  # requests whose headers are complete
            self._timer.arm()
            super().on_response_complete()  # starts the first queued request, if any
            if queued or self.transport.is_closing():
                self._timer.disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._timer.disarm()
            super().connection_lost(exc)

    PROTOCOLS["httptools"] = HttpToolsHeaderTimeoutProtocol


def header_timeout_protocol(
    header_read_timeout_s: float, http: HttpChoice = "auto"
) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn as ``http=``, with this header timeout:
    httptools' when it is installed (``"auto"``), or the one named."""
    name = ("httptools" if "httptools" in PROTOCOLS else "h11") if http == "auto" else http
    base = PROTOCOLS[name]
    protocol = type(base.__name__, (base,), {"header_read_timeout_s": header_read_timeout_s})
    protocol.__qualname__ = base.__qualname__
    return cast("type[asyncio.Protocol]", protocol)


def event_loop() -> Literal["uvloop", "asyncio"]:
    """uvicorn's ``loop=``: uvloop where it is installed (not on Windows or PyPy)."""
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
