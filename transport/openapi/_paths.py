"""Every route of the app, one :class:`Operation` per route and method: the table
``/openapi.json`` is built from (transport/openapi/_document.py).

The routes of ``transport`` are here; those ``widgets_api`` serves (connect flow, pages,
the demo provider) are in :mod:`parkway.transport.openapi._widgets`. Adding a route means
adding its entry to one of them, next to its neighbours: tests/transport/test_openapi.py
fails for a route the app serves that has no entry (and for an entry no route serves),
and tests/transport/test_fuzz.py fuzzes every entry, with bodies drawn from its ``body`` model.
An entry names what is particular to its route; :mod:`parkway.transport.openapi._build`
adds the errors every route of its kind answers (500, 503 with ``redis``, 401 with
``auth``, 403 for state-changing methods, the body reader's 400/408/413 and 422 with a
``body``). A JSON answer's model goes in :mod:`parkway.transport.openapi._shapes` (or
wherever the route parses it: ``body`` models are the routes' own).
"""

from __future__ import annotations

from ag_ui.core import RunAgentInput

from parkway.runner.store import MAX_APPROVALS_PAGE
from parkway.transport.api import CommitBody, SessionRequest, SettleBody
from parkway.transport.openapi._audit import AUDIT_OPERATIONS
from parkway.transport.openapi._build import (
    AguiStream,
    Content,
    Json,
    NoContent,
    Operation,
    Param,
    Stream,
)
from parkway.transport.openapi._shapes import (
    AgentView,
    AnswersPending,
    ApprovalQueue,
    ArtifactList,
    CallView,
    ChatRequest,
    ChatView,
    CommittedRevision,
    FunctionVersions,
    Health,
    LibraryList,
    LiveAnswer,
    LiveAnswered,
    Readiness,
    SandboxStatus,
    SessionIssued,
    SettleResult,
    Stopping,
)
from parkway.transport.openapi._widgets import WIDGET_OPERATIONS
from parkway.transport.settings import Settings

__all__ = ["OPERATIONS"]

_STREAM = Stream("the run, as the AI SDK UI message stream")
_CHAT_404 = "chat_not_found: no such chat (another principal's chat reads the same)"
_CALL_404 = "chat_not_found or call_not_found"
_RUN_409 = "chat_busy (a run holds the chat), duplicate_message or incompatible_state"
_SHUTTING = "shutting_down: this worker takes no new runs; send it to another"
_TOO_MANY = "too_many_runs or too_many_streams: past this worker's limits; nothing was started"
_TOO_MANY_OR_QUOTA = (
    "too_many_runs or too_many_streams: past this worker's limits; nothing was started; or "
    "quota_exceeded (with `quota`: stored_bytes or live_chats, or for anonymous sessions "
    "address_stored_bytes or address_live_chats, and `limit`): the principal's quota, or "
    "the one its client address's sessions share, is used up; nothing was stored"
)


def _metrics(settings: Settings) -> bool:
    return settings.metrics


# -- chats -------------------------------------------------------------------------------

