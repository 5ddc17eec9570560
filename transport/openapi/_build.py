"""The OpenAPI document's parts: what a route's entry says (:class:`Operation` and its
answers) and how a document is built from the entries.

Each route is one :class:`Operation` in the table of
:mod:`parkway.transport.openapi._paths`: method, path, what it is for, its body model,
its query parameters and what it answers. From an entry this module derives the rest, so
an entry names only what is particular to its route:

- path parameters, from the ``{name}`` segments of the path;
- the errors every route of a kind can answer: 500 ``internal_error`` (all), 503
  ``redis_unavailable`` (``redis``), 401 ``unauthenticated`` (``auth``), 403
  ``origin_not_allowed`` (state-changing methods: the origin guard), 400 / 408 / 413
  from the body reader (``body`` or ``reads_body``), 422 ``invalid_body`` (``body``);
- the schemas, from pydantic models (``model_json_schema``), collected once under
  ``components/schemas``, with the union of one SSE event of each wire: the AI SDK's
  ``UIMessageChunk`` and AG-UI's ``AguiEvent``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ag_ui.core import (
    CustomEvent,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, models_json_schema

from parkway.transport.aisdk import chunks
from parkway.transport.openapi._shapes import ErrorBody
from parkway.transport.settings import Settings

__all__ = [
    "AguiStream",
    "Answer",
    "Content",
    "Html",
    "Json",
    "NoContent",
    "Operation",
    "Param",
    "Redirect",
    "Stream",
    "build_document",
]

OPENAPI_VERSION = "3.1.0"
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PATH_PARAM = re.compile(r"\{(\w+)\}")
_REF = "#/components/schemas/{model}"


# -- what an entry says --------------------------------------------------------------


@dataclass(frozen=True)
class Json:
    """A JSON answer whose body is ``model``."""

    model: type[BaseModel]
    description: str
    headers: Mapping[str, str] = field(default_factory=dict)  # name -> what it says


@dataclass(frozen=True)
class Stream:
    """The AI SDK UI message stream (SSE): one chunk per ``data:`` line, then
    ``data: [DONE]``."""

    description: str


@dataclass(frozen=True)
class AguiStream:
    """The AG-UI event stream (SSE): one AG-UI event per ``data:`` line, the run's
    ``RUN_FINISHED`` or ``RUN_ERROR`` last (no ``[DONE]``)."""

    description: str


@dataclass(frozen=True)
class Html:
    description: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Redirect:
    description: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NoContent:
    description: str


@dataclass(frozen=True)
class Content:
    """Bytes of the given media types (files, metrics)."""

    media_types: tuple[str, ...]
    description: str
    headers: Mapping[str, str] = field(default_factory=dict)


Answer = Json | Stream | AguiStream | Html | Redirect | NoContent | Content


@dataclass(frozen=True)
class Param:
    """A query parameter (all are optional strings unless ``required``)."""

    name: str
    description: str
    required: bool = False


@dataclass(frozen=True)
class Operation:
    """One route and method.

    ``answers``: the route's own answers by status (its successes, and errors that are
    particular to it); an error given as a string is a JSON error (``ErrorBody``) and
    the string says when, naming its codes. The errors every route of its kind answers
    are added (see the module's docstring). ``when``: the route exists only with these
    settings. ``errors_as``: ``html`` for pages whose own errors are pages, ``oauth`` for
    the demo provider's RFC 6749 errors.
    """

    method: str
    path: str
    summary: str
    tag: str
    answers: Mapping[int, Answer | str]
    body: type[BaseModel] | None = None
    reads_body: bool = False
    query: tuple[Param, ...] = ()
    auth: bool = True
    redis: bool = True
    editor_token: bool = False
    description: str = ""
    when: Callable[[Settings], bool] | None = None
    errors_as: str = "json"
    params: Mapping[str, str] = field(default_factory=dict)  # path parameter -> description


# -- building the document -------------------------------------------------------------


class _Schemas(GenerateJsonSchema):
    """pydantic's JSON Schema, with property titles left out (they only repeat the
    names) and component names without a private module's leading underscore."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def normalize_name(self, name: str) -> str:
        return super().normalize_name(name).lstrip("_")


# Path parameters Parkway's routes share, described once.
_PARAMS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat_id": (
        "the chat's id (400 invalid_request when malformed)",
        {"type": "string", "pattern": r"^[A-Za-z0-9_.:-]{1,128}$"},
    ),
    "call_id": ("the parked call's toolCallId", {"type": "string"}),
}

_INTERNAL = (
    "internal_error: an unexpected failure; the message holds only a reference to the server log"
)
_REDIS_DOWN = "redis_unavailable: the store cannot be reached; nothing was changed, send it again"
_BAD_JSON = "invalid_json (not strict JSON: UTF-8, depth, no NaN, no lone surrogate)"
_RETRY_AFTER = {
    "retry-after": "seconds to wait before sending it again (a redis_unavailable or a 429)"
}


