"""One MCP server's session on this worker: connecting, listing its tools, calling one.

A worker keeps one session per server (per :attr:`McpServer.connection_key`: the
address and where its credentials come from), shared by every run on the worker that
uses the server, and opened on first use. The official SDK's :class:`mcp.Client` runs
it, in a task of its own (:mod:`parkway.runner.mcp._session`: the transport, the
``subscriptions/listen`` stream, why a connect failed).

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
(``InputRequiredResult``), which the caller parks (:mod:`parkway.runner.mcp.input`); an
older server's ``elicitation/create`` in the middle of a call goes to the call's person
only when it can be tied to the one watched call in flight, else it is answered
``cancel`` (:mod:`parkway.runner.mcp._live`).

A server that needs OAuth gets the user's token on this session only (``auth``); its
401 is noted by the token's auth flow and turned into :class:`McpAuthRequired` by
:meth:`McpConnection.refused` (:mod:`parkway.runner.mcp.oauth`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    REQUEST_TIMEOUT,
    CallToolResult,
    ElicitResult,
    InputRequiredResult,
)

from parkway.runner.agent import McpServer
from parkway.runner.errors import McpUnavailableError
from parkway.runner.mcp._live import LiveRouting
from parkway.runner.mcp._session import Session, leaf_of, reason_of
from parkway.runner.mcp.input import LiveAsk, link_scope
from parkway.runner.mcp.oauth import BearerAuth, McpAuthRequired

__all__ = ["McpConnection", "McpListing", "McpStatus"]

log = logging.getLogger(__name__)

# A server's tool list is read page by page; a server that never stops paging is cut here.
_MAX_PAGES = 50


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
        self.clock = clock
        self.last_used = clock()
        self.busy = 0
        # The calls in flight on this session (the elicitation requests' routing)
        self._live = LiveRouting(server.name)
        self._session = Session(
            server, environ=environ, clock=clock, retry_s=retry_s, auth=auth,
            on_message=self._on_message, on_elicit=self._live.on_elicit,
            on_change=self.invalidate,
        )  # fmt: skip
        self._listing_lock = asyncio.Lock()
        self._listing: McpListing | None = None
        self._generation = 0

    # -- status ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._session.connected

    def status(self, name: str | None = None) -> McpStatus:
        """What this worker knows of the server now (no I/O); ``name``: the server's name
        in the asking template (entries of several templates may share a session)."""
        listing = self._listing
        tools = None if listing is None else len(listing.tools)
        label = name or self.server.name
        if self._session.reason is not None:
            return McpStatus(label, self.server.transport, False, self._session.reason)
        if self.connected or listing is not None:
            return McpStatus(label, self.server.transport, True, tools=tools)
        return McpStatus(label, self.server.transport, None)

    def invalidate(self) -> None:
        """Forget the tool list (the server said it changed, or the session dropped)."""
        self._generation += 1

    def drop(self) -> None:
        """End the session (it is reopened on the next use)."""
        self._session.drop()

    def use_token(self, token: str) -> None:
        """The token this session sends from now on (a refresh may have replaced it); a
        new token lifts the pause after a refused connect."""
        assert self.auth is not None
        if token != self.auth.token:
            self.auth.token = token
            self.auth.refused = False
            self._session.forgive()

    def refused(self) -> McpAuthRequired | None:
        """The server's 401, when the last request of this session got one."""
        if self.auth is None or not self.auth.refused:
            return None
        self.auth.refused = False
        self.drop()
        self._session.forgive()
        return McpAuthRequired(self.auth.challenge)

    # -- the session ---------------------------------------------------------------------

    async def client(self) -> Client:
        """The open session, connecting first if there is none. Raises
        :class:`McpUnavailableError` when the server cannot be reached (at once, while
        the last failure is fresher than ``retry_s``)."""
        self.last_used = self.clock()
        return await self._session.client()

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
                        raise self._session.fail("the connection closed") from None
                    refused = self.refused()
                    if refused is not None:  # 401: the caller asks the user to sign in
                        raise refused from None
                    # a server without tools (or that will not list them) offers none
                    log.warning("MCP server %s did not list its tools: %s", self.server.name, exc)
                    tools = []
                except TimeoutError:
                    raise self._session.fail(
                        f"no answer within {self.server.connect_timeout_s:g} s"
                    ) from None
                except Exception as exc:
                    if attempt == 0:
                        self.drop()
                        continue
                    raise self._session.fail(
                        reason_of(exc, self.server.connect_timeout_s)
                    ) from None
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
        try:
            with self._live.flight(live, live_s) as flight:
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
                        # the person is asked (LiveRouting.on_elicit), instead of the SDK's.
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
                            await self._session.never_connected()
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
                "MCP server %s: a call failed in transport: %r", self.server.name, leaf_of(exc)
            )
            raise MCPError(CONNECTION_CLOSED, "the connection failed during the call") from None
        finally:
            self.busy -= 1
            self.last_used = self.clock()

    async def aclose(self) -> None:
        """End the session (a stdio server's process ends with it)."""
        await self._session.aclose()
