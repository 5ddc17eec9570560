"""The build-kit overlay merge: Python and the playground's JS pass the same vectors.

The playground applies the overlay in the browser (widgets_api/playground/static/overlay.js) while
the server's tests use widgets_api/playground/overlay.py; tests/helpers/vectors/overlay_merge.json pins the
rules both must follow, and a seeded generated set checks that they agree beyond it.
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from parkway.widgets_api.playground.overlay import (
    LIST_SECTIONS,
    OverlayMerge,
    entry_identity,
    merge_overlay,
)
from tests.helpers.support import run_node_vectors

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "helpers" / "vectors" / "overlay_merge.json"
RUNNER = ROOT / "tests" / "helpers" / "vectors" / "overlay_vectors.mjs"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())["cases"]
MERGE_CASES = [case for case in CASES if not case.get("error")]


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["name"] for case in cases]


def containers(value: Any) -> dict[int, Any]:
    """Every dict and list inside ``value``, by id (kept alive by the returned mapping)."""
    found: dict[int, Any] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            found[id(item)] = item
            stack.extend(item.values() if isinstance(item, dict) else item)
    return found


def run_node(vectors: Path) -> dict[str, Any]:
    return run_node_vectors(RUNNER, vectors, "the playground's overlay.js")


def test_vectors_cover_the_rules() -> None:
    """The vectors are the contract, so they must be broad enough to pin each rule down."""
    assert len(CASES) >= 20
    assert len(set(ids(CASES))) == len(CASES), "case names are unique"
    assert any(case.get("error") for case in CASES)
    identities = {
        override.get("identity", "").split(":")[0]
        for case in MERGE_CASES
        for override in case["expected"]["overrides"]
    }
    assert {"platform", "workflow", "name"} <= identities
    sections = {
        override["path"][0]
        for case in MERGE_CASES
        for override in case["expected"]["overrides"]
        if "identity" in override
    }
    assert sections == set(LIST_SECTIONS)


@pytest.mark.parametrize("case", MERGE_CASES, ids=ids(MERGE_CASES))
def test_python_merge_matches_vector(case: dict[str, Any]) -> None:
    """Python gives exactly the vector's template and overrides, key order included."""
    result = merge_overlay(case["template"], case["overlay"])
    got = {"template": result.template, "overrides": result.overrides}
    assert json.dumps(got) == json.dumps(case["expected"])


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.get("error")], ids=ids([c for c in CASES if c.get("error")])
)
def test_python_refuses_vector(case: dict[str, Any]) -> None:
    """A malformed template or overlay is a caller mistake, reported as ValueError."""
    with pytest.raises(ValueError, match=r"template|overlay"):
        merge_overlay(case["template"], case["overlay"])


@pytest.mark.parametrize("case", MERGE_CASES, ids=ids(MERGE_CASES))
def test_python_merge_leaves_inputs_alone(case: dict[str, Any]) -> None:
    """The playground merges into a throwaway copy: the user's template must never change,
    and editing the merged copy must not reach back into it."""
    template, overlay = copy.deepcopy(case["template"]), copy.deepcopy(case["overlay"])
    result = merge_overlay(template, overlay)
    assert json.dumps([template, overlay]) == json.dumps([case["template"], case["overlay"]])
    shared = containers(result.template).keys() & (
        containers(template).keys() | containers(overlay).keys()
    )
    assert not shared


def test_read_only_mappings_are_accepted_and_copied() -> None:
    """Mapping inputs (not only dicts) merge, and come back as plain dicts."""
    template = MappingProxyType({"sandbox": MappingProxyType({"network": False})})
    result = merge_overlay(template, MappingProxyType({"sandbox": {"network": True}}))
    assert result == OverlayMerge(
        template={"sandbox": {"network": True}}, overrides=[{"path": ["sandbox", "network"]}]
    )
    assert type(result.template["sandbox"]) is dict


class Opaque:
    pass


def cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "nan is not a JSON number"),
        (math.inf, "inf is not a JSON number"),
        (("a", "b"), "tuple is not plain JSON"),
        ({"a"}, "set is not plain JSON"),
        (b"bytes", "bytes is not plain JSON"),
        (Opaque(), "Opaque is not plain JSON"),
        ({1: "one"}, "key 1 is not a str"),
        (cyclic(), "a cycle"),
    ],
    ids=["nan", "inf", "tuple", "set", "bytes", "object", "int-key", "cycle"],
)
def test_non_json_values_are_refused_where_found(value: Any, message: str) -> None:
    """Only plain JSON can mean the same thing on both sides; the error names the spot."""
    with pytest.raises(ValueError, match=message) as template_error:
        merge_overlay({"sandbox": {"x": value}}, {})
    assert "template['sandbox']['x']" in str(template_error.value)
    with pytest.raises(ValueError, match=message) as overlay_error:
        merge_overlay({}, {"tools": [value]})
    assert "overlay['tools']['0']" in str(overlay_error.value)


