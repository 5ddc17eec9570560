"""The built-in render kinds of client tools, and which output schemas each can answer.

A client tool's ``render`` names the widget a front end draws for its calls; the answer
that widget gives is checked against the tool's ``output_schema`` when the call settles.
Three kinds are built in (the playground draws them; any other kind is a custom front
end's, and Parkway assumes nothing of its answers):

- ``client`` (and a tool with no ``render``): a JSON editor; the person types the answer,
  so any output schema fits.
- ``choice``: one button per string of the call's ``options``; the answer is the option
  picked, shaped as the output schema wants (:func:`choice_answer`): the string itself
  (``str``, a ``Literal`` or ``Enum`` of strings), or an object with the option in its one
  string field (a model or ``TypedDict`` with one required string field, whatever its
  name; ``dict[str, str]`` and no schema at all get ``{"choice": option}``).
- ``connect``: the OAuth connect card; its call settles with a connection reference the
  server records, or a failure (declined, error), whatever the schema says: the schema,
  if any, must accept each kind of result (:data:`CONNECTION_RESULTS` has one of each).

:func:`render_mismatch` says why a kind cannot answer a schema, and what would fit; the
Python decorator (``@agent.client_tool``) and template validation both refuse such a tool
with it, so a tool is never declared that its own widget cannot answer. The descriptor
the page draws from (``widgets_api``) carries :func:`choice_answer`'s shape: one source
for the shape of an answer, here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

__all__ = [
    "CONNECTION_RESULTS",
    "RENDER_CHOICE",
    "RENDER_CLIENT",
    "RENDER_CONNECT",
    "ChoiceAnswer",
    "RenderMismatch",
    "choice_answer",
    "render_mismatch",
]

RENDER_CHOICE = "choice"
RENDER_CLIENT = "client"
RENDER_CONNECT = "connect"
# The field the choice widget puts the option in when the schema names none (no schema,
# ``dict[str, str]``): the answer the playground has always given.
DEFAULT_CHOICE_FIELD = "choice"
# What a connect card's call settles with (runner/outcomes.py, model_result): a
# connection reference recorded by the server, or the failure the model is told of.
CONNECTION_RESULTS: dict[str, dict[str, Any]] = {
    "a connection reference": {
        "connected": True,
        "provider": "github",
        "connection_id": "conn_1",
        "account": "octocat",
        "scopes": ["repo"],
    },
    "a declined connection": {"connected": False, "reason": "declined", "retryable": False},
    "a failed connection": {
        "connected": False,
        "reason": "error",
        "retryable": True,
        "message": "connection failed",
    },
}
# How deep $ref / anyOf chains are followed: a schema is JSON, and may loop.
_MAX_DEPTH = 16


@dataclass(frozen=True)
class ChoiceAnswer:
    """How the choice widget answers a call: with the option itself (``field`` None), or
    with ``{field: option}``."""

    field: str | None

    def of(self, option: str) -> Any:
        """The answer for ``option``."""
        return option if self.field is None else {self.field: option}

    def shape(self) -> dict[str, Any]:
        """The JSON a widget descriptor carries (``answerShape``): ``{"as": "value"}`` or
        ``{"as": "field", "field": <name>}``."""
        if self.field is None:
            return {"as": "value"}
        return {"as": "field", "field": self.field}

    @property
    def is_default(self) -> bool:
        """Whether this is the answer a page gives when a descriptor says nothing
        (``{"choice": option}``)."""
        return self.field == DEFAULT_CHOICE_FIELD


@dataclass(frozen=True)
class RenderMismatch:
    """Why the render kind ``kind`` cannot answer an output schema (``why``, of the
    schema: "it is an integer"), and what would fit, in a Python return type's words
    (``fits_python``) and in a template's (``fits_schema``)."""

    kind: str
    why: str
    fits_python: str
    fits_schema: str

    def for_template(self) -> str:
        """The message of a template whose client tool entry has this mismatch."""
        return (
            f"render kind {self.kind!r} cannot answer its output_schema: {self.why}; "
            f"give an output_schema that {self.fits_schema}"
        )

    def for_python(self, tool: str, returns: str) -> str:
        """The message of ``@agent.client_tool`` on a function returning ``returns``."""
        return (
            f"client tool {tool!r}: render={self.kind!r} cannot answer a call of a tool "
            f"returning {returns} ({self.why}); {self.fits_python}"
        )


