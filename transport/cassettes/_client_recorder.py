"""Recording a cassette on the client side (private to
:mod:`parkway.transport.cassettes`): a :class:`Recorder` hooks into the ``httpx2`` or
``httpx`` client that talks to a Parkway server and keeps every exchange, with the agent
file and model that produced them.

The server records on its own with ``parkway serve --record`` (``parkway record``, the
``parkway_record`` fixture): :mod:`parkway.transport.cassettes._server_recorder`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parkway.transport.cassettes._format import (
    Cassette,
    Exchange,
    RequestRecord,
    agent_digest,
    model_name,
    response_record,
)
from parkway.transport.cassettes._replay_server import CassetteError

if TYPE_CHECKING:
    import httpx
    import httpx2

    Client = httpx2.AsyncClient | httpx2.Client | httpx.AsyncClient | httpx.Client
    Response = httpx2.Response | httpx.Response

__all__ = ["Recorder"]

# Requests a recorder leaves out: a replay opens its own session, and health checks and
# the host's sandbox say nothing about the chat.
_UNRECORDED = frozenset({"/api/sessions", "/healthz", "/api/sandbox"})


class Recorder:
    """Records what an HTTP client exchanges with a Parkway server.

    ``attach(client)`` adds a response hook to an ``httpx2.AsyncClient`` or
    ``httpx2.Client`` (``httpx2`` comes with Parkway), or to their ``httpx`` twins;
    from then on every request the client sends is recorded with its answer, except
    ``/api/sessions``, ``/healthz`` and ``/api/sandbox``. The hook reads each response
    body in full before the caller sees it, so streams arrive all at once. Record one
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

    def attach(self, client: Client) -> None:
        """Record every exchange ``client`` has from now on (the two packages' clients
        have the same hooks, so either works)."""
        if inspect.iscoroutinefunction(client.send):  # an AsyncClient

            async def on_response(response: Response) -> None:
                await response.aread()
                self._record(response)

            client.event_hooks["response"].append(on_response)
        else:  # a Client

            def on_response_sync(response: Response) -> None:
                response.read()
                self._record(response)

            client.event_hooks["response"].append(on_response_sync)

    def _record(self, response: Response) -> None:
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
        """Record one exchange by hand (for clients other than ``httpx2`` and ``httpx``)."""
        request = RequestRecord.model_validate({"method": method, "path": path, "json": body})
        self.exchanges.append(
            Exchange(
                request=request,
                response=response_record(status, content_type, raw, path=path),
            )
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
