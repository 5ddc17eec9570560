"""Recording a cassette on the server side: ``parkway serve --record CASSETTE`` (and
``parkway record``) wraps the app in :class:`CassetteRecording`, an ASGI middleware that
keeps every chat exchange the server answers, from any client (the playground in a
browser, a script, the AI SDK), and a :class:`CassetteWriter` that saves the cassette
after each one.

What is recorded: the chat API, ``/api/chat`` and everything under ``/api/chat/`` and
``/api/chats/``, and the AG-UI endpoint ``/api/agui`` (its streams as ``events``), except
a chat's audit trail (wall-clock times and the recording session's principal, which no
replay reproduces). Left out: sessions (a replay opens its own), the agent and
connection routes (they describe the server, not the chat), health, metrics, the
OpenAPI document, the playground's page and assets, OAuth pages.

An exchange is kept the moment the last message of its answer passes, just before it
goes on to the client: so exchanges are in the order their answers complete (as
:class:`~parkway.transport.cassettes.Recorder` keeps them), even when the client sends
its next request before the app's call has returned (the playground reads a chat's view
as soon as a stream ends, while the stream's response is still unwinding). A replay
sends them one at a time, so requests that overlapped (one started before another's
answer had ended: a stream reconnect during a running turn, two tabs) are logged with a
warning. A request whose body is not JSON, that the server answered before reading its
body, or whose client left before the answer ended, is skipped with a warning: a replay
could not send it as recorded, or would compare a cut-off answer. Recording turns agent
editing off by default (transport/settings/), so the playground sends no working copy
of the agent; a turn that runs one all the same (``agentTemplate``, with agent editing
turned on) is recorded with a warning: a replay serves the agent file with agent editing
off and refuses it.

Each stream passes through untouched: its bytes are copied as they go, never held back.
After each exchange the whole cassette is written to a temporary file that replaces the
cassette (``os.replace``), so a server killed at any moment leaves a valid cassette of
the exchanges that completed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parkway.runner.agent import is_agent_ref
from parkway.runner.demo import DEMO_AGENT
from parkway.transport.cassettes._format import (
    Cassette,
    Exchange,
    RequestRecord,
    agent_digest,
    cassette_json,
    model_name,
    response_record,
)
from parkway.transport.settings import Settings, SettingsError, flag_and_variable

__all__ = ["CassetteRecording", "CassetteWriter", "is_recorded", "recording_writer"]

log = logging.getLogger("parkway.cassettes")

_CHAT_ROUTE = re.compile(r"^/api/(chat|chat/.+|chats/.+|agui)$")
_AUDIT_ROUTE = re.compile(r"^/api/chats/[^/]+/audit$")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})  # what a cassette holds


def is_recorded(path: str) -> bool:
    """Whether a request to ``path`` (without its query) goes into the cassette: the
    chat API (the AG-UI endpoint included), except a chat's audit trail."""
    return bool(_CHAT_ROUTE.match(path)) and not _AUDIT_ROUTE.match(path)


