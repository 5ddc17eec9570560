"""Log lines: the JSON and text formatters, and the logging configuration of ``parkway
serve``.

Only the CLI configures logging (:func:`logging_config`, applied with ``dictConfig``);
everything else logs through ``logging.getLogger(__name__)``. Every line goes to standard
error: Parkway's, uvicorn's own (``uvicorn.error``) and uvicorn's access log
(``uvicorn.access``), in one format:

- ``json``: one JSON object per line, for log collectors (:class:`JsonFormatter`);
- ``text``: ``<time> <LEVEL> <logger>: <message>`` with the bound fields appended, for
  people at a terminal (:class:`TextFormatter`);
- ``auto`` (the default): text when standard error is a terminal, JSON otherwise.

What a line is about (chat, run, call, principal) comes from
:mod:`parkway.runner.ops.logcontext`, read when the line is formatted, which is when it is
logged: a ``StreamHandler`` formats in the thread and task that log.

A line says what happened, never what was said, sent or returned (docs/security.md):
Parkway's own lines name ids, never content; the libraries that echo payloads below
WARNING (sse-starlette's every chunk, the HTTP clients' URLs and headers, the demo OAuth
server's tokens, the model SDKs' requests) are held at WARNING whatever the level
(:data:`QUIET_LOGGERS`), and no other library logs below INFO: ``--log-level debug`` is
Parkway's debug, not every library's. A traceback shows each exception's type and
frames, never its message (:func:`traceback_text`).

Access lines never carry a query string. A query may hold secrets: a connect callback's
authorization ``code`` and ``state``, a connect start link's one-time token, the demo
provider's ``state`` and PKCE challenge. JSON drops the query; text shows
``?[redacted]`` in its place.

A formatter never raises: a record whose arguments do not fit its message still gives
one line (the message unformatted, and why), where ``logging`` would print a traceback
of its own on standard error, which no JSON reader expects.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from contextvars import ContextVar
from dataclasses import dataclass
from typing import IO, Any, Final, Literal

from starlette.types import ASGIApp, Receive, Scope, Send

from parkway.runner.ops import logcontext

__all__ = [
    "QUIET_LOGGERS",
    "WITHHELD",
    "AccessTiming",
    "JsonFormatter",
    "LogFormat",
    "StampDuration",
    "TextFormatter",
    "logging_config",
    "resolve_format",
    "traceback_text",
]

LogFormat = Literal["auto", "json", "text"]

ACCESS_LOGGER: Final = "uvicorn.access"
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries whose lines below WARNING echo what passes through them; held at WARNING
# whatever the log level (docs/security.md, "What the log never holds"):
QUIET_LOGGERS: Final = (
    # every chunk of a stream at DEBUG ("chunk: b'data: ...'"): message text, tool
    # inputs and outputs, program output
    "sse_starlette",
    # full URLs at INFO ("HTTP Request: GET <url>"): a provider's URL may carry a key in
    # its query (httpx2 is the fork the model SDKs use)
    "httpx",
    "httpx2",
    # each response's headers at DEBUG: a provider's Set-Cookie, its request ids
    "httpcore",
    "httpcore2",
    # the OAuth server of the demo provider: its grants log issued tokens at DEBUG
    "authlib",
    # the model SDKs: the request options (the whole conversation), response headers
    # and streamed chunks at DEBUG
    "anthropic",
    "openai",
    "google_genai",
)
# The most any other library logs: ``--log-level debug`` is Parkway's own debug (and
# uvicorn's), never a library's, whose DEBUG lines are where payloads get dumped.
_LIBRARY_FLOOR: Final = "INFO"

# When the app began the current HTTP request (time.monotonic()), for the access line.
_request_started: ContextVar[float | None] = ContextVar("parkway_request_started", default=None)


def resolve_format(log_format: LogFormat, stream: IO[str]) -> Literal["json", "text"]:
    """``auto`` as text for a terminal, JSON for anything else (a file, a pipe, a log
    collector); ``json`` and ``text`` as they are."""
    if log_format != "auto":
        return log_format
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return "json"


def logging_config(log_format: Literal["json", "text"], level: str) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of ``parkway serve``: one handler on standard
    error with the chosen formatter; Parkway's loggers (``parkway.*``) and uvicorn's at
    ``level``, which propagate to it (give uvicorn ``log_config=None`` so it does not
    install its own handlers); every other library at ``level`` but never below INFO,
    and the :data:`QUIET_LOGGERS` at WARNING whatever ``level`` says."""
    level = level.upper()
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    library_level = _LIBRARY_FLOOR if level == "DEBUG" else level
    quiet_level = "WARNING" if level in {"DEBUG", "INFO", "WARNING"} else level
    return {
        "version": 1,
        # loggers made at import time (every module's `log`) must keep working
        "disable_existing_loggers": False,
        "formatters": {"parkway": {"()": f"{formatter.__module__}.{formatter.__qualname__}"}},
        "filters": {"duration": {"()": f"{StampDuration.__module__}.{StampDuration.__qualname__}"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "parkway",
            }
        },
        "loggers": {
            "parkway": {"level": level, "handlers": [], "propagate": True},
            # uvicorn's loggers: no handlers of their own, lines go to the root's
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level, "handlers": [], "propagate": True},
            ACCESS_LOGGER: {
                "level": level,
                "handlers": [],
                "propagate": True,
                "filters": ["duration"],
            },
            **{name: {"level": quiet_level} for name in QUIET_LOGGERS},
        },
        "root": {"level": library_level, "handlers": ["stderr"]},
    }


