"""What every route does with a request before its own work: resolve the principal,
read the body within its limits, and report an invalid body.

Every body a route reads is read here, by the app's :class:`BodyReader`
(``app.state.reader``; ``widgets_api``, which never imports ``transport``, finds it there
too). Each limit answers a hostile client:

- size: reading stops as soon as the body passes the route's limit (413), whatever
  ``Content-Length`` says or whether it is sent at all; a declared length over the limit
  is refused before anything is read. A worker never holds more than the limit.
- time: the whole body must arrive within ``body_read_timeout_s`` (408, and the
  connection is closed), so a client trickling bytes cannot pin a request for ever.
- shape (JSON): strict UTF-8; at most ``max_json_depth`` levels of nesting, measured on
  the text before parsing so the parser never recurses deeply; no NaN or Infinity; no
  lone UTF-16 surrogate (an unpaired ``\\ud800``-``\\udfff`` escape) in any key or string,
  since such a string cannot be encoded to UTF-8 and would fail later in Redis or the
  model layer, after the request had already changed something (400 ``invalid_json``).

Parsing is orjson's where its answer is the standard parser's (most bodies: an AI SDK
chat POST resends the whole history, 76 KB at 200 messages, on every request), and the
checked standard parser's otherwise, so every error names the problem as it always did.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import secrets
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request

from parkway.runner.agent import AgentStore
from parkway.runner.canonical import has_long_digit_run
from parkway.runner.engine import Runner
from parkway.runner.ops import logcontext
from parkway.runner.store import check_chat_id
from parkway.transport.auth import identity_of
from parkway.transport.errors import HTTPError
from parkway.transport.settings import Settings

__all__ = [
    "EDITOR_TOKEN_HEADER",
    "BodyReader",
    "chat_id_of",
    "is_editor",
    "parse_json",
    "principal_of",
    "read_json",
    "roles_of",
    "runner_of",
]

EDITOR_TOKEN_HEADER = "x-parkway-editor-token"  # noqa: S105 - a header name, not a secret

# A JSON string token (escapes included), and the brackets left once strings are gone.
# Linear by construction: the quantifiers are possessive and a string left open runs to
# the end of the text, so a match that starts always succeeds. (Were an unclosed string
# a failed match, each escaped quote after it would start a new scan to the end: a
# 100 KB body of them would take seconds.)
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
# An escape that may decode to a surrogate (a valid pair decodes to one code point).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# For the fast path, on bytes: the nesting step of each bracket byte, the bytes that are
# neither a quote nor a bracket, and digits marked "1" among "0"s (an integer of 19 or
# more digits may not fit 64 bits, which orjson then reads as a float).
_BYTE_STEP = [0] * 256
_BYTE_STEP[ord("[")] = _BYTE_STEP[ord("{")] = 1
_BYTE_STEP[ord("]")] = _BYTE_STEP[ord("}")] = -1
_NOT_QUOTE_OR_BRACKET = bytes(b for b in range(256) if b not in b'"[]{}')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_FOLD_BRACES = bytes.maketrans(b"{}", b"[]")
# At most this many passes peel innermost bracket pairs before counting (_depth_of_valid).
_PEEL_PASSES = 8
_UNREAD = object()


def runner_of(request: Request) -> Runner:
    """The app's runner."""
    runner: Runner = request.app.state.runner
    return runner


def chat_id_of(request: Request, name: str = "chat_id") -> str:
    """The chat id in the path (``name``), checked (400 when malformed)."""
    value = request.path_params[name]
    check_chat_id(value)
    return str(value)


