"""The HTTP edge every request passes: the origin guard against cross-site request
forgery, the error handlers (a JSON error with the right status, never a stack trace or
an internal exception's text), the access log's redaction of OAuth callbacks, and what a
401 tells the client to do."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from parkway.runner.errors import ParkwayError, QuotaExceededError, SettleConflictError
from parkway.runner.ops import REDIS_ERRORS
from parkway.runner.store import RedisUnavailableError, is_redis_outage
from parkway.transport.api import Authenticator, SessionAuthenticator
from parkway.transport.auth import HeaderAuthenticator, JwtAuthenticator
from parkway.transport.errors import HTTPError, redis_unavailable, status_for
from parkway.transport.settings import Settings
from parkway.widgets_api.connect import DEMO_MOUNT

__all__ = [
    "OriginGuard",
    "RedactCallbackQuery",
    "exception_handlers",
    "redact_access_log",
    "unauthenticated_hint",
]

log = logging.getLogger(__name__)

_STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}


class OriginGuard:
    """Refuses state-changing requests whose ``Origin`` is not allowed.

    Threat answered: cross-site request forgery with the session cookie. The default
    allowed origin is the server's own (``public_url``, else the request's own host);
    more come from ``allowed_origins``. Requests without ``Origin`` pass: browsers send
    ``Origin`` on every cross-origin POST, so a request without it is not a forged
    browser request riding on the cookie.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in _STATE_CHANGING
            # The demo provider's consent form posts with ``Origin: null`` (its page is
            # no-referrer) and guards itself: a one-time consent record bound to a
            # SameSite=Strict browser cookie. Its token endpoint is called server-side.
            # (The path inside a host's mount: ``/pw/demo-oauth/...`` is ``/demo-oauth/...``.)
            and not get_route_path(scope).startswith(f"{DEMO_MOUNT}/")
        ):
            headers = dict(scope["headers"])
            origin = headers.get(b"origin")
            if origin is not None and not self._allowed(origin.decode("latin-1"), scope, headers):
                error = HTTPError(
                    403, "origin_not_allowed", "requests from this origin are not allowed"
                )
                await JSONResponse(error.body(), status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        origin = origin.lower().rstrip("/")
        if origin in self.settings.allowed_origins:
            return True
        if self.settings.public_url is not None:
            own = self.settings.public_url.lower().rstrip("/")
        else:
            host = headers.get(b"host", b"").decode("latin-1").lower()
            own = f"{scope.get('scheme', 'http')}://{host}"
        return origin == own


async def _parkway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ParkwayError)
    extra: dict[str, Any] = {}
    if isinstance(exc, SettleConflictError):
        extra["outcome"] = exc.existing
    if isinstance(exc, QuotaExceededError):  # which quota, and its value
        extra.update(quota=exc.quota, limit=exc.limit)
    error = HTTPError(status_for(exc), exc.code, str(exc), **extra)
    if error.status == 500:
        return await _unexpected(request, exc)
    return JSONResponse(error.body(), status_code=error.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPError)
    # A 408 leaves a trickling body unread: close the connection rather than wait for
    # it. A 413 does not: closing while an honest client is still sending its body
    # makes its kernel reset the connection, and the client never reads the answer.
    # uvicorn reads and drops the rest instead; `parkway serve` bounds how long with its
    # header timeout (transport/serving.py), which runs from the answer on.
    headers = dict(exc.headers)
    if exc.status == 408:
        headers["connection"] = "close"
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    if is_redis_outage(exc):
        return await _redis_down(request, exc)
    ref = secrets.token_hex(4)
    log.error(
        "unhandled error (ref %s) on %s %s", ref, request.method, request.url.path, exc_info=exc
    )
    error = HTTPError(500, "internal_error", f"internal error (reference {ref})")
    return JSONResponse(error.body(), status_code=500)


async def _redis_down(request: Request, exc: Exception) -> Response:
    REDIS_ERRORS.labels("http").inc()
    # A request refused by the open breaker is one of many during an outage, which the
    # breaker logged once when it opened (runner/store/breaker.py).
    level = logging.DEBUG if isinstance(exc, RedisUnavailableError) else logging.WARNING
    log.log(level, "Redis unavailable on %s %s: %s", request.method, request.url.path, exc)
    return await _http_error(request, redis_unavailable())


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    codes = {404: "not_found", 405: "method_not_allowed"}
    error = HTTPError(status, codes.get(status, "http_error"), str(getattr(exc, "detail", "")))
    return JSONResponse(error.body(), status_code=status)


class RedactCallbackQuery(logging.Filter):
    """Keeps OAuth codes and states out of the access log: uvicorn logs each request's
    path with its query string, and a connect callback's query holds both."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path = args[2]
            # (under a host's mount prefix too: ``/pw/connect/...``)
            if "/connect/" in path.split("?", 1)[0] and "?" in path:
                record.args = (*args[:2], path.split("?", 1)[0] + "?[redacted]", *args[3:])
        return True


_ACCESS_FILTER = RedactCallbackQuery()


def redact_access_log() -> None:
    """Put the callback-query redaction on uvicorn's access log (once)."""
    access_log = logging.getLogger("uvicorn.access")
    if _ACCESS_FILTER not in access_log.filters:
        access_log.addFilter(_ACCESS_FILTER)


def exception_handlers() -> dict[Any, Any]:
    """Every error a route raises, as a JSON error with its status: Parkway's own, HTTP
    ones, Redis unreachable (503), unknown paths and methods, and anything else (500,
    with a reference to the log, never the exception's text)."""
    return {
        ParkwayError: _parkway_error,
        HTTPError: _http_error,
        # Redis unreachable, or no free connection within the pool's wait: 503.
        RedisConnectionError: _redis_down,
        RedisTimeoutError: _redis_down,
        404: _not_found,
        405: _not_found,
        Exception: _unexpected,
    }


def unauthenticated_hint(authenticator: Authenticator) -> str | None:
    """What a 401 tells the client to do, when it is not "get a session"."""
    if isinstance(authenticator, JwtAuthenticator):
        return "no valid bearer token: send 'Authorization: Bearer <JWT>' from your sign-in"
    if isinstance(authenticator, HeaderAuthenticator):
        return "no identity: requests must come through the authenticating proxy"
    if not isinstance(authenticator, SessionAuthenticator):  # the host application's own
        return "not signed in: sign in to the application that serves this API"
    return None