class CassetteWriter:
    """The cassette being recorded, saved to ``path`` after each exchange.

    ``agent_file`` is the agent file the server serves (the cassette names it relative
    to its own folder), ``agent`` its document (digest, model and an embedded copy),
    ``model`` the model the runs use when ``--model`` overrides the agent's. ``finish``
    is applied to each snapshot before it is saved (to add what the runtime recorded
    besides the exchanges, such as model steps); it runs on the event loop.
    """

    def __init__(
        self,
        path: Path,
        *,
        agent_file: Path | None,
        agent: Mapping[str, Any],
        model: str | None = None,
        finish: Callable[[Cassette], Cassette] | None = None,
    ) -> None:
        self.path = path
        self.agent_file = agent_file.resolve() if agent_file is not None else None
        self.agent = dict(agent)
        self.model = model or model_name(self.agent)
        self.finish = finish
        self.exchanges: list[Exchange] = []
        self.saved = 0  # exchanges in the file on disk
        self.saved_steps = 0  # model steps in the file on disk
        self._lock = asyncio.Lock()

    def cassette(self) -> Cassette:
        """What was recorded so far, before ``finish``."""
        return Cassette(
            agent_file=str(self.agent_file) if self.agent_file is not None else None,
            agent_digest=agent_digest(self.agent),
            model=self.model,
            agent=self.agent,
            exchanges=list(self.exchanges),
        )

    def _write(self, text: str) -> None:
        """Replace the cassette atomically: a reader, or a server killed mid-write, never
        sees half a file."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path)

    def _snapshot(self) -> Cassette:
        cassette = self.cassette()
        return self.finish(cassette) if self.finish is not None else cassette

    def keep(self, exchange: Exchange) -> None:
        """Keep ``exchange`` (at once, with no await: the order of the calls is the
        cassette's order); :meth:`save` writes it."""
        self.exchanges.append(exchange)

    async def add(self, exchange: Exchange) -> None:
        """Keep ``exchange`` and save the cassette."""
        self.keep(exchange)
        await self.save()

    async def save(self) -> None:
        """Save every exchange kept so far, off the event loop."""
        async with self._lock:  # saves in order; each writes everything kept so far
            cassette = self._snapshot()
            text = cassette_json(cassette, folder=self.path.parent)
            await asyncio.to_thread(self._write, text)
            self.saved = len(cassette.exchanges)
            self.saved_steps = len(cassette.model_steps)

    def close(self) -> None:
        """Save once more at shutdown if a model step was recorded after the last
        exchange (a run that went on with no request open, such as an automatic resume),
        or an exchange was kept whose save never ran (its app call raised after the
        answer ended)."""
        if not self.exchanges:
            return
        cassette = self._snapshot()
        unsaved = len(cassette.exchanges) != self.saved  # kept, its save never ran
        if unsaved or len(cassette.model_steps) != self.saved_steps:
            self._write(cassette_json(cassette, folder=self.path.parent))
            self.saved = len(cassette.exchanges)
            self.saved_steps = len(cassette.model_steps)


class _Exchange:
    """One request and its answer, copied as they pass through."""

    def __init__(self, scope: Scope) -> None:
        raw_path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        self.method: str = scope["method"]
        self.path = raw_path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        headers = dict(scope.get("headers", ()))
        length = headers.get(b"content-length", b"0").strip()
        # a request with a body the app did not read to its end is not kept (below)
        self.body_read = length in {b"", b"0"} and b"transfer-encoding" not in headers
        self.body = bytearray()
        self.status = 0
        self.content_type = ""
        self.answer = bytearray()
        self.answered = False

    def request_message(self, message: Message) -> None:
        if message["type"] == "http.request":
            self.body += message.get("body", b"")
            self.body_read = not message.get("more_body", False)

    def response_message(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            for name, value in message.get("headers", ()):
                if name.lower() == b"content-type":
                    self.content_type = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            self.answer += message.get("body", b"")
            self.answered = not message.get("more_body", False)

    def record(self) -> Exchange | None:
        """The exchange as a cassette keeps it, or None (with a warning) when a replay
        could not send it as recorded or would compare a cut-off answer."""
        line = f"{self.method} {self.path}"
        if self.method not in _METHODS:  # HEAD, OPTIONS: nothing a chat client sends
            return None
        if not self.answered:
            log.warning("not recorded: %s (the client left before the answer ended)", line)
            return None
        if not self.body_read:
            log.warning("not recorded: %s (answered before its body was read)", line)
            return None
        try:
            body = json.loads(self.body) if self.body else None
            request = RequestRecord.model_validate(
                {"method": self.method, "path": self.path, "json": body}
            )
        except ValueError:  # pydantic's ValidationError is one too
            log.warning("not recorded: %s (the body is not JSON)", line)
            return None
        response = response_record(
            self.status, self.content_type, bytes(self.answer), path=self.path
        )
        return Exchange(request=request, response=response)


class CassetteRecording:
    """ASGI middleware: records the chat exchanges the app answers into ``writer``."""

    def __init__(self, app: ASGIApp, writer: CassetteWriter) -> None:
        self.app = app
        self.writer = writer
        # recorded requests whose answers are under way, and how many ever started:
        # together they tell whether two requests overlapped
        self.running = 0
        self.started = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_recorded(scope["path"]):
            await self.app(scope, receive, send)
            return
        exchange = _Exchange(scope)
        overlapped, first = self.running > 0, self.started
        ended = False  # this answer's last message passed (or the app returned without)
        kept = False

        def end() -> None:
            """The answer ended: keep the exchange now, so that its place is where its
            answer completed, not where the app's call returned. A request that starts
            from here on (the client's next one, sent on the last byte) no longer
            overlaps this one."""
            nonlocal ended, kept
            ended = True
            self.running -= 1
            kept = self._keep(exchange, overlapped or self.started > first + 1)

        async def tee_receive() -> Message:
            message = await receive()
            exchange.request_message(message)
            return message

        async def tee_send(message: Message) -> None:
            exchange.response_message(message)  # a copy of the bytes, then on at once
            if exchange.answered and not ended:
                end()
            await send(message)

        self.running += 1
        self.started += 1
        try:
            await self.app(scope, tee_receive, tee_send)
        finally:
            if not ended:  # no answer, or a cut-off one: record() says why it is skipped
                end()
        if kept:
            await self.writer.save()

    def _keep(self, exchange: _Exchange, overlapped: bool) -> bool:
        """Keep ``exchange`` in the writer if a replay can send it; warn about what a
        replay may not reproduce."""
        recorded = exchange.record()
        if recorded is None:
            return False
        line = recorded.request.line()
        if overlapped:
            log.warning(
                "recorded %s while another request ran: the replay sends requests one at "
                "a time, in the order their answers completed",
                line,
            )
        body = recorded.request.body
        if isinstance(body, dict) and body.get("agentTemplate") is not None:
            # (only with agent editing turned on: recording turns it off by default)
            log.warning(
                "recorded %s with agentTemplate, a working copy of the agent (the "
                "playground's build kit, or edits not committed): a replay serves the "
                "agent file with agent editing off and refuses it (403); record with "
                "agent editing off (the default while recording)",
                line,
            )
        self.writer.keep(recorded)
        return True


def recording_writer(settings: Settings, agent_in_code: bool) -> CassetteWriter:
    """The writer for ``settings.record``, checked at startup: with ``record_mode`` once
    an existing cassette is refused (it would be lost), and the agent must come from a
    file or be the built-in demo (the cassette needs its document)."""
    path = settings.record
    assert path is not None
    where = f"record ({flag_and_variable('record')})"
    if path.exists() and settings.record_mode == "once":
        raise SettingsError(
            f"{where}: {path} exists; replay it with `parkway replay {path}`, or pass "
            "--record-mode all to record it again"
        )
    if path.is_dir():
        raise SettingsError(f"{where}: {path} is a folder, not a cassette file")
    if agent_in_code:
        raise SettingsError(f"{where}: recording needs the agent as a file (agent_file)")
    if settings.agent_file is not None and is_agent_ref(settings.agent_file):
        raise SettingsError(
            f"{where}: recording needs the agent as a file; write one with `parkway agent "
            f"export {settings.agent_file} --agent-file > agent.json` and serve that"
        )
    if settings.agent_file is not None:
        try:
            document = json.loads(settings.agent_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SettingsError(f"cannot read agent file {settings.agent_file}: {exc}") from None
    else:
        document = DEMO_AGENT
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError(f"{where}: cannot create {path.parent}: {exc.strerror}") from None
    spec = settings.model_spec
    return CassetteWriter(
        path,
        agent_file=settings.agent_file,
        agent=document,
        model=spec.name if spec is not None else None,
    )
