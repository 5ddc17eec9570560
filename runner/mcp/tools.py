"""The worker's MCP servers: the tools a run offers, and calling them.

:class:`McpTools` is what the runner holds (one per worker). For each model step it
makes the run's :class:`McpOffer` (:meth:`McpTools.offer`): the template's own tools and
its MCP servers' tools, listed through the worker's sessions
(:class:`~parkway.runner.mcp.connection.McpConnection`, one per server address, shared by
every template that names it), as one :class:`~parkway.runner.agent.AgentTemplate` that
triage and execution read like any other. A server that cannot be reached offers no
tools that step, and the model's instructions get a note saying so (the run goes on
without them); a call of one of its tools is refused with the same words.

A call (:meth:`McpTools.call`) is one ``tools/call`` through the session, bounded by the
entry's ``timeout_s``. Its result becomes the tool's output: the ``structuredContent``
when the server gave one, else ``{"content": [...]}`` with the content blocks as JSON
(text, images, resource links as the protocol shapes them). An ``isError`` result is a
tool error whose message is the server's text. Outputs over the artifact threshold are
kept as artifacts by the runner, as any server tool's are. A request for input from a
person goes to :func:`~parkway.runner.mcp.input.answer_input_request` (the call parks);
a call made again once a person answered (``ctx.continuation``) sends the answers
(:func:`~parkway.runner.mcp.input.retry_input`).

A resumed run (on any worker) finds an approved call's tool again by its name
(:meth:`McpTools.find`): the server's tools are listed through this worker's session if
it has none fresh, so the call is made exactly as on the worker that parked it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parkway.runner.agent import (
    AgentTemplate,
    ConnectionUnavailableError,
    Credentials,
    McpServer,
    ToolContext,
    ToolSpec,
    exposed_name,
    server_of,
)
from parkway.runner.errors import McpUnavailableError, ToolError
from parkway.runner.mcp.oauth import (
    SIGN_IN_TOOL,
    BearerAuth,
    McpAuthRequired,
    check_challenge,
    connection_answer,
    park_for_connection,
)

# The ``mcp`` SDK is imported by the modules that talk to servers (connection, listing,
# input), and it is the largest import of all of Parkway (about 40% of a server's start):
# this module, which every runner holds, imports them only once a template names an MCP
# server, so a worker whose agents have none never loads the SDK.
if TYPE_CHECKING:
    from mcp_types import CallToolResult

    from parkway.runner.mcp.connection import McpConnection, McpStatus
    from parkway.runner.mcp.listing import McpToolset

__all__ = ["McpOffer", "McpTools", "tool_output"]

log = logging.getLogger(__name__)

# An error text from a server is the model's to read, within reason.
_ERROR_MAX = 2000
# A server that needs OAuth is probed for /readyz at most this often (seconds).
_PROBE_S = 30.0
# What a server may ask of a client that Parkway never provides (connection.py says why).
_NOT_PROVIDED = {"sampling/createMessage": "model sampling", "roots/list": "its roots"}


@dataclass(frozen=True)
class McpOffer:
    """What a run offers the model in one step: ``template`` (the run's template with its
    MCP servers' tools among its tools, and a note in its instructions for each server
    that cannot be reached), and ``unavailable``: those servers, with why."""

    template: AgentTemplate
    unavailable: Mapping[str, str] = field(default_factory=dict)

    def refusal(self, name: str) -> str | None:
        """Why the tool ``name`` is not offered, when it is an unreachable server's."""
        server = server_of(name)
        reason = self.unavailable.get(server or "")
        if server is None or reason is None:
            return None
        return str(McpUnavailableError(server, reason))


def _note(unavailable: Mapping[str, str]) -> str:
    lines = [
        f"- MCP server {name!r} is unreachable ({reason}): its tools "
        f"({name}__...) are unavailable right now."
        for name, reason in unavailable.items()
    ]
    return "\n\n[Parkway: tools unavailable]\n" + "\n".join(lines)