_CHOICE_FITS_PYTHON = (
    "the choice widget answers with the option picked: return str, a Literal or Enum of "
    "strings, a model or TypedDict with one required str field (of any name), or "
    "dict[str, str]; with no return annotation the answer is {'choice': option}"
)
_CHOICE_FITS_SCHEMA = (
    "is a string (or an enum of strings), an object with one required string property, an "
    'object of string values, or none at all (the answer is then {"choice": option})'
)
_CONNECT_FITS_PYTHON = (
    "the connect card answers with a connection reference {'connected': True, 'provider', "
    "'connection_id', 'account', 'scopes'} or a failure {'connected': False, 'reason', "
    "'retryable', 'message'?}: return dict[str, Any], a model whose fields take both, or "
    "leave the return unannotated"
)
_CONNECT_FITS_SCHEMA = (
    "accepts a connection reference {connected, provider, connection_id, account, scopes} "
    "and a failure {connected: false, reason, retryable, message?}, or none at all"
)


class _Unanswerable(Exception):
    """Inside :func:`choice_answer`: why the schema takes no option."""


def choice_answer(output_schema: Mapping[str, Any] | bool | None) -> ChoiceAnswer:
    """How the choice widget answers a tool with ``output_schema``: the option itself
    where the schema takes a string, else the object with the option in its one string
    property (the one required property; with none required, a property named
    ``choice`` or the only string one; with no properties, ``choice``). Raises
    :class:`ValueError` saying why, when no option can be an answer."""
    if output_schema is None or output_schema is True:
        return ChoiceAnswer(DEFAULT_CHOICE_FIELD)
    root = output_schema if isinstance(output_schema, Mapping) else {}
    try:
        return _answer(output_schema, root, 0)
    except _Unanswerable as exc:
        raise ValueError(str(exc)) from None


