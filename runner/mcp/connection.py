"""One MCP server's session on this worker: connecting, listing its tools, calling one.

A worker keeps one session per server (per :attr:`McpServer.connection_key`: the
address and where its credentials come from), shared by every run on the worker that
uses the server, and opened on first use. The official SDK's :class:`mcp.Client` runs
it: protocol version negotiation (``server/discover`` on 2026-07-28 servers, the
``initialize`` handshake on older ones), the streamable HTTP or stdio transport. The SDK
holds a session's resources in task groups that must be left by the task that entered
them, so each session lives in a task of its own (:meth:`McpConnection._hold`), which
runs until the session drops or the worker closes; runs talk to it through the
session's requests, which any task may send.

A session that drops (the server restarted, a stdio server exited, a request finds the
connection closed) is reopened on the next use; a failed connect is not retried for
``retry_s`` (the server's tools are unavailable meanwhile, and every step does not wait
for a connect timeout again). Nothing about a call lives only in a session: a call is
one ``tools/call`` request, and a parked run that resumes on another worker calls the
tool through that worker's own session.

The tool list is kept for the entry's ``tools_ttl_s``, and dropped at once when the
server says it changed: ``notifications/tools/list_changed``, which 2026-07-28 servers
send on the ``subscriptions/listen`` stream the session keeps open and older ones on
their own. Whenever that stream is (re)opened, and whenever a session drops, the list
is dropped too: a change may have been missed meanwhile. A new session is handed over
only once its first stream is acknowledged (or the server has none; bounded by
``connect_timeout_s``), so the first list, read after that, is not dropped at once.

Sampling and roots: the client declares neither capability, so a server that asks
anyway is refused by the SDK's defaults ("Sampling not supported", "List roots not
supported"). Sampling would spend the operator's model on a server's prompt, outside
any run, its approvals and its log; roots would describe the worker's files to a server.

Elicitation. A 2026-07-28 server asks for input in the result of the call itself
(``InputRequiredResult``): the caller gets that result and parks the call
(:mod:`parkway.runner.mcp.input`). An older server asks with an ``elicitation/create``
request in the middle of a call, which only a live wait can answer: the session
declares the capability and :meth:`McpConnection._on_elicit` answers. A request says
nothing of the call it belongs to, so it goes to a call only when that is the one call
in flight on the session and the call brought a way to ask its person (``live``):
anything else (two calls in flight, a call nobody watches, a URL-mode request, more
than :data:`MAX_LIVE_QUESTIONS` in one call) is answered ``cancel`` at once, never
routed to a person who might be someone else. While the person is asked, the call's own
timeout (``timeout_s``) stops; the wait is bounded by the entry's ``live_input_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    REQUEST_TIMEOUT,
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    InputRequiredResult,
)

from parkway.runner.agent import McpServer
from parkway.runner.errors import McpUnavailableError
from parkway.runner.mcp.input import LIVE_CANCELLED, MAX_LIVE_QUESTIONS, LiveAsk, link_scope
from parkway.runner.mcp.oauth import BearerAuth, McpAuthRequired

__all__ = ["McpConnection", "McpListing", "McpStatus"]

log = logging.getLogger(__name__)

# A server's tool list is read page by page; a server that never stops paging is cut here.
_MAX_PAGES = 50
# A listen stream that ended is opened again after this pause, doubled each time it
# fails again, up to the second.
_RELISTEN_FIRST_S = 0.5
_RELISTEN_MAX_S = 30.0


@dataclass
class _InFlight:
    """A call in flight on the session: how it asks its person (None: it cannot), and
    its own timer, which stops while the person is asked."""

    live: LiveAsk | None
    live_s: float = 0.0
    timer: asyncio.Timeout | None = None
    asked: int = 0


@dataclass(frozen=True)
class McpListing:
    """A server's tools as this worker last listed them. ``generation`` is the
    connection's count of changes when it was read (a newer count: the list changed)."""

    tools: tuple[types.Tool, ...]
    generation: int
    fetched_at: float


@dataclass(frozen=True)
class McpStatus:
    """What this worker knows of a server: ``reachable`` is None before it first tried."""

    server: str
    transport: str
    reachable: bool | None
    reason: str | None = None
    tools: int | None = None


