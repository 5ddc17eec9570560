"""``pw``, the helpers sandboxed programs get: tested in the host directly (the module is
plain standard-library Python, loaded from its file as the sandbox loads it)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

GUEST = Path(__file__).resolve().parents[3] / "runner" / "sandbox" / "guest"
PW_FILE = GUEST / "pw.py"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, GUEST / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# pw imports pw_query by name when a program first queries (the guest folder is on the
# sandbox's sys.path); here it is loaded from its file, as the sandbox would.
sys.modules.setdefault("pw_query", _load("pw_query"))
pw: Any = _load("pw")

LOG = """boot ok
ERROR 12 disk full
retry
error 13 disk still full
done"""

DATA = {
    "users": [
        {"name": "Ada", "age": 36, "tags": ["math"], "address": {"city": "London"}},
        {"name": "Alan", "age": 41, "tags": ["math", "crypto"], "address": {"city": "Wilmslow"}},
        {"name": "Grace", "age": 85, "tags": [], "active": True},
    ],
    "odd key": {"x": 1},
    "nested": [[1, 2], [3], 4],
}


def test_grep_finds_lines_with_numbers_and_context() -> None:
    found = pw.grep(r"ERROR \d+", LOG, context=1)
    assert found == [
        {"line": 2, "text": "ERROR 12 disk full", "before": ["boot ok"], "after": ["retry"]}
    ]
    assert [m["line"] for m in pw.grep("error", LOG, ignore_case=True)] == [2, 4]
    assert [m["line"] for m in pw.grep("disk", LOG.splitlines(), max_matches=1)] == [2]
    assert pw.grep("(", "a(b", fixed=True)[0]["text"] == "a(b"
    json.dumps(found)  # plain JSON, ready for result(...)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("users[0].name", "Ada"),
        ("users[-1].name", "Grace"),
        ("users[5].name", None),
        ("users[*].name", ["Ada", "Alan", "Grace"]),
        ("users[*].address.city", ["London", "Wilmslow"]),
        ("users[?age > 40].name", ["Alan", "Grace"]),
        ("users[?age <= 41].name", ["Ada", "Alan"]),
        ("users[?name == 'Ada'].age", [36]),
        ("users[?name != 'Ada'].name", ["Alan", "Grace"]),
        ("users[?address.city == 'London'].name", ["Ada"]),
        ("users[?active == true].name", ["Grace"]),
        ("users[?active == null].name", ["Ada", "Alan"]),
        ("users[?name > 'B'].name", ["Grace"]),
        ("users[*].tags[0]", ["math", "math"]),
        ("users[*].tags[*]", [["math"], ["math", "crypto"], []]),
        ("nested[]", [1, 2, 3, 4]),
        ('"odd key".x', 1),
        ("missing.key", None),
        ("users.name", None),
        ("nested[?@ == 4]", [4]),
    ],
)
def test_query_supports_its_documented_subset(expr: str, expected: Any) -> None:
    assert pw.query(DATA, expr) == expected


@pytest.mark.parametrize(
    "expr", ["", "users[", "users[?age]", "users[?age ~ 3]", "users.", ".users", "users[x]", "1a"]
)
def test_query_names_the_position_of_a_malformed_expression(expr: str) -> None:
    with pytest.raises(ValueError, match="query: "):
        pw.query(DATA, expr)


def test_query_compares_as_json_does() -> None:
    """true is not 1, and < holds only between two numbers or two strings."""
    rows = [{"v": True}, {"v": 1}, {"v": "1"}, {"v": 2}]
    assert pw.query({"r": rows}, "r[?v == 1].v") == [1]
    assert pw.query({"r": rows}, "r[?v == true].v") == [True]
    assert pw.query({"r": rows}, "r[?v < 3].v") == [1, 2]


def test_text_helpers() -> None:
    assert pw.split_lines("a\r\nb\nc") == ["a", "b", "c"]
    assert pw.chunk("abcdefgh", 3) == ["abc", "def", "gh"]
    assert pw.chunk("abcdefgh", 4, overlap=2) == ["abcd", "cdef", "efgh"]
    assert pw.chunk("", 3) == []
    with pytest.raises(ValueError, match="overlap"):
        pw.chunk("abc", 2, overlap=2)
    assert pw.truncate("hello world", 8) == "hello w…"
    assert pw.truncate("short", 8) == "short" and pw.truncate("abc", 1) == "a"
    assert pw.word_count(" two  words\n") == 2


def test_diff_is_a_unified_diff_like_diff_u(tmp_path: Path) -> None:
    a, b = "one\ntwo\nthree\n", "one\n2\nthree\nfour"
    text = pw.diff(a, b, a_name="old", b_name="new")
    assert text.startswith("--- old\n+++ new\n@@ -1,3 +1,4 @@\n")
    assert "-two\n+2\n" in text and text.endswith("+four\n")
    assert pw.diff(a, a) == ""
    (tmp_path / "a").write_text(a)
    (tmp_path / "b").write_text(b + "\n")
    reference = subprocess.run(
        ["diff", "-u", "a", "b"], cwd=tmp_path, capture_output=True, text=True, check=False
    ).stdout
    body = lambda t: t.splitlines()[2:]  # noqa: E731 (the headers carry times)
    assert body(text) == body(reference)


CSV = "region,total,status\nnorth,100,open\nsouth,88,closed\nnorth,210.5,open\nwest,,open\n"


def test_csv_round_trip_filter_select() -> None:
    rows = pw.read_csv(CSV)
    assert rows[0] == {"region": "north", "total": "100", "status": "open"}
    assert pw.filter_rows(rows, status="closed") == [rows[1]]
    assert pw.filter_rows(rows, total=100) == [rows[0]]  # "100" matches 100
    assert pw.filter_rows(rows, lambda r: r["region"] != "north", status="open") == [rows[3]]
    assert pw.select(rows[:1], ["total", "missing"]) == [{"total": "100", "missing": None}]
    assert pw.select(rows[:1], "region") == [{"region": "north"}]
    text = pw.write_csv(pw.select(rows, ["region", "total"]))
    assert text.splitlines()[:2] == ["region,total", "north,100"]
    assert pw.read_csv(pw.write_csv(rows)) == rows
    assert pw.read_csv("a,b\n1,2,3\n4\n") == [
        {"a": "1", "b": "2", "_extra": ["3"]},
        {"a": "4", "b": ""},
    ]
    assert pw.write_csv([{"a": 1}, {"b": 2}]) == "a,b\n1,\n,2\n"


def test_aggregate_groups_and_ops() -> None:
    rows = pw.read_csv(CSV)
    assert pw.aggregate(rows, "region") == {"north": 2, "south": 1, "west": 1}
    assert pw.aggregate(rows, "region", "total", "count") == {"north": 2, "south": 1, "west": 0}
    assert pw.aggregate(rows, "region", "total", "sum") == {"north": 310.5, "south": 88, "west": 0}
    assert pw.aggregate(rows, "region", "total", "mean") == {
        "north": 155.25,
        "south": 88.0,
        "west": None,
    }
    assert pw.aggregate(rows, None, "total", "max") == 210.5
    assert pw.aggregate(rows, None, "region", "min") == "north"  # text when not numbers
    with pytest.raises(ValueError, match="not a number"):
        pw.aggregate(rows, None, "region", "sum")
    with pytest.raises(ValueError, match="op must be one of"):
        pw.aggregate(rows, "region", "total", "median")


def test_pw_imports_nothing_heavy_at_load() -> None:
    """The helpers import what they use when called, so every run starts fast."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); import pw; "
        "print(sorted(set(sys.modules) - before - {'pw'}))"
    )
    loaded = subprocess.run(
        ["/usr/bin/python3", "-I", "-S", "-c", code, str(PW_FILE.parent)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert loaded.strip() == "['__future__']"
