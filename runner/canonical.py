"""Canonical JSON (RFC 8785, JCS) and the parkedCallKey.

The parkedCallKey (``toolName + "#" + canonical_json(input)``) anchors a parked call
for cold replay: a client that replays a transcript with fresh tool call ids is matched
to the pending call by this key. It also fingerprints approvals, so an approval
authorises exactly the input it was shown. Anything that is not plain JSON has no key:
the call is refused (fail closed) rather than matched loosely.

The canonical form is the JSON Canonicalization Scheme (RFC 8785), so a key computed by
a browser agrees with ours: numbers are IEEE doubles printed as ECMAScript prints them
(``1.0`` is ``1``, ``-0`` is ``0``, ``1e21`` is ``1e+21``, ``1e-7`` stays ``1e-7``),
strings escape only ``"``, ``\\`` and control characters, and object keys sort by their
UTF-16 code units. ``widgets_api/playground/static/canonical.js`` is the playground's copy;
``tests/helpers/vectors/jcs.json`` holds both to the same cases.

Integers: JSON numbers are doubles, so an integer beyond ±(2**53 - 1) is printed as the
double it becomes (``9007199254740993`` as ``9007199254740992``), which is what a
JavaScript client prints after ``JSON.parse``. Two such integers that round to one
double share a key, as they would in any JavaScript client. An integer too large for a
double (about 1.8e308) is not plain JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import rfc8785

from parkway.runner.errors import NotPlainJSONError

__all__ = ["canonical_json", "has_long_digit_run", "is_plain_json", "parked_call_key"]

_MAX_DEPTH = 64
# Digits as b"0", every other byte as b" " (has_long_digit_run).
_DIGIT_MARKS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_DIGITS = b"0" * 19
# rfc8785 refuses integers beyond this instead of rounding them (see _plain).
_MAX_SAFE_INTEGER = 2**53 - 1
# Python strings hold astral characters whole, so any surrogate code point is a lone one:
# text that is not Unicode, which UTF-8 (and so JCS) cannot carry.
_SURROGATE = re.compile("[\ud800-\udfff]")
# Astral characters sort differently by code point (Python) and by UTF-16 unit (JCS).
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


class _Shape:
    """What a value holds that json.dumps would print otherwise than JCS."""

    __slots__ = ("special",)

    def __init__(self) -> None:
        self.special = False


def _plain(value: Any, depth: int, shape: _Shape | None = None) -> Any:
    """``value`` checked as plain JSON and made ready for rfc8785: each integer beyond
    the double's exact range replaced by the double it becomes. ``shape`` notes whether
    it holds a float, such an integer or an astral character in a key."""
    if depth > _MAX_DEPTH:
        raise NotPlainJSONError("value nests deeper than 64 levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise NotPlainJSONError("a string holds a lone surrogate (text that is not Unicode)")
        return value
    if isinstance(value, int):
        if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER:
            return value
        if shape is not None:
            shape.special = True
        try:
            return float(value)
        except OverflowError:
            raise NotPlainJSONError("an integer is too large for a JSON number") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotPlainJSONError("value contains a non-finite number")
        if shape is not None:
            shape.special = True
        return value
    if isinstance(value, list):
        return [_plain(item, depth + 1, shape) for item in value]
    if isinstance(value, dict):
        plain: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotPlainJSONError("object key is not a string")
            if _SURROGATE.search(key):
                raise NotPlainJSONError("an object key holds a lone surrogate")
            if shape is not None and not key.isascii() and _ASTRAL.search(key):
                shape.special = True
            plain[key] = _plain(item, depth + 1, shape)
        return plain
    raise NotPlainJSONError(f"value of type {type(value).__name__} is not plain JSON")


def is_plain_json(value: Any) -> bool:
    """True when ``value`` is made only of JSON objects, arrays, strings, finite numbers,
    booleans and null: exactly the values :func:`canonical_json` accepts."""
    try:
        _plain(value, 0)
    except NotPlainJSONError:
        return False
    return True


def canonical_json(value: Any) -> str:
    """Serialise ``value`` as RFC 8785 canonical JSON (see the module doc).

    Raises :class:`NotPlainJSONError` for anything that is not plain JSON (tuples,
    NaN, non-string keys, lone surrogates, custom objects), so two different values
    never share a key.
    """
    shape = _Shape()
    plain = _plain(value, 0, shape)
    if not shape.special:
        # No float, no integer beyond 2**53 and no astral key: json.dumps prints exactly
        # what JCS does (same escapes, same key order), about ten times faster.
        return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        return rfc8785.dumps(plain).decode()
    except rfc8785.CanonicalizationError as exc:  # _plain should have refused it first
        raise NotPlainJSONError(f"value has no canonical JSON form: {exc}") from None


def parked_call_key(tool_name: str, tool_input: Any) -> str:
    """``toolName#canonical_json(input)``; absent input counts as ``{}``."""
    return f"{tool_name}#{canonical_json({} if tool_input is None else tool_input)}"


def has_long_digit_run(data: bytes) -> bool:
    """Whether ``data`` holds a run of 19 or more digits: a number orjson may not read
    exactly (it reads an integer past 64 bits, which has at least 19 digits, as a float),
    left to Python's parser by the callers that use orjson for speed."""
    return _LONG_DIGITS in data.translate(_DIGIT_MARKS)
