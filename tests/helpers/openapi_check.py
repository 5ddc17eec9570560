"""Holding real responses against ``/openapi.json``: the documented status, content type
and schema (JSON Schema 2020-12, refs into the document's ``components``), and for a
stream every event against the schema its ``x-sse-data`` names (``UIMessageChunk`` for the
AI SDK stream, ``AguiEvent`` for AG-UI). Used by test_openapi, test_health and the
fuzz."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any
from urllib.parse import unquote

import httpx
from jsonschema import Draft202012Validator

from parkway.transport.sse import sse_chunks

DIALECT = "https://json-schema.org/draft/2020-12/schema"
STREAM_HEADER = "x-vercel-ai-ui-message-stream"


def template_regex(template: str) -> re.Pattern[str]:
    """A documented path as a pattern over request paths (one segment per parameter)."""
    parts = re.split(r"(\{\w+\})", template)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


class ApiDocument:
    """An OpenAPI document, for checking responses against it."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self._validators: dict[str, Draft202012Validator] = {}

    @cached_property
    def templates(self) -> list[tuple[re.Pattern[str], str]]:
        # fewer parameters first: a fixed segment wins over a parameter
        ordered = sorted(self.document["paths"], key=lambda p: (p.count("{"), p))
        return [(template_regex(p), p) for p in ordered]

    def template_of(self, path: str) -> str | None:
        """The documented path template that ``path`` (as sent) falls under, if any."""
        decoded = unquote(path)
        return next((t for pattern, t in self.templates if pattern.fullmatch(decoded)), None)

    def operation(self, method: str, template: str) -> dict[str, Any]:
        methods = self.document["paths"].get(template)
        assert methods is not None, f"{template} is not documented"
        operation = methods.get(method.lower())
        assert operation is not None, f"{method} {template} is not documented"
        return operation  # type: ignore[no-any-return]

    def validate(self, instance: Any, schema: Mapping[str, Any], where: str) -> None:
        key = repr(sorted(schema.items()))
        validator = self._validators.get(key)
        if validator is None:
            root = {"$schema": DIALECT, "components": self.document["components"], **schema}
            validator = self._validators[key] = Draft202012Validator(root)
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            raise AssertionError(f"{where}: {first.message[:300]} at {list(first.path)}")

    def check(self, response: httpx.Response, template: str | None = None) -> dict[str, Any]:
        """``response`` against what the document says of its route, method and status;
        returns that documented response. ``template``: the route, when the request's
        path is not enough to tell (it is found from the path otherwise)."""
        method = response.request.method
        path = response.request.url.path
        template = template or self.template_of(path)
        assert template is not None, f"{method} {path}: no documented path matches"
        where = f"{method} {template} -> {response.status_code}"
        documented = self.operation(method, template)["responses"].get(str(response.status_code))
        assert documented is not None, f"{where} is not documented: {response.text[:300]}"
        content = documented.get("content")
        if not content:
            assert not response.content, f"{where}: a body where none is documented"
            return documented  # type: ignore[no-any-return]
        media = response.headers.get("content-type", "").partition(";")[0].strip()
        assert media in content, f"{where}: {media!r} is not among {sorted(content)}"
        schema = content[media].get("schema", {})
        if media == "application/json":
            self.validate(response.json(), schema, where)
        elif media == "text/event-stream":
            if STREAM_HEADER in documented.get("headers", {}):  # the AI SDK's stream
                assert response.headers.get(STREAM_HEADER) == "v1", where
            chunks = sse_chunks(response.text)
            assert chunks, f"{where}: an empty stream"
            for chunk in chunks:
                self.validate(chunk, schema["x-sse-data"], f"{where}, chunk {chunk}")
        return documented  # type: ignore[no-any-return]
