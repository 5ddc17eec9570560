"""The cassette file format (private to :mod:`parkway.transport.cassettes`): its models,
reading (with the migration of version 1), writing, and the agent's digest and model
name that a cassette records.

Version 2 records *which* agent produced the cassette (the agent file's path relative to
the cassette, a digest of the agent document, the model's name) so that a replay serves
the current agent file and says whether it changed; the agent document itself is an
optional copy. Version 3 adds ``model_steps``: each step of a real model, with the request
that produced it and what the model streamed back (:mod:`parkway.runner.llm.tape`), so a
replay serves the model offline. Versions 1 and 2 are read and migrated in memory.
A response's ``events`` (the AG-UI stream of a ``POST /api/agui``, beside the AI SDK's
``chunks``) came without a new version: a reader that predates them refuses them as an
unknown key rather than misread them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from parkway.runner.canonical import canonical_json
from parkway.runner.errors import ParkwayError
from parkway.runner.llm import TapeStep, event_from_json, parse_model_spec
from parkway.runner.store import CHAT_ID
from parkway.runner.validation import describe_first_error
from parkway.transport.cassettes._replay_server import CassetteError
from parkway.transport.sse import sse_chunks

__all__ = [
    "AGUI_PATH",
    "FORMAT_VERSION",
    "Cassette",
    "Exchange",
    "ModelStepRecord",
    "RequestRecord",
    "ResponseRecord",
    "agent_digest",
    "cassette_json",
    "is_agui",
    "load_cassette",
    "model_name",
    "parse_cassette",
    "response_record",
    "save_cassette",
]

FORMAT_VERSION: Literal[3] = 3
_CHAT_PATH = re.compile(r"^/api/chats?/([^/?]+)")
# The AG-UI endpoint: its streams are kept as ``events``, its body names the chat as
# ``threadId`` (transport/api/agui.py).
AGUI_PATH = "/api/agui"


def is_agui(path: str) -> bool:
    """Whether a request to ``path`` (with or without its query) is an AG-UI run."""
    return path.split("?", 1)[0] == AGUI_PATH


def agent_digest(document: Any) -> str:
    """``sha256:<hex>`` of the agent document's canonical JSON (RFC 8785): the same for
    the same agent however its file is indented or its keys ordered."""
    try:
        text = canonical_json(document)
    except ParkwayError:  # not plain JSON: digest what JSON would print
        text = json.dumps(document, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def model_name(document: Any) -> str:
    """The model an agent document runs: ``scripted`` or ``provider:model`` (the
    template's ``llm`` wins over the file's ``model``, as when serving); ``unknown``
    when the document names none that parses."""
    if not isinstance(document, Mapping):
        return "unknown"
    template = document.get("template")
    llm = template.get("llm") if isinstance(template, Mapping) else None
    for value, where in ((llm, "llm"), (document.get("model"), "model")):
        if value is None:
            continue
        with contextlib.suppress(ParkwayError):
            return parse_model_spec(value, where).name
    return "unknown"


class RequestRecord(BaseModel):
    """A request as the client sent it: method, path (with query) and JSON body."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    path: str = Field(pattern=r"^/")
    body: Any = Field(default=None, alias="json")

    def line(self) -> str:
        return f"{self.method} {self.path}"


class ResponseRecord(BaseModel):
    """An answer: its status and at most one body (AI SDK stream ``chunks``, AG-UI
    stream ``events``, JSON, or text)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    status: int = Field(ge=100, le=599)
    chunks: list[dict[str, Any]] | None = None
    events: list[dict[str, Any]] | None = None
    body: Any = Field(default=None, alias="json")
    text: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> ResponseRecord:
        given = [
            self.chunks is not None,
            self.events is not None,
            self.body is not None,
            self.text is not None,
        ]
        if sum(given) > 1:
            raise ValueError("a response has at most one of 'chunks', 'events', 'json' and 'text'")
        return self

    @property
    def stream(self) -> list[dict[str, Any]] | None:
        """The stream's items, whichever wire it came on (``chunks`` or ``events``)."""
        return self.chunks if self.chunks is not None else self.events

    def parks(self) -> bool:
        """True when this is a stream that ended a turn by parking it: an AI SDK
        ``finish`` for tool calls, or an AG-UI ``RUN_FINISHED`` whose outcome is an
        interrupt, or a success that leaves frontend tool calls pending."""
        if self.events:
            last = self.events[-1]
            if last.get("type") != "RUN_FINISHED":
                return False
            outcome = last.get("outcome")
            if not isinstance(outcome, dict):
                return False
            if outcome.get("type") == "interrupt":
                return True
            return outcome.get("type") == "success" and bool(outcome.get("pendingToolCallIds"))
        if not self.chunks:
            return False
        last = self.chunks[-1]  # with a real model it also carries messageMetadata
        return last.get("type") == "finish" and last.get("finishReason") == "tool-calls"

    def finishes(self) -> bool:
        """True when this is a stream that reached the end of a turn (an AI SDK
        ``finish``, an AG-UI ``RUN_FINISHED``)."""
        if any(event.get("type") == "RUN_FINISHED" for event in self.events or ()):
            return True
        return any(chunk.get("type") == "finish" for chunk in self.chunks or ())

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.chunks is not None:
            out["chunks"] = self.chunks
        elif self.events is not None:
            out["events"] = self.events
        elif self.body is not None:
            out["json"] = self.body
        elif self.text is not None:
            out["text"] = self.text
        return out


