"""Reserved workflows that an ``@ag.embed`` reference may name.

The embed resolver inlines a reserved slug into the tool entry it stands for. The
connect flow is a client tool: it has no server-side execute, because a successful
connection is recorded by the server's OAuth callback, never by the model or the browser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["REQUEST_CONNECTION", "RESERVED_WORKFLOWS"]

REQUEST_CONNECTION = "request_connection"


def _request_connection() -> Mapping[str, Any]:
    return {
        "type": "client",
        "name": REQUEST_CONNECTION,
        "description": (
            "Ask the user to connect an account with an external provider (OAuth). "
            "Returns a reference to the connection, never a credential."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "provider": {"type": "string", "minLength": 1, "maxLength": 64},
                "scopes": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
                "reason": {"type": "string", "maxLength": 1000},
            },
            "required": ["provider"],
            "additionalProperties": False,
        },
        "output_schema": {
            "type": "object",
            "properties": {
                "connected": {"type": "boolean"},
                "provider": {"type": "string"},
                "connection_id": {"type": "string"},
                "account": {"type": "string"},
                "scopes": {"type": "array", "items": {"type": "string"}},
                "reason": {"type": "string"},
                "retryable": {"type": "boolean"},
                "message": {"type": "string"},
            },
            "required": ["connected"],
        },
        "render": {"kind": "connect"},
        "deadline_s": 600.0,
    }


RESERVED_WORKFLOWS: dict[str, Callable[[], Mapping[str, Any]]] = {
    "__ag__request_connection": _request_connection,
}
