"""Credentials: how a server tool uses a connection without ever holding its secrets.

A ``request_connection`` result names a connection (``connection_id``); a server tool
that needs the provider's access token asks the runtime for it by that reference through
:meth:`parkway.runner.agent.tools.ToolContext.access_token`. The runner only defines the interface;
the connection store that implements it (encrypted tokens, refresh under a lock) lives
with the connect flow in ``widgets_api``. Tokens go to the tool's code, never into a tool
result, the history or the model's input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from parkway.runner.errors import ToolError

__all__ = ["ConnectionUnavailableError", "Credentials", "UnavailableReason"]

UnavailableReason = Literal["not_found", "needs_reconnect", "missing_scope", "provider_error"]


class ConnectionUnavailableError(ToolError):
    """The connection cannot give a token now. The message (which the model sees) says
    what to do: connect again, ask for a wider scope, or try later."""

    def __init__(self, message: str, *, reason: UnavailableReason, provider: str | None) -> None:
        super().__init__(message)
        self.reason = reason
        self.provider = provider


class Credentials(Protocol):
    """Looks up a principal's connection and returns a usable access token."""

    async def access_token(
        self, principal: str, connection_id: str, *, scopes: Sequence[str] = ()
    ) -> str:
        """A valid access token for ``connection_id`` (refreshed if needed), granted at
        least ``scopes``. Raises :class:`ConnectionUnavailableError`."""
        ...

    def provider_issuer(self, provider: str) -> str | None:
        """The issuer of the configured provider ``provider``; None when there is no
        such provider (or it has no issuer: it cannot vouch for an MCP server)."""
        ...

    async def resource_connection(self, principal: str, provider: str, resource: str) -> str | None:
        """The id of ``principal``'s usable connection with ``provider`` whose tokens
        were issued for ``resource`` (an MCP server's canonical URL), or None."""
        ...

    async def resource_token(self, principal: str, connection_id: str, resource: str) -> str:
        """:meth:`access_token` for a connection issued for ``resource`` only: a
        connection issued for anything else (another server, no resource) is refused
        (``not_found``), so a token never reaches a server it was not issued for.
        Raises :class:`ConnectionUnavailableError`."""
        ...
