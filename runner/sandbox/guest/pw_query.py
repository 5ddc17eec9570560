"""The query language of ``pw.query``: a small subset of JMESPath, parsed by hand.

An expression parses into steps (``key``, ``index``, ``each``, ``flatten``, ``filter``)
applied left to right; a projection step applies the rest to each item of a list and
leaves out the items that give None, as JMESPath does. Standard library only: it runs
inside the sandbox, imported by ``pw`` when a program first queries.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~10 ms to import at every run; annotations only
    from typing import Any

__all__ = ["evaluate"]

_COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")


def evaluate(data: Any, expr: str) -> Any:
    """``pw.query(data, expr)``: see its docstring for the language."""
    steps = _parse_path(expr, 0, top=True)[0]
    return _evaluate(steps, 0, data)


def _parse_error(expr: str, at: int, what: str) -> ValueError:
    return ValueError(f"query: {what} at position {at} of {expr!r}")


def _key(expr: str, at: int) -> tuple[str, int]:
    if at < len(expr) and expr[at] == '"':
        end = expr.find('"', at + 1)
        if end < 0:
            raise _parse_error(expr, at, "unterminated quoted key")
        return expr[at + 1 : end], end + 1
    end = at
    while end < len(expr) and (expr[end].isalnum() or expr[end] == "_"):
        end += 1
    if end == at or expr[at].isdigit():
        raise _parse_error(expr, at, "expected a key")
    return expr[at:end], end


def _parse_path(expr: str, at: int, *, top: bool) -> tuple[list[tuple[str, Any]], int]:
    """Steps ``("key", name) | ("index", n) | ("each", None) | ("flatten", None) |
    ("filter", (path, op, literal))`` from ``at``; a nested path (inside a filter)
    stops at the first character it cannot take."""
    steps: list[tuple[str, Any]] = []
    expect_key = True
    while True:
        while at < len(expr) and expr[at] == " ":
            at += 1
        if at >= len(expr):
            break
        char = expr[at]
        if char == "[":
            step, at = _bracket(expr, at, nested=not top)
            steps.append(step)
            expect_key = False
        elif char == "." and steps and not expect_key:
            at += 1
            expect_key = True
            if at >= len(expr) or expr[at] in ".[ ":
                raise _parse_error(expr, at, "expected a key after '.'")
        elif char == "@" and not steps and not top:
            at += 1
            expect_key = False
        elif expect_key and (char == '"' or char.isalpha() or char == "_"):
            name, at = _key(expr, at)
            steps.append(("key", name))
            expect_key = False
        elif top:
            raise _parse_error(expr, at, f"unexpected {char!r}")
        else:
            break
    if top and (not steps or expect_key):
        raise _parse_error(expr, at, "incomplete expression")
    return steps, at


def _bracket(expr: str, at: int, *, nested: bool) -> tuple[tuple[str, Any], int]:
    close = expr.find("]", at)
    inner = expr[at + 1 : close].strip() if close >= 0 else ""
    if inner == "*" and close >= 0:
        step: tuple[str, Any] = ("each", None)
    elif inner == "" and close >= 0:
        step = ("flatten", None)
    elif inner.lstrip("-").isdigit() and close >= 0:
        step = ("index", int(inner))
    elif expr.startswith("[?", at) and not nested:
        step, close = _filter(expr, at + 2)
    else:
        raise _parse_error(expr, at, "expected [n], [*], [] or [?...]")
    return step, close + 1


def _filter(expr: str, at: int) -> tuple[tuple[str, Any], int]:
    path, at = _parse_path(expr, at, top=False)
    while at < len(expr) and expr[at] == " ":
        at += 1
    op = next((op for op in _COMPARISONS if expr.startswith(op, at)), None)
    if op is None:
        raise _parse_error(expr, at, "expected a comparison (==, !=, <, <=, >, >=)")
    literal, at = _literal(expr, at + len(op))
    while at < len(expr) and expr[at] == " ":
        at += 1
    if at >= len(expr) or expr[at] != "]":
        raise _parse_error(expr, at, "expected ']' to close the filter")
    return ("filter", (path, op, literal)), at


def _literal(expr: str, at: int) -> tuple[Any, int]:
    while at < len(expr) and expr[at] == " ":
        at += 1
    if expr.startswith("'", at):
        end = expr.find("'", at + 1)
        if end < 0:
            raise _parse_error(expr, at, "unterminated string")
        return expr[at + 1 : end], end + 1
    for word, value in (("true", True), ("false", False), ("null", None)):
        if expr.startswith(word, at):
            return value, at + len(word)
    end = at
    while end < len(expr) and (expr[end].isdigit() or expr[end] in "-+.eE"):
        end += 1
    try:
        number = float(expr[at:end])
    except ValueError:
        what = "expected a literal ('text', a number, true, false, null)"
        raise _parse_error(expr, at, what) from None
    return (int(number) if number.is_integer() and "." not in expr[at:end] else number), end


def _evaluate(steps: list[tuple[str, Any]], start: int, value: Any) -> Any:
    for position in range(start, len(steps)):
        kind, arg = steps[position]
        if kind == "key":
            value = value.get(arg) if isinstance(value, dict) else None
        elif kind == "index":
            in_range = isinstance(value, list) and -len(value) <= arg < len(value)
            value = value[arg] if in_range else None
        else:
            if not isinstance(value, list):
                return None
            if kind == "flatten":
                items = [x for item in value for x in (item if isinstance(item, list) else [item])]
            elif kind == "filter":
                items = [item for item in value if _holds(arg, item)]
            else:
                items = value
            projected = (_evaluate(steps, position + 1, item) for item in items)
            return [item for item in projected if item is not None]
        if value is None:
            return None
    return value


def _holds(condition: tuple[list[tuple[str, Any]], str, Any], item: Any) -> bool:
    path, op, wanted = condition
    actual = _evaluate(path, 0, item)
    if op == "==":
        return _same(actual, wanted)
    if op == "!=":
        return not _same(actual, wanted)
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (actual, wanted))
    if not numbers and not (isinstance(actual, str) and isinstance(wanted, str)):
        return False
    if op == "<":
        return bool(actual < wanted)
    if op == "<=":
        return bool(actual <= wanted)
    if op == ">":
        return bool(actual > wanted)
    return bool(actual >= wanted)


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b
