"""Comparing a replayed response with a recorded one (private to
:mod:`parkway.transport.cassettes`).

Two things make a faithful replay differ byte for byte from its recording: ids the
server generates (``msg_…``, ``call_…``, ``apr_…``) and deadlines (wall-clock times).
:class:`IdTable` learns the generated ids of one side of a replay in order of first
appearance and names them ``msg#1``, ``call#1``, … so both sides can be compared; the
same labels map a recorded id to the id the replaying server generated in its place.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ABSENT",
    "GENERATED_PREFIXES",
    "Difference",
    "IdTable",
    "Note",
    "diff_chunks",
    "diff_json",
    "merge_deltas",
    "translate",
]

# Generated-id prefixes, and the keys under which the server names such ids. A value
# under one of these keys that starts with one of the prefixes is a generated id.
GENERATED_PREFIXES = ("msg_", "call_", "apr_")
_ID_KEYS = frozenset({"messageId", "toolCallId", "approvalId", "id"})
# Run failures and 500s name a random log reference; it carries no meaning in a diff.
_REFERENCE = re.compile(r"\(reference [0-9a-f]+\)")
# Streamed deltas that are compared as the concatenated text of their part:
# chunk type -> (the key naming the part, the key holding the delta).
_DELTAS = {
    "text-delta": ("id", "delta"),
    "reasoning-delta": ("id", "delta"),
    "tool-input-delta": ("toolCallId", "inputTextDelta"),
}


def _walk(value: Any, key: str | None = None) -> Iterator[tuple[str | None, Any]]:
    """Every (key, value) pair of a JSON value, depth first in document order."""
    yield key, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, key)


def _map_strings(value: Any, fn: Callable[[str, str | None], Any], key: str | None = None) -> Any:
    if isinstance(value, str):
        return fn(value, key)
    if isinstance(value, dict):
        return {k: _map_strings(v, fn, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn, key) for v in value]
    return value


class IdTable:
    """The generated ids one side of a replay has seen, labelled in order of first
    appearance per kind (``msg#1``, ``call#1``, ``call#2``, ``apr#1``)."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}
        self._ids: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._pattern: re.Pattern[str] | None = None

    def learn(self, value: Any) -> None:
        """Label every generated id that ``value`` (JSON) names and that is new."""
        for key, item in _walk(value):
            if key in _ID_KEYS and isinstance(item, str) and item.startswith(GENERATED_PREFIXES):
                if item in self._labels:
                    continue
                kind = item.split("_", 1)[0]
                self._counts[kind] = self._counts.get(kind, 0) + 1
                label = f"{kind}#{self._counts[kind]}"
                self._labels[item] = label
                self._ids[label] = item
                self._pattern = None

    def label(self, generated_id: str) -> str | None:
        return self._labels.get(generated_id)

    def id_for(self, label: str) -> str | None:
        return self._ids.get(label)

    def substitute(self, text: str, replace: Callable[[str], str]) -> str:
        """``text`` with every known id in it replaced by ``replace(id)``."""
        if not self._labels:
            return text
        if self._pattern is None:
            ids = sorted(self._labels, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(i) for i in ids))
        return self._pattern.sub(lambda m: replace(m.group(0)), text)

    def normalise(self, value: Any) -> Any:
        """``value`` with known ids replaced by their labels, deadlines by
        ``"<deadline>"`` and log references by ``"(reference <ref>)"``."""

        def fix(text: str, key: str | None) -> str:
            text = self.substitute(text, lambda i: self._labels[i])
            return _REFERENCE.sub("(reference <ref>)", text)

        def deadlines(item: Any) -> Any:
            if isinstance(item, dict):
                return {
                    k: "<deadline>"
                    if k == "deadline" and isinstance(v, int | float) and not isinstance(v, bool)
                    else deadlines(v)
                    for k, v in item.items()
                }
            if isinstance(item, list):
                return [deadlines(v) for v in item]
            return item

        return deadlines(_map_strings(value, fix))


def translate(value: Any, source: IdTable, target: IdTable) -> Any:
    """``value`` with each id ``source`` knows replaced by the id ``target`` has under
    the same label; ids ``target`` has no counterpart for stay as they are."""

    def swap(found: str) -> str:
        label = source.label(found)
        new = target.id_for(label) if label is not None else None
        return new if new is not None else found

    return _map_strings(value, lambda text, _key: source.substitute(text, swap))


