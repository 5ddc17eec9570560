"""Recording a cassette (private to :mod:`parkway.transport.cassettes`): a
:class:`Recorder` hooks into the ``httpx`` client that talks to a Parkway server and
keeps every exchange, with the agent file and model that produced them.

Recording modes (a ``parkway record`` command, a fixture that records on the first run)
belong here: they drive a server through a :class:`Recorder` and save its cassette.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parkway.transport._cassette_format import (
    Cassette,
    Exchange,
    RequestRecord,
    agent_digest,
    model_name,
    response_record,
)
from parkway.transport._replay_process import CassetteError

if TYPE_CHECKING:
    import httpx

__all__ = ["Recorder"]

# Requests a recorder leaves out: a replay opens its own session, and health checks
# say nothing about the chat.
_UNRECORDED = frozenset({"/api/sessions", "/healthz"})


class Recorder:
    """Records what an ``httpx`` client exchanges with a Parkway server.

    ``attach(client)`` adds a response hook to an ``httpx.AsyncClient`` (or
    ``httpx.Client``); from then on every request the client sends is recorded with its
    answer, except ``/api/sessions`` and ``/healthz``. The hook reads each response body
    in full before the caller sees it, so streams arrive all at once. Record one
    request at a time: exchanges are kept in the order their answers completed.

    ``agent`` is the agent file the server serves (its path: the cassette names it
    relative to where it is saved and keeps a copy) or its document (the cassette then
    names no file and a replay needs ``--agent`` or ``--cassette-agent``).
    ``embed_agent=False`` leaves the copy out.
    """

    def __init__(
        self,
        agent: Mapping[str, Any] | str | Path,
        *,
        description: str | None = None,
        embed_agent: bool = True,
    ) -> None:
        if isinstance(agent, str | Path):
            self.agent_file: Path | None = Path(agent).resolve()
            try:
                document = json.loads(self.agent_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CassetteError(f"cannot read agent file {str(agent)!r}: {exc}") from None
        else:
            self.agent_file, document = None, dict(agent)
        self.agent: dict[str, Any] = document
        self.embed_agent = embed_agent
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
            Exchange(request=request, response=response_record(status, content_type, raw))
        )

    def cassette(self) -> Cassette:
        """What was recorded, naming the agent and model that produced it."""
        return Cassette(
            description=self.description,
            agent_file=str(self.agent_file) if self.agent_file is not None else None,
            agent_digest=agent_digest(self.agent),
            model=model_name(self.agent),
            agent=self.agent if self.embed_agent else None,
            exchanges=list(self.exchanges),
        )
