"""Finding the places that reach Parkway's modules by the repository's folder names.

The folders ``runner/``, ``transport/`` and ``widgets_api/`` install as
``parkway.runner``, ``parkway.transport`` and ``parkway.widgets_api``. Inside a checkout
the bare folder names import too (the repository root is on ``sys.path`` for pytest, and
``python -m`` puts the working directory there), so code that says
``resources.files("widgets_api")`` passes every test run from a checkout and fails for
every user of the installed wheel. This module finds such references in any text:
Python source (imports, and module names in strings), docs, HTML, JavaScript, TOML.

What counts as reaching a module by a bare name:

- an import statement: ``import runner``, ``from transport.app import ...`` (in code
  and in code shown in docs);
- a ``module:attribute`` reference: ``"runner.demo:get_weather"`` (agent files' refs,
  entry points, uvicorn's app strings);
- a dotted module name in a string: ``"widgets_api.static"``, ``"runner.loop.Runner"``
  (``import_module``, ``resources.files``, ``mock.patch`` targets);
- a bare package handed to the loaders: ``files("widgets_api")``,
  ``import_module("runner")``, ``python -m transport.cli``.

A mention of a folder (``widgets_api/playground/static/``) or of a variable named ``runner``
(``runner.driver``, outside a string) is none of these.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import io
import re
import sys
import tokenize
import types
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BARE", "Finding", "InstalledNamesOnly", "bare_references", "refuse_bare_imports"]

BARE = ("runner", "transport", "widgets_api")
_NAME = "(?:" + "|".join(BARE) + ")"
# Not preceded by a name character, a dot (``parkway.runner``), a slash or a dash (a path
# or a file name such as ``test_runner.py``).
_START = r"(?<![\w./\-])"

_TEXT_PATTERNS = {
    "import": re.compile(rf"^\s*(?:from\s+{_NAME}(?:\.\w+)*\s+import\b|import\s+{_NAME}\b)", re.M),
    "module:attribute reference": re.compile(rf"{_START}{_NAME}(?:\.\w+)+:[A-Za-z_]"),
    "quoted module name": re.compile(rf"""["'`]{_NAME}(?:\.\w+)+(?::[\w.]+)?["'`]"""),
    "loader call": re.compile(
        rf"""(?:files|import_module|__import__|find_spec|get_data|import_string)\(\s*["']{_NAME}\b"""
    ),
    "python -m": re.compile(rf"-m\s+{_NAME}\b"),
}
# In Python source, any string literal that is a bare dotted module name, with or without
# an attribute (``"runner.loop"``, ``"widgets_api.page:page_routes"``), or exactly a bare
# package handed on (checked by the loader-call pattern above).
_DOTTED = re.compile(rf"^{_NAME}(?:\.\w+)+(?::[\w.]+)?$")


@dataclass(frozen=True)
class Finding:
    """One bare reference: where, what kind, and the line it is on."""

    path: str
    line: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.text.strip()}"


def _python_strings(source: str) -> list[tuple[int, str]]:
    """(line, value) of each plain string literal in Python source (f-strings' literal
    parts are read as text by the patterns)."""
    found = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    for token in tokens:
        if token.type != tokenize.STRING:
            continue
        literal = token.string
        prefix = re.match(r"^[A-Za-z]*", literal)
        assert prefix is not None
        if "f" in prefix.group().lower() or "b" in prefix.group().lower():
            continue
        body = literal[len(prefix.group()) :]
        quote = body[:3] if body[:3] in {'"""', "'''"} else body[:1]
        found.append((token.start[0], body[len(quote) : -len(quote)]))
    return found


def bare_references(path: str, text: str) -> list[Finding]:
    """Every bare reference in ``text`` (the content of the file at ``path``)."""
    lines = text.splitlines()
    found: dict[tuple[int, str], Finding] = {}
    for kind, pattern in _TEXT_PATTERNS.items():
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.setdefault((line, kind), Finding(path, line, kind, lines[line - 1]))
    if path.endswith(".py"):
        for line, value in _python_strings(text):
            if _DOTTED.match(value.strip()):
                kind = "module name in a string"
                found.setdefault((line, kind), Finding(path, line, kind, lines[line - 1]))
    return sorted(found.values(), key=lambda f: (f.line, f.kind))


class InstalledNamesOnly(importlib.abc.MetaPathFinder):
    """An import hook that refuses the bare folder names.

    pytest keeps the repository root on ``sys.path`` (the ``tests.*`` helpers import from
    it), where ``runner/``, ``transport/`` and ``widgets_api/`` would import under their
    bare names. A user's installed Parkway has only ``parkway.*``: with this hook first on
    ``sys.meta_path``, a bare name fails in the suite as it fails for them, instead of
    quietly loading a second copy of the module from the checkout.
    """

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in BARE:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: Parkway installs as 'parkway.{fullname}'; "
                "the bare folder name resolves only inside a checkout",
                name=fullname,
            )
        return None


def refuse_bare_imports() -> None:
    """Put :class:`InstalledNamesOnly` first on ``sys.meta_path`` (once), and fail if a
    bare name was imported before it was there."""
    early = sorted(name for name in sys.modules if name.partition(".")[0] in BARE)
    assert not early, f"imported by a bare folder name before the guard: {early}"
    if not any(isinstance(finder, InstalledNamesOnly) for finder in sys.meta_path):
        sys.meta_path.insert(0, InstalledNamesOnly())
