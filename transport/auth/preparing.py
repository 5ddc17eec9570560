"""Awaiting an authenticator's I/O before a route runs.

An :class:`~parkway.transport.api.Authenticator` answers synchronously, from what it
already holds: routes and the connect flow call it inline. One that must fetch something
first (the JWT authenticator's keys) also defines ``async prepare(conn)``, and this
middleware awaits it for every HTTP request before the app sees it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["PrepareIdentity", "Preparing"]


@runtime_checkable
class Preparing(Protocol):
    """An authenticator with I/O to do before it can answer for a request."""

    async def prepare(self, conn: HTTPConnection) -> None: ...


class PrepareIdentity:
    """Awaits ``authenticator.prepare`` for each HTTP request, when it has one."""

    def __init__(self, app: ASGIApp, authenticator: object) -> None:
        self.app = app
        self.authenticator = authenticator if isinstance(authenticator, Preparing) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.authenticator is not None and scope["type"] == "http":
            await self.authenticator.prepare(HTTPConnection(scope))
        await self.app(scope, receive, send)