def principal_of(request: Request) -> str:
    """The request's principal, or 401. Its roles go to ``request.state.roles`` (see
    :func:`roles_of`). It is bound to the log context (as a hash), so the request's log
    lines, its access line and the runs it starts name it."""
    identity = identity_of(request.app.state.authenticator.authenticate(request))
    if identity is None:
        hint = getattr(request.app.state, "unauthenticated_hint", None)
        raise HTTPError(
            401,
            "unauthenticated",
            hint
            or "no valid session: POST /api/sessions first, then send "
            "the cookie or 'Authorization: Bearer <token>'",
        )
    request.state.principal = identity.principal
    request.state.roles = identity.roles
    logcontext.bind(principal=identity.principal)
    return identity.principal


def is_editor(request: Request, principal: str) -> bool:
    """Whether this request may commit the agent: editing is on, and its principal is an
    editor (named by ``editors``, or granted the ``editor`` role by its authenticator) or
    it carries the editor token (transport/api/agent.py)."""
    store: AgentStore | None = getattr(request.app.state, "agents", None)
    if store is None or not store.editable:
        return False
    if store.editors.includes(principal) or "editor" in getattr(
        request.state, "roles", frozenset()
    ):
        return True
    settings: Settings = request.app.state.settings
    given = request.headers.get(EDITOR_TOKEN_HEADER)
    expected = settings.editor_token
    return (
        given is not None
        and expected is not None
        and secrets.compare_digest(given.encode(), expected.get_secret_value().encode())
    )


def roles_of(request: Request) -> frozenset[str]:
    """The request's roles: those its authenticator set (``request.state.roles``), with
    ``editor`` for a principal the ``editors`` setting names (``*`` names everyone) or an
    editor by :func:`is_editor`, and ``approver`` for a principal the ``approvers``
    setting names. Roles are plain names. 401 without an identity."""
    if getattr(request.state, "roles", None) is None:  # not resolved yet
        principal_of(request)
    principal: str = request.state.principal
    roles: frozenset[str] = request.state.roles
    settings: Settings = request.app.state.settings
    named: set[str] = set()
    if principal in settings.editors or "*" in settings.editors or is_editor(request, principal):
        named.add("editor")
    if principal in settings.approvers:
        named.add("approver")
    return roles | named


def _invalid_json(reason: str) -> HTTPError:
    return HTTPError(400, "invalid_json", f"the body is not valid JSON: {reason}")


def _too_deep(text: str, max_depth: int) -> bool:
    """Whether ``text`` nests brackets deeper than ``max_depth``, ignoring brackets inside
    strings. Regular expressions and ``accumulate`` keep the loop in C: a megabyte of
    ``[`` is measured in milliseconds, with no recursion at all."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    brackets = _BRACKETS.findall(_STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > max_depth


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf
        raise _invalid_json("numbers must be finite")
    return value


def _no_constants(name: str) -> Any:
    raise _invalid_json(f"{name} is not a JSON value")


def _has_lone_surrogate(value: Any) -> bool:
    """Walk ``value`` without recursion: every key and every string."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _depth_of_valid(data: bytes) -> int:
    """How deep ``data``, known to be valid JSON, nests. Exact for valid JSON only: there
    a backslash is always an escape inside a string, so once escaped backslashes and
    quotes are gone every quote left opens or closes a string, and the brackets left
    pair up properly."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(None, _NOT_QUOTE_OR_BRACKET)
    if marks.count(b'"') != 2 * marks.count(b'""'):  # a string holds a bracket: drop strings
        marks = b"".join(data.split(b'"')[::2]).translate(None, _NOT_BRACKET)
    else:  # each string's quotes are adjacent among the marks: no bracket inside one
        marks = marks.translate(None, b'"')
    # Each pass of removing every adjacent pair takes off the innermost level (a pair
    # goes in the pass that equals its height), at C speed; a body a few levels deep is
    # gone within a few passes, and what is left is counted bracket by bracket (at once
    # when a pass takes off little: a deep, narrow body).
    marks = marks.translate(_FOLD_BRACES)
    peeled = 0
    while marks and peeled < _PEEL_PASSES:
        before, marks = len(marks), marks.replace(b"[]", b"")
        peeled += 1
        if 4 * len(marks) > 3 * before:
            break
    return peeled + max(accumulate(map(_BYTE_STEP.__getitem__, marks)), default=0)


def _parse_fast(data: bytes, max_depth: int) -> Any:
    """``data``'s value by orjson when that is what :func:`_parse_checked` returns for it,
    else ``_UNREAD``. orjson refuses everything the checks refuse but depth (it allows
    1024 levels): non-UTF-8, surrogates, NaN, Infinity, numbers that overflow to it. It
    reads an integer past 64 bits as a float, so a long run of digits anywhere is left
    to the standard parser; so is anything it refuses, for the error message."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _UNREAD
    if has_long_digit_run(data) or _depth_of_valid(data) > max_depth:
        return _UNREAD
    return value


