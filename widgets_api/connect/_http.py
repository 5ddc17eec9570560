"""HTTP helpers of the connect flow's JSON endpoints: the error body and the small body
of ``POST /connect/{provider}/use``."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["json_error", "read_use_body"]


def json_error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status)


async def read_use_body(request: Request) -> tuple[str, str, str] | None:
    """``(chatId, toolCallId, connectionId)``, or ``None`` for any other body."""
    body = await request.body()
    if len(body) > 4096:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or set(data) != {"chatId", "toolCallId", "connectionId"}:
        return None
    values = (data["chatId"], data["toolCallId"], data["connectionId"])
    if not all(isinstance(v, str) and 0 < len(v) <= 256 for v in values):
        return None
    return values[0], values[1], values[2]
