"""Generated ids on the two sides of a replay (private to
:mod:`parkway.transport.cassettes`).

A faithful replay differs from its recording in the ids the server generates
(``msg_…``, ``call_…``, ``apr_…``). :class:`IdTable` labels the ids one side has seen
(``msg#1``, ``call#1``, ``apr#1``) so both sides can be compared, and the same labels map
a recorded id to the id the replaying server generated in its place.

AG-UI names messages after the runner's ids (:mod:`parkway.transport.agui.encoder`): the
assistant message of step ``k`` is ``msg_…-k``, its reasoning ``msg_…-k-rN``, a tool's
result ``call_…-result``. Such a derived id is learnt as the generated id it is made
from, and its suffix stays as it is (``msg#1-1``, ``call#2-result``): so a request that
names it (an AG-UI client sends its messages back) is rewritten with the new id.

The recorded side is labelled in order of first appearance. The replayed side is
labelled against the recorded one (its *counterpart*): a call takes the label of the
recorded call with the same parkedCallKey (``tool#canonical JSON input``; first in,
first out among equal keys), an approval the label of the recorded approval of the
same call, and only what keys do not decide falls back to order. So a model that makes
the same calls in another order still has each recorded call matched to its true
counterpart, and answers reach the call they were meant for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from parkway.runner.canonical import parked_call_key
from parkway.runner.errors import NotPlainJSONError

__all__ = ["GENERATED_PREFIXES", "IdTable", "map_strings", "translate", "walk"]

# Generated-id prefixes, and the keys under which the server names such ids. A value
# under one of these keys that starts with one of the prefixes is a generated id (the
# AG-UI keys: a tool call's parent message, a finished run's pending frontend calls).
GENERATED_PREFIXES = ("msg_", "call_", "apr_")
_ID_KEYS = frozenset(
    {"messageId", "toolCallId", "approvalId", "id", "parentMessageId", "pendingToolCallIds"}
)
# An id derived from a generated one (runner/engine/run.py new_id: the prefix and 16
# characters of base64url) by the AG-UI encoder: a step's message ``-k``, its
# reasoning ``-rN``, a tool's result ``-result``. The length is what tells the suffix
# from the random part, which may itself end in ``-5``.
_DERIVED = re.compile(
    r"^((?:msg|call|apr)_[A-Za-z0-9_-]{16})(?:(?:-[0-9]+)?(?:-r[0-9]+)?|-result)$"
)
# Run failures and 500s name a random log reference; it carries no meaning in a diff.
_REFERENCE = re.compile(r"\(reference [0-9a-f]+\)")
# Stream chunk types that start with "tool-"; any other "tool-<name>" type is a UI
# message part of the tool <name> (the AI SDK's static tool parts).
_TOOL_CHUNKS = frozenset(
    {
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-input-error",
        "tool-output-available",
        "tool-output-error",
        "tool-output-denied",
        "tool-approval-request",
    }
)


def walk(value: Any, key: str | None = None) -> Iterator[tuple[str | None, Any]]:
    """Every (key, value) pair of a JSON value, depth first in document order."""
    yield key, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, k)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item, key)


def map_strings(value: Any, fn: Callable[[str, str | None], Any], key: str | None = None) -> Any:
    """``value`` with every string replaced by ``fn(string, key it sits under)``."""
    if isinstance(value, str):
        return fn(value, key)
    if isinstance(value, dict):
        return {k: map_strings(v, fn, k) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, fn, key) for v in value]
    return value


def _generated(item: Any, prefix: str = "") -> bool:
    return isinstance(item, str) and item.startswith(prefix or GENERATED_PREFIXES)


def _base(generated: str) -> str:
    """The generated id ``generated`` names: itself, or the id it is derived from."""
    found = _DERIVED.match(generated)
    return found.group(1) if found else generated


class _Calls:
    """What a JSON value says about the tool calls it names: each call's tool, its
    parkedCallKey where the input is known, and each approval's call. It reads the AI
    SDK's chunks and parts, and AG-UI's events (``TOOL_CALL_START`` names the tool,
    ``TOOL_CALL_ARGS`` stream the input, an interrupt's ``metadata.parkway`` describes
    its call, a snapshot's ``toolCalls`` hold name and arguments)."""

    def __init__(self, value: Any) -> None:
        self.tools: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.approvals: dict[str, str] = {}
        self._inputs: dict[str, Any] = {}
        self._streamed: dict[str, str] = {}
        for _, item in walk(value):
            if not isinstance(item, dict):
                continue
            function = item.get("function")
            if isinstance(function, dict) and _generated(item.get("id"), "call_"):
                self._function_call(str(item["id"]), function)
            elif _generated(item.get("toolCallId"), "call_"):
                self._item(str(item["toolCallId"]), item)
        for call, name in self.tools.items():
            if call in self.keys:
                continue
            if call not in self._inputs and call in self._streamed:
                try:
                    self._inputs[call] = json.loads(self._streamed[call])
                except ValueError:
                    continue
            if call in self._inputs:
                try:
                    self.keys[call] = parked_call_key(name, self._inputs[call])
                except NotPlainJSONError:
                    continue

    def _function_call(self, call: str, function: dict[str, Any]) -> None:
        """An AG-UI assistant message's tool call: ``{id, function: {name, arguments}}``."""
        if isinstance(function.get("name"), str):
            self.tools.setdefault(call, function["name"])
        if isinstance(function.get("arguments"), str):
            self._streamed.setdefault(call, function["arguments"])

    def _item(self, call: str, item: dict[str, Any]) -> None:
        """A chunk, part, event or interrupt that names ``call`` as its toolCallId."""
        kind = str(item.get("type", ""))
        metadata = item.get("metadata")
        about = metadata.get("parkway") if isinstance(metadata, dict) else None
        described = about if isinstance(about, dict) else item  # an AG-UI interrupt's call
        name = described.get("toolName", item.get("toolCallName"))
        if not isinstance(name, str) and kind.startswith("tool-") and kind not in _TOOL_CHUNKS:
            name = kind[len("tool-") :]  # a UI message part: "tool-<name>"
        if isinstance(name, str):
            self.tools.setdefault(call, name)
            if "input" in described:
                self._inputs.setdefault(call, described["input"])
        if isinstance(described.get("parkedCallKey"), str):
            self.keys.setdefault(call, described["parkedCallKey"])
        if kind == "tool-input-delta":
            self._stream(call, item.get("inputTextDelta", ""))
        elif kind == "TOOL_CALL_ARGS":
            self._stream(call, item.get("delta", ""))
        approval = described.get("approvalId")
        nested = item.get("approval")
        if isinstance(nested, dict):
            approval = nested.get("id")
        if _generated(approval, "apr_"):
            self.approvals.setdefault(str(approval), call)

    def _stream(self, call: str, delta: Any) -> None:
        self._streamed[call] = self._streamed.get(call, "") + str(delta)


class IdTable:
    """The generated ids one side of a replay has seen, with their labels.

    ``learn(value)`` labels new ids in order of first appearance per kind;
    ``learn(value, counterpart=recorded)`` labels them after the recorded side's ids
    (see the module doc). A replayed id with no recorded counterpart left gets an
    ``extra`` label (``call#extra1``), so it never takes a label a later recorded id
    needs.
    """

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}
        self._ids: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._anchors: dict[str, str] = {}  # label -> parkedCallKey, or "approval:<label>"
        self._tools: dict[str, str] = {}  # call label -> tool name
        self._latest: list[str] = []  # labels new in the last learn(), in order
        self._pattern: re.Pattern[str] | None = None

    def learn(self, value: Any, *, counterpart: IdTable | None = None) -> None:
        """Label every generated id that ``value`` (JSON) names and that is new."""
        fresh: list[str] = []
        for key, item in walk(value):
            if key not in _ID_KEYS or not _generated(item):
                continue
            generated = _base(item)
            if generated not in self._labels and generated not in fresh:
                fresh.append(generated)
        calls = _Calls(value)
        self._latest = []
        if counterpart is None:
            for generated in fresh:
                self._assign(generated, self._next_label(generated))
        else:
            self._match(fresh, calls, counterpart)
        for generated, name in calls.tools.items():
            label = self._labels.get(generated)
            if label is not None:
                self._tools.setdefault(label, name)
                if generated in calls.keys:
                    self._anchors.setdefault(label, calls.keys[generated])
        for approval, call in calls.approvals.items():
            label, call_label = self._labels.get(approval), self._labels.get(call)
            if label is not None and call_label is not None:
                self._anchors.setdefault(label, f"approval:{call_label}")
        self._pattern = None

    def _match(self, fresh: list[str], calls: _Calls, counterpart: IdTable) -> None:
        # Calls by parkedCallKey, then approvals by their call's label, then order.
        for generated in fresh:
            key = calls.keys.get(generated)
            if generated.startswith("call_") and key is not None:
                label = self._free_label(counterpart, anchor=key)
                if label is not None:
                    self._assign(generated, label)
        for generated in fresh:
            call_label = self._labels.get(calls.approvals.get(generated, ""))
            if generated.startswith("apr_") and call_label is not None:
                label = self._free_label(counterpart, anchor=f"approval:{call_label}")
                if label is not None:
                    self._assign(generated, label)
        for generated in fresh:
            if generated not in self._labels:
                prefix = generated.split("_", 1)[0] + "#"
                label = self._free_label(counterpart, prefix=prefix)
                self._assign(generated, label or self._next_label(generated, extra=True))

    def _free_label(
        self, counterpart: IdTable, *, anchor: str | None = None, prefix: str = ""
    ) -> str | None:
        """The counterpart's first label this table has not taken: with ``anchor``, the
        first (in the counterpart's order) with that anchor; otherwise the first of its
        kind (``prefix``), those the counterpart learnt last preferred, so an unmatched
        call stands in for a call of the same exchange."""
        if anchor is not None:
            order = list(counterpart._ids)
        else:
            older = [lb for lb in counterpart._ids if lb not in counterpart._latest]
            order = counterpart._latest + older
        for label in order:
            if label in self._ids or not label.startswith(prefix):
                continue
            if anchor is None or counterpart._anchors.get(label) == anchor:
                return label
        return None

    def _next_label(self, generated: str, *, extra: bool = False) -> str:
        kind = generated.split("_", 1)[0]
        counter = f"{kind}+" if extra else kind
        self._counts[counter] = self._counts.get(counter, 0) + 1
        return f"{kind}#{'extra' if extra else ''}{self._counts[counter]}"

    def _assign(self, generated: str, label: str) -> None:
        self._labels[generated] = label
        self._ids[label] = generated
        self._latest.append(label)

    def label(self, generated_id: str) -> str | None:
        return self._labels.get(generated_id)

    def id_for(self, label: str) -> str | None:
        return self._ids.get(label)

    def tool(self, label: str) -> str | None:
        """The tool name of the call labelled ``label``, when this side has seen it."""
        return self._tools.get(label)

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
        ``"<deadline>"`` (a numeric ``deadline``, an AG-UI interrupt's ``expiresAt``),
        an AG-UI event's ``timestamp`` by ``"<timestamp>"`` and log references by
        ``"(reference <ref>)"``."""

        def fix(text: str, key: str | None) -> str:
            text = self.substitute(text, lambda i: self._labels[i])
            return _REFERENCE.sub("(reference <ref>)", text)

        def clock(key: str, item: Any) -> str | None:
            """The mask of a wall-clock value: a numeric ``deadline``, an
            ``expiresAt`` (an AG-UI interrupt's is an ISO time), an AG-UI event's
            numeric ``timestamp``."""
            number = isinstance(item, int | float) and not isinstance(item, bool)
            if (key == "deadline" and number) or (
                key == "expiresAt" and (number or isinstance(item, str))
            ):
                return "<deadline>"
            if key == "timestamp" and number:
                return "<timestamp>"
            return None

        def deadlines(item: Any) -> Any:
            if isinstance(item, dict):
                out = {}
                for k, v in item.items():
                    masked = clock(k, v)
                    out[k] = masked if masked is not None else deadlines(v)
                return out
            if isinstance(item, list):
                return [deadlines(v) for v in item]
            return item

        return deadlines(map_strings(value, fix))


def translate(value: Any, source: IdTable, target: IdTable) -> Any:
    """``value`` with each id ``source`` knows replaced by the id ``target`` has under
    the same label; ids ``target`` has no counterpart for stay as they are."""

    def swap(found: str) -> str:
        label = source.label(found)
        new = target.id_for(label) if label is not None else None
        return new if new is not None else found

    return map_strings(value, lambda text, _key: source.substitute(text, swap))
