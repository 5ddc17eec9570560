"""Parkway's transport: the AI SDK UI message stream encoder, HTTP routes, app and CLI."""

from transport.app import create_app
from transport.chunks import Chunk
from transport.encoder import WIDGET_PART, encode_event
from transport.errors import HTTPError
from transport.sessions import Authenticator, SessionAuthenticator
from transport.settings import Secret, Settings, SettingsError

__all__ = [
    "WIDGET_PART",
    "Authenticator",
    "Chunk",
    "HTTPError",
    "Secret",
    "SessionAuthenticator",
    "Settings",
    "SettingsError",
    "create_app",
    "encode_event",
]
