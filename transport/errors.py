"""HTTP errors: every failure leaves as JSON ``{"error": {"code", "message"}}``.

The tree::

    HTTPError            an error with a status, a stable code and a safe message

Runner errors are mapped to statuses by :func:`status_for`; anything unexpected
becomes a 500 whose message carries only a reference to the server log, never the
exception's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from parkway.runner.errors import (
    AnswerMismatchError,
    ApprovalByOthersError,
    ArtifactNotFoundError,
    CallerError,
    CallNotFoundError,
    ChatNotFoundError,
    ConflictError,
    EditingDisabledError,
    InvalidOutcomeError,
    NotPlainJSONError,
    OutcomeNotAllowedError,
    ParkwayError,
    QuotaExceededError,
    ShuttingDownError,
    StateError,
    TemplateError,
)
from parkway.runner.validation import describe_first_error

__all__ = ["HTTPError", "invalid_body", "redis_unavailable", "status_for"]


class HTTPError(Exception):
    """An error answer: status, machine-readable code, message safe to show."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


REDIS_RETRY_AFTER_S = 2


def redis_unavailable() -> HTTPError:
    """The answer while Redis cannot be reached (or this worker has no free connection
    to it within the pool's wait, or its client's breaker knows Redis is away and
    refused the command unsent): nothing was changed; send the request again."""
    return HTTPError(
        503,
        "redis_unavailable",
        "the server's store is unavailable; nothing was changed, try again shortly",
        headers={"retry-after": str(REDIS_RETRY_AFTER_S)},
    )


def status_for(exc: ParkwayError) -> int:
    if isinstance(exc, ChatNotFoundError | CallNotFoundError | ArtifactNotFoundError):
        return 404
    if isinstance(exc, OutcomeNotAllowedError | EditingDisabledError | ApprovalByOthersError):
        return 403
    if isinstance(exc, AnswerMismatchError):
        return 409
    if isinstance(exc, InvalidOutcomeError | TemplateError | NotPlainJSONError):
        return 422
    if isinstance(exc, CallerError):
        return 400
    if isinstance(exc, QuotaExceededError):
        return 429
    if isinstance(exc, ShuttingDownError):
        return 503
    if isinstance(exc, ConflictError | StateError):
        return 409
    return 500


def invalid_body(exc: ValidationError) -> HTTPError:
    """A 422 naming the first problem of a body that failed its model. Field names come
    from the body, so each is cut short: an unknown 1 MB key is not sent back."""
    return HTTPError(422, "invalid_body", describe_first_error(exc, root="body"))
