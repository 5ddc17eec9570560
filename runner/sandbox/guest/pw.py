"""The `pw` module: small helpers for sandboxed programs (standard library only, bound as ``pw``).

Search text::

    pw.grep(r"ERROR \\d+", log, context=1)
    # [{"line": 12, "text": "ERROR 42 disk full", "before": ["..."], "after": ["..."]}]

Pick values out of JSON (a small JMESPath subset, see :func:`query`)::

    pw.query(data, "orders[?status == 'open'].total")   # [12.5, 40]
    pw.query(data, "users[0].name")                     # "Ada"

Text: ``split_lines(text)``, ``chunk(text, 1000, overlap=100)``, ``truncate(text, 80)``,
``word_count(text)``, ``diff(a, b)`` (a unified diff).

CSV (every cell is a string)::

    rows = pw.read_csv(artifacts.text("sales.csv"))
    open_rows = pw.filter_rows(rows, status="open")
    big = pw.filter_rows(rows, lambda r: float(r["total"]) > 100)
    pw.aggregate(rows, "region", "total", "sum")        # {"north": 310.5, "south": 88}
    pw.write_csv(pw.select(big, ["id", "total"]))       # "id,total\\n7,120\\n"

Every helper returns plain JSON values (lists, dicts, strings, numbers), so its
output can be passed straight to ``result(...)``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~10 ms to import at every run; annotations only
    from collections.abc import Callable, Iterable
    from typing import Any

__all__ = [
    "aggregate",
    "chunk",
    "diff",
    "filter_rows",
    "grep",
    "query",
    "read_csv",
    "select",
    "split_lines",
    "truncate",
    "word_count",
    "write_csv",
]

# -- search -------------------------------------------------------------------------


def grep(
    pattern: str,
    text_or_lines: str | Iterable[str],
    *,
    context: int = 0,
    ignore_case: bool = False,
    fixed: bool = False,
    max_matches: int = 100,
) -> list[dict[str, Any]]:
    """The lines matching the regular expression ``pattern`` (``re.search``; ``fixed``:
    a plain substring), at most ``max_matches``, each as ``{"line": n, "text": ...,
    "before": [...], "after": [...]}`` with 1-based line numbers and up to ``context``
    lines around it."""
    import re  # noqa: PLC0415 (helpers import what they use when first called)

    lines = split_lines(text_or_lines) if isinstance(text_or_lines, str) else list(text_or_lines)
    regex = re.compile(
        re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0
    )
    if context < 0 or max_matches < 0:
        raise ValueError("grep: context and max_matches must not be negative")
    found: list[dict[str, Any]] = []
    for index, line in enumerate(lines):
        if len(found) >= max_matches:
            break
        if regex.search(line):
            found.append(
                {
                    "line": index + 1,
                    "text": line,
                    "before": lines[max(0, index - context) : index],
                    "after": lines[index + 1 : index + 1 + context],
                }
            )
    return found


# -- query: a small JMESPath subset (pw_query.py) --------------------------------------


def query(data: Any, expr: str) -> Any:
    """Pick values out of JSON data with a small subset of JMESPath.

    Supported, and nothing else:

    - ``a.b.c``: keys of objects (``"odd key"`` in double quotes for other characters);
    - ``a[0]``, ``a[-1]``: an item of a list;
    - ``a[*].b``: projection: what follows applies to each item of the list;
    - ``a[]``: flatten one level of nested lists, then project;
    - ``a[?key == 'v'].b``: filter then project; the comparisons are ``==``, ``!=``, ``<``,
      ``<=``, ``>``, ``>=``; the left side is a path inside the item (``@`` is the item
      itself), the right side a literal: ``'text'``, a number, ``true``, ``false`` or
      ``null``. ``<``-style comparisons hold only between two numbers or two strings.

    As in JMESPath, a missing key or index gives ``None`` (no exception), and a
    projection leaves out the items that give ``None``. A malformed expression is a
    ``ValueError`` that names the position.
    """
    from pw_query import evaluate  # noqa: PLC0415 (parsed only when a program queries)

    return evaluate(data, expr)


# -- text ------------------------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, without their line endings."""
    return text.splitlines()


def chunk(text: str, size: int, overlap: int = 0) -> list[str]:
    """``text`` in pieces of ``size`` characters, each starting ``size - overlap`` after
    the one before; the last piece may be shorter. An empty text gives ``[]``."""
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError("chunk: size must be positive and 0 <= overlap < size")
    pieces = []
    start = 0
    while start < len(text):
        pieces.append(text[start : start + size])
        if start + size >= len(text):
            break
        start += size - overlap
    return pieces


def truncate(text: str, n: int, marker: str = "…") -> str:
    """``text`` cut to at most ``n`` characters, ``marker`` included when it was cut."""
    if n < 0:
        raise ValueError("truncate: n must not be negative")
    if len(text) <= n:
        return text
    if n <= len(marker):
        return text[:n]
    return text[: n - len(marker)] + marker


def word_count(text: str) -> int:
    """The number of whitespace-separated words."""
    return len(text.split())