# -- what a record says -------------------------------------------------------------------


@dataclass(frozen=True)
class _Access:
    """An access line of uvicorn: ``'%s - "%s %s HTTP/%s" %d'`` and its five arguments."""

    client: str
    method: str
    path: str  # without the query string
    had_query: bool
    http_version: str
    status: int

    @classmethod
    def of(cls, record: logging.LogRecord) -> _Access | None:
        args = record.args
        if record.name != ACCESS_LOGGER or not isinstance(args, tuple) or len(args) != 5:
            return None
        client, method, full_path, http_version, status = args
        if not isinstance(status, int):
            return None
        path, mark, _ = str(full_path).partition("?")
        return cls(str(client), str(method), path, bool(mark), str(http_version), status)

    def text(self) -> str:
        """uvicorn's message, with the query string redacted."""
        path = f"{self.path}?[redacted]" if self.had_query else self.path
        return f'{self.client} - "{self.method} {path} HTTP/{self.http_version}" {self.status}'


def _message(record: logging.LogRecord) -> tuple[str, str | None]:
    """The record's message, and why it could not be formatted (None when it could)."""
    try:
        return record.getMessage(), None
    except Exception as exc:  # a log call whose arguments do not fit its message
        try:
            template = str(record.msg)
        except Exception:
            template = f"<unprintable {type(record.msg).__name__}>"
        where = f"{record.pathname}:{record.lineno}"
        return template, f"{type(exc).__name__}: the arguments do not fit the message ({where})"


def _context() -> dict[str, str]:
    """The bound fields, in :data:`~parkway.runner.ops.logcontext.FIELDS` order."""
    fields = logcontext.current()
    return {name: fields[name] for name in logcontext.FIELDS if fields.get(name)}


class StampDuration(logging.Filter):
    """Stamps an access record with ``duration_ms``: from the request reaching the app
    (:class:`AccessTiming`) to this line, which uvicorn logs as the response's status and
    headers go out (for a stream: as it starts)."""

    def filter(self, record: logging.LogRecord) -> bool:
        started = _request_started.get()
        if started is not None:
            record.duration_ms = round((time.monotonic() - started) * 1000, 1)
        return True


