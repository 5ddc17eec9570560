"""What every route does with a request before its own work: resolve the principal,
read the JSON body within the size limit, and report an invalid body."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request

from transport.errors import HTTPError
from transport.settings import Settings

__all__ = ["invalid_body", "principal_of", "read_json"]


def principal_of(request: Request) -> str:
    """The request's principal, or 401."""
    principal = request.app.state.authenticator.authenticate(request)
    if principal is None:
        raise HTTPError(
            401,
            "unauthenticated",
            "no valid session: POST /api/sessions first, then send "
            "the cookie or 'Authorization: Bearer <token>'",
        )
    return str(principal)


async def read_json(request: Request) -> Any:
    """The request body as JSON, refusing oversized or malformed bodies."""
    settings: Settings = request.app.state.settings
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, "body_too_large", f"the body exceeds {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise HTTPError(413, "body_too_large", f"the body exceeds {limit} bytes")
    if not body:
        raise HTTPError(400, "invalid_json", "the body is empty; send a JSON object")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise HTTPError(400, "invalid_json", "the body is not valid JSON") from None


def invalid_body(exc: ValidationError) -> HTTPError:
    """A 422 naming the first problem of a body that failed its model."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return HTTPError(422, "invalid_body", f"{where}: {first['msg']}")