@dataclass
class _Response:
    """One status of one operation while it is being assembled."""

    descriptions: list[str] = field(default_factory=list)
    content: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def add(self, description: str, media: str | None, schema: dict[str, Any] | None) -> None:
        if description not in self.descriptions:
            self.descriptions.append(description)
        if media is not None:
            schemas = self.content.setdefault(media, [])
            # (by identity: a model's reference is one object, filled in at the end)
            if schema is not None and not any(schema is known for known in schemas):
                schemas.append(schema)

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {"description": "; ".join(self.descriptions)}
        if self.headers:
            out["headers"] = {
                name: {"description": text, "schema": {"type": "string"}}
                for name, text in sorted(self.headers.items())
            }
        if self.content:
            out["content"] = {
                media: ({"schema": _one_of(schemas)} if schemas else {})
                for media, schemas in self.content.items()
            }
        return out


def _one_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


class _Builder:
    """Collects the models' schemas under ``components/schemas`` as operations use them.

    :meth:`ref` hands out one reference object per model and mode, filled in by
    :meth:`components` with the name pydantic gives the model's schema (it tells apart
    two models of one name, e.g. ``UIMessage-Input``)."""

    def __init__(self) -> None:
        self.refs: dict[tuple[type[BaseModel], JsonSchemaMode], dict[str, Any]] = {}

    def ref(self, model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return self.refs.setdefault((model, mode), {})

    def components(self) -> dict[str, Any]:
        union = [self.ref(model, "serialization") for model in _chunk_models()]
        events = [self.ref(model, "serialization") for model in AGUI_EVENTS]
        named, defs = models_json_schema(
            list(self.refs), ref_template=_REF, schema_generator=_Schemas
        )
        for key, ref in self.refs.items():
            ref.update(named[key])
        schemas: dict[str, Any] = dict(sorted(defs.get("$defs", {}).items()))
        for schema in schemas.values():  # a private model's title, as its name
            if schema.get("title", "").startswith("_"):
                schema["title"] = schema["title"].lstrip("_")
        schemas["UIMessageChunk"] = {
            "description": "One chunk of the AI SDK UI message stream (one SSE data line).",
            "oneOf": union,
        }
        schemas["AguiEvent"] = {
            "description": "One event of the AG-UI 1.0 stream (one SSE data line): the "
            "events POST /api/agui sends, as the ag-ui-protocol package defines them.",
            "oneOf": events,
        }
        return schemas


def _chunk_models() -> list[type[BaseModel]]:
    """Every chunk the encoder can send, from :mod:`parkway.transport.aisdk.chunks`."""
    return [getattr(chunks, name) for name in chunks.__all__ if name != "Chunk"]


# Every AG-UI event ``POST /api/agui`` sends: those of its encoder
# (transport/agui/encoder.py) and the route's MESSAGES_SNAPSHOT (transport/api/agui.py).
# The tests hold real streams to their union, so an event added there fails until it is
# named here too.
AGUI_EVENTS: tuple[type[BaseModel], ...] = (
    RunStartedEvent,
    RunFinishedEvent,
    RunErrorEvent,
    StepStartedEvent,
    StepFinishedEvent,
    TextMessageStartEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    ReasoningStartEvent,
    ReasoningMessageStartEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningEndEvent,
    ToolCallStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    CustomEvent,
    MessagesSnapshotEvent,
)


def _answer(builder: _Builder, response: _Response, answer: Answer | str, op: Operation) -> None:
    if isinstance(answer, str):
        if op.errors_as == "html":
            response.add(answer, "text/html", {"type": "string"})
        else:
            response.add(answer, "application/json", builder.ref(ErrorBody, "serialization"))
        return
    if isinstance(answer, Json):
        response.add(
            answer.description, "application/json", builder.ref(answer.model, "serialization")
        )
    elif isinstance(answer, Stream):
        response.add(answer.description, "text/event-stream", _stream_schema())
        response.headers.update(
            {
                "x-vercel-ai-ui-message-stream": "v1: the AI SDK UI message stream protocol",
                "cache-control": "no-cache",
                "x-accel-buffering": "no: proxies pass each chunk on at once",
            }
        )
        return
    elif isinstance(answer, AguiStream):
        response.add(answer.description, "text/event-stream", _agui_stream_schema())
        response.headers.update(
            {
                "cache-control": "no-cache",
                "x-accel-buffering": "no: proxies pass each event on at once",
            }
        )
        return
    elif isinstance(answer, Html):
        response.add(answer.description, "text/html", {"type": "string"})
    elif isinstance(answer, Content):
        for media in answer.media_types:  # any JSON value, or text
            schema = None if media.endswith("json") else {"type": "string"}
            response.add(answer.description, media, schema)
    else:  # Redirect, NoContent
        response.add(answer.description, None, None)
    response.headers.update(getattr(answer, "headers", {}))


def _stream_schema() -> dict[str, Any]:
    return {
        "type": "string",
        "description": "Server-Sent Events: each event's data is one UIMessageChunk as JSON; "
        "the last is the literal [DONE]. Comment lines keep the connection alive.",
        "x-sse-data": {"$ref": _REF.format(model="UIMessageChunk")},
    }


def _agui_stream_schema() -> dict[str, Any]:
    return {
        "type": "string",
        "description": "Server-Sent Events: each event's data is one AguiEvent as JSON; "
        "RUN_STARTED first, RUN_FINISHED or RUN_ERROR last. Comment lines keep the "
        "connection alive.",
        "x-sse-data": {"$ref": _REF.format(model="AguiEvent")},
    }


def _common_errors(op: Operation) -> dict[int, list[str]]:
    """The errors every route of ``op``'s kind answers, as JSON (see the docstring)."""
    found: dict[int, list[str]] = {500: [_INTERNAL]}
    if op.redis:
        found[503] = [_REDIS_DOWN]
    if op.auth and op.errors_as == "json":  # pages and the OAuth server answer their own
        found[401] = ["unauthenticated: no valid session (POST /api/sessions first)"]
    if op.method in _STATE_CHANGING and op.errors_as != "oauth":
        found[403] = ["origin_not_allowed: the request's Origin is not allowed"]
    if "{chat_id}" in op.path or "{call_id}" in op.path:
        found.setdefault(400, []).append("invalid_request: a malformed id in the path")
    if op.body is not None or op.reads_body:
        if op.body is not None:
            found.setdefault(400, []).append(_BAD_JSON)
        found.setdefault(400, []).append("body_incomplete: the client left mid-body")
        found[408] = ["body_timeout: the body did not arrive in time (the connection is closed)"]
        found[413] = ["body_too_large"]
    if op.body is not None:
        found[422] = ["invalid_body: the body does not have the shape described"]
    return found


def _operation(builder: _Builder, op: Operation) -> dict[str, Any]:
    responses: dict[int, _Response] = {}
    for status, answer in sorted(op.answers.items()):
        _answer(builder, responses.setdefault(status, _Response()), answer, op)
    for status, texts in _common_errors(op).items():
        response = responses.setdefault(status, _Response())
        for text in texts:
            response.add(text, "application/json", builder.ref(ErrorBody, "serialization"))
    for status in (429, 503):
        if status in responses:
            responses[status].headers.update(_RETRY_AFTER)
    if 408 in responses:
        responses[408].headers["connection"] = "close"
    out: dict[str, Any] = {
        "operationId": _operation_id(op),
        "summary": op.summary,
        "tags": [op.tag],
        "security": _security(op),
        "responses": {str(s): r.render() for s, r in sorted(responses.items())},
    }
    if op.description:
        out["description"] = op.description
    parameters = [*_path_parameters(op), *_query_parameters(op)]
    if parameters:
        out["parameters"] = parameters
    if op.body is not None:
        out["requestBody"] = {
            "required": op.path != "/api/sessions",
            "content": {"application/json": {"schema": builder.ref(op.body, "validation")}},
        }
    return out


def _operation_id(op: Operation) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", " ", f"{op.method} {op.path}").split()
    return words[0].lower() + "".join(w[:1].upper() + w[1:] for w in words[1:])


def _security(op: Operation) -> list[dict[str, list[str]]]:
    if not op.auth:
        return []
    found: list[dict[str, list[str]]] = [{"sessionCookie": []}, {"bearer": []}]
    if op.editor_token:
        found = [{**s, "editorToken": []} for s in found] + found
    return found


def _path_parameters(op: Operation) -> Iterable[dict[str, Any]]:
    for name in _PATH_PARAM.findall(op.path):
        description, schema = op.params.get(name), {"type": "string"}
        if name in _PARAMS:
            default_description, schema = _PARAMS[name]
            description = description or default_description
        yield {
            "name": name,
            "in": "path",
            "required": True,
            "description": description or name,
            "schema": schema,
        }


def _query_parameters(op: Operation) -> Iterable[dict[str, Any]]:
    for param in op.query:
        yield {
            "name": param.name,
            "in": "query",
            "required": param.required,
            "description": param.description,
            "schema": {"type": "string"},
        }


def build_document(operations: Iterable[Operation], settings: Settings) -> dict[str, Any]:
    """The OpenAPI document of the ``operations`` that exist with ``settings``."""
    builder = _Builder()
    paths: dict[str, dict[str, Any]] = {}
    tags: dict[str, None] = {}
    for op in operations:
        if op.when is not None and not op.when(settings):
            continue
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(builder, op)
        tags[op.tag] = None
    components = builder.components()
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Parkway",
            "version": _version(),
            "description": "Human-in-the-loop client-tool round trips for AI agents: the "
            "AI SDK UI message stream (POST /api/chat) and AG-UI 1.0 (POST /api/agui) "
            "over SSE, parked calls, settles and resumes. Errors of Parkway's own routes "
            'are {"error": {"code", "message"}}.',
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": components,
            "securitySchemes": {
                "sessionCookie": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "parkway_session",
                    "description": "the session cookie POST /api/sessions sets (its name "
                    "carries a tag of the server's key: parkway_session_<tag>)",
                },
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the token POST /api/sessions returns",
                },
                "editorToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Parkway-Editor-Token",
                    "description": "the operator's editor token: commits the agent",
                },
            },
        },
        "tags": [{"name": t} for t in tags],
    }


def _version() -> str:
    try:
        return version("parkway")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "0"
