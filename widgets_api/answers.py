"""What a client tool's card needs to answer in the shape the tool's output schema wants.

The page never sees a tool's ``output_schema``; its descriptor carries what the card
makes of it:

- ``answerShape`` on a ``choice`` card: how the option picked becomes the answer, from
  :func:`parkway.runner.agent.renders.choice_answer` (the same rule that refused, at
  decoration or template load, a tool whose schema no option can answer). Left out when
  it is ``{"choice": option}``, what a page does when the descriptor says nothing, so
  the descriptors of tools written for that shape (and the cassettes that recorded them)
  stay as they were.
- ``answerDraft`` on a ``client`` card (the JSON editor): a value of the schema's shape
  to start from (every property, with an empty string, zero, false, an empty list, or
  its default, its enum's first value), instead of ``{}``. A draft, not an answer: a
  ``minLength`` or a ``pattern`` is the person's to meet. Left out without a schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from parkway.runner.agent import RENDER_CHOICE, RENDER_CLIENT, choice_answer

__all__ = ["answer_fields", "draft_of"]

# Deep enough for a model in a model in a list; a schema may also loop through its $refs.
_MAX_DEPTH = 6
_EMPTY = {"string": "", "integer": 0, "number": 0, "boolean": False, "null": None}


def answer_fields(kind: str, output_schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The descriptor fields a client call's card of ``kind`` answers with (see the
    module doc); empty when it needs none."""
    if kind == RENDER_CHOICE:
        try:
            answer = choice_answer(output_schema)
        except ValueError:
            # Only a call parked by a server tool's own render can get here (a tool's
            # render is checked when its template loads): the page's default answer is
            # refused when it settles, and the card shows why.
            return {}
        return {} if answer.is_default else {"answerShape": answer.shape()}
    if kind == RENDER_CLIENT and output_schema is not None:
        return {"answerDraft": draft_of(output_schema)}
    return {}


def draft_of(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A JSON value shaped as ``schema`` says, to start an answer from."""
    root = schema if root is None else root
    if depth > _MAX_DEPTH or not isinstance(schema, Mapping):
        return None if depth else {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        return draft_of(_pointer(root, ref), root, depth + 1)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, Sequence) and not isinstance(enum, str) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, Sequence) and branches:
            chosen = next((b for b in branches if _types(b) != ["null"]), branches[0])
            return draft_of(chosen, root, depth + 1)
    types = [t for t in _types(schema) if t != "null"] or _types(schema)
    properties = schema.get("properties")
    if (not types or types[0] == "object") and isinstance(properties, Mapping):
        # the required ones first, in their list's order: a stored schema's properties
        # may have been sorted (canonical JSON), its lists never are
        required = [n for n in schema.get("required") or () if n in properties]
        names = list(dict.fromkeys([*required, *properties]))
        return {str(name): draft_of(properties[name], root, depth + 1) for name in names}
    if not types:
        return {} if depth == 0 else None
    if types[0] == "array":
        return []
    return _EMPTY.get(types[0], {})


def _types(schema: Any) -> list[str]:
    found = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(found, str):
        return [found]
    if isinstance(found, Sequence):
        return [t for t in found if isinstance(t, str)]
    return []


def _pointer(root: Any, ref: str) -> Any:
    found = root
    for part in ref[2:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(found, Mapping) or key not in found:
            return None
        found = found[key]
    return found
