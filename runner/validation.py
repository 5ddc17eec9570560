"""Turning a pydantic :class:`~pydantic.ValidationError` into the one-line message Parkway
shows: where the first problem is, and what it is.

Used by every package (``runner`` for templates, scripts and stored records;
``transport`` and ``widgets_api`` for request bodies and configuration), so it lives in
``runner``, which the other two import and which imports neither.
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["ECHO_MAX", "describe_first_error"]

# A location names keys of the document that failed, which may be a hostile request
# body: each key is cut to this many characters, so an unknown 1 MB key is not sent back.
ECHO_MAX = 64


def describe_first_error(exc: ValidationError, *, root: str = "") -> str:
    """``"<where>: <what>"`` for the first error of ``exc``, e.g.
    ``"messages.0.role: Input should be 'user', 'assistant' or 'system'"``.

    ``where`` is the dotted location, each part cut to :data:`ECHO_MAX` characters;
    ``root`` names the location of an error about the document as a whole (an empty
    location); without one, the message is just ``what``. Pydantic's messages say what
    was expected rather than quote what was sent, with one exception: a discriminated
    union names an unknown tag it found (no request body is read through one that can
    refuse a tag).
    """
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(_cut(str(part)) for part in first["loc"]) or root
    return f"{where}: {first['msg']}" if where else first["msg"]


def _cut(text: str) -> str:
    return text if len(text) <= ECHO_MAX else f"{text[:ECHO_MAX]}..."