def tool_output(name: str, result: CallToolResult) -> Any:
    """The output of a finished call (see the module doc); an ``isError`` result raises
    :class:`ToolError` with the server's text."""
    blocks = [
        block.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"meta"})
        for block in result.content
    ]
    if result.is_error:
        text = "\n".join(b["text"] for b in blocks if b.get("type") == "text" and b.get("text"))
        raise ToolError(text[:_ERROR_MAX] or f"MCP tool {name!r} reported an error")
    if result.structured_content is not None:
        return result.structured_content
    return {"content": blocks}


class McpTools:
    """The worker's MCP sessions and the tools they offer (see the module doc).

    ``environ`` is where entries' environment references are read (the process
    environment by default), ``clock`` times tool lists and reconnects, ``retry_s`` is
    how long a server that could not be reached is left alone, and at most
    ``max_sessions`` sessions stay open (the least recently used idle one closes
    first)."""

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_s: float = 5.0,
        max_sessions: int = 64,
    ) -> None:
        self.environ = environ
        self.clock = clock
        self.retry_s = retry_s
        self.max_sessions = max_sessions
        # The connection store, for servers that need OAuth (the runner sets it).
        self.credentials: Credentials | None = None
        self._connections: OrderedDict[str, McpConnection] = OrderedDict()
        self._toolsets: OrderedDict[tuple[McpServer, str | None], McpToolset] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        # Servers that need OAuth, as /readyz last probed them: when, and what it found
        self._probes: dict[str, tuple[float, McpStatus]] = {}
        self._closed = False
        # Told of each link a server says was completed (notifications/elicitation/
        # complete) as (scope, elicitation id): the runner settles the call waiting for it.
        self.on_link_done: Callable[[str, str], Coroutine[Any, Any, None]] | None = None

    def connection(self, server: McpServer, credential: str | None = None) -> McpConnection:
        """The session to ``server``'s address (made, not yet opened, on first use); for
        a server that needs OAuth, ``credential`` names the user's connection whose
        token the session sends: one session per server and connection."""
        key = (
            server.connection_key if credential is None else f"{server.connection_key}|{credential}"
        )
        found = self._connections.get(key)
        if found is not None:
            self._connections.move_to_end(key)
            return found
        from parkway.runner.mcp.connection import McpConnection  # (the SDK: see the imports)

        found = McpConnection(
            server, environ=self.environ, clock=self.clock, retry_s=self.retry_s,
            on_link_done=self._link_done,
            auth=BearerAuth() if credential is not None else None,
        )  # fmt: skip
        self._connections[key] = found
        idle = [k for k, c in self._connections.items() if c.busy == 0 and c is not found]
        while len(self._connections) > self.max_sessions and idle:
            old = self._connections.pop(idle.pop(0))
            task = asyncio.create_task(old.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return found

    def _link_done(self, scope: str, elicitation_id: str) -> None:
        hook = self.on_link_done
        if hook is None or self._closed:
            return
        task = asyncio.create_task(hook(scope, elicitation_id), name="parkway-mcp-link-done")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def toolset(self, server: McpServer, principal: str | None = None) -> McpToolset:
        """``server``'s tools as its entry offers them (for a server that needs OAuth,
        as listed with ``principal``'s token; without one, its sign-in tool). Raises
        :class:`McpUnavailableError`."""
        from parkway.runner.mcp.listing import toolset

        credential: str | None = None
        if server.auth is not None:
            try:
                credential, connection = await self._authorized(server, principal)
                listing = await self._guarded(connection, connection.listing(server.tools_ttl_s))
            except McpAuthRequired:
                return self._sign_in_toolset(server)
        else:
            listing = await self.connection(server).listing(server.tools_ttl_s)
        key = (server, credential)
        made = self._toolsets.get(key)
        if made is None or made.listing is not listing:
            made = toolset(server, listing, self.call)
            self._toolsets[key] = made
            while len(self._toolsets) > 4 * self.max_sessions:
                self._toolsets.popitem(last=False)
        self._toolsets.move_to_end(key)
        return made

    # -- servers that need OAuth (runner/mcp/oauth.py) ----------------------------------

    async def _authorized(
        self, server: McpServer, principal: str | None, connection_id: str | None = None
    ) -> tuple[str, McpConnection]:
        """The connection's id and the session sending ``principal``'s token for
        ``server`` (the connection ``connection_id``, else their usable one for the
        server). Raises
        :class:`McpAuthRequired` when they have none (or it must be connected again)."""
        assert server.auth is not None
        assert server.resource is not None
        credentials = self.credentials
        if credentials is None or principal is None:
            raise McpUnavailableError(server.name, "this server has no connection store")
        if connection_id is None:
            connection_id = await credentials.resource_connection(
                principal, server.auth.provider, server.resource
            )
        if connection_id is None:
            raise McpAuthRequired(None)
        try:
            token = await credentials.resource_token(principal, connection_id, server.resource)
        except ConnectionUnavailableError as exc:
            if exc.reason in ("needs_reconnect", "not_found"):
                raise McpAuthRequired(None) from None
            raise McpUnavailableError(server.name, "its sign-in could not be renewed") from None
        connection = self.connection(server, connection_id)
        connection.use_token(token)
        return connection_id, connection

    @staticmethod
    async def _guarded(connection: McpConnection, work: Any) -> Any:
        """``await work``; a 401 the session got meanwhile raises
        :class:`McpAuthRequired` instead of what it failed with."""
        from mcp.shared.exceptions import MCPError

        try:
            return await work
        except (McpUnavailableError, MCPError):
            refused = connection.refused()
            if refused is not None:
                raise refused from None
            raise

    def _sign_in_toolset(self, server: McpServer) -> McpToolset:
        from parkway.runner.mcp.connection import McpListing
        from parkway.runner.mcp.listing import McpToolset

        name = exposed_name(server.name, SIGN_IN_TOOL)
        spec = ToolSpec(
            name=name,
            kind="mcp",
            description=(
                f"Sign the user in to the MCP server {server.name!r}: its tools are offered "
                "once they have. Returns the tools' names, never a credential."
            ),
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
            approval_policy="allow",
            timeout_s=2 * server.connect_timeout_s + 5,
            source=server.where,
            func=self._sign_in_runner(server, name),
        )
        return McpToolset(McpListing((), -1, 0.0), {name: spec}, {name: SIGN_IN_TOOL})

    def _sign_in_runner(self, server: McpServer, name: str) -> Any:
        async def run(tool_input: Any, ctx: ToolContext) -> Any:
            del tool_input
            return await self.sign_in(server, name, ctx)

        return run

    async def _ask_to_sign_in(
        self, server: McpServer, challenge: str | None, tool: str, name: str, arguments: Any
    ) -> Any:
        """Check the server's challenge, then park the call on a connect card (or raise
        :class:`ToolError`: the model reads why no card is shown)."""
        assert server.auth is not None
        credentials = self.credentials
        issuer = None if credentials is None else credentials.provider_issuer(server.auth.provider)
        await check_challenge(server, issuer, challenge)
        park_for_connection(server, tool, name, arguments)

    async def sign_in(self, server: McpServer, name: str, ctx: ToolContext) -> Any:
        """The sign-in tool of a server that needs OAuth: parks on a connect card until
        the user has a connection the server accepts; then its tools' names."""
        connection_id = connection_answer(ctx, server)
        try:
            _, connection = await self._authorized(server, ctx.principal, connection_id)
            listing = await self._guarded(connection, connection.listing(0))
        except McpAuthRequired as exc:
            return await self._ask_to_sign_in(server, exc.challenge, SIGN_IN_TOOL, name, {})
        names = [exposed_name(server.name, t.name) for t in listing.tools if server.offers(t.name)]
        return {"signedIn": True, "server": server.name, "tools": names}

    async def offer(self, template: AgentTemplate, principal: str | None = None) -> McpOffer:
        """What a step of a run on ``template`` offers (see :class:`McpOffer`);
        ``principal``: whose tokens servers that need OAuth get."""
        if not template.mcps:
            return McpOffer(template)
        found = await asyncio.gather(
            *(self.toolset(server, principal) for server in template.mcps),
            return_exceptions=True,
        )
        tools: dict[str, ToolSpec] = dict(template.tools)
        unavailable: dict[str, str] = {}
        for server, result in zip(template.mcps, found, strict=True):
            if isinstance(result, McpUnavailableError):
                unavailable[server.name] = result.reason
            elif isinstance(result, asyncio.CancelledError):
                raise result
            elif isinstance(result, BaseException):
                # a server's surprise must not end the run: its tools are left out
                log.error("MCP server %s: listing its tools failed", server.name, exc_info=result)
                unavailable[server.name] = f"its tools could not be read ({type(result).__name__})"
            else:
                tools.update(result.specs)
        instructions = template.instructions + (_note(unavailable) if unavailable else "")
        offered = dataclasses.replace(template, tools=tools, instructions=instructions)
        return McpOffer(offered, unavailable)

    async def find(
        self, template: AgentTemplate, name: str, principal: str | None = None
    ) -> ToolSpec | str:
        """The spec of the MCP tool ``name`` of ``template``, or why there is none now
        (words for the model): the server cannot be reached, or no longer offers it."""
        server = next((s for s in template.mcps if s.name == server_of(name)), None)
        if server is None:
            return f"tool {name!r} is no longer in the agent template"
        if server.auth is not None and name == exposed_name(server.name, SIGN_IN_TOOL):
            return self._sign_in_toolset(server).specs[name]
        try:
            spec = (await self.toolset(server, principal)).specs.get(name)
        except McpUnavailableError as exc:
            return str(exc)
        if spec is None:
            return f"MCP server {server.name!r} no longer offers the tool {name!r}"
        return spec

    async def call(
        self,
        server: McpServer,
        tool: str,
        name: str,
        arguments: Mapping[str, Any],
        ctx: ToolContext,
    ) -> Any:
        """Call ``server``'s tool ``tool`` (offered as ``name``) with ``arguments``; its
        output, or :class:`ToolError` with what the model should read."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import (
            CONNECTION_CLOSED,
            REQUEST_TIMEOUT,
            URL_ELICITATION_REQUIRED,
            InputRequiredResult,
        )
        from pydantic import ValidationError

        from parkway.runner.mcp.input import (
            McpInputRequest,
            McpRetry,
            answer_input_request,
            link_scope,
            live_asker,
            retry_input,
        )

        retry = McpRetry()
        if server.auth is not None:
            connection_id = connection_answer(ctx, server)  # parked on a sign-in: its answer
            try:
                _, connection = await self._authorized(server, ctx.principal, connection_id)
            except McpAuthRequired as exc:
                return await self._ask_to_sign_in(server, exc.challenge, tool, name, arguments)
            if connection_id is None and ctx.continuation is not None:
                retry = retry_input(ctx.continuation, ctx.answer or {})
        else:
            connection = self.connection(server)
            if ctx.continuation is not None:  # answered by a person: the call is made again
                retry = retry_input(ctx.continuation, ctx.answer or {})
        try:
            try:
                result = await connection.call(
                    tool, arguments, server.timeout_s,
                    input_responses=retry.input_responses, request_state=retry.request_state,
                    live=live_asker(ctx, server, tool), live_s=server.live_input_s,
                )  # fmt: skip
            except (MCPError, McpUnavailableError):
                denied = connection.refused()
                if denied is not None:  # 401: the token was refused; sign in again
                    return await self._ask_to_sign_in(
                        server, denied.challenge, tool, name, arguments
                    )
                raise
        except MCPError as exc:
            if exc.code == URL_ELICITATION_REQUIRED:
                data = exc.data if isinstance(exc.data, Mapping) else {}
                request = McpInputRequest(
                    server.name, tool, name, dict(arguments), "url_elicitation", dict(data),
                    scope=link_scope(server.connection_key),
                )  # fmt: skip
                return await answer_input_request(request, ctx)
            if exc.code == REQUEST_TIMEOUT:
                raise ToolError(
                    f"MCP tool {name!r} did not answer within {server.timeout_s:g} s"
                ) from None
            if exc.code == CONNECTION_CLOSED:
                raise ToolError(
                    f"the connection to MCP server {server.name!r} ended during the call: "
                    "its result is unknown (do not blindly retry a call that changes things)"
                ) from None
            raise ToolError(
                f"MCP server {server.name!r} refused the call: {exc.message[:_ERROR_MAX]}"
            ) from None
        except ValidationError:
            raise ToolError(
                f"MCP server {server.name!r} answered with a result Parkway cannot read"
            ) from None
        if isinstance(result, InputRequiredResult):
            asked = {req.method for req in (result.input_requests or {}).values()}
            refused = sorted(asked & _NOT_PROVIDED.keys())
            if refused:
                what = " and ".join(_NOT_PROVIDED[method] for method in refused)
                raise ToolError(
                    f"MCP tool {name!r} asked Parkway for {what}, which Parkway does not "
                    "provide to MCP servers"
                )
            requests = {
                key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
                for key, value in (result.input_requests or {}).items()
            }
            request = McpInputRequest(
                server.name, tool, name, dict(arguments), "input_required", requests,
                result.request_state,
            )  # fmt: skip
            return await answer_input_request(request, ctx)
        return tool_output(name, result)

    async def status(
        self, servers: Sequence[McpServer], *, within_s: float | None = None
    ) -> list[McpStatus]:
        """What this worker knows of ``servers``; with ``within_s``, each one's tools are
        listed first (from the cache when fresh), each wait bounded by it."""
        if within_s is not None and servers:

            async def check(server: McpServer) -> None:
                if server.auth is not None:
                    await self._probe(server, within_s)
                    return
                try:
                    async with asyncio.timeout(within_s):
                        await self.toolset(server)
                except (McpUnavailableError, TimeoutError):
                    pass  # the status says so

            await asyncio.gather(*(check(server) for server in servers))
        return [self._status(server) for server in servers]

    def _status(self, server: McpServer) -> McpStatus:
        from parkway.runner.mcp.connection import McpStatus

        if server.auth is None:
            return self.connection(server).status(server.name)
        probed = self._probes.get(server.connection_key)
        if probed is None:
            return McpStatus(server.name, server.transport, None)
        return dataclasses.replace(probed[1], server=server.name)

    async def _probe(self, server: McpServer, within_s: float) -> None:
        """Whether a server that needs OAuth is there: its tools are listed with each
        user's token only, so a session without one is opened, and the server's 401 says
        it answers. At most once per :data:`_PROBE_S` per server."""
        probed = self._probes.get(server.connection_key)
        if probed is not None and self.clock() - probed[0] < _PROBE_S:
            return
        from parkway.runner.mcp.connection import McpConnection, McpStatus

        auth = BearerAuth()
        probe = McpConnection(server, environ=self.environ, clock=self.clock, retry_s=0, auth=auth)
        try:
            async with asyncio.timeout(within_s):
                await probe.listing(0)
            status = McpStatus(server.name, server.transport, True)  # (it let us in)
        except McpAuthRequired:
            status = McpStatus(server.name, server.transport, True)
        except McpUnavailableError as exc:
            refused = auth.refused  # its 401: it is there, and asks each user to sign in
            status = McpStatus(
                server.name, server.transport, refused, None if refused else exc.reason
            )
        except TimeoutError:
            status = McpStatus(
                server.name, server.transport, False, f"no answer within {within_s:g} s"
            )
        finally:
            await probe.aclose()
        self._probes[server.connection_key] = (self.clock(), status)
        while len(self._probes) > 4 * self.max_sessions:
            self._probes.pop(next(iter(self._probes)))

    async def aclose(self) -> None:
        """Close every session (stdio servers' processes end with them)."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(
            *(c.aclose() for c in connections), *self._closing, return_exceptions=True
        )
