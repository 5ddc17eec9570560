"""Widgets: descriptors for parked calls, the OAuth connect flow, the build-kit overlay,
and the pages the browser sees.

Imports ``runner``; never imported by it, and never imports ``transport``.
"""

from starlette.routing import BaseRoute

from parkway.widgets_api.connect import ConnectFlow, connect_routes, outcome_summary
from parkway.widgets_api.connect.connections import Connection, ConnectionStore
from parkway.widgets_api.descriptors import describe_call
from parkway.widgets_api.playground.overlay import OverlayMerge, entry_identity, merge_overlay
from parkway.widgets_api.playground.page import page_routes
from parkway.widgets_api.connect.providers import Provider, ProviderConfigError, ProviderRegistry
from parkway.widgets_api.connect.cipher import TokenCipher

__all__ = [
    "ConnectFlow",
    "Connection",
    "ConnectionStore",
    "OverlayMerge",
    "Provider",
    "ProviderConfigError",
    "ProviderRegistry",
    "TokenCipher",
    "connect_routes",
    "describe_call",
    "entry_identity",
    "merge_overlay",
    "outcome_summary",
    "page_routes",
    "widget_routes",
]


def widget_routes() -> list[BaseRoute]:
    """Routes that ``transport`` mounts: the playground page at ``/`` and its files, and
    the connect flow."""
    return [*page_routes(), *connect_routes()]