def diff(a: str, b: str, *, context: int = 3, a_name: str = "a", b_name: str = "b") -> str:
    """A unified diff from ``a`` to ``b`` ("" when they are equal)."""
    import difflib  # noqa: PLC0415

    lines = difflib.unified_diff(
        a.splitlines(), b.splitlines(), a_name, b_name, n=context, lineterm=""
    )
    text = "\n".join(lines)
    return text + "\n" if text else ""


# -- CSV -------------------------------------------------------------------------------


def read_csv(text: str, *, delimiter: str = ",") -> list[dict[str, str]]:
    """Rows of a CSV text with a header line, as dicts of strings. A short row's missing
    cells are ""; a long row's extra cells go, as a list, under the key ``"_extra"``."""
    import csv  # noqa: PLC0415
    import io  # noqa: PLC0415

    reader = csv.DictReader(io.StringIO(text), delimiter=delimiter, restkey="_extra", restval="")
    return [dict(row) for row in reader]


def filter_rows(
    rows: Iterable[dict[str, Any]],
    predicate: Callable[[dict[str, Any]], Any] | None = None,
    **equals: Any,
) -> list[dict[str, Any]]:
    """The rows for which ``predicate(row)`` is true and each ``column=value`` holds. A
    string cell also matches a non-string value of the same text (``age=30`` matches
    ``"30"``), since every CSV cell is a string."""
    kept = []
    for row in rows:
        if predicate is not None and not predicate(row):
            continue
        if all(_cell_equals(row.get(column), value) for column, value in equals.items()):
            kept.append(row)
    return kept


def _cell_equals(cell: Any, value: Any) -> bool:
    if cell == value:
        return True
    return isinstance(cell, str) and not isinstance(value, str) and cell == str(value)


def select(rows: Iterable[dict[str, Any]], cols: str | Iterable[str]) -> list[dict[str, Any]]:
    """The rows with only the columns ``cols`` (in that order; a missing cell is None)."""
    columns = [cols] if isinstance(cols, str) else list(cols)
    return [{column: row.get(column) for column in columns} for row in rows]


_OPS = ("count", "sum", "min", "max", "mean")


def aggregate(
    rows: Iterable[dict[str, Any]], by: str | None, field: str | None = None, op: str = "count"
) -> Any:
    """``op`` (count, sum, min, max, mean) of the column ``field`` per value of the
    column ``by``, as ``{group: value}`` in the order groups first appear; with ``by``
    None, the one value over all rows. Empty cells are skipped; sum and mean need
    numbers ("12", "3.5" count as numbers); min and max compare numbers when every cell
    is one, else text. ``count`` counts rows (or non-empty cells when ``field`` is
    given). A group with no values gives None (0 for count and sum)."""
    if op not in _OPS:
        raise ValueError(f"aggregate: op must be one of {', '.join(_OPS)}, not {op!r}")
    if op != "count" and field is None:
        raise ValueError(f"aggregate: {op} needs a field")
    groups: dict[str, list[Any]] = {}
    for row in rows:
        key = "" if by is None else _group_key(row.get(by))
        cells = groups.setdefault(key, [])
        if field is None:
            cells.append(True)
        elif (cell := row.get(field)) is not None and cell != "":
            cells.append(cell)
    if by is None:
        return _combine(groups.get("", []), op, field)
    return {key: _combine(cells, op, field) for key, cells in groups.items()}


def _group_key(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _combine(cells: list[Any], op: str, field: str | None) -> Any:
    if op == "count":
        return len(cells)
    numbers = [_number(cell) for cell in cells]
    if op in ("min", "max") and any(n is None for n in numbers):
        texts = [str(cell) for cell in cells]
        return (min(texts) if op == "min" else max(texts)) if texts else None
    if any(n is None for n in numbers):
        bad = next(cells[i] for i, n in enumerate(numbers) if n is None)
        raise ValueError(f"aggregate: {field}={bad!r} is not a number")
    if op == "sum":
        return sum(numbers)
    if not numbers:
        return None
    if op == "mean":
        return sum(numbers) / len(numbers)  # type: ignore[arg-type]
    return min(numbers) if op == "min" else max(numbers)  # type: ignore[type-var]


def _number(cell: Any) -> int | float | None:
    if isinstance(cell, bool):
        return None
    if isinstance(cell, (int, float)):
        return cell
    text = str(cell).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    import math  # noqa: PLC0415

    return value if math.isfinite(value) else None


def write_csv(rows: Iterable[dict[str, Any]], cols: Iterable[str] | None = None) -> str:
    """CSV text with a header line: the columns ``cols``, or every key in the order
    first seen. Missing cells are empty; lines end with ``\\n``."""
    import csv  # noqa: PLC0415
    import io  # noqa: PLC0415

    rows = list(rows)
    if cols is None:
        columns: dict[str, None] = {}
        for row in rows:
            columns.update(dict.fromkeys(row))
        cols = list(columns)
    out = io.StringIO()
    writer = csv.DictWriter(out, list(cols), restval="", extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
