"""Python source as highlighted HTML, one string per line, for the code review widgets.

Pygments tokenises the code; each token becomes a ``<span class="tok-…">`` with its text
escaped, split at line ends so a token spanning lines (a long string) is closed and
reopened on each line. The page adds line numbers and the colours (playground.css); it
inserts these strings as HTML, so everything in them is escaped here.
"""

from __future__ import annotations

from html import escape

from pygments.lexers.python import PythonLexer
from pygments.token import STANDARD_TYPES, _TokenType

__all__ = ["highlight_lines"]

# Lines highlighted at most; a longer program is shown highlighted up to here, then plain.
MAX_LINES = 2000


def _css_class(token: _TokenType) -> str:
    while token not in STANDARD_TYPES and token.parent is not None:
        token = token.parent
    return str(STANDARD_TYPES.get(token, ""))


def highlight_lines(code: str) -> list[str]:
    """``code``'s lines as HTML (escaped text in spans), as many as ``code`` has."""
    lines: list[str] = [""]
    source = code if code.endswith("\n") else code + "\n"
    head, tail = source, ""
    if source.count("\n") > MAX_LINES:
        cut = source.split("\n")
        head, tail = "\n".join(cut[:MAX_LINES]) + "\n", "\n".join(cut[MAX_LINES:])
    for token, text in PythonLexer(stripnl=False, ensurenl=False).get_tokens(head):
        css = _css_class(token)
        for index, piece in enumerate(text.split("\n")):
            if index:
                lines.append("")
            if piece:
                escaped = escape(piece, quote=False)
                lines[-1] += f'<span class="tok-{css}">{escaped}</span>' if css else escaped
    if lines and lines[-1] == "":
        lines.pop()
    if tail:
        lines.extend(escape(line, quote=False) for line in tail.split("\n"))
    expected = len(code.split("\n")) - (1 if code.endswith("\n") else 0)
    return lines[:expected] if expected > 0 else lines
