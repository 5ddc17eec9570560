"""Ignore paths: values a replay leaves out of its comparison (private to
:mod:`parkway.transport.cassettes`; docs/cassettes.md, "Ignore paths", is the reference).

A path is dot-separated segments, matched against where a value sits in a JSON body or
in one stream chunk:

- ``name`` matches that object key (``*`` and ``?`` inside a name glob: ``*_at``);
- ``*`` matches any one segment, a key or an array index;
- ``**`` matches any number of segments, none included;
- ``[n]`` matches array index ``n`` and ``[*]`` any index; indexes follow a segment
  (``messages[0].parts[*].text``) or stand alone (``[0]``).

A leading ``$.`` is allowed, so a JSON path copied from a report works as is. A path
applies to JSON bodies and to every stream chunk (a chunk's path starts at its own keys:
``data.description``); ``TYPE:path`` applies only to chunks whose ``type`` matches the
glob ``TYPE`` (``data-parkway-widget:data.description``, ``tool-*:input``), and
``TYPE:`` (nothing after the colon) leaves out those chunks whole.

A matched object key is removed on both sides (so a key one side lacks is not a
difference either); a matched array element becomes ``"<ignored>"`` on both sides, so
later elements keep their index; a matched chunk is dropped from both streams.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from parkway.transport.cassettes._replay_server import CassetteError

__all__ = ["IGNORED", "IgnoreFilter", "ignore_filter"]

IGNORED = "<ignored>"
_QUALIFIER = re.compile(r"^([A-Za-z0-9_*?-]+):(.*)$")
_SEGMENT = re.compile(r"^([^\[\]]*)((?:\[(?:[0-9]+|\*)\])*)$")
_INDEX = re.compile(r"\[([0-9]+|\*)\]")

# A step of a value's location: an object key or an array index.
_Step = str | int
# A pattern token: ("key", glob), ("one",), ("deep",), ("index", n) or ("any index",).
_Token = tuple[Any, ...]


def _tokens(path: str, original: str) -> tuple[_Token, ...]:
    if path in ("", "$"):
        return ()
    path = path.removeprefix("$.")
    tokens: list[_Token] = []
    for segment in path.split("."):
        match = _SEGMENT.match(segment)
        if match is None or (not match.group(1) and not match.group(2)):
            raise CassetteError(
                f"ignore path {original!r}: bad segment {segment!r} (use dot-separated "
                "keys, '*', '**', and indexes as [0] or [*])"
            )
        name, indexes = match.groups()
        if name == "**":
            tokens.append(("deep",))
        elif name == "*":
            tokens.append(("one",))
        elif name:
            tokens.append(("key", name))
        for index in _INDEX.findall(indexes):
            tokens.append(("any index",) if index == "*" else ("index", int(index)))
    return tuple(tokens)


def _matches(tokens: tuple[_Token, ...], steps: tuple[_Step, ...]) -> bool:
    if not tokens:
        return not steps
    head, rest = tokens[0], tokens[1:]
    if head[0] == "deep":
        return any(_matches(rest, steps[i:]) for i in range(len(steps) + 1))
    if not steps:
        return False
    step = steps[0]
    if head[0] == "one":
        fits = True
    elif head[0] == "key":
        fits = isinstance(step, str) and fnmatch.fnmatchcase(step, head[1])
    elif head[0] == "index":
        fits = isinstance(step, int) and step == head[1]
    else:  # any index
        fits = isinstance(step, int)
    return fits and _matches(rest, steps[1:])


@dataclass(frozen=True)
class _Pattern:
    chunk_type: str | None  # a glob on the chunk's type; None: JSON bodies and all chunks
    tokens: tuple[_Token, ...]


class IgnoreFilter:
    """Compiled ignore paths. Raises :class:`CassetteError` naming a malformed path."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)
        patterns = []
        for path in self.paths:
            if not isinstance(path, str) or not path.strip():
                raise CassetteError(f"ignore path {path!r}: expected a non-empty path")
            qualified = _QUALIFIER.match(path.strip())
            if qualified:
                kind, rest = qualified.groups()
                patterns.append(_Pattern(kind, _tokens(rest, path)))
            else:
                tokens = _tokens(path.strip(), path)
                if not tokens:
                    raise CassetteError(f"ignore path {path!r}: it would ignore every body")
                patterns.append(_Pattern(None, tokens))
        self._patterns = tuple(patterns)

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def _prune(self, value: Any, patterns: tuple[_Pattern, ...], steps: tuple[_Step, ...]) -> Any:
        if isinstance(value, dict):
            kept = {}
            for key, item in value.items():
                at = (*steps, key)
                if not any(_matches(p.tokens, at) for p in patterns):
                    kept[key] = self._prune(item, patterns, at)
            return kept
        if isinstance(value, list):
            out = []
            for index, item in enumerate(value):
                at = (*steps, index)
                hit = any(_matches(p.tokens, at) for p in patterns)
                out.append(IGNORED if hit else self._prune(item, patterns, at))
            return out
        return value

    def json(self, body: Any) -> Any:
        """A JSON body without its ignored values."""
        patterns = tuple(p for p in self._patterns if p.chunk_type is None)
        return self._prune(body, patterns, ()) if patterns else body

    def chunks(self, view: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
        """Indexed stream chunks without ignored chunks and values."""
        out = []
        for index, chunk in view:
            kind = str(chunk.get("type", ""))
            patterns = tuple(
                p
                for p in self._patterns
                if p.chunk_type is None or fnmatch.fnmatchcase(kind, p.chunk_type)
            )
            if any(_matches(p.tokens, ()) for p in patterns):
                continue  # the whole chunk
            out.append((index, self._prune(chunk, patterns, ()) if patterns else chunk))
        return out


@lru_cache(maxsize=32)
def ignore_filter(paths: tuple[str, ...]) -> IgnoreFilter:
    """The compiled filter for ``paths`` (cached: a replay compares many exchanges)."""
    return IgnoreFilter(paths)
