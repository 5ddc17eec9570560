"""Comparing a replayed response with a recorded one (private to
:mod:`parkway.transport.cassettes`).

Two things make a faithful replay differ byte for byte from its recording: ids the
server generates (``msg_…``, ``call_…``, ``apr_…``) and wall-clock times (deadlines, an
AG-UI interrupt's ``expiresAt``, an event's ``timestamp``).
Both sides are normalised first (:class:`IdTable`, in ``_cassette_ids``); what still
differs is a :class:`Difference`, tagged with what a report needs to find its cause:
its kind, the chunk type, and the call it concerns.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from parkway.transport.cassettes._ids import GENERATED_PREFIXES, IdTable, translate

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

# Streamed deltas that are compared as the concatenated text of their part:
# chunk type -> (the key naming the part, the key holding the delta).
_DELTAS = {
    "text-delta": ("id", "delta"),
    "reasoning-delta": ("id", "delta"),
    "tool-input-delta": ("toolCallId", "inputTextDelta"),
    # AG-UI events
    "TEXT_MESSAGE_CONTENT": ("messageId", "delta"),
    "REASONING_MESSAGE_CONTENT": ("messageId", "delta"),
    "TOOL_CALL_ARGS": ("toolCallId", "delta"),
}


@dataclass(frozen=True)
class Difference:
    """One way a replayed exchange differs from its recording.

    ``chunk`` is the index of the recorded chunk (``got_chunk`` of the replayed one) for
    stream responses; ``path`` locates the differing value inside a chunk or a JSON body.
    Values are shown normalised (generated ids as labels, deadlines masked).

    For finding causes: ``kind`` is ``"status"``, ``"body"`` (another kind of body),
    ``"value"``, ``"missing"`` / ``"unexpected"`` (a chunk), ``"moved"`` (a chunk that
    came in another order) or ``"no answer"``; ``chunk_type`` the stream chunk's type;
    ``call`` the label of the tool call the chunk or JSON object is about (``call#2``),
    ``tool`` its tool name; ``request_calls`` the calls the request's path names.
    """

    exchange: int
    request: str
    what: str
    expected: Any
    got: Any
    chunk: int | None = None
    got_chunk: int | None = None
    path: str = ""
    kind: str = "value"
    chunk_type: str | None = None
    call: str | None = None
    tool: str | None = None
    request_calls: tuple[str, ...] = ()

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


def _call_of(item: Any) -> str | None:
    """The (normalised) call a JSON object is about: its ``toolCallId``, a widget's
    ``data.toolCallId``, or an ``id`` that is a call label."""
    if not isinstance(item, dict):
        return None
    data = item.get("data")
    for found in (
        item.get("toolCallId"),
        data.get("toolCallId") if isinstance(data, dict) else None,
        item.get("id"),
    ):
        if isinstance(found, str) and found.startswith("call#"):
            return found
    return None


def _leaf_diffs(
    expected: Any, got: Any, path: str, call: str | None = None
) -> Iterator[tuple[str, Any, Any, str | None]]:
    """(path, expected, got, call) for each differing leaf; ``call`` is the nearest
    enclosing object's call."""
    if isinstance(expected, dict) and isinstance(got, dict):
        call = _call_of(expected) or _call_of(got) or call
        for key in [*expected, *(k for k in got if k not in expected)]:
            yield from _leaf_diffs(
                expected.get(key, ABSENT), got.get(key, ABSENT), f"{path}.{key}", call
            )
        return
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for index, (e, g) in enumerate(zip(expected, got, strict=True)):
            yield from _leaf_diffs(e, g, f"{path}[{index}]", call)
        return
    if expected == got and type(expected) is type(got):
        return
    yield path or "$", expected, got, call


def diff_json(exchange: int, request: str, expected: Any, got: Any) -> list[Difference]:
    """The differing leaves of two (normalised) JSON bodies, by JSON path."""
    return [
        Difference(exchange, request, "JSON body", e, g, path=path, call=call)
        for path, e, g, call in _leaf_diffs(expected, got, "$")
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


def _part_id(chunk: dict[str, Any]) -> Any:
    """What part of the answer a chunk is about: its ``id``, its call; for an AG-UI
    event (whose type is upper case) also its ``messageId`` (a text, a reasoning)."""
    part = chunk.get("id", chunk.get("toolCallId", _call_of(chunk)))
    if part is None and str(chunk.get("type", "")).isupper():
        part = chunk.get("messageId")
    return part


def _label(chunk: dict[str, Any]) -> str:
    kind = str(chunk.get("type", "?"))
    part = _part_id(chunk)
    return f"{kind} {part}" if isinstance(part, str) else kind


def _part(chunk: dict[str, Any]) -> tuple[str, Any]:
    return str(chunk.get("type")), _part_id(chunk)


def diff_chunks(
    exchange: int,
    request: str,
    expected: list[tuple[int, dict[str, Any]]],
    got: list[tuple[int, dict[str, Any]]],
) -> list[Difference]:
    """The differences between two (normalised, merged) chunk lists, aligned so that one
    missing or extra chunk is reported as such rather than shifting every later one.

    A chunk that is on both sides but out of line (two calls made in the other order)
    is one ``moved`` difference; chunks that stand in each other's place (the same type
    and part) are compared field by field; the rest are missing or unexpected."""
    keys_e = [json.dumps(c, sort_keys=True) for _, c in expected]
    keys_g = [json.dumps(c, sort_keys=True) for _, c in got]
    matcher = difflib.SequenceMatcher(None, keys_e, keys_g, autojunk=False)
    blocks = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    # Moves: equal chunks of a part (a text, a call) left unaligned on both sides, first
    # in, first out. Step and finish chunks have no part: they are never "moved".
    spare: dict[str, list[int]] = {}
    for _, _e0, _e1, g0, g1 in blocks:
        for gi in range(g0, g1):
            if _part(got[gi][1])[1] is not None:
                spare.setdefault(keys_g[gi], []).append(gi)
    moved: dict[int, int] = {}
    for _, e0, e1, _g0, _g1 in blocks:
        for ei in range(e0, e1):
            if spare.get(keys_e[ei]):
                moved[ei] = spare[keys_e[ei]].pop(0)
    # Stand-ins, compared field by field: the same part (a text id, a call) anywhere,
    # then the same type within one unaligned stretch.
    paired = dict(moved)
    block_e = {i: n for n, op in enumerate(blocks) for i in range(op[1], op[2])}
    block_g = {i: n for n, op in enumerate(blocks) for i in range(op[3], op[4])}
    for same, local in ((_part, False), (lambda c: c.get("type"), True)):
        for ei in sorted(block_e):
            if ei in paired or (not local and _part(expected[ei][1])[1] is None):
                continue
            free = set(block_g) - set(paired.values())
            match = next(
                (
                    g
                    for g in sorted(free)
                    if same(got[g][1]) == same(expected[ei][1])
                    and (not local or block_g[g] == block_e[ei])
                ),
                None,
            )
            if match is not None:
                paired[ei] = match
    found: list[tuple[tuple[int, int], Difference]] = []

    def add(
        at: tuple[int, int], what: str, e: Any, g: Any, source: dict[str, Any], **fields: Any
    ) -> None:
        call = fields.pop("call", None) or _call_of(source)
        kind = str(source.get("type", "?"))
        found.append(
            (at, Difference(exchange, request, what, e, g, chunk_type=kind, call=call, **fields))
        )

    for ei in sorted(block_e):
        (rec, ec), at = expected[ei], (block_e[ei], ei)
        if ei in moved:
            rep = got[moved[ei]][0]
            what = f"chunk {rec} ({_label(ec)}) came in another order"
            add(
                at,
                what,
                Note(f"chunk {rec}"),
                Note(f"chunk {rep}"),
                ec,
                chunk=rec,
                got_chunk=rep,
                kind="moved",
            )
        elif ei in paired:
            rep, gc = got[paired[ei]]
            what = f"chunk {rec} ({_label(ec)})" + (
                f", replayed as chunk {rep}" if rep != rec else ""
            )
            for path, e, g, call in list(_leaf_diffs(ec, gc, "")) or [("", ec, gc, None)]:
                add(at, what, e, g, ec, chunk=rec, got_chunk=rep, path=path.lstrip("."), call=call)
        else:
            add(
                at,
                f"chunk {rec} ({_label(ec)}) is missing",
                ec,
                ABSENT,
                ec,
                chunk=rec,
                kind="missing",
            )
    taken = set(paired.values())
    for gi in sorted(set(block_g) - taken):
        rep, gc = got[gi]
        what = f"unexpected chunk ({_label(gc)}) replayed as chunk {rep}"
        add((block_g[gi], gi), what, ABSENT, gc, gc, got_chunk=rep, kind="unexpected")
    # In stream order: by unaligned stretch, then position.
    return [d for _, d in sorted(found, key=lambda item: item[0])]
