"""Parkway's transport: the AI SDK UI message stream encoder, HTTP routes, app and CLI.

The face imports its names on first use (PEP 562's module ``__getattr__``): the console
script's module, ``parkway.transport.cli``, lives in this package, and importing the
whole runtime (the engine, pydantic-ai, the MCP SDK) for ``parkway --help`` took seconds.
``from parkway.transport import create_app`` works as before; type checkers read the
imports below.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
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

# The module each public name comes from.
_HOMES = {
    "WIDGET_PART": "parkway.transport.aisdk",
    "Chunk": "parkway.transport.aisdk",
    "encode_event": "parkway.transport.aisdk",
    "Authenticator": "parkway.transport.api",
    "SessionAuthenticator": "parkway.transport.api",
    "create_app": "parkway.transport.app",
    "Identity": "parkway.transport.auth",
    "HTTPError": "parkway.transport.errors",
    "parkway_lifespan": "parkway.transport.lifecycle",
    "Settings": "parkway.transport.settings",
    "SettingsError": "parkway.transport.settings",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # bound once: later reads do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