def render_mismatch(
    render: Mapping[str, Any] | None, output_schema: Mapping[str, Any] | None
) -> RenderMismatch | None:
    """Why a client tool's built-in ``render`` kind cannot answer ``output_schema``, or
    None when it can (or the kind is not built in: a custom front end's)."""
    kind = render.get("kind") if render is not None else None
    if kind == RENDER_CHOICE:
        try:
            choice_answer(output_schema)
        except ValueError as exc:
            return RenderMismatch(kind, str(exc), _CHOICE_FITS_PYTHON, _CHOICE_FITS_SCHEMA)
        return None
    if kind == RENDER_CONNECT and output_schema is not None:
        validator = Draft202012Validator(output_schema)
        for label, result in CONNECTION_RESULTS.items():
            error = next(iter(validator.iter_errors(result)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                why = f"it refuses {label}, at {where}: {error.validator}={error.validator_value!r}"
                return RenderMismatch(
                    RENDER_CONNECT, why, _CONNECT_FITS_PYTHON, _CONNECT_FITS_SCHEMA
                )
    return None


# -- reading a schema ---------------------------------------------------------------------


def _resolve(schema: Any, root: Mapping[str, Any], depth: int) -> Any:
    """``schema`` with its local ``$ref`` (``#/$defs/Name``, as pydantic writes them)
    followed; a lone ``allOf`` member stands for the schema."""
    for _ in range(_MAX_DEPTH - depth):
        if not isinstance(schema, Mapping):
            return schema
        ref = schema.get("$ref")
        if isinstance(ref, str):
            schema = _pointer(root, ref)
            continue
        all_of = schema.get("allOf")
        if isinstance(all_of, Sequence) and len(all_of) == 1 and "type" not in schema:
            schema = all_of[0]
            continue
        return schema
    raise _Unanswerable("its $ref chain is too deep to read")


def _pointer(root: Mapping[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        raise _Unanswerable(f"it refers to {ref!r}, outside the schema")
    found: Any = root
    for part in [p for p in ref[1:].split("/") if p]:
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(found, Mapping) or key not in found:
            raise _Unanswerable(f"its $ref {ref!r} names nothing")
        found = found[key]
    return found


def _branches(schema: Mapping[str, Any]) -> list[Any] | None:
    for key in ("anyOf", "oneOf"):
        found = schema.get(key)
        if isinstance(found, Sequence) and not isinstance(found, str):
            return list(found)
    return None


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    """The ``type`` keyword as a set, or None when the schema has none."""
    found = schema.get("type")
    if isinstance(found, str):
        return {found}
    if isinstance(found, Sequence):
        return {t for t in found if isinstance(t, str)}
    return None


def _takes_string(schema: Any, root: Mapping[str, Any], depth: int) -> bool:
    """Whether some string is valid against ``schema`` as far as its kind goes (an enum's
    strings and a pattern are the options' business, checked when the call settles)."""
    schema = _resolve(schema, root, depth)
    if schema is True:
        return True
    if not isinstance(schema, Mapping):
        return False
    if "const" in schema:
        return isinstance(schema["const"], str)
    if "enum" in schema:
        enum = schema["enum"]
        return isinstance(enum, Sequence) and any(isinstance(v, str) for v in enum)
    branches = _branches(schema)
    if branches is not None:
        return any(_takes_string(b, root, depth + 1) for b in branches)
    types = _types(schema)
    return types is None or "string" in types


def _describe(schema: Any, root: Mapping[str, Any], depth: int) -> str:
    """What ``schema`` is, in a few words, for a refusal: "an integer"."""
    schema = _resolve(schema, root, depth)
    if schema is False:
        return "it accepts nothing"
    if isinstance(schema, Mapping):
        if "const" in schema:
            return f"it is the constant {schema['const']!r}"
        if "enum" in schema:
            return f"it is one of {schema['enum']!r}, none a string"
        types = sorted(_types(schema) or ())
        if types:
            names = {"integer": "an integer", "number": "a number", "boolean": "a boolean",
                     "array": "an array", "null": "null", "object": "an object"}  # fmt: skip
            return "it is " + " or ".join(names.get(t, t) for t in types)
    return "it takes no string"


def _answer(schema: Any, root: Mapping[str, Any], depth: int) -> ChoiceAnswer:
    schema = _resolve(schema, root, depth)
    if schema is True:
        return ChoiceAnswer(DEFAULT_CHOICE_FIELD)
    if not isinstance(schema, Mapping):
        raise _Unanswerable(_describe(schema, root, depth))
    branches = _branches(schema)
    if branches is not None:
        reasons = []
        for branch in branches:  # the first branch an option can answer
            try:
                return _answer(branch, root, depth + 1)
            except _Unanswerable as exc:
                reasons.append(str(exc))
        raise _Unanswerable("; ".join(dict.fromkeys(reasons)) or "it has no alternatives")
    types = _types(schema)
    if (types is not None and "string" in types) or schema.keys() & {"const", "enum"}:
        if _takes_string(schema, root, depth):
            return ChoiceAnswer(None)
        raise _Unanswerable(_describe(schema, root, depth))
    if types is None and not _keys_of_object(schema):
        return ChoiceAnswer(DEFAULT_CHOICE_FIELD)  # {}, or only annotations: any answer
    if types is None or "object" in types:
        return ChoiceAnswer(_field(schema, root, depth))
    raise _Unanswerable(_describe(schema, root, depth))


def _keys_of_object(schema: Mapping[str, Any]) -> bool:
    return bool(schema.keys() & {"properties", "required", "additionalProperties"})


def _field(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> str:
    """The property of an object schema that the option goes in."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = [str(r) for r in schema.get("required") or ()]
    extra = schema.get("additionalProperties", True)
    if len(required) > 1:
        raise _Unanswerable(
            f"it requires {len(required)} fields ({', '.join(required)}) and a choice fills one"
        )
    if required:
        (name,) = required
        field_schema = properties.get(name, extra)
        if not _takes_string(field_schema, root, depth + 1):
            kind = _describe(field_schema, root, depth + 1).removeprefix("it is ")
            raise _Unanswerable(f"its required field {name!r} is {kind}, not a string")
        return name
    strings = [n for n, s in properties.items() if _takes_string(s, root, depth + 1)]
    if DEFAULT_CHOICE_FIELD in strings:
        return DEFAULT_CHOICE_FIELD
    if len(strings) == 1:
        return str(strings[0])
    if strings:
        raise _Unanswerable(
            f"it has {len(strings)} optional string fields ({', '.join(strings)}) and "
            "none is required, so the one a choice fills is not said (make it required)"
        )
    if not properties and _takes_string(extra, root, depth + 1):
        return DEFAULT_CHOICE_FIELD
    raise _Unanswerable("it is an object with no string field")