_CHATS = [
    Operation(
        "POST",
        "/api/chat",
        "Start a turn, or answer parked calls and resume",
        "chats",
        {
            200: _STREAM,
            202: Json(AnswersPending, "answers settled some calls; others are still pending"),
            403: "agent_editing_off (a working copy where editing is off), not_an_editor, "
            "outcome_not_allowed or approval_by_others (an answer to an approval left to "
            "someone else)",
            404: _CHAT_404,
            409: f"{_RUN_409}, nothing_to_resume, no_pending_call_answered or answer_mismatch",
            413: "message_too_large: the user message is past 100,000 characters",
            422: "nothing_to_do (neither a user message nor an answer), invalid_template, "
            "invalid_outcome or not_plain_json",
            429: _TOO_MANY_OR_QUOTA,
            503: _SHUTTING,
        },
        body=ChatRequest,
        description="The AI SDK chat endpoint (useChat with DefaultChatTransport). A new "
        "user message starts a turn; answers in the last assistant message settle the "
        "calls they match and, once every parked call is settled, resume the run in the "
        "same response.",
    ),
    Operation(
        "POST",
        "/api/agui",
        "Run the agent over AG-UI: a turn, a resume, or the chat as it is",
        "chats",
        {
            200: AguiStream(
                "the run, as AG-UI events; a resume the AG-UI rules refuse is a "
                "RUN_ERROR in it, its code naming the rule, with nothing changed"
            ),
            400: "invalid_request: a threadId that is not a chat id, or a runId, message "
            "id, toolCallId or interruptId that is empty or past 256 characters",
            403: "outcome_not_allowed (a tool message reports what a client may not) or "
            "approval_by_others (a resume of an approval left to someone else)",
            404: "chat_not_found: a new user message on another principal's chat",
            409: f"{_RUN_409}, answer_mismatch or already_settled (an answer lost a settle race)",
            413: "message_too_large (user text past 100,000 characters), too_many_messages "
            "(5000), too_many_tools (128) or too_many_resume_entries (256)",
            422: "invalid_body (also an empty user message), unsupported_content (a "
            "content part that is not text), invalid_tools, tool_name_taken (a frontend "
            "tool named like one of the agent's server tools), invalid_template, "
            "invalid_outcome or not_plain_json",
            429: _TOO_MANY_OR_QUOTA,
            503: _SHUTTING,
        },
        body=RunAgentInput,
        description="The AG-UI 1.0 endpoint (@ag-ui/client's HttpAgent, CopilotKit); the "
        "body is AG-UI's RunAgentInput. threadId is the chat id (1-128 characters of "
        "letters, digits and _ . : -); runId comes back on RUN_STARTED and RUN_FINISHED. "
        "The server reads the last message when it is the user's (text only), the tool "
        "messages after the last user message, resume and tools (frontend tools, offered "
        "to the model as client tools); state, context, forwardedProps and the rest of "
        "the history are ignored. A new user message starts a turn; resume entries and "
        "tool messages settle the interrupts and frontend tool calls they answer and, "
        "once none is pending, continue the run; an input with nothing new answers a "
        "MESSAGES_SNAPSHOT and the pending interrupts again. A run that parks ends with "
        "RUN_FINISHED, outcome interrupt (an interrupt's id is its call's toolCallId) or "
        "success with pendingToolCallIds (frontend tools).",
    ),
    Operation(
        "GET",
        "/api/chat/{chat_id}/stream",
        "Resume the stream of the current assistant message",
        "chats",
        {
            200: _STREAM,
            204: NoContent("nothing to resume: no message, or it finished a while ago"),
            404: _CHAT_404,
            429: _TOO_MANY,
        },
        description="The AI SDK resumeStream(): the current assistant message from its start, "
        "then live while its run goes on.",
    ),
    Operation(
        "GET",
        "/api/chats/{chat_id}",
        "The chat as UI messages, with its parked calls",
        "chats",
        {200: Json(ChatView, "the chat"), 404: _CHAT_404},
    ),
    Operation(
        "GET",
        "/api/chats/{chat_id}/calls/{call_id}",
        "One parked call and its status (a widget's statusUrl)",
        "chats",
        {200: Json(CallView, "the call"), 404: _CALL_404},
        description="The chat's owner reads any of its calls; an approver reads an approval "
        "it may answer (the call alone: the chat stays 404 to it).",
    ),
    Operation(
        "GET",
        "/api/approvals",
        "Approvals waiting for you, across chats, newest first",
        "chats",
        {
            200: Json(ApprovalQueue, "a page of the approvals you may answer"),
            400: "invalid_query (a limit out of range, a parameter given twice or unknown) "
            "or invalid_request (a cursor this server did not give out)",
        },
        query=(
            Param("limit", f"how many approvals: 1-{MAX_APPROVALS_PAGE}, default 50"),
            Param("after", "a page's 'next': the approvals just older than that page's"),
        ),
        description="Pending approvals whose policy leaves them to someone other than the "
        "chat's owner (a role, or no self-approval) and that you may answer; answer one "
        "with POST /api/chats/{chat_id}/calls/{call_id}. A page may be short of 'limit' "
        "and still have a 'next'.",
    ),
    Operation(
        "POST",
        "/api/chats/{chat_id}/calls/{call_id}",
        "Settle one parked call, without resuming",
        "chats",
        {
            200: Json(SettleResult, "the recorded outcome (also for an identical repeat)"),
            403: "outcome_not_allowed: not an outcome this client may record; "
            "approval_by_others: an approval its policy leaves to someone else, and you "
            "requested it",
            404: _CALL_404,
            409: "already_settled: another outcome was recorded first (error.outcome holds it)",
            422: "invalid_outcome or not_plain_json",
        },
        body=SettleBody,
        description="outcome is output, error, declined or cancelled for a client tool; "
        "approved (with input, when edits are allowed) or denied (with a reason) for an "
        "approval. An approval whose policy leaves it to someone else (GET /api/approvals) "
        "is answered by a principal it admits; its outcome records who ('by').",
    ),
    Operation(
        "POST",
        "/api/chats/{chat_id}/calls/{call_id}/live/{live_id}",
        "Answer a live question of a running call",
        "chats",
        {
            200: Json(LiveAnswered, "the answer recorded (also for the same answer again)"),
            404: "call_not_found: no such question of yours and this call",
            409: "live_question_closed: another answer won, or the wait is over",
            413: "the body is over 128 KiB",
            422: "invalid_outcome: not an answer, or content that does not fit the form",
        },
        body=LiveAnswer,
        description="A running call that waits for its person (an older MCP server's form "
        "question in the middle of a call, docs/mcp.md) puts the question on the stream as "
        "the data part parkway-live-input; its liveId names it here. The first answer "
        "wins while the call waits (its deadline, and only while its worker is there).",
    ),
    Operation(
        "POST",
        "/api/chats/{chat_id}/resume",
        "Resume a chat whose parked calls are all settled",
        "chats",
        {
            200: _STREAM,
            404: _CHAT_404,
            409: f"nothing_to_resume or {_RUN_409}",
            422: "invalid_template: the stored template does not load",
            429: _TOO_MANY,
            503: _SHUTTING,
        },
    ),
    Operation(
        "POST",
        "/api/chats/{chat_id}/stop",
        "Stop the chat's running run",
        "chats",
        {
            202: Json(Stopping, "the run stops, keeping its partial answer"),
            404: _CHAT_404,
            409: "not_running: no run of this chat is running",
        },
    ),
    Operation(
        "GET",
        "/api/chats/{chat_id}/artifacts",
        "The chat's artifacts",
        "code",
        {200: Json(ArtifactList, "the artifacts' records"), 404: _CHAT_404},
    ),
    Operation(
        "GET",
        "/api/chats/{chat_id}/artifacts/{artifact_id}",
        "One artifact's bytes, as a download",
        "code",
        {
            200: Content(
                ("application/json", "text/plain"),
                "the artifact",
                {"content-disposition": "attachment; filename=<artifact id>.<json|txt>"},
            ),
            404: "chat_not_found or artifact_not_found",
        },
    ),
    Operation(
        "GET",
        "/api/chats/{chat_id}/calls/{call_id}/artifacts",
        "The artifacts an execute_code call mounts (its owner, or an approver it is left to)",
        "code",
        {200: Json(ArtifactList, "the records of the call's inputs"), 404: _CHAT_404},
    ),
    Operation(
        "GET",
        "/api/chats/{chat_id}/calls/{call_id}/artifacts/{artifact_id}",
        "One artifact an execute_code call mounts, as a download",
        "code",
        {
            200: Content(
                ("application/json", "text/plain"),
                "the artifact",
                {"content-disposition": "attachment; filename=<artifact id>.<json|txt>"},
            ),
            404: "chat_not_found, call_not_found or artifact_not_found (the call mounts none such)",
        },
    ),
]

