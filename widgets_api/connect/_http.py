"""HTTP helpers of the connect flow's JSON endpoints: the error body and the small body
of ``POST /connect/{provider}/use`` and ``POST /connect/{provider}/ticket``.

Bodies are read by the server's one body reader, which ``transport`` puts at
``app.state.reader`` (this package never imports ``transport``): its size limit holds
while reading, it times out a trickling client, and it refuses malformed JSON (deep
nesting, lone surrogates, bad UTF-8) with the server's usual 4xx error body.
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["USE_BODY_LIMIT", "BodyReader", "json_error", "read_ticket_body", "read_use_body"]

# {chatId, toolCallId, connectionId}: three short ids fit in far less.
USE_BODY_LIMIT = 4096


class BodyReader(Protocol):
    """What the connect flow needs of ``app.state.reader``."""

    async def json(self, request: Request, *, limit: int | None = None) -> Any: ...


def json_error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status)


async def read_use_body(request: Request) -> tuple[str, str, str] | None:
    """``(chatId, toolCallId, connectionId)``, or ``None`` for JSON of any other shape.
    A body that is not JSON, too large or too slow is refused by the reader (4xx)."""
    reader: BodyReader = request.app.state.reader
    data = await reader.json(request, limit=USE_BODY_LIMIT)
    if not isinstance(data, dict) or set(data) != {"chatId", "toolCallId", "connectionId"}:
        return None
    values = (data["chatId"], data["toolCallId"], data["connectionId"])
    if not all(isinstance(v, str) and 0 < len(v) <= 256 for v in values):
        return None
    return values[0], values[1], values[2]


async def read_ticket_body(request: Request) -> tuple[str, str, bool] | None:
    """``(chatId, toolCallId, retry)`` of a ticket request (``retry`` optional, a
    boolean), or ``None`` for JSON of any other shape."""
    reader: BodyReader = request.app.state.reader
    data = await reader.json(request, limit=USE_BODY_LIMIT)
    if not isinstance(data, dict) or not {"chatId", "toolCallId"} <= set(data):
        return None
    if set(data) - {"chatId", "toolCallId", "retry"}:
        return None
    ids = (data["chatId"], data["toolCallId"])
    retry = data.get("retry", False)
    if not all(isinstance(v, str) and 0 < len(v) <= 256 for v in ids) or not isinstance(
        retry, bool
    ):
        return None
    return ids[0], ids[1], retry