class AccessTiming:
    """ASGI wrapper noting when each HTTP request reaches the app, for
    :class:`StampDuration` (a context variable: the access line is logged in the
    request's task)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _request_started.set(time.monotonic())
        try:
            await self.app(scope, receive, send)
        finally:
            _request_started.reset(token)


# -- tracebacks ------------------------------------------------------------------------------

WITHHELD: Final = "[message withheld]"
_CAUSE: Final = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT: Final = "\nDuring handling of the above exception, another exception occurred:\n\n"


def traceback_text(exc_info: Any) -> str:
    """A traceback as Python prints one (the frames, the chained exceptions, the members
    of a group), each exception shown by its type alone, its message withheld: a message
    may hold what the code was handling (a tool's input in ``ValueError(f"no such city:
    {city}")``, pydantic's ``input_value=...``), and a log line never carries that.
    Written here rather than with ``traceback.TracebackException`` because that class
    keeps no way to leave the message out but its private fields."""
    exc = exc_info[1] if isinstance(exc_info, tuple) else None
    if not isinstance(exc, BaseException):
        return "NoneType: None"
    return "".join(_exception_lines(exc, set())).rstrip("\n")


def _exception_lines(exc: BaseException, seen: set[int]) -> list[str]:
    seen.add(id(exc))
    lines: list[str] = []
    cause, context = exc.__cause__, exc.__context__
    if cause is not None and id(cause) not in seen:
        lines += [*_exception_lines(cause, seen), _CAUSE]
    elif context is not None and not exc.__suppress_context__ and id(context) not in seen:
        lines += [*_exception_lines(context, seen), _CONTEXT]
    if exc.__traceback__ is not None:
        lines += ["Traceback (most recent call last):\n", *traceback.format_tb(exc.__traceback__)]
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ not in {"builtins", "__main__"}:
        name = f"{kind.__module__}.{name}"
    lines.append(f"{name}: {WITHHELD}\n" if exc.args else f"{name}\n")
    if isinstance(exc, BaseExceptionGroup):
        for number, inner in enumerate(exc.exceptions, 1):
            if id(inner) in seen:
                continue
            lines.append(f"+---------------- {number} ----------------\n")
            inner_text = "".join(_exception_lines(inner, seen))
            lines += [f"    {line}" for line in inner_text.splitlines(keepends=True)]
    return lines


# -- the formatters -------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: ``ts`` (RFC 3339, UTC, milliseconds),
    ``level``, ``logger``, ``message``; the bound fields (``chat_id``, ``run_id``,
    ``call_id``, ``principal`` as its hash); ``exc`` (the traceback) and ``stack`` when
    the record has them; for an access line ``method``, ``path`` (no query string),
    ``status``, ``client``, ``http_version`` and ``duration_ms``.

    Non-ASCII text is escaped (``\\u00e9``): the line is plain ASCII, valid whatever
    the stream's encoding, and JSON readers give the text back unchanged.
    """

    def formatException(self, ei: Any) -> str:
        return traceback_text(ei)

    def format(self, record: logging.LogRecord) -> str:
        message, problem = _message(record)
        entry: dict[str, Any] = {
            "ts": _rfc3339(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": message,
        }
        access = _Access.of(record)
        if access is not None:
            entry["message"] = f"{access.method} {access.path} {access.status}"
            entry.update(
                method=access.method,
                path=access.path,
                status=access.status,
                client=access.client,
                http_version=access.http_version,
            )
            duration = getattr(record, "duration_ms", None)
            if isinstance(duration, int | float):
                entry["duration_ms"] = duration
        if problem is not None:
            entry["format_error"] = problem
        entry.update(_context())
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
            entry["exc"] = record.exc_text
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=True, default=str, separators=(",", ":"))


def _rfc3339(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message>``, then the bound fields as ``name=value``
    when there are any, then the traceback on the lines below."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatException(self, ei: Any) -> str:
        return traceback_text(ei)

    def format(self, record: logging.LogRecord) -> str:
        message, problem = _message(record)
        access = _Access.of(record)
        record.message = access.text() if access is not None else message
        if problem is not None:
            record.message = f"{record.message} [{problem}]"
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        fields = _context()
        if fields:
            line += " " + " ".join(f"{name}={value}" for name, value in fields.items())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line