@pytest.mark.parametrize(
    ("entry", "identity"),
    [
        ({"type": "platform", "op": "commit_config", "name": "x"}, "platform:commit_config"),
        ({"@ag.embed": {"@ag.references": {"workflow": {"slug": "s"}}}, "name": "x"}, "workflow:s"),
        ({"type": "client", "name": "pick"}, "name:pick"),
        ({"type": "platform", "op": 3, "name": "x"}, "name:x"),
        ({"@ag.embed": "not an object"}, None),
        ({"name": ""}, None),
        ("name:x", None),
        (None, None),
    ],
)
def test_entry_identity(entry: Any, identity: str | None) -> None:
    """Identity picks platform op, then embed slug, then name; nothing else counts."""
    assert entry_identity(entry) == identity


def test_js_passes_every_vector() -> None:
    """The playground's overlay.js passes the same vectors, leaves its inputs untouched,
    refuses non-JSON values and loads as a plain <script>."""
    summary = run_node(VECTORS)
    assert summary["cases"] == summary["passed"] == len(CASES)
    assert summary["checks"] == summary["checks_passed"] > 0


# A small vocabulary, so generated templates and overlays collide often: shared keys,
# shared identities, equal and unequal values, type changes. No integer-like keys: JS walks
# those first whatever the document's order, the one documented divergence.
TOP_KEYS = ["llm", "sandbox", "x"]
KEYS = ["permissions", "network", "a.b", "__proto__", "7a"]
SCALARS: list[Any] = [None, True, False, 0, 1, 1.0, 2.5, "", "s", "t"]
OPS = ["commit_config", "execute_code"]
NAMES = ["lookup", "pick", "github"]


def generate_value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.6:
        return {key: generate_value(rng, depth + 1) for key in rng.sample(KEYS, rng.randint(0, 3))}
    if roll < 0.7:
        return [generate_value(rng, 3) for _ in range(rng.randint(0, 2))]
    return rng.choice(SCALARS)


def generate_entry(rng: random.Random) -> Any:
    shape = rng.randrange(5)
    if shape == 0:
        entry: Any = {"type": "platform", "op": rng.choice(OPS)}
    elif shape == 1:
        entry = {"@ag.embed": {"@ag.references": {"workflow": {"slug": rng.choice(NAMES)}}}}
    elif shape == 2:
        entry = {"name": rng.choice(NAMES)}
    elif shape == 3:
        entry = {"description": rng.choice(NAMES)}
    else:
        return rng.choice(SCALARS)
    if rng.random() < 0.5:
        entry["v"] = rng.choice([1, 2])
    return entry


def generate_document(rng: random.Random, *, overlay: bool) -> dict[str, Any]:
    document: dict[str, Any] = {}
    keys = rng.sample(TOP_KEYS, rng.randint(0, 3))
    keys += [section for section in sorted(LIST_SECTIONS) if rng.random() < 0.7]
    rng.shuffle(keys)
    for key in keys:
        if key not in LIST_SECTIONS:
            document[key] = generate_value(rng, 1)
            continue
        entries, seen = [], set()
        for _ in range(rng.randint(0, 4)):
            entry = generate_entry(rng)
            identity = entry_identity(entry)
            if overlay and identity is not None and identity in seen:
                continue  # an overlay may not repeat an identity
            seen.add(identity)
            entries.append(entry)
        document[key] = entries
    return document


def test_js_agrees_with_python_on_generated_cases(tmp_path: Path) -> None:
    """Beyond the hand-written vectors, a seeded set of generated merges comes out of the
    JS exactly as Python computed it, key order and override order included."""
    rng = random.Random(1010)
    cases = []
    for number in range(300):
        template = generate_document(rng, overlay=False)
        overlay = generate_document(rng, overlay=True)
        result = merge_overlay(template, overlay)
        expected = {"template": result.template, "overrides": result.overrides}
        cases.append({"name": f"generated {number}", "template": template, "overlay": overlay})
        cases[-1]["expected"] = expected
    overrides = [o for case in cases for o in case["expected"]["overrides"]]
    assert sum("identity" in o for o in overrides) > 20, "the set exercises list sections"
    assert sum(len(o["path"]) > 1 for o in overrides) > 20, "and nested leaves"
    vectors = tmp_path / "generated.json"
    vectors.write_text(json.dumps({"cases": cases}))
    summary = run_node(vectors)
    assert summary["cases"] == summary["passed"] == len(cases)
