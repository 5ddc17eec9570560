"""What a tool function's docstring tells the model: its description, and each parameter's.

Google (``Args:``), NumPy (``Parameters`` underlined) and Sphinx (``:param x:``) styles are
read, the style found from the docstring itself, by griffe's parsers: docstring grammars
are a solved problem with edge cases (continuation lines, types in the header, sections
that look alike) that a hand-written reader would get wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DocstringParts", "read_docstring"]


@dataclass(frozen=True)
class DocstringParts:
    """A docstring split for a tool: the text before its first section (the tool's
    description) and the description of each documented parameter by name."""

    description: str = ""
    parameters: Mapping[str, str] = field(default_factory=dict)


def read_docstring(func: Callable[..., Any]) -> DocstringParts:
    """The description and parameter descriptions of ``func``'s docstring (empty when it
    has none). Sections other than the parameters (returns, raises, examples) are left
    out: the model needs what to pass, the return value it will see."""
    text = inspect.getdoc(func)
    if not text:
        return DocstringParts()
    # griffe takes ~60 ms to import: only agents defined in Python pay for it, once.
    from griffe import (  # noqa: PLC0415
        Docstring,
        DocstringSectionKind,
        DocstringSectionParameters,
        Parser,
        PerStyleOptions,
        infer_docstring_style,
    )

    # Each parser reads the docstring and the one that finds the most sections wins (a
    # tie, as for a docstring with no sections, goes to Google's, the first). Guessing by
    # pattern alone misses a Sphinx docstring with a single ``:param:``. warnings off:
    # griffe would log each parameter whose type the docstring does not repeat, and the
    # signature carries the types.
    options: PerStyleOptions = {
        "google": {"warnings": False},
        "numpy": {"warnings": False},
        "sphinx": {"warnings": False},
    }
    style, sections = infer_docstring_style(
        Docstring(text, lineno=1),
        method="max_sections",
        style_order=[Parser.google, Parser.numpy, Parser.sphinx],
        per_style_options=options,
    )
    if sections is None:  # (max_sections always parses; kept for the type checker)
        sections = Docstring(text, lineno=1).parse(style or "google", warnings=False)
    description = ""
    parameters: dict[str, str] = {}
    for section in sections:
        if section.kind is DocstringSectionKind.text and not description:
            description = str(section.value).strip()
        elif isinstance(section, DocstringSectionParameters):
            for param in section.value:
                if param.description:
                    parameters.setdefault(param.name.lstrip("*"), param.description.strip())
    return DocstringParts(description=description, parameters=parameters)
