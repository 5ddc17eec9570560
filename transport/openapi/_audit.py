"""The entries of the audit trail's routes (transport/api/audit.py): a chat's
decisions, the agent's commits, the caller's connection grants and revocations. Part of
the table of :mod:`parkway.transport.openapi._paths`, which says how an entry is
written."""

from __future__ import annotations

from parkway.runner.store import MAX_PAGE
from parkway.transport.api import AgentAudit, ChatAudit, ConnectionAudit
from parkway.transport.openapi._build import Json, Operation, Param

__all__ = ["AUDIT_OPERATIONS"]

_PAGE_QUERY = (
    Param("limit", f"how many entries: 1-{MAX_PAGE}, default 50"),
    Param("before", "an entry id (a page's 'before'): the entries just older than it"),
    Param("after", "an entry id (a page's 'after'): the entries just newer than it"),
)
_BAD_QUERY = (
    "invalid_query (a limit out of range, a parameter given twice or unknown) or "
    "invalid_request (a cursor that is no entry id, or both cursors)"
)
_PAGE = "a page of the trail, oldest first; without a cursor, the newest entries"

AUDIT_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/api/chats/{chat_id}/audit",
        "The chat's decisions: who settled which call, how, from where and when",
        "chats",
        {
            200: Json(ChatAudit, _PAGE),
            400: _BAD_QUERY,
            404: "chat_not_found: no such chat, or another principal's (also once the "
            "chat itself expired: the trail names its owner)",
        },
        query=_PAGE_QUERY,
        description="One entry per settled call, written by the atomic step that won the "
        "settle: the principal (none for a timeout), the source (browser, callback, "
        "sweeper, server), the call, its tool, a digest of its input (sha1: of its "
        "parkedCallKey), the outcome kind, and an edited approval's edits as an RFC 6902 "
        "JSON Patch. Never an output or a message.",
    ),
    Operation(
        "GET",
        "/api/agent/audit",
        "The agent's commits: who committed which revision, when (editors only)",
        "agent",
        {
            200: Json(AgentAudit, _PAGE),
            400: _BAD_QUERY,
            403: "not_an_editor: only the agent's editors read its trail",
            404: "not_found: this server keeps no agent revisions",
        },
        query=_PAGE_QUERY,
        editor_token=True,
    ),
    Operation(
        "GET",
        "/api/connections/audit",
        "Your connection grants and revocations",
        "connections",
        {
            200: Json(ConnectionAudit, _PAGE),
            400: _BAD_QUERY,
            404: "not_found: this server has no OAuth providers",
        },
        query=_PAGE_QUERY,
    ),
)
