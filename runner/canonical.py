"""Canonical JSON and the parkedCallKey.

The parkedCallKey (``toolName + "#" + canonical_json(input)``) anchors a parked call
for cold replay: a client that replays a transcript with fresh tool call ids is matched
to the pending call by this key. It also fingerprints approvals, so an approval
authorises exactly the input it was shown. Anything that is not plain JSON has no key:
the call is refused (fail closed) rather than matched loosely.
"""

from __future__ import annotations

import json
import math
from typing import Any

from runner.errors import NotPlainJSONError

__all__ = ["canonical_json", "is_plain_json", "parked_call_key"]

_MAX_DEPTH = 64


def _check(value: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise NotPlainJSONError("value nests deeper than 64 levels")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotPlainJSONError("value contains a non-finite number")
        return
    if isinstance(value, list):
        for item in value:
            _check(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotPlainJSONError("object key is not a string")
            _check(item, depth + 1)
        return
    raise NotPlainJSONError(f"value of type {type(value).__name__} is not plain JSON")


def is_plain_json(value: Any) -> bool:
    """True when ``value`` is made only of JSON objects, arrays, strings, finite numbers,
    booleans and null."""
    try:
        _check(value, 0)
    except NotPlainJSONError:
        return False
    return True


def canonical_json(value: Any) -> str:
    """Serialise ``value`` with sorted object keys and no insignificant whitespace.

    Raises :class:`NotPlainJSONError` for anything that is not plain JSON (tuples,
    NaN, non-string keys, custom objects), so two different values never share a key.
    """
    _check(value, 0)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parked_call_key(tool_name: str, tool_input: Any) -> str:
    """``toolName#canonical_json(input)``; absent input counts as ``{}``."""
    return f"{tool_name}#{canonical_json({} if tool_input is None else tool_input)}"
