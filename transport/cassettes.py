"""Cassettes: a chat recorded once, replayed against a fresh server, cold or warm.

A cassette is a JSON file (format version 1)::

    {
      "version": 1,
      "description": "optional free text",
      "agent": { …an agent file: {"template": …, "model": {"scripted": …}} … },
      "exchanges": [
        {"request":  {"method": "POST", "path": "/api/chat", "json": { …body… }},
         "response": {"status": 200, "chunks": [ {"type": "start", …}, … ]}},
        {"request":  {"method": "POST", "path": "/api/chats/c1/calls/call_x",
                      "json": {"outcome": "declined"}},
         "response": {"status": 200, "json": { …body… }}},
        {"request":  {"method": "GET", "path": "/api/chat/c1/stream", "json": null},
         "response": {"status": 204}}
      ]
    }

- ``agent`` is the agent file the server ran (``parkway serve --agent``); a replay
  serves exactly this agent.
- ``exchanges`` are the client's requests in the order they were sent, each with the
  answer it got. ``request.json`` is the JSON body, ``null`` when there was none; the
  path includes the query string. Session requests and headers are not recorded: a
  replay opens its own session.
- ``response`` holds ``status`` and at most one body: ``chunks``, the JSON chunks of an
  SSE stream (without ``[DONE]``); ``json``, a JSON body; ``text``, any other body.

Replaying (:func:`replay`) sends the recorded requests in order to a server started for
the replay and compares each answer with the recording. The server generates message,
tool-call and approval ids (``msg_…``, ``call_…``, ``apr_…``), so a replay learns which
new id stands for which recorded one (in order of first appearance) and writes the new
ids into later request paths and bodies; chat ids and user message ids are the
client's and are sent as recorded. ``cold=True`` kills the server with SIGKILL after
every response that parks a turn and starts a new process on the same Redis before the
next request: the proof that a parked run resumes from Redis alone.

Recording: attach a :class:`Recorder` to the ``httpx`` client that talks to the server.
See docs/cassettes.md.
"""

from __future__ import annotations

import contextlib
import http.client
import inspect
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from parkway.runner.agentfile import parse_agent_file
from parkway.runner.errors import ParkwayError
from parkway.runner.keys import CHAT_ID
from parkway.runner.validation import describe_first_error
from parkway.transport._cassette_diff import (
    Difference,
    IdTable,
    Note,
    diff_chunks,
    diff_json,
    merge_deltas,
    translate,
)
from parkway.transport._replay_process import (
    CassetteError,
    ReplayServer,
    ServerProcess,
    http_request,
    scratch_server,
)
from parkway.transport.sse import sse_chunks

if TYPE_CHECKING:
    import httpx

__all__ = [
    "FORMAT_VERSION",
    "Cassette",
    "CassetteError",
    "Difference",
    "Exchange",
    "IdTable",
    "Recorder",
    "ReplayReport",
    "ReplayServer",
    "RequestRecord",
    "ResponseRecord",
    "ServerProcess",
    "cassette_json",
    "compare_response",
    "load_cassette",
    "parse_cassette",
    "replay",
    "save_cassette",
]

FORMAT_VERSION: Literal[1] = 1
# Requests a recorder leaves out: a replay opens its own session, and health checks
# say nothing about the chat.
_UNRECORDED = frozenset({"/api/sessions", "/healthz"})
_CHAT_PATH = re.compile(r"^/api/chats?/([^/?]+)")


# -- the format -----------------------------------------------------------------------


class RequestRecord(BaseModel):
    """A request as the client sent it: method, path (with query) and JSON body."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    path: str = Field(pattern=r"^/")
    body: Any = Field(default=None, alias="json")

    def line(self) -> str:
        return f"{self.method} {self.path}"


class ResponseRecord(BaseModel):
    """An answer: its status and at most one body (SSE chunks, JSON, or text)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    status: int = Field(ge=100, le=599)
    chunks: list[dict[str, Any]] | None = None
    body: Any = Field(default=None, alias="json")
    text: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> ResponseRecord:
        given = [self.chunks is not None, self.body is not None, self.text is not None]
        if sum(given) > 1:
            raise ValueError("a response has at most one of 'chunks', 'json' and 'text'")
        return self

    def parks(self) -> bool:
        """True when this is a stream that ended a turn by parking it."""
        if not self.chunks:
            return False
        return self.chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.chunks is not None:
            out["chunks"] = self.chunks
        elif self.body is not None:
            out["json"] = self.body
        elif self.text is not None:
            out["text"] = self.text
        return out


