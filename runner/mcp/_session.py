"""One MCP server's SDK session, held in a task of its own: connecting, the transport, the
listen stream, and why a connect failed.

The official SDK's :class:`mcp.Client` runs the session: protocol version negotiation
(``server/discover`` on 2026-07-28 servers, the ``initialize`` handshake on older ones),
the streamable HTTP or stdio transport. The SDK holds a session's resources in task
groups that must be left by the task that entered them, so each session lives in a task
of its own (:meth:`Session._hold`), which runs until the session drops or the worker
closes; runs talk to it through the session's requests, which any task may send.

A session that drops is reopened on the next use; a failed connect is not retried for
``retry_s``. Whenever the ``subscriptions/listen`` stream is (re)opened, and whenever a
session drops, the owner is told (``on_change``): a change of the tool list may have been
missed meanwhile. A new session is handed over only once its first stream is
acknowledged (or the server has none; bounded by ``connect_timeout_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
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
from mcp_types import CONNECTION_CLOSED, ElicitRequestParams, ElicitResult, ErrorData

from parkway.runner.agent import McpServer
from parkway.runner.errors import McpUnavailableError
from parkway.runner.mcp.oauth import BearerAuth

__all__ = ["Session", "leaf_of", "reason_of"]

log = logging.getLogger(__name__)

# A listen stream that ended is opened again after this pause, doubled each time it
# fails again, up to the second.
_RELISTEN_FIRST_S = 0.5
_RELISTEN_MAX_S = 30.0

OnMessage = Callable[[Any], Awaitable[None]]
OnElicit = Callable[
    [ClientRequestContext, ElicitRequestParams], Awaitable[ElicitResult | ErrorData]
]


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


def leaf_of(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, which anyio's task groups
    wrap transport failures in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def reason_of(exc: BaseException, connect_timeout_s: float) -> str:
    """Why a connect failed, in words safe for the model and /readyz (no URL, no host,
    no header): the log has the details."""
    leaf = leaf_of(exc)
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


class Session:
    """One server's SDK session (see the module doc). ``environ`` is where headers and a
    stdio server's ``env`` references are read, when it connects; ``clock`` times the
    pause after a failed connect; ``on_message`` and ``on_elicit`` hear the server's
    notifications and ``elicitation/create`` requests; ``on_change`` is told when the
    tool list may have changed unseen (it must not block)."""

    def __init__(
        self,
        server: McpServer,
        *,
        environ: Mapping[str, str] | None,
        clock: Callable[[], float],
        retry_s: float,
        auth: BearerAuth | None,
        on_message: OnMessage,
        on_elicit: OnElicit,
        on_change: Callable[[], None],
    ) -> None:
        self.server = server
        self.environ = environ
        self.clock = clock
        self.retry_s = retry_s
        self.auth = auth
        self.on_message = on_message
        self.on_elicit = on_elicit
        self.on_change = on_change
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._connecting = asyncio.Lock()
        self._failed_at: float | None = None
        self.reason: str | None = None  # why the last connect failed, while it counts
        self._closed = False
        # What ended the last session, when something did (its first exception).
        self._ended_by: BaseException | None = None

    @property
    def connected(self) -> bool:
        return self._client is not None and self._owner is not None and not self._owner.done()

    def drop(self) -> None:
        """End the session (it is reopened on the next use)."""
        self._client = None
        self._stop.set()
        self.on_change()

    def fail(self, reason: str) -> McpUnavailableError:
        """End the session as failed for ``reason``: connects pause for ``retry_s``."""
        self.drop()
        self._failed_at, self.reason = self.clock(), reason
        return McpUnavailableError(self.server.name, reason)

    def forgive(self) -> None:
        """Lift the pause after a failed connect (the next use connects at once)."""
        self._failed_at = self.reason = None

    async def client(self) -> Client:
        """The open session, connecting first if there is none. Raises
        :class:`McpUnavailableError` when the server cannot be reached (at once, while
        the last failure is fresher than ``retry_s``)."""
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
                raise McpUnavailableError(self.server.name, self.reason or "unreachable")
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
                self._failed_at, self.reason = self.clock(), exc.reason
                raise McpUnavailableError(self.server.name, exc.reason) from None
            self._client, self._failed_at, self.reason = client, None, None
            return client

    def _new_client(self, stack: contextlib.AsyncExitStack) -> Client:
        server = self.server
        environ = os.environ if self.environ is None else self.environ
        common: dict[str, Any] = {
            "mode": "auto",
            "cache": None,  # the tool list is kept by the connection, with the entry's TTL
            "message_handler": self.on_message,
            "elicitation_callback": self.on_elicit,
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
            reason = reason_of(exc, server.connect_timeout_s)
            if not ready.done():
                log.warning(
                    "MCP server %s is unreachable: %s (%r)", server.name, reason, leaf_of(exc)
                )
                ready.set_exception(_Unreachable(reason))
            else:
                self._ended_by = leaf_of(exc)
                log.warning("MCP server %s: the session ended: %r", server.name, leaf_of(exc))
        finally:
            self._client = None
            self.on_change()

    async def _listen(self, client: Client, listening: asyncio.Event) -> None:
        """Keep the 2026-07-28 ``subscriptions/listen`` stream open for tool list changes
        (each also reaches ``on_message``). A stream that ends (a proxy's idle timeout, a
        server restarting) is opened again after a pause, and the tool list is forgotten
        meanwhile: changes may have been missed. The session itself stays, so calls in
        flight on it are not cut; a server that is gone fails the new listen request, and
        with it the session (:meth:`_hold`). ``listening`` is set once the first stream is
        acknowledged, or it is clear there will be none."""
        pause = _RELISTEN_FIRST_S
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    # Acknowledged: from now on no change is missed, but one made before
                    # (while the list was read, or while no stream was open) might be.
                    pause = _RELISTEN_FIRST_S
                    self.on_change()
                    listening.set()
                    async for _ in subscription:
                        self.on_change()
            except ListenNotSupportedError:
                listening.set()
                return  # an older server: it sends list_changed on its own
            except MCPError as exc:
                listening.set()
                if exc.code == CONNECTION_CLOSED:
                    self.drop()
                return  # a server that does not serve subscriptions: nothing to listen to
            except Exception as exc:
                log.info(
                    "MCP server %s: the listen stream ended: %r", self.server.name, leaf_of(exc)
                )
            listening.set()  # a first stream that failed does not hold the session up
            self.on_change()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._stop.wait()
                return  # the session is ending
            pause = min(pause * 2, _RELISTEN_MAX_S)

    async def never_connected(self) -> None:
        """Raise :class:`McpUnavailableError` when the session that a call found closed
        ended because the server refused connections: no request reached it then, so
        the call did not run (anything else leaves its result unknown)."""
        owner = self._owner
        if owner is not None:
            await asyncio.wait([owner], timeout=1.0)
        if isinstance(self._ended_by, httpx2.ConnectError):
            raise self.fail("connection refused")

    async def aclose(self) -> None:
        """End the session (a stdio server's process ends with it)."""
        self._closed = True
        self._stop.set()
        if self._owner is not None:
            await asyncio.gather(self._owner, return_exceptions=True)
