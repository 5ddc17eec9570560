"""The routes ``transport`` mounts for widgets_api: the playground and the connect flow."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute

from parkway.widgets_api.connect import connect_routes
from parkway.widgets_api.playground import page_routes

__all__ = ["widget_routes"]


def widget_routes(embed_origins: Sequence[str] = (), *, auth: str = "session") -> list[BaseRoute]:
    """Routes that ``transport`` mounts: the playground page at ``/`` and its files, and
    the connect flow. ``embed_origins`` may frame the page; ``auth`` tells it how the
    server knows its users (see :func:`page_routes`)."""
    return [*page_routes(embed_origins, auth=auth), *connect_routes()]
