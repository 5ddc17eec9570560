"""Sample values from JSON Schemas: an argument a tool's input schema accepts.

:class:`~parkway.runner.llm.testmodel.TestModel` calls each tool with a value made here,
so that a test exercises the tool's validation and code with input the model could
really have sent. The value is deterministic for a schema and a seed, and respects what
tool schemas commonly say: ``type`` (or a list of types), ``enum`` and ``const``,
``$ref`` into ``$defs``/``definitions``, ``anyOf``/``oneOf``/``allOf``, required and
optional properties, ``additionalProperties``, string lengths, ``format`` (date-time,
date, time, email, uri, uuid, ipv4, ipv6, hostname, duration, ...) and ``pattern``,
numeric bounds (inclusive and exclusive) and ``multipleOf``, array lengths,
``prefixItems``, ``uniqueItems`` and ``contains``.

Every value is checked against its schema (with :mod:`jsonschema`) before it is handed
out; a schema it cannot satisfy raises :class:`SampleError` naming the tool's schema
location, and a test then gives the arguments itself (``TestModel(args=...)``).

Written here rather than taken from a library: the libraries that generate data from
JSON Schema (hypothesis-jsonschema) are test-time dependencies that search randomly, and
a runtime package must not need them; a tool schema's needs are small and fixed.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator

try:  # the regular-expression parser of the standard library (``sre_parse`` before 3.11)
    from re import _parser as _sre  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11 is not supported anyway
    import sre_parse as _sre

__all__ = ["SampleError", "sample"]

# One sample per format; ``{n}`` is a small number from the seed (distinct items).
_FORMATS: dict[str, str] = {
    "date-time": "2026-01-{d}T03:04:05Z",
    "date": "2026-01-{d}",
    "time": "03:04:{d}Z",
    "duration": "P{n}DT2H",
    "email": "user{n}@example.com",
    "idn-email": "user{n}@example.com",
    "hostname": "host{n}.example.com",
    "idn-hostname": "host{n}.example.com",
    "ipv4": "192.0.2.{n}",
    "ipv6": "2001:db8::{n}",
    "uri": "https://example.com/{n}",
    "iri": "https://example.com/{n}",
    "uri-reference": "/{n}",
    "iri-reference": "/{n}",
    "url": "https://example.com/{n}",
    "uuid": "123e4567-e89b-42d3-a456-4266141740{d}",
    "json-pointer": "/{n}",
    "relative-json-pointer": "0/{n}",
    "regex": "^a{{{n}}}$",
    "uri-template": "https://example.com/{{id}}/{n}",
    "byte": "YQ==",
    "password": "password-{n}",
}
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_MAX_DEPTH = 12


class SampleError(ValueError):
    """No value could be made for a schema (an unsatisfiable or unsupported part)."""


def sample(schema: Mapping[str, Any] | bool, *, seed: int = 0) -> Any:
    """A value valid against ``schema`` (JSON Schema draft 2020-12), the same for the same
    schema and ``seed``. Raises :class:`SampleError` when none can be made."""
    maker = _Sampler(schema, seed)
    value = maker.value(schema, "#", 0)
    problem = next(iter(Draft202012Validator(schema).iter_errors(value)), None)
    if problem is not None:
        where = "/".join(str(p) for p in problem.absolute_schema_path) or "(root)"
        raise SampleError(f"no value satisfies the schema at {where}: {problem.message}")
    return value


class _Sampler:
    def __init__(self, root: Mapping[str, Any] | bool, seed: int) -> None:
        self.root = root
        self.seed = seed
        self._validator = Draft202012Validator(root)

    def _accepts(self, schema: Mapping[str, Any] | bool, value: Any) -> bool:
        """Whether ``schema`` (a part of the root: its references resolve there) accepts
        ``value``."""
        return bool(self._validator.evolve(schema=schema).is_valid(value))

    # -- dispatch -------------------------------------------------------------------

    def value(self, schema: Mapping[str, Any] | bool, where: str, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise SampleError(f"the schema at {where} nests deeper than {_MAX_DEPTH} levels")
        if schema is True:
            return self._word(depth)
        if schema is False:
            raise SampleError(f"the schema at {where} accepts nothing")
        if "$ref" in schema:
            merged = {**self._resolve(schema["$ref"], where), **_without(schema, "$ref")}
            return self.value(merged, where, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return self._enum(schema, where)
        if "allOf" in schema:
            merged = dict(_without(schema, "allOf"))
            for part in schema["allOf"]:
                merged = _merge(merged, self._resolved(part, where))
            return self.value(merged, where, depth + 1)
        for key in ("oneOf", "anyOf"):
            if key in schema:
                return self._choice(schema, key, where, depth)
        kind = _kind(schema)
        if kind == "object":
            return self._object(schema, where, depth)
        if kind == "array":
            return self._array(schema, where, depth)
        if kind == "string":
            return self._string(schema, where, depth)
        if kind == "integer":
            return self._integer(schema, where)
        if kind == "number":
            return self._number(schema, where)
        if kind == "boolean":
            return (self.seed + depth) % 2 == 0
        if kind == "null":
            return None
        raise SampleError(f"the schema at {where} has an unknown type {kind!r}")

    def _resolve(self, ref: str, where: str) -> Mapping[str, Any]:
        if not ref.startswith("#"):
            raise SampleError(f"the schema at {where} refers outside itself ({ref!r})")
        node: Any = self.root
        for raw in ref[1:].split("/")[1:]:
            part = raw.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise SampleError(f"the schema at {where} refers to a missing {ref!r}")
            node = node[part]
        if not isinstance(node, Mapping):
            raise SampleError(f"the schema at {where} refers to {ref!r}, not a schema")
        return node

    def _resolved(self, schema: Mapping[str, Any] | bool, where: str) -> Mapping[str, Any]:
        if isinstance(schema, bool):
            return {} if schema else {"not": {}}
        if "$ref" in schema:
            return {**self._resolve(schema["$ref"], where), **_without(schema, "$ref")}
        return schema

    def _enum(self, schema: Mapping[str, Any], where: str) -> Any:
        options = list(schema["enum"])
        if not options:
            raise SampleError(f"the schema at {where} has an empty enum")
        rest = _without(schema, "enum")
        valid = [o for o in options if self._accepts(rest, o)] or options
        return valid[self.seed % len(valid)]

    def _choice(self, schema: Mapping[str, Any], key: str, where: str, depth: int) -> Any:
        """The first branch (from the seed's, preferring non-null ones) whose value the
        whole schema accepts (for ``oneOf``: exactly one branch)."""
        branches = list(schema[key])
        if not branches:
            raise SampleError(f"the schema at {where} has an empty {key}")
        rest = _without(schema, key)
        order = sorted(
            range(len(branches)),
            key=lambda i: (_is_null(branches[i]), (i - self.seed) % len(branches)),
        )
        for index in order:
            branch = self._resolved(branches[index], f"{where}/{key}/{index}")
            try:
                candidate = self.value(
                    _merge(dict(rest), branch), f"{where}/{key}/{index}", depth + 1
                )
            except SampleError:
                continue
            if self._accepts(schema, candidate):
                return candidate
        raise SampleError(f"no branch of {key} at {where} gave a valid value")

    # -- the types ------------------------------------------------------------------

    def _object(self, schema: Mapping[str, Any], where: str, depth: int) -> dict[str, Any]:
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = list(schema.get("required", []))
        out: dict[str, Any] = {}
        # every declared property, required first: optional ones are exercised too
        for name in [*required, *(p for p in properties if p not in required)]:
            sub = properties.get(name)
            if sub is None:
                sub = schema.get("additionalProperties", True)
                if sub is False:
                    raise SampleError(f"{where}: {name!r} is required but not allowed")
            out[name] = self.value(sub, f"{where}/properties/{name}", depth + 1)
        extra = schema.get("additionalProperties", True)
        wanted = int(schema.get("minProperties", 0))
        index = 0
        while len(out) < wanted:
            if extra is False:
                raise SampleError(f"{where}: minProperties needs properties it does not allow")
            name = f"extra_{index}"
            index += 1
            if name not in out:
                out[name] = self.value(extra, f"{where}/additionalProperties", depth + 1)
        maximum = schema.get("maxProperties")
        if maximum is not None and len(out) > maximum:
            keep = required + [k for k in out if k not in required]
            out = {k: out[k] for k in keep[: int(maximum)]}
        return out

    def _array(self, schema: Mapping[str, Any], where: str, depth: int) -> list[Any]:
        prefix = list(schema.get("prefixItems", []))
        items = schema.get("items", True)
        low = int(schema.get("minItems", 0))
        high = schema.get("maxItems")
        count = max(low, len(prefix), 1)
        if high is not None:
            count = min(count, int(high))
        if items is False:
            count = min(count, len(prefix))
        out: list[Any] = []
        for index in range(count):
            if index < len(prefix):
                out.append(self.value(prefix[index], f"{where}/prefixItems/{index}", depth + 1))
            else:
                sampler = _Sampler(self.root, self.seed + index)
                out.append(sampler.value(items, f"{where}/items", depth + 1))
        if schema.get("uniqueItems"):
            out = self._unique(out, items, where, depth)
        contains = schema.get("contains")
        if contains is not None and not any(self._accepts(contains, v) for v in out):
            found = self.value(contains, f"{where}/contains", depth + 1)
            if out and (high is not None and len(out) >= int(high)):
                out[-1] = found
            else:
                out.append(found)
        return out

    def _unique(self, out: list[Any], items: Any, where: str, depth: int) -> list[Any]:
        seen: list[Any] = []
        for index, first in enumerate(out):
            value, tries = first, 0
            while value in seen:
                tries += 1
                if tries > 32:
                    raise SampleError(f"{where}: cannot make {len(out)} distinct items")
                value = _Sampler(self.root, self.seed + index + 97 * tries).value(
                    items, f"{where}/items", depth + 1
                )
            seen.append(value)
        return seen

    def _string(self, schema: Mapping[str, Any], where: str, depth: int) -> str:
        low = int(schema.get("minLength", 0))
        high = schema.get("maxLength")
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        if pattern is not None:
            return _from_pattern(
                pattern, where, low, None if high is None else int(high), self.seed
            )
        if isinstance(fmt, str) and fmt in _FORMATS:
            n = self.seed % 28 + 1
            text = _FORMATS[fmt].format(n=n, d=f"{n:02d}")
        else:
            text = self._word(depth)
        if len(text) < low:
            text = text + "x" * (low - len(text))
        if high is not None and len(text) > int(high):
            text = text[: int(high)]
        return text

    def _integer(self, schema: Mapping[str, Any], where: str) -> int:
        low, high = _bounds(schema, integer=True)
        step = schema.get("multipleOf", 1)
        start = low if low is not None else (min(high, 1) if high is not None else 1)
        candidate = math.ceil(start / step) * step
        value = int(candidate)
        if value != candidate or (high is not None and value > high):
            raise SampleError(f"no integer at {where} meets its bounds and multipleOf")
        return value

    def _number(self, schema: Mapping[str, Any], where: str) -> float | int:
        low, high = _bounds(schema, integer=False)
        step = schema.get("multipleOf")
        if low is not None and high is not None:
            value: float = (low + high) / 2
        elif low is not None:
            value = low + 1.5
        elif high is not None:
            value = high - 1.5
        else:
            value = 1.5
        if step is None:
            return value
        # the first multiple at or above the lower bound that survives the float check
        # validators do (value / step is a whole number)
        first = math.ceil((low if low is not None else value) / step)
        for k in range(first, first + 16):
            multiple = k * step
            for candidate in (multiple, round(multiple, 12)):
                if (low is None or candidate >= low) and (high is None or candidate <= high):
                    quotient = candidate / step
                    if quotient == int(quotient):
                        return float(candidate)
        raise SampleError(f"no number at {where} meets its bounds and multipleOf")

    def _word(self, depth: int) -> str:
        word = _WORDS[(self.seed + depth) % len(_WORDS)]
        rounds = self.seed // len(_WORDS)
        return f"{word}-{rounds}" if rounds else word


# -- helpers ------------------------------------------------------------------------


def _without(schema: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def _merge(into: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """``allOf`` as one schema: properties and required lists join, the rest is
    overwritten by the later part (enough for the schemas tools have)."""
    out = dict(into)
    for key, value in part.items():
        if key == "properties" and key in out:
            out[key] = {**out[key], **value}
        elif key == "required" and key in out:
            out[key] = [*out[key], *(r for r in value if r not in out[key])]
        else:
            out[key] = value
    return out


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") == "null"


def _kind(schema: Mapping[str, Any]) -> str:
    declared = schema.get("type")
    if isinstance(declared, list):
        usable = [t for t in declared if t != "null"] or declared
        declared = usable[0] if usable else None
    if isinstance(declared, str):
        return declared
    # no type: guess from the keywords present
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema or "minItems" in schema:
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "multipleOf")):
        return "number"
    return "string"


def _bounds(schema: Mapping[str, Any], *, integer: bool) -> tuple[Any, Any]:
    """The inclusive bounds a schema's minimum/maximum (and exclusive ones) give."""
    low = schema.get("minimum")
    high = schema.get("maximum")
    ex_low = schema.get("exclusiveMinimum")
    ex_high = schema.get("exclusiveMaximum")
    nudge = 1 if integer else 1e-6
    if isinstance(ex_low, int | float) and not isinstance(ex_low, bool):
        moved = math.floor(ex_low) + 1 if integer else ex_low + nudge
        low = moved if low is None else max(low, moved)
    if isinstance(ex_high, int | float) and not isinstance(ex_high, bool):
        moved = math.ceil(ex_high) - 1 if integer else ex_high - nudge
        high = moved if high is None else min(high, moved)
    if integer:
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
    return low, high


# -- strings from regular expressions -----------------------------------------------

_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": "-",
}


