"""Parkway's transport: the AI SDK UI message stream encoder, HTTP routes, app and CLI."""

from parkway.transport.aisdk import WIDGET_PART, Chunk, encode_event
from parkway.transport.api import Authenticator, SessionAuthenticator
from parkway.transport.app import create_app
from parkway.transport.auth import Identity
from parkway.transport.errors import HTTPError
from parkway.transport.lifecycle import parkway_lifespan
from parkway.transport.settings import Settings, SettingsError

__all__ = [
    "WIDGET_PART",
    "Authenticator",
    "Chunk",
    "HTTPError",
    "Identity",
    "SessionAuthenticator",
    "Settings",
    "SettingsError",
    "create_app",
    "encode_event",
    "parkway_lifespan",
]