class _Unreachable(Exception):
    """A connect failed for ``reason`` (words safe to show; details go to the log)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _client_info() -> types.Implementation:
    try:
        release = version("parkway")
    except PackageNotFoundError:  # a checkout that was never installed
        release = "0"
    return types.Implementation(name="parkway", version=release)


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, which anyio's task groups
    wrap transport failures in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException, connect_timeout_s: float) -> str:
    """Why a connect failed, in words safe for the model and /readyz (no URL, no host,
    no header): the log has the details."""
    leaf = _leaf(exc)
    if isinstance(leaf, _Unreachable):
        return leaf.reason
    if isinstance(leaf, TimeoutError | httpx2.TimeoutException):
        return f"no answer within {connect_timeout_s:g} s"
    if isinstance(leaf, httpx2.ConnectError | ConnectionError):
        return "connection refused"
    if isinstance(leaf, httpx2.HTTPStatusError):
        return f"HTTP {leaf.response.status_code}"
    if isinstance(leaf, FileNotFoundError | PermissionError):
        return "its command could not be started"
    if isinstance(leaf, MCPError):
        return (
            "the connection closed" if leaf.code == CONNECTION_CLOSED else "it refused to connect"
        )
    return f"connection failed ({type(leaf).__name__})"


class McpConnection:
    """One server's session on this worker (see the module doc). ``environ`` is where
    headers and a stdio server's ``env`` references are read, when it connects;
    ``clock`` times the tool list's TTL and the pause after a failed connect;
    ``on_link_done(scope, elicitation_id)`` hears the server's
    ``notifications/elicitation/complete`` (it must not block)."""

    def __init__(
        self,
        server: McpServer,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_s: float = 5.0,
        on_link_done: Callable[[str, str], None] | None = None,
        auth: BearerAuth | None = None,
    ) -> None:
        self.server = server
        self.on_link_done = on_link_done
        # The bearer token of a server that needs OAuth: this session is one user's
        # connection's (runner/mcp/oauth.py), never shared with another's.
        self.auth = auth
        self.environ = environ
        self.clock = clock
        self.retry_s = retry_s
        self.last_used = clock()
        self.busy = 0
        # The calls in flight on this session (the elicitation requests' routing)
        self._in_flight: dict[int, _InFlight] = {}
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._connecting = asyncio.Lock()
        self._listing_lock = asyncio.Lock()
        self._listing: McpListing | None = None
        self._generation = 0
        self._failed_at: float | None = None
        self._reason: str | None = None
        self._closed = False
        # What ended the last session, when something did (its first exception).
        self._ended_by: BaseException | None = None

    # -- status ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._client is not None and self._owner is not None and not self._owner.done()

    def status(self, name: str | None = None) -> McpStatus:
        """What this worker knows of the server now (no I/O); ``name``: the server's name
        in the asking template (entries of several templates may share a session)."""
        listing = self._listing
        tools = None if listing is None else len(listing.tools)
        label = name or self.server.name
        if self._reason is not None:
            return McpStatus(label, self.server.transport, False, self._reason)
        if self.connected or listing is not None:
            return McpStatus(label, self.server.transport, True, tools=tools)
        return McpStatus(label, self.server.transport, None)

    def invalidate(self) -> None:
        """Forget the tool list (the server said it changed, or the session dropped)."""
        self._generation += 1

    def drop(self) -> None:
        """End the session (it is reopened on the next use)."""
        self._client = None
        self._stop.set()
        self.invalidate()

    def use_token(self, token: str) -> None:
        """The token this session sends from now on (a refresh may have replaced it); a
        new token lifts the pause after a refused connect."""
        assert self.auth is not None
        if token != self.auth.token:
            self.auth.token = token
            self.auth.refused = False
            self._failed_at = self._reason = None

    def refused(self) -> McpAuthRequired | None:
        """The server's 401, when the last request of this session got one."""
        if self.auth is None or not self.auth.refused:
            return None
        self.auth.refused = False
        self.drop()
        self._failed_at = self._reason = None
        return McpAuthRequired(self.auth.challenge)

    # -- the session ---------------------------------------------------------------------

    async def client(self) -> Client:
        """The open session, connecting first if there is none. Raises
        :class:`McpUnavailableError` when the server cannot be reached (at once, while
        the last failure is fresher than ``retry_s``)."""
        self.last_used = self.clock()
        if self._closed:
            raise McpUnavailableError(self.server.name, "this worker is shutting down")
        if self.connected:
            assert self._client is not None
            return self._client
        async with self._connecting:
            if self.connected:
                assert self._client is not None
                return self._client
            failed_at = self._failed_at
            if failed_at is not None and self.clock() - failed_at < self.retry_s:
                raise McpUnavailableError(self.server.name, self._reason or "unreachable")
            if self._owner is not None:  # a session that dropped: let its task end first
                await asyncio.gather(self._owner, return_exceptions=True)
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._ended_by = None
            self._owner = asyncio.create_task(
                self._hold(ready), name=f"parkway-mcp-{self.server.name}"
            )
            try:
                client = await asyncio.shield(ready)
            except _Unreachable as exc:
                self._failed_at, self._reason = self.clock(), exc.reason
                raise McpUnavailableError(self.server.name, exc.reason) from None
            self._client, self._failed_at, self._reason = client, None, None
            return client

    def _new_client(self, stack: contextlib.AsyncExitStack) -> Client:
        server = self.server
        environ = os.environ if self.environ is None else self.environ
        common: dict[str, Any] = {
            "mode": "auto",
            "cache": None,  # the tool list is kept here, with the entry's TTL
            "message_handler": self._on_message,
            "elicitation_callback": self._on_elicit,
            "client_info": _client_info(),
        }
        if server.transport == "stdio":
            env = {}
            for name, value in server.env:
                env[name] = value if isinstance(value, str) else self._secret(value, environ)
            params = StdioServerParameters(
                command=server.command[0], args=list(server.command[1:]), env=env
            )
            return Client(params, **common)
        headers = {name: self._secret(ref, environ) for name, ref in server.headers}
        # No read timeout on the HTTP client: a call is bounded by the entry's timeout_s
        # (the request's own timeout), and the listen stream is idle for as long as the
        # tools do not change.
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(server.connect_timeout_s, read=None),
            auth=self.auth,
        )
        stack.push_async_callback(http.aclose)
        assert server.url is not None
        return Client(streamable_http_client(server.url, http_client=http), **common)

    def _secret(self, ref: Any, environ: Mapping[str, str]) -> str:
        value = environ.get(ref.env)
        if value is None:
            log.warning(
                "MCP server %s: the environment variable %s is not set", self.server.name, ref.env
            )
            raise _Unreachable("an environment variable it reads is not set on this worker")
        return str(ref.prefix) + value

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        """The session's task: open it, hand it over through ``ready``, keep the
        ``subscriptions/listen`` stream open, and close it when asked or when it drops."""
        server = self.server
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(server.connect_timeout_s):
                        client = await stack.enter_async_context(self._new_client(stack))
                except TimeoutError:
                    raise _Unreachable(f"no answer within {server.connect_timeout_s:g} s") from None
                log.info(
                    "MCP server %s: connected (%s, protocol %s)",
                    server.name, server.transport, client.protocol_version,
                )  # fmt: skip
                listening = asyncio.Event()
                listener = asyncio.create_task(self._listen(client, listening))
                try:
                    # The session is handed over once its listen stream is acknowledged
                    # (or the server has none): the acknowledgement drops the tool list,
                    # so a list read before it would be read twice, and one read after it
                    # misses no change. A slow acknowledgement does not hold it up longer
                    # than a connect may take.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(server.connect_timeout_s):
                            await listening.wait()
                    if not ready.done():
                        ready.set_result(client)
                    await self._stop.wait()
                finally:
                    listener.cancel()
                    await asyncio.gather(listener, return_exceptions=True)
        except Exception as exc:
            reason = _reason(exc, server.connect_timeout_s)
            if not ready.done():
                log.warning(
                    "MCP server %s is unreachable: %s (%r)", server.name, reason, _leaf(exc)
                )
                ready.set_exception(_Unreachable(reason))
            else:
                self._ended_by = _leaf(exc)
                log.warning("MCP server %s: the session ended: %r", server.name, _leaf(exc))
        finally:
            self._client = None
            self.invalidate()

    async def _listen(self, client: Client, listening: asyncio.Event) -> None:
        """Keep the 2026-07-28 ``subscriptions/listen`` stream open for tool list changes
        (each also reaches :meth:`_on_message`). A stream that ends (a proxy's idle
        timeout, a server restarting) is opened again after a pause, and the tool list is
        forgotten meanwhile: changes may have been missed. The session itself stays, so
        calls in flight on it are not cut; a server that is gone fails the new listen
        request, and with it the session (:meth:`_hold`). ``listening`` is set once the
        first stream is acknowledged, or it is clear there will be none."""
        pause = _RELISTEN_FIRST_S
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    # Acknowledged: from now on no change is missed, but one made before
                    # (while the list was read, or while no stream was open) might be.
                    pause = _RELISTEN_FIRST_S
                    self.invalidate()
                    listening.set()
                    async for _ in subscription:
                        self.invalidate()
            except ListenNotSupportedError:
                listening.set()
                return  # an older server: it sends list_changed on its own
            except MCPError as exc:
                listening.set()
                if exc.code == CONNECTION_CLOSED:
                    self.drop()
                return  # a server that does not serve subscriptions: nothing to listen to
            except Exception as exc:
                log.info("MCP server %s: the listen stream ended: %r", self.server.name, _leaf(exc))
            listening.set()  # a first stream that failed does not hold the session up
            self.invalidate()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._stop.wait()
                return  # the session is ending
            pause = min(pause * 2, _RELISTEN_MAX_S)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.invalidate()
        elif (
            isinstance(message, types.ElicitCompleteNotification) and self.on_link_done is not None
        ):  # a link a person was asked to open (-32042) was completed, says the server
            scope = link_scope(self.server.connection_key)
            self.on_link_done(scope, message.params.elicitation_id)

    # -- listing and calling -----------------------------------------------------------

    async def listing(self, ttl_s: float) -> McpListing:
        """The server's tools: as listed within ``ttl_s`` and since the last change, or
        listed now (all pages). Raises :class:`McpUnavailableError`."""
        cached = self._listing
        if self._fresh(cached, ttl_s):
            assert cached is not None
            return cached
        async with self._listing_lock:
            cached = self._listing
            if self._fresh(cached, ttl_s):
                assert cached is not None
                return cached
            for attempt in range(2):  # a session found dropped is reopened once
                client = await self.client()
                generation = self._generation
                try:
                    tools = await self._list(client)
                except MCPError as exc:
                    if exc.code == CONNECTION_CLOSED and attempt == 0:
                        self.drop()
                        continue
                    if exc.code == CONNECTION_CLOSED:
                        raise self._failed("the connection closed") from None
                    refused = self.refused()
                    if refused is not None:  # 401: the caller asks the user to sign in
                        raise refused from None
                    # a server without tools (or that will not list them) offers none
                    log.warning("MCP server %s did not list its tools: %s", self.server.name, exc)
                    tools = []
                except TimeoutError:
                    raise self._failed(
                        f"no answer within {self.server.connect_timeout_s:g} s"
                    ) from None
                except Exception as exc:
                    if attempt == 0:
                        self.drop()
                        continue
                    raise self._failed(_reason(exc, self.server.connect_timeout_s)) from None
                listing = McpListing(tuple(tools), generation, self.clock())
                self._listing = listing
                return listing
        raise AssertionError("unreachable")  # pragma: no cover

    def _fresh(self, listing: McpListing | None, ttl_s: float) -> bool:
        return (
            listing is not None
            and listing.generation == self._generation
            and self.clock() - listing.fetched_at < ttl_s
        )

    async def _list(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        async with asyncio.timeout(self.server.connect_timeout_s):
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        return tools

    def _failed(self, reason: str) -> McpUnavailableError:
        self.drop()
        self._failed_at, self._reason = self.clock(), reason
        return McpUnavailableError(self.server.name, reason)

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        timeout_s: float,
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
        live: LiveAsk | None = None,
        live_s: float = 0.0,
    ) -> CallToolResult | InputRequiredResult:
        """One ``tools/call``, in the SDK's manual input mode (an ``InputRequiredResult``
        is returned, not answered). Raises :class:`McpUnavailableError` when the server
        cannot be reached, :class:`MCPError` for the server's own error answers
        (``REQUEST_TIMEOUT`` after ``timeout_s``, and ``CONNECTION_CLOSED`` when the
        session dropped during the call: its result is unknown). ``input_responses`` and
        ``request_state`` answer an earlier ``InputRequiredResult`` of the same call;
        ``live`` asks the call's person an older server's question during the call, each
        within ``live_s`` (see the module doc)."""
        responses = (
            {k: ElicitResult.model_validate(v) for k, v in input_responses.items()}
            if input_responses is not None
            else None
        )
        client = await self.client()
        self.busy += 1
        flight = _InFlight(live, live_s)
        self._in_flight[id(flight)] = flight
        try:
            for attempt in range(2):
                try:
                    if live is None:
                        return await client.session.call_tool(
                            tool,
                            dict(arguments),
                            read_timeout_seconds=timeout_s,
                            input_responses=responses,  # type: ignore[arg-type]
                            request_state=request_state,
                            allow_input_required=True,
                        )
                    # A call that may ask its person: its own timer, which stops while
                    # the person is asked (_on_elicit), instead of the SDK's.
                    try:
                        async with asyncio.timeout(timeout_s) as flight.timer:
                            return await client.session.call_tool(
                                tool,
                                dict(arguments),
                                input_responses=responses,  # type: ignore[arg-type]
                                request_state=request_state,
                                allow_input_required=True,
                            )
                    except TimeoutError:
                        if flight.timer is None or not flight.timer.expired():
                            raise
                        raise MCPError(REQUEST_TIMEOUT, "the call timed out") from None
                except MCPError as exc:
                    # A 2026-07-28 server refuses a call whose tool this session has not
                    # listed as it is now: list again and send it once more (as the SDK's
                    # Client.call_tool does).
                    if exc.code == CONNECTION_CLOSED:
                        await self._never_connected()
                        self.drop()
                    if exc.code != HEADER_MISMATCH or attempt:
                        raise
                    self.invalidate()
                    await self.listing(0)
            raise AssertionError("unreachable")  # pragma: no cover
        except (MCPError, McpUnavailableError):
            raise
        except Exception as exc:
            # A transport failure mid-call: the request may or may not have run.
            self.drop()
            log.warning(
                "MCP server %s: a call failed in transport: %r", self.server.name, _leaf(exc)
            )
            raise MCPError(CONNECTION_CLOSED, "the connection failed during the call") from None
        finally:
            self._in_flight.pop(id(flight), None)
            self.busy -= 1
            self.last_used = self.clock()

    async def _on_elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """A server's ``elicitation/create`` during a call (see the module doc): the
        person's answer when it can be routed to the one call in flight, else cancel."""
        del context
        flights = list(self._in_flight.values())
        if not isinstance(params, ElicitRequestFormParams):
            log.info("MCP server %s asked for a URL during a call: cancelled", self.server.name)
            return LIVE_CANCELLED
        if len(flights) != 1 or flights[0].live is None:
            log.info(
                "MCP server %s asked a question no one call's person can answer (%d calls "
                "in flight): cancelled", self.server.name, len(flights),
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
            log.warning("MCP server %s: a live question failed", self.server.name, exc_info=True)
            return LIVE_CANCELLED
        finally:
            # the call's clock runs again, unless the call ended meanwhile
            if timer is not None and left is not None and id(flight) in self._in_flight:
                with contextlib.suppress(RuntimeError):  # (its timeout block has ended)
                    timer.reschedule(loop.time() + max(left, 0.0))

    async def _never_connected(self) -> None:
        """Raise :class:`McpUnavailableError` when the session that a call found closed
        ended because the server refused connections: no request reached it then, so
        the call did not run (anything else leaves its result unknown)."""
        owner = self._owner
        if owner is not None:
            await asyncio.wait([owner], timeout=1.0)
        if isinstance(self._ended_by, httpx2.ConnectError):
            raise self._failed("connection refused")

    async def aclose(self) -> None:
        """End the session (a stdio server's process ends with it)."""
        self._closed = True
        self._stop.set()
        if self._owner is not None:
            await asyncio.gather(self._owner, return_exceptions=True)