def _from_pattern(pattern: str, where: str, low: int, high: int | None, seed: int) -> str:
    """A string that ``re.search(pattern, ...)`` finds (JSON Schema patterns are not
    anchored), of a length in ``[low, high]``, built from the parsed expression: the
    first alternative of each branch, the first character each class allows, each
    open-ended repeat its minimum plus ``extra`` times (raised until the length fits)."""
    try:
        parsed = _sre.parse(pattern)
        for extra in range(seed % 4, seed % 4 + max(low, 1) + 1):
            text = _emit(parsed, extra)
            if len(text) >= low and re.search(pattern, text) is not None:
                break
    except (re.error, SampleError, KeyError, IndexError, TypeError) as exc:
        raise SampleError(
            f"cannot make a string for pattern {pattern!r} at {where}: {exc}"
        ) from None
    too_long = high is not None and len(text) > high
    if re.search(pattern, text) is None or len(text) < low or too_long:
        raise SampleError(f"cannot make a string for pattern {pattern!r} at {where}")
    return text


def _emit(parsed: Any, extra: int = 0) -> str:
    out: list[str] = []
    for op, arg in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(arg) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_class_char(arg))
        elif name in {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}:
            low, high, body = arg
            times = low + extra
            if high is not _sre.MAXREPEAT:
                times = min(times, high)
            out.append(_emit(body, extra) * times)
        elif name in {"SUBPATTERN", "ATOMIC_GROUP"}:
            out.append(_emit(arg[-1] if name == "SUBPATTERN" else arg, extra))
        elif name == "BRANCH":
            out.append(_emit(arg[1][0], extra))
        elif name in {"AT", "ASSERT", "ASSERT_NOT"}:
            continue
        elif name == "CATEGORY":
            out.append(_CATEGORY_CHARS[str(arg)])
        elif name == "GROUPREF":
            continue
        else:
            raise SampleError(f"unsupported regular-expression construct {name}")
    return "".join(out)


def _class_char(items: Any) -> str:
    negated = any(str(op) == "NEGATE" for op, _ in items)
    allowed: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            allowed.append(chr(arg))
        elif name == "RANGE":
            allowed.append(chr(arg[0]))
        elif name == "CATEGORY":
            allowed.append(_CATEGORY_CHARS[str(arg)])
    if not negated:
        if not allowed:
            raise SampleError("an empty character class")
        return allowed[0]
    refused = set()
    for op, arg in items:
        if str(op) == "LITERAL":
            refused.add(chr(arg))
        elif str(op) == "RANGE":
            refused.update(chr(c) for c in range(arg[0], arg[1] + 1))
    for char in string.ascii_letters + string.digits + "-_":
        if char not in refused:
            return char
    raise SampleError("a character class that refuses every plain character")