def parse_json(data: bytes, *, max_depth: int) -> Any:
    """``data`` as JSON, or :class:`HTTPError` 400 ``invalid_json`` naming the problem.

    Stricter than :func:`json.loads`: UTF-8 only, at most ``max_depth`` levels, finite
    numbers, no NaN/Infinity, no lone surrogates. Messages never quote the body.
    """
    value = _parse_fast(data, max_depth)
    return _parse_checked(data, max_depth=max_depth) if value is _UNREAD else value


def _parse_checked(data: bytes, *, max_depth: int) -> Any:
    """:func:`parse_json` by the standard parser, with every check around it."""
    # Checks around the standard parser rather than a library: json.loads has no depth
    # limit (it recurses until RecursionError) and lets lone surrogates through, and no
    # parser Parkway depends on takes a depth to stop at.
    if not data.strip():
        raise HTTPError(400, "invalid_json", "the body is empty; send a JSON object")
    try:
        text = data.decode("utf-8")  # strict: also refuses UTF-8-encoded surrogates
    except UnicodeDecodeError:
        raise _invalid_json("it is not UTF-8") from None
    if _too_deep(text, max_depth):
        raise _invalid_json(f"it nests deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise _invalid_json(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:  # an integer past Python's digit limit
        raise _invalid_json("a number has too many digits") from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
        raise _invalid_json("it holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff)")
    return value


@dataclass(frozen=True)
class BodyReader:
    """Reads request bodies within the server's limits; each route may ask for a
    smaller (or larger) size limit than ``max_bytes``."""

    max_bytes: int
    max_depth: int
    timeout_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> BodyReader:
        return cls(
            max_bytes=settings.max_body_bytes,
            max_depth=settings.max_json_depth,
            timeout_s=settings.body_read_timeout_s,
        )

    async def body(self, request: Request, *, limit: int | None = None) -> bytes:
        """The raw body: 413 past ``limit`` bytes, 408 when it is not all there within
        the read timeout. Either way the rest is never read."""
        limit = self.max_bytes if limit is None else limit
        too_large = HTTPError(413, "body_too_large", f"the body exceeds {limit} bytes")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        body = bytearray()
        try:
            async with asyncio.timeout(self.timeout_s):
                async for chunk in request.stream():
                    if len(body) + len(chunk) > limit:
                        raise too_large
                    body += chunk
        except TimeoutError:
            raise HTTPError(
                408, "body_timeout", f"the body did not arrive within {self.timeout_s:g} s"
            ) from None
        except ClientDisconnect:  # nobody reads the answer; no error worth logging either
            raise HTTPError(
                400, "body_incomplete", "the client left before the body ended"
            ) from None
        return bytes(body)

    async def json(self, request: Request, *, limit: int | None = None) -> Any:
        """The body as strict JSON (see :func:`parse_json`), within the limits."""
        return parse_json(await self.body(request, limit=limit), max_depth=self.max_depth)


async def read_json(request: Request, *, limit: int | None = None) -> Any:
    """The request's JSON body, read by the app's :class:`BodyReader`."""
    reader: BodyReader = request.app.state.reader
    return await reader.json(request, limit=limit)
