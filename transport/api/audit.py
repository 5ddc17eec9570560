"""Reading the audit trails over HTTP (runner/store/audit.py keeps them).

- ``GET /api/chats/{chatId}/audit``: the chat's decisions, for its owner only (anyone
  else gets 404, as for every chat route), also after the chat itself expired;
- ``GET /api/agent/audit``: the agent's commits, for its editors only (403 otherwise,
  like committing; transport/api/agent.py mounts it);
- ``GET /api/connections/audit``: the caller's own connection grants and revocations.

Each answers a page, oldest first: the newest ``limit`` entries (default 50, at most
200), or those just ``before`` / just ``after`` an entry id. ``before`` in the answer is
the cursor for older entries (null when there are none), ``after`` the one for newer.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parkway.runner.errors import ChatNotFoundError
from parkway.runner.store import (
    MAX_PAGE,
    AuditPage,
    CommitEntry,
    ConnectionEntry,
    SettleEntry,
    chat_audit,
    chat_keys,
)
from parkway.transport.api.requests import chat_id_of, principal_of, runner_of
from parkway.transport.errors import HTTPError

__all__ = [
    "AgentAudit",
    "ChatAudit",
    "ChatAuditEntry",
    "ConnectionAudit",
    "get_chat_audit",
    "get_connection_audit",
    "page_query",
    "page_response",
]


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(50, ge=1, le=MAX_PAGE)
    before: str | None = Field(None, max_length=41)
    after: str | None = Field(None, max_length=41)


def page_query(request: Request) -> dict[str, Any]:
    """``limit``, ``before`` and ``after`` from the query string, or 400."""
    params = request.query_params
    if len(params.multi_items()) != len(params.keys()):
        raise HTTPError(400, "invalid_query", "give each query parameter once")
    try:
        return _Query.model_validate(dict(params)).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "query"
        raise HTTPError(400, "invalid_query", f"{where}: {first['msg']}") from None


E = TypeVar("E", bound=BaseModel)


class _Page(BaseModel, Generic[E]):
    entries: list[E]
    before: str | None = Field(description="pass as ?before= for older entries; null: none")
    after: str | None = Field(description="pass as ?after= for newer entries")


class ChatAuditEntry(SettleEntry):
    by_you: bool = Field(description="whether the viewer made this decision")


class ChatAudit(_Page[ChatAuditEntry]):
    """A page of a chat's audit trail: one entry per settled call."""


class AgentAudit(_Page[CommitEntry]):
    """A page of the agent's audit trail: one entry per committed revision."""


class ConnectionAudit(_Page[ConnectionEntry]):
    """A page of the caller's connection audit trail: grants and revocations."""


def page_response(page: _Page[Any]) -> Response:
    return JSONResponse(page.model_dump(mode="json", by_alias=True))


async def get_chat_audit(request: Request) -> Response:
    """The chat's decisions: who settled which call, when, how and from where."""
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    query = page_query(request)
    page = await chat_audit(runner_of(request).store.redis, chat_keys(chat_id), principal, **query)
    if page is None:
        raise ChatNotFoundError("no such chat")
    entries = [
        ChatAuditEntry(**e.model_dump(), by_you=e.principal == principal) for e in page.entries
    ]
    return page_response(ChatAudit(entries=entries, before=page.before, after=page.after))


async def get_connection_audit(request: Request) -> Response:
    """The caller's own connection grants and revocations."""
    principal = principal_of(request)
    query = page_query(request)
    flow = getattr(request.app.state, "connect", None)
    if flow is None:
        raise HTTPError(404, "not_found", "this server has no OAuth providers")
    page: AuditPage[ConnectionEntry] = await flow.connections.audit(principal, **query)
    return page_response(
        ConnectionAudit(entries=page.entries, before=page.before, after=page.after)
    )
