"""Building and serving the OpenAPI document (private to :mod:`parkway.transport.openapi`)."""

from __future__ import annotations

import json
import threading
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from parkway.transport.openapi._build import build_document
from parkway.transport.openapi._paths import OPERATIONS
from parkway.transport.settings import Settings

__all__ = ["openapi_document", "openapi_json"]

_CACHE: dict[tuple[bool, ...], bytes] = {}
_LOCK = threading.Lock()


def openapi_document(settings: Settings) -> dict[str, Any]:
    """The document for an app built with ``settings``."""
    return json.loads(_document_bytes(settings))  # type: ignore[no-any-return]


def _document_bytes(settings: Settings) -> bytes:
    variant = tuple(op.when(settings) for op in OPERATIONS if op.when is not None)
    with _LOCK:
        cached = _CACHE.get(variant)
        if cached is None:
            document = build_document(OPERATIONS, settings)
            cached = _CACHE[variant] = json.dumps(document, separators=(",", ":")).encode()
    return cached


async def openapi_json(request: Request) -> Response:
    """``GET /openapi.json``: public, and built once per variant of the settings (and
    mount prefix)."""
    state = request.app.state
    prefix = str(request.scope.get("root_path", "")).rstrip("/")
    cached: dict[str, bytes] | None = getattr(state, "openapi", None)
    if cached is None:
        cached = state.openapi = {}
    body = cached.get(prefix)
    if body is None:
        body = _document_bytes(state.settings)
        if prefix:
            document = json.loads(body)
            document["servers"] = [{"url": prefix}]
            body = json.dumps(document, separators=(",", ":")).encode()
        cached[prefix] = body
    return Response(body, media_type="application/json")