@dataclass(frozen=True)
class Difference:
    """One way a replayed exchange differs from its recording.

    ``chunk`` is the index of the recorded chunk (``got_chunk`` of the replayed one) for
    stream responses; ``path`` locates the differing value inside a chunk or a JSON body.
    Values are shown normalised (generated ids as labels, deadlines masked).
    """

    exchange: int
    request: str
    what: str
    expected: Any
    got: Any
    chunk: int | None = None
    got_chunk: int | None = None
    path: str = ""

    def __str__(self) -> str:
        where = f"exchange {self.exchange} ({self.request}): {self.what}"
        if self.path:
            where += f" at {self.path}"
        text = f"{where}\n  expected: {_show(self.expected)}\n  got:      {_show(self.got)}"
        if isinstance(self.expected, str) and isinstance(self.got, str):
            at = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(self.expected, self.got, strict=False))
                    if a != b
                ),
                min(len(self.expected), len(self.got)),
            )
            text += f"\n  (the texts differ from character {at})"
        return text


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


# Stands for the value on the side of a difference that has none (a missing key or chunk).
ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Note:
    """A description shown as is rather than as JSON (``a stream of 12 chunks``)."""

    text: str

    def __repr__(self) -> str:
        return self.text


def _show(value: Any) -> str:
    if isinstance(value, _Absent | Note):
        return repr(value)
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 600 else text[:600] + "…"


def _leaf_diffs(expected: Any, got: Any, path: str) -> list[tuple[str, Any, Any]]:
    if isinstance(expected, dict) and isinstance(got, dict):
        found = []
        for key in [*expected, *(k for k in got if k not in expected)]:
            found += _leaf_diffs(expected.get(key, ABSENT), got.get(key, ABSENT), f"{path}.{key}")
        return found
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        found = []
        for index, (e, g) in enumerate(zip(expected, got, strict=True)):
            found += _leaf_diffs(e, g, f"{path}[{index}]")
        return found
    if expected == got and type(expected) is type(got):
        return []
    return [(path or "$", expected, got)]


def diff_json(exchange: int, request: str, expected: Any, got: Any) -> list[Difference]:
    """The differing leaves of two (normalised) JSON bodies, by JSON path."""
    return [
        Difference(exchange, request, "JSON body", e, g, path=path)
        for path, e, g in _leaf_diffs(expected, got, "$")
    ]


def merge_deltas(chunks: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The chunks with their indexes, each streamed part's deltas merged into its first
    delta chunk, so a different split of the same text compares equal."""
    merged: list[tuple[int, dict[str, Any]]] = []
    first: dict[tuple[str, Any], dict[str, Any]] = {}
    for index, chunk in enumerate(chunks):
        spec = _DELTAS.get(str(chunk.get("type")))
        if spec is None:
            merged.append((index, chunk))
            continue
        part_key, delta_key = spec
        part = (str(chunk["type"]), chunk.get(part_key))
        if part in first:
            head = first[part]
            head[delta_key] = str(head.get(delta_key, "")) + str(chunk.get(delta_key, ""))
            continue
        head = dict(chunk)
        first[part] = head
        merged.append((index, head))
    return merged


def _label(chunk: dict[str, Any]) -> str:
    kind = str(chunk.get("type", "?"))
    part = chunk.get("id", chunk.get("toolCallId"))
    return f"{kind} {part}" if isinstance(part, str) else kind


def diff_chunks(
    exchange: int,
    request: str,
    expected: list[tuple[int, dict[str, Any]]],
    got: list[tuple[int, dict[str, Any]]],
) -> list[Difference]:
    """The differences between two (normalised, merged) chunk lists, aligned so that one
    missing or extra chunk is reported as such rather than shifting every later one."""
    keys_e = [json.dumps(c, sort_keys=True) for _, c in expected]
    keys_g = [json.dumps(c, sort_keys=True) for _, c in got]
    matcher = difflib.SequenceMatcher(None, keys_e, keys_g, autojunk=False)
    found: list[Difference] = []
    for op, e0, e1, g0, g1 in matcher.get_opcodes():
        if op == "equal":
            continue
        pairs = min(e1 - e0, g1 - g0)
        for offset in range(pairs):
            (ei, ec), (gi, gc) = expected[e0 + offset], got[g0 + offset]
            what = f"chunk {ei} ({_label(ec)})"
            if gi != ei:
                what += f", replayed as chunk {gi}"
            leaves = _leaf_diffs(ec, gc, "")
            for path, e, g in leaves or [("", ec, gc)]:
                found.append(Difference(exchange, request, what, e, g, ei, gi, path.lstrip(".")))
        for ei, ec in expected[e0 + pairs : e1]:
            what = f"chunk {ei} ({_label(ec)}) is missing"
            found.append(Difference(exchange, request, what, ec, ABSENT, chunk=ei))
        for gi, gc in got[g0 + pairs : g1]:
            what = f"unexpected chunk ({_label(gc)}) replayed as chunk {gi}"
            found.append(Difference(exchange, request, what, ABSENT, gc, got_chunk=gi))
    return found