class Exchange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request: RequestRecord
    response: ResponseRecord


class ModelStepRecord(BaseModel):
    """One recorded step of a real model: chat ``chat``'s model call ``index``, the
    request as the model saw it (normalised) and the events it streamed back."""

    model_config = ConfigDict(extra="forbid")
    chat: str = Field(min_length=1)
    index: int = Field(ge=0)
    request: dict[str, Any]
    events: list[dict[str, Any]] = Field(min_length=1)

    @model_validator(mode="after")
    def _known_events(self) -> ModelStepRecord:
        for event in self.events:
            event_from_json(event)  # ValueError on an unknown kind
        return self

    def step(self) -> TapeStep:
        return TapeStep.from_json(self.model_dump())

    @classmethod
    def of(cls, step: TapeStep) -> ModelStepRecord:
        return cls.model_validate(step.to_json())


class Cassette(BaseModel):
    """A recorded chat: which agent and model produced it, and the exchanges in order.

    ``agent_file`` is the agent file's path relative to the cassette's folder (absolute
    until a cassette recorded in memory is saved); ``agent`` an optional copy of the
    agent document. :attr:`source` is the file the cassette was loaded from, if any.
    """

    model_config = ConfigDict(extra="forbid")
    version: Literal[3] = FORMAT_VERSION
    description: str | None = None
    agent_file: str | None = Field(default=None, min_length=1)
    agent_digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    model: str = Field(min_length=1)
    agent: dict[str, Any] | None = None
    exchanges: list[Exchange] = Field(default_factory=list)
    model_steps: list[ModelStepRecord] = Field(default_factory=list)
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    def named_agent_file(self) -> Path | None:
        """The agent file the cassette names, resolved from the cassette's folder (from
        the working directory for a cassette that was never saved)."""
        if self.agent_file is None:
            return None
        folder = self._source.parent if self._source is not None else Path.cwd()
        return folder / self.agent_file

    def chat_ids(self) -> list[str]:
        """The chats the exchanges touch, in order of first use (an AG-UI run's chat is
        its ``threadId``)."""
        found: list[str] = []
        for exchange in self.exchanges:
            body = exchange.request.body
            match = _CHAT_PATH.match(exchange.request.path)
            candidates = [match.group(1) if match else None]
            if exchange.request.path.split("?", 1)[0] == "/api/chat" and isinstance(body, dict):
                candidates.append(body.get("id"))
            if is_agui(exchange.request.path) and isinstance(body, dict):
                candidates.append(body.get("threadId"))
            for chat in candidates:
                if isinstance(chat, str) and CHAT_ID.match(chat) and chat not in found:
                    found.append(chat)
        return found

    def run_ids(self) -> list[str]:
        """The AG-UI run ids the requests name (``runId``, ``parentRunId``), in order."""
        found: list[str] = []
        for exchange in self.exchanges:
            body = exchange.request.body
            if not is_agui(exchange.request.path) or not isinstance(body, dict):
                continue
            for key in ("runId", "parentRunId"):
                run = body.get(key)
                if isinstance(run, str) and run and run not in found:
                    found.append(run)
        return found


def _migrate_v1(document: dict[str, Any]) -> dict[str, Any]:
    """A version-1 document as the current version: it names no agent file, and its
    embedded agent is the one recorded."""
    migrated = {k: v for k, v in document.items() if k != "version"}
    agent = document.get("agent")
    migrated.update(
        version=FORMAT_VERSION, agent_digest=agent_digest(agent), model=model_name(agent)
    )
    return migrated


