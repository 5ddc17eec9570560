"""Widgets: descriptors for parked calls, and the pages the browser sees.

Imports ``runner``; never imported by it.
"""

from starlette.routing import Route

from widgets_api.descriptors import describe_call
from widgets_api.page import index

__all__ = ["describe_call", "widget_routes"]


def widget_routes() -> list[Route]:
    """Routes that ``transport`` mounts: the page at ``/``."""
    return [Route("/", index, methods=["GET"])]