class Exchange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request: RequestRecord
    response: ResponseRecord


class Cassette(BaseModel):
    """A recorded chat: the agent it ran and the exchanges, in order."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = FORMAT_VERSION
    description: str | None = None
    agent: dict[str, Any]
    exchanges: list[Exchange] = Field(default_factory=list)

    def chat_ids(self) -> list[str]:
        """The chats the exchanges touch, in order of first use."""
        found: list[str] = []
        for exchange in self.exchanges:
            body = exchange.request.body
            match = _CHAT_PATH.match(exchange.request.path)
            candidates = [match.group(1) if match else None]
            if exchange.request.path == "/api/chat" and isinstance(body, dict):
                candidates.append(body.get("id"))
            for chat in candidates:
                if isinstance(chat, str) and CHAT_ID.match(chat) and chat not in found:
                    found.append(chat)
        return found


def parse_cassette(document: Any) -> Cassette:
    """Validate a cassette document; raise :class:`CassetteError` naming the problem."""
    if not isinstance(document, dict):
        raise CassetteError("a cassette is a JSON object with 'version', 'agent', 'exchanges'")
    version = document.get("version")
    if version != FORMAT_VERSION:
        raise CassetteError(
            f"cassette format version {version!r} is not supported "
            f"(this Parkway reads version {FORMAT_VERSION})"
        )
    try:
        return Cassette.model_validate(document)
    except ValidationError as exc:
        raise CassetteError(describe_first_error(exc, root="cassette")) from None


def load_cassette(path: str | Path) -> Cassette:
    """Read and validate a cassette file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CassetteError(f"cannot read cassette {str(path)!r}: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CassetteError(f"cassette {str(path)!r} is not valid JSON: {exc}") from None
    try:
        return parse_cassette(document)
    except CassetteError as exc:
        raise CassetteError(f"cassette {str(path)!r}: {exc}") from None


def cassette_json(cassette: Cassette) -> str:
    """The cassette as JSON text: indented, one stream chunk per line."""
    marker = f"@@chunk-{secrets.token_hex(6)}-"
    compact: dict[str, str] = {}

    def mark(chunk: dict[str, Any]) -> str:
        name = f"{marker}{len(compact)}@@"
        compact[name] = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
        return name

    exchanges = []
    for exchange in cassette.exchanges:
        response = exchange.response.document()
        if "chunks" in response:
            response["chunks"] = [mark(c) for c in response["chunks"]]
        request = {
            "method": exchange.request.method,
            "path": exchange.request.path,
            "json": exchange.request.body,
        }
        exchanges.append({"request": request, "response": response})
    document: dict[str, Any] = {"version": cassette.version}
    if cassette.description is not None:
        document["description"] = cassette.description
    document.update(agent=cassette.agent, exchanges=exchanges)
    text = json.dumps(document, ensure_ascii=False, indent=2)
    text = re.sub(f'"({re.escape(marker)}[0-9]+@@)"', lambda m: compact[m.group(1)], text)
    return text + "\n"


def save_cassette(cassette: Cassette, path: str | Path) -> None:
    Path(path).write_text(cassette_json(cassette), encoding="utf-8")


def _response_record(status: int, content_type: str, raw: bytes) -> ResponseRecord:
    kind = content_type.split(";", 1)[0].strip().lower()
    text = raw.decode("utf-8", errors="replace")
    if kind == "text/event-stream":
        with contextlib.suppress(ValueError):  # a malformed stream is kept as text
            return ResponseRecord(status=status, chunks=sse_chunks(text))
    if not raw:
        return ResponseRecord(status=status)
    if kind == "application/json" or kind.endswith("+json"):
        with contextlib.suppress(ValueError):
            return ResponseRecord.model_validate({"status": status, "json": json.loads(text)})
    return ResponseRecord(status=status, text=text)


# -- recording ------------------------------------------------------------------------


class Recorder:
    """Records what an ``httpx`` client exchanges with a Parkway server.

    ``attach(client)`` adds a response hook to an ``httpx.AsyncClient`` (or
    ``httpx.Client``); from then on every request the client sends is recorded with its
    answer, except ``/api/sessions`` and ``/healthz``. The hook reads each response body
    in full before the caller sees it, so streams arrive all at once. Record one
    request at a time: exchanges are kept in the order their answers completed.
    """

    def __init__(self, agent: Mapping[str, Any], *, description: str | None = None) -> None:
        self.agent = dict(agent)
        self.description = description
        self.exchanges: list[Exchange] = []

    def attach(self, client: httpx.AsyncClient | httpx.Client) -> None:
        if inspect.iscoroutinefunction(client.send):  # an httpx.AsyncClient

            async def on_response(response: httpx.Response) -> None:
                await response.aread()
                self._record(response)

            client.event_hooks["response"].append(on_response)
        else:  # an httpx.Client

            def on_response_sync(response: httpx.Response) -> None:
                response.read()
                self._record(response)

            client.event_hooks["response"].append(on_response_sync)

    def _record(self, response: httpx.Response) -> None:
        request = response.request
        path = request.url.raw_path.decode("ascii")
        if path.split("?", 1)[0] in _UNRECORDED:
            return
        content = request.content
        try:
            body = json.loads(content) if content else None
        except ValueError:
            raise CassetteError(f"{request.method} {path}: the body is not JSON") from None
        self.add(
            request.method,
            path,
            body,
            status=response.status_code,
            content_type=response.headers.get("content-type", ""),
            raw=response.content,
        )

    def add(
        self, method: str, path: str, body: Any, *, status: int, content_type: str, raw: bytes
    ) -> None:
        """Record one exchange by hand (for clients other than ``httpx``)."""
        request = RequestRecord.model_validate({"method": method, "path": path, "json": body})
        self.exchanges.append(
            Exchange(request=request, response=_response_record(status, content_type, raw))
        )

    def cassette(self) -> Cassette:
        return Cassette(
            agent=self.agent, description=self.description, exchanges=list(self.exchanges)
        )


# -- replaying ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found. ``matched`` is true when every status and body equals the
    recording up to generated ids and deadlines. ``restarts_after`` lists the exchanges
    after which a cold replay killed and restarted the server; ``requests`` and
    ``responses`` are what was sent (with the new ids) and received, as is."""

    exchanges: int
    cold: bool
    restarts_after: tuple[int, ...]
    differences: tuple[Difference, ...]
    requests: tuple[RequestRecord, ...]
    responses: tuple[ResponseRecord, ...]

    @property
    def matched(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        restarts = len(self.restarts_after)
        times = "once" if restarts == 1 else f"{restarts} times"
        mode = f"cold: killed and restarted {times}" if self.cold else "warm"
        if self.matched:
            return f"replayed {self.exchanges} exchanges ({mode}): every response matches"
        count = len(self.differences)
        return f"replayed {self.exchanges} exchanges ({mode}): {count} difference(s)"

    def format(self) -> str:
        """The summary and every difference, readable in a terminal or a test failure."""
        return "\n".join([self.summary(), *(str(d) for d in self.differences)])


def _body_view(record: ResponseRecord, ids: IdTable) -> tuple[str, Any]:
    if record.chunks is not None:
        ids.learn(record.chunks)
        return "stream", [(i, ids.normalise(c)) for i, c in merge_deltas(record.chunks)]
    if record.body is not None:
        ids.learn(record.body)
        return "json", ids.normalise(record.body)
    if record.text is not None:
        return "text", record.text
    return "empty", None


def _describe(kind: str, view: Any) -> Note:
    if kind == "stream":
        return Note(f"a stream of {len(view)} chunk(s)")
    if kind == "json":
        return Note(f"a JSON body {json.dumps(view)[:300]}")
    if kind == "text":
        return Note(f"a text body {str(view)[:300]!r}")
    return Note("no body")


def compare_response(
    index: int,
    request: str,
    *,
    expected: ResponseRecord,
    got: ResponseRecord,
    recorded_ids: IdTable,
    replayed_ids: IdTable,
) -> list[Difference]:
    """The differences between a replayed response and its recording (exchange
    ``index``, described as ``request``). Each :class:`IdTable` learns its side's
    generated ids first, so pass the same two tables for every exchange of a replay."""
    found: list[Difference] = []
    if expected.status != got.status:
        found.append(Difference(index, request, "status", expected.status, got.status))
    kind_e, view_e = _body_view(expected, recorded_ids)
    kind_g, view_g = _body_view(got, replayed_ids)
    if kind_e != kind_g:
        found.append(
            Difference(index, request, "body", _describe(kind_e, view_e), _describe(kind_g, view_g))
        )
    elif kind_e == "stream":
        found += diff_chunks(index, request, view_e, view_g)
    elif kind_e == "json":
        found += diff_json(index, request, view_e, view_g)
    elif view_e != view_g:
        found.append(Difference(index, request, "text body", view_e, view_g))
    return found


def _run(cassette: Cassette, server: ReplayServer, cold: bool, timeout_s: float) -> ReplayReport:
    recorded_ids, replayed_ids = IdTable(), IdTable()
    differences: list[Difference] = []
    sent: list[RequestRecord] = []
    responses: list[ResponseRecord] = []
    restarts: list[int] = []
    base_url = server.start()
    try:
        status, _, raw = http_request(base_url, "POST", "/api/sessions", timeout_s=timeout_s)
        if status != 201:
            raise CassetteError(f"the replay server refused a session (status {status})")
        token = str(json.loads(raw)["token"])
        last = len(cassette.exchanges) - 1
        for index, exchange in enumerate(cassette.exchanges):
            recorded = exchange.request
            path = translate(recorded.path, recorded_ids, replayed_ids)
            body = translate(recorded.body, recorded_ids, replayed_ids)
            sent.append(
                RequestRecord.model_validate(
                    {"method": recorded.method, "path": path, "json": body}
                )
            )
            try:
                status, content_type, raw = http_request(
                    base_url, recorded.method, path, body, token=token, timeout_s=timeout_s
                )
            except (OSError, http.client.HTTPException) as exc:
                # The server died or hung: nothing later can be compared.
                differences.append(
                    Difference(
                        index, recorded.line(), "no answer", Note("an answer"), Note(repr(exc))
                    )
                )
                break
            got = _response_record(status, content_type, raw)
            responses.append(got)
            differences += compare_response(
                index,
                recorded.line(),
                expected=exchange.response,
                got=got,
                recorded_ids=recorded_ids,
                replayed_ids=replayed_ids,
            )
            if cold and exchange.response.parks() and index < last:
                server.kill()
                restarts.append(index)
                base_url = server.start()
    finally:
        server.stop()
    return ReplayReport(
        exchanges=len(cassette.exchanges),
        cold=cold,
        restarts_after=tuple(restarts),
        differences=tuple(differences),
        requests=tuple(sent),
        responses=tuple(responses),
    )


def replay(
    cassette: Cassette,
    *,
    cold: bool = False,
    redis_url: str | None = None,
    server: ReplayServer | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> ReplayReport:
    """Replay ``cassette`` against a fresh server and compare every answer.

    By default the server is ``parkway serve`` in a child process, on a private Redis in
    a temporary folder, or on ``redis_url`` (whose database must not hold the cassette's
    chats yet). ``server`` replaces that with your own :class:`ReplayServer`; the replay
    starts and stops it. With ``cold``, the server is killed with SIGKILL after each
    response that parks a turn and started again before the next request.

    Raises :class:`CassetteError` when the cassette's agent does not load or the server
    cannot start; a replay that runs returns a report, matched or not.
    """
    try:
        parse_agent_file(cassette.agent)
    except ParkwayError as exc:
        raise CassetteError(f"the cassette's agent does not load: {exc}") from None
    if server is not None:
        return _run(cassette, server, cold, timeout_s)
    with scratch_server(cassette.agent, cassette.chat_ids(), redis_url, env) as scratch:
        return _run(cassette, scratch, cold, timeout_s)