def parse_cassette(document: Any) -> Cassette:
    """Validate a cassette document (version 3, or 1 or 2 migrated); raise
    :class:`CassetteError` naming the problem."""
    if not isinstance(document, dict):
        raise CassetteError(
            "a cassette is a JSON object with 'version', 'agent_digest', 'model', 'exchanges'"
        )
    version = document.get("version")
    if version == 1:
        if not isinstance(document.get("agent"), dict):
            raise CassetteError("a version 1 cassette needs its 'agent'")
        document = _migrate_v1(document)
    elif version == 2:  # version 3 only added model_steps
        document = {**document, "version": FORMAT_VERSION}
    elif version != FORMAT_VERSION:
        raise CassetteError(
            f"cassette format version {version!r} is not supported "
            f"(this Parkway reads versions 1 to {FORMAT_VERSION})"
        )
    try:
        return Cassette.model_validate(document)
    except ValidationError as exc:
        raise CassetteError(describe_first_error(exc, root="cassette")) from None


def load_cassette(path: str | Path) -> Cassette:
    """Read and validate a cassette file; the cassette remembers where it came from, so
    the agent file it names is found relative to it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CassetteError(f"cannot read cassette {str(path)!r}: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CassetteError(f"cassette {str(path)!r} is not valid JSON: {exc}") from None
    try:
        cassette = parse_cassette(document)
    except CassetteError as exc:
        raise CassetteError(f"cassette {str(path)!r}: {exc}") from None
    cassette._source = Path(path).resolve()
    return cassette


def _relative_agent_file(cassette: Cassette, folder: Path) -> str | None:
    """The agent file's path as a saved cassette in ``folder`` names it: relative, with
    forward slashes, so a cassette committed on one machine replays on another."""
    named = cassette.named_agent_file()
    if named is None:
        return None
    relative = os.path.relpath(named.resolve(), folder.resolve())
    return PurePosixPath(*Path(relative).parts).as_posix()


def cassette_json(cassette: Cassette, *, folder: Path | None = None) -> str:
    """The cassette as JSON text: indented, one stream chunk per line. ``folder`` is
    where it will be saved (its agent file is named relative to it)."""
    marker = f"@@chunk-{secrets.token_hex(6)}-"
    compact: dict[str, str] = {}

    def mark(chunk: dict[str, Any]) -> str:
        name = f"{marker}{len(compact)}@@"
        compact[name] = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
        return name

    exchanges = []
    for exchange in cassette.exchanges:
        response = exchange.response.document()
        for stream in ("chunks", "events"):
            if stream in response:
                response[stream] = [mark(c) for c in response[stream]]
        request = {
            "method": exchange.request.method,
            "path": exchange.request.path,
            "json": exchange.request.body,
        }
        exchanges.append({"request": request, "response": response})
    document: dict[str, Any] = {"version": cassette.version}
    if cassette.description is not None:
        document["description"] = cassette.description
    agent_file = (
        _relative_agent_file(cassette, folder) if folder is not None else cassette.agent_file
    )
    if agent_file is not None:
        document["agent_file"] = agent_file
    document.update(agent_digest=cassette.agent_digest, model=cassette.model)
    if cassette.agent is not None:
        document["agent"] = cassette.agent
    document["exchanges"] = exchanges
    if cassette.model_steps:
        document["model_steps"] = [
            {**step.model_dump(), "events": [mark(e) for e in step.events]}
            for step in cassette.model_steps
        ]
    text = json.dumps(document, ensure_ascii=False, indent=2)
    text = re.sub(f'"({re.escape(marker)}[0-9]+@@)"', lambda m: compact[m.group(1)], text)
    return text + "\n"


def save_cassette(cassette: Cassette, path: str | Path) -> None:
    """Write the cassette to ``path``, naming its agent file relative to that folder."""
    target = Path(path)
    target.write_text(cassette_json(cassette, folder=target.parent), encoding="utf-8")


def response_record(
    status: int, content_type: str, raw: bytes, *, path: str = ""
) -> ResponseRecord:
    """A response as a cassette keeps it, from its status, content type and body; a
    stream answering ``path`` ``/api/agui`` is kept as AG-UI ``events``, any other as
    AI SDK ``chunks`` (both are each SSE event's data, parsed)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    text = raw.decode("utf-8", errors="replace")
    if kind == "text/event-stream":
        with contextlib.suppress(ValueError):  # a malformed stream is kept as text
            if is_agui(path):
                return ResponseRecord(status=status, events=sse_chunks(text))
            return ResponseRecord(status=status, chunks=sse_chunks(text))
    if not raw:
        return ResponseRecord(status=status)
    if kind == "application/json" or kind.endswith("+json"):
        with contextlib.suppress(ValueError):
            return ResponseRecord.model_validate({"status": status, "json": json.loads(text)})
    return ResponseRecord(status=status, text=text)