# -- sessions, the agent, its library ------------------------------------------------------

_AGENT = [
    Operation(
        "POST",
        "/api/sessions",
        "Issue a session",
        "sessions",
        {
            201: Json(
                SessionIssued,
                "a new session, or the request's own principal again",
                {"set-cookie": "the session cookie (HttpOnly, SameSite=Lax)"},
            ),
            404: "not_found: this server's authenticator issues no sessions",
            422: "invalid_body: send an empty JSON object or no body",
            429: "too_many_sessions: this address minted its allowance of sessions; "
            "Retry-After says when to try again (auth=anonymous outside a local playground)",
        },
        body=SessionRequest,
        auth=False,
        redis=False,
    ),
    Operation(
        "GET",
        "/api/agent",
        "The agent's head revision, its recent revisions and the build-kit overlay",
        "agent",
        {
            200: Json(AgentView, "the agent"),
            404: "not_found: this server keeps no agent revisions",
        },
    ),
    Operation(
        "POST",
        "/api/agent/commit",
        "Commit a new revision of the agent",
        "agent",
        {
            201: Json(CommittedRevision, "the new revision"),
            403: "agent_editing_off or not_an_editor",
            404: "not_found: this server keeps no agent revisions",
            409: "revision_conflict: the agent changed since expectedVersion "
            "(error.currentVersion)",
            422: "invalid_template",
        },
        body=CommitBody,
        editor_token=True,
    ),
    Operation(
        "GET",
        "/api/sandbox",
        "Whether this server can run code, and how",
        "code",
        {200: Json(SandboxStatus, "code mode's status as probed at startup")},
        redis=False,
    ),
    Operation(
        "GET",
        "/api/agent/library",
        "The agent's saved functions",
        "code",
        {
            200: Json(LibraryList, "the functions' latest versions"),
            404: "not_found: this server keeps no agent library",
        },
    ),
    Operation(
        "GET",
        "/api/agent/library/{name}",
        "Every version of one saved function",
        "code",
        {
            200: Json(FunctionVersions, "the function's versions"),
            404: "function_not_found or not_found",
        },
        params={"name": "the function's name"},
    ),
]

# -- operations ----------------------------------------------------------------------------

_OPERATIONS = [
    Operation(
        "GET",
        "/healthz",
        "Liveness: 200 while the process serves",
        "operations",
        {200: Json(Health, "serving (and nothing else: no versions, paths or limits)")},
        auth=False,
        redis=False,
    ),
    Operation(
        "GET",
        "/readyz",
        "Readiness: whether this worker can do its work, check by check",
        "operations",
        {
            200: Json(Readiness, "ready"),
            503: Json(Readiness, "not ready: the checks say why"),
        },
        auth=False,
        redis=False,
    ),
    Operation(
        "GET",
        "/openapi.json",
        "This document",
        "operations",
        {200: Content(("application/json",), "the OpenAPI 3.1 document")},
        auth=False,
        redis=False,
    ),
    Operation(
        "GET",
        "/metrics",
        "Prometheus metrics (only with setting metrics on)",
        "operations",
        {200: Content(("text/plain",), "the Prometheus text format")},
        auth=False,
        redis=False,
        when=_metrics,
    ),
]

OPERATIONS: tuple[Operation, ...] = (
    *_CHATS,
    *_AGENT,
    *_OPERATIONS,
    *WIDGET_OPERATIONS,
    *AUDIT_OPERATIONS,
)
