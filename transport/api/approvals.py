"""``GET /api/approvals``: the approvals waiting for the caller, across chats.

An approval whose policy leaves it to someone other than the chat's owner (a role such
as ``approver``, or no self-approval: docs/security.md, "Approvals by others") waits in
the approvals index until it is settled or times out. An approver reads here what they
may answer, newest first, a page at a time, and answers through the settle route
(``POST /api/chats/{chat}/calls/{call}``), which admits them for exactly these calls.
Reading an approval shows the call (its chat id, tool, input, requester, deadline),
never the rest of its chat.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parkway.runner.store import MAX_APPROVALS_PAGE, Approval
from parkway.transport.aisdk import Describer
from parkway.transport.api.requests import principal_of, roles_of, runner_of
from parkway.transport.errors import HTTPError

__all__ = ["approval_routes"]


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(50, ge=1, le=MAX_APPROVALS_PAGE)
    after: str | None = Field(None, min_length=1, max_length=1024)


def _query(request: Request) -> _Query:
    params = request.query_params
    if len(params.multi_items()) != len(params.keys()):
        raise HTTPError(400, "invalid_query", "give each query parameter once")
    try:
        return _Query.model_validate(dict(params))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "query"
        raise HTTPError(400, "invalid_query", f"{where}: {first['msg']}") from None


def _item(approval: Approval, describer: Describer) -> dict[str, Any]:
    call = approval.call
    item: dict[str, Any] = {
        "chatId": approval.chat_id,
        "toolCallId": call.tool_call_id,
        "toolName": call.tool_name,
        "input": call.input,
        "requestedBy": call.requester or "",
        "approvers": call.approvers or "",
        "selfApproval": call.self_approval,
        "allowEdits": call.allow_edits,
        "createdAt": int(call.created_at * 1000),
        "widget": describer(approval.chat_id, call),
    }
    if call.deadline is not None:
        item["deadline"] = int(call.deadline * 1000)
    if call.approval_id is not None:
        item["approvalId"] = call.approval_id
    if call.description:
        item["description"] = call.description
    return item


async def list_approvals(request: Request) -> Response:
    """The pending approvals the caller may answer, across chats, newest first."""
    principal = principal_of(request)
    query = _query(request)
    page = await runner_of(request).approvals(
        principal, roles_of(request), limit=query.limit, after=query.after
    )
    describer: Describer = request.app.state.describe
    return JSONResponse(
        {"approvals": [_item(a, describer) for a in page.approvals], "next": page.next}
    )


def approval_routes() -> list[Route]:
    return [Route("/api/approvals", list_approvals, methods=["GET"])]
