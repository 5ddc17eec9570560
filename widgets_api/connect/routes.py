"""The connect flow's Starlette routes. They find the flow at ``app.state.connect`` and
answer 404 when the server has no OAuth providers configured."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from parkway.widgets_api.connect._http import json_error
from parkway.widgets_api.connect.flow import ConnectFlow
from parkway.widgets_api.connect.pages import connect_page

__all__ = ["connect_routes"]


def _flow(request: Request) -> ConnectFlow | None:
    flow: ConnectFlow | None = getattr(request.app.state, "connect", None)
    return flow


async def _start(request: Request) -> Response:
    flow = _flow(request)
    if flow is None:
        return connect_page(status=404, title="Not available", message="No providers.", ok=False)
    return await flow.start(request)


async def _callback(request: Request) -> Response:
    flow = _flow(request)
    if flow is None:
        return connect_page(status=404, title="Not available", message="No providers.", ok=False)
    return await flow.callback(request)


def _no_providers() -> Response:
    return json_error(404, "not_found", "this server has no OAuth providers configured")


async def _use(request: Request) -> Response:
    flow = _flow(request)
    return _no_providers() if flow is None else await flow.use(request)


async def _ticket(request: Request) -> Response:
    flow = _flow(request)
    return _no_providers() if flow is None else await flow.ticket(request)


async def _list_connections(request: Request) -> Response:
    flow = _flow(request)
    return _no_providers() if flow is None else await flow.list_connections(request)


async def _delete_connection(request: Request) -> Response:
    flow = _flow(request)
    return _no_providers() if flow is None else await flow.delete_connection(request)


def connect_routes() -> list[Route]:
    """The connect flow's routes; they find the flow at ``app.state.connect``."""
    return [
        Route("/connect/{provider}/start", _start, methods=["GET"]),
        Route("/connect/{provider}/callback", _callback, methods=["GET"]),
        Route("/connect/{provider}/use", _use, methods=["POST"]),
        Route("/connect/{provider}/ticket", _ticket, methods=["POST"]),
        Route("/api/connections", _list_connections, methods=["GET"]),
        Route("/api/connections/{connection_id}", _delete_connection, methods=["DELETE"]),
    ]
