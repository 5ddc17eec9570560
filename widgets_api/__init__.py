"""Widgets: descriptors for parked calls, the OAuth connect flow, the build-kit overlay,
and the pages the browser sees.

Imports ``runner``; never imported by it, and never imports ``transport``.
"""

from parkway.widgets_api.connect import (
    ConnectFlow,
    Connection,
    ConnectionStore,
    Provider,
    ProviderConfigError,
    ProviderRegistry,
    TokenCipher,
    connect_routes,
    outcome_summary,
)
from parkway.widgets_api.descriptors import describe_call
from parkway.widgets_api.playground import OverlayMerge, entry_identity, merge_overlay, page_routes
from parkway.widgets_api.routes import widget_routes

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
