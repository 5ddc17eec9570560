"""The template merge: lay a partial agent template over an agent template.

The same rules serve the build-kit overlay (``widgets_api/playground/overlay.py``) and the patches
of the ``commit_config`` platform op, so a change the playground previews is the change
that gets committed.

While a user builds an agent in the playground, the assistant needs scaffolding that must
never ship with the published agent (platform tools, the ``request_connection`` reference
tool, an authoring skill, elevated sandbox permissions). The server describes it as an
overlay; the playground merges it into a throwaway copy of the template on each run and
shows an override hint wherever the overlay replaced a value the user set themselves
(docs/architecture.md, "Agent revisions and the build kit"). The playground is vanilla
JS, so the same rules live twice, here and in ``widgets_api/playground/static/overlay.js``, pinned
by ``tests/helpers/vectors/overlay_merge.json``.

Rules:

- Template and overlay are JSON objects of plain JSON (dicts with str keys, lists, str,
  int, finite float, bool, None). Anything else, or a cycle, is a ``ValueError`` naming
  where it was found. The inputs are never mutated and the result shares nothing with them.
- List sections are exactly the top-level keys ``tools``, ``skills`` and ``mcps``; they must
  be arrays on both sides. They merge by identity (:func:`entry_identity`): an overlay entry
  whose identity matches a template entry replaces it wholesale, at the same index (the
  first match when the user's list repeats an identity); any other entry, including one
  with no identity, is appended in overlay order. Two overlay entries of one section with
  the same identity are a ``ValueError``: "last one wins" would hide a mistake in the kit.
- Every other key is an object section: two objects deep-merge; anything else (a scalar,
  an array, ``None``, or a value of a different type) is a leaf and the overlay's value
  replaces the template's wholesale. Arrays inside object sections are never merged.
- Key order is deterministic: the template's keys in their order, then the overlay's new
  keys in overlay order, at every depth.
- An override is recorded where the overlay replaced a value the user had set: a leaf whose
  key the template already had (``None`` counts as set) with a value that differs, as
  ``{"path": [...segments]}``; a list-section entry that replaced a differing template
  entry, as ``{"path": ["tools"], "identity": "name:foo"}``. Equal values and new keys are
  not overrides. Overrides are listed in the order the overlay is walked (overlay key order,
  depth first; section entries in overlay order).
- Paths are lists of key segments, so a key containing a dot needs no escaping:
  ``["sandbox", "permissions", "network"]``.
- Equality is JSON equality: ``1 == 1.0`` but ``True != 1``; object key order is ignored.

One divergence is inherent to JavaScript: its objects list integer-like keys (``"0"``,
``"42"``) first, in ascending order, whatever the document's order, so the JS side can
neither see nor keep the order of such keys. The merged values and the set of overrides are
the same on both sides; the order of those keys, and of overrides found under them, can
differ. Agent templates have no such keys in practice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LIST_SECTIONS", "OverlayMerge", "entry_identity", "merge_overlay"]

LIST_SECTIONS: frozenset[str] = frozenset({"tools", "skills", "mcps"})
"""Top-level keys merged by entry identity rather than deep-merged."""

_HINT = "use dicts with str keys, lists, str, int, finite float, bool or None"


@dataclass(frozen=True)
class OverlayMerge:
    """The merged template (a fresh copy) and where the overlay overrode the user."""

    template: dict[str, Any]
    overrides: list[dict[str, Any]]


def entry_identity(entry: Any) -> str | None:
    """Name what a list-section entry is, so an overlay entry can replace its twin.

    ``platform:<op>`` for ``{"type": "platform", "op": ...}``; else ``workflow:<slug>`` for an
    embed reference ``{"@ag.embed": {"@ag.references": {"workflow": {"slug": ...}}}}``; else
    ``name:<name>``. Only non-empty strings count. ``None`` when the entry has no identity.
    """
    if not isinstance(entry, Mapping):
        return None
    op = entry.get("op")
    if entry.get("type") == "platform" and _is_name(op):
        return f"platform:{op}"
    slug: Any = entry
    for key in ("@ag.embed", "@ag.references", "workflow", "slug"):
        slug = slug.get(key) if isinstance(slug, Mapping) else None
    if _is_name(slug):
        return f"workflow:{slug}"
    name = entry.get("name")
    if _is_name(name):
        return f"name:{name}"
    return None


def merge_overlay(template: Mapping[str, Any], overlay: Mapping[str, Any]) -> OverlayMerge:
    """Merge ``overlay`` into a copy of ``template`` by the rules in the module docstring.

    Raises ``ValueError`` when either input is not a JSON object of plain JSON, when a list
    section is not an array, or when an overlay section repeats an identity.
    """
    base = _top_level(template, "template")
    top = _top_level(overlay, "overlay")
    overrides: list[dict[str, Any]] = []
    merged = dict(base)
    for key, value in top.items():
        if key in LIST_SECTIONS:
            merged[key] = _merge_section(key, base.get(key, []), value, overrides)
        elif key in merged:
            merged[key] = _merge_value(merged[key], value, [key], overrides)
        else:
            merged[key] = value
    return OverlayMerge(template=merged, overrides=overrides)


def _top_level(value: Any, side: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{side} must be a JSON object, got {_kind(value)}")
    copied: dict[str, Any] = _copy_plain(value, side, [], set())
    for key in LIST_SECTIONS & copied.keys():
        if not isinstance(copied[key], list):
            raise ValueError(
                f"{side}[{key!r}] must be a JSON array (a list section merged by identity), "
                f"got {_kind(copied[key])}"
            )
    return copied


def _merge_value(old: Any, new: Any, path: list[str], overrides: list[dict[str, Any]]) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for key, value in new.items():
            if key in merged:
                merged[key] = _merge_value(merged[key], value, [*path, key], overrides)
            else:
                merged[key] = value
        return merged
    if not _json_equal(old, new):
        overrides.append({"path": path})
    return new


def _merge_section(
    section: str, old: list[Any], new: list[Any], overrides: list[dict[str, Any]]
) -> list[Any]:
    merged = list(old)
    identities = [entry_identity(entry) for entry in old]
    seen: set[str] = set()
    for entry in new:
        identity = entry_identity(entry)
        if identity is None:
            merged.append(entry)
            continue
        if identity in seen:
            raise ValueError(
                f"overlay[{section!r}] has two entries with identity {identity!r}; keep one of them"
            )
        seen.add(identity)
        if identity in identities:
            index = identities.index(identity)
            if not _json_equal(merged[index], entry):
                overrides.append({"path": [section], "identity": identity})
            merged[index] = entry
        else:
            merged.append(entry)
    return merged


def _copy_plain(value: Any, side: str, path: list[str], active: set[int]) -> Any:
    """Deep-copy ``value``, refusing anything that is not plain JSON."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{_where(side, path)}: {value!r} is not a JSON number; {_HINT}")
        return value
    if isinstance(value, Mapping | list):
        if id(value) in active:
            raise ValueError(f"{_where(side, path)}: the value contains itself (a cycle)")
        active.add(id(value))
        try:
            if isinstance(value, list):
                return [
                    _copy_plain(item, side, [*path, str(i)], active) for i, item in enumerate(value)
                ]
            copied: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ValueError(f"{_where(side, path)}: key {key!r} is not a str; {_HINT}")
                copied[key] = _copy_plain(item, side, [*path, key], active)
            return copied
        finally:
            active.discard(id(value))
    raise ValueError(f"{_where(side, path)}: {_kind(value)} is not plain JSON; {_HINT}")


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _kind(value: Any) -> str:
    """JSON's name for a value's type (as the JS side says it), else the Python type's."""
    if value is None:
        return "null"
    for types, name in _JSON_KINDS:
        if isinstance(value, types):
            return name
    return type(value).__name__


_JSON_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),
    ((int, float), "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _where(side: str, path: list[str]) -> str:
    return side + "".join(f"[{segment!r}]" for segment in path)
