"""The shapes of what Parkway's routes answer (and of the two bodies no route parses
with a model of its own), as pydantic models: ``/openapi.json`` takes their JSON Schemas
(transport/openapi/_document.py), and tests/transport/test_openapi.py holds real answers against
them.

The routes build these answers as plain dicts; these models only describe them. Every
model forbids keys it does not name, so an answer that grows a field fails the test
until the description grows it too. A field typed :data:`Absent` is left out of the
answer when it does not apply, never sent as ``null``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from parkway.transport.aisdk import ChatBody

__all__ = [
    "AgentView",
    "AnswersPending",
    "ApprovalItem",
    "ApprovalQueue",
    "ArtifactList",
    "CallView",
    "ChatRequest",
    "ChatView",
    "CommittedRevision",
    "ConnectionList",
    "ErrorBody",
    "FunctionVersions",
    "Health",
    "JsonObject",
    "LibraryList",
    "LiveAnswer",
    "LiveAnswered",
    "OAuthError",
    "Readiness",
    "SandboxStatus",
    "SessionIssued",
    "SettleResult",
    "StartTicket",
    "StartTicketRequest",
    "Stopping",
    "UseConnectionRequest",
    "UseConnectionResult",
]

_T = TypeVar("_T")


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # "absent", not null: a null default would misdescribe it


Absent = Annotated[_T | SkipJsonSchema[None], Field(json_schema_extra=_no_default)]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    """``code`` is stable (clients branch on it); ``message`` is for people. Some errors
    add fields: a settle conflict the winner's ``outcome``, a revision conflict the
    ``currentVersion``."""

    model_config = ConfigDict(extra="allow")
    code: str
    message: str
    outcome: Absent[dict[str, Any]] = None
    currentVersion: Absent[int] = None


class ErrorBody(_Out):
    """Every error of Parkway's own routes."""

    error: ErrorDetail


class OAuthError(BaseModel):
    """An RFC 6749 error, as the demo OAuth provider answers (not Parkway's shape)."""

    model_config = ConfigDict(extra="allow")
    error: str
    error_description: Absent[str] = None


class JsonObject(BaseModel):
    """Any JSON object (the demo provider's OAuth answers: RFC 8414 metadata, tokens,
    userinfo)."""

    model_config = ConfigDict(extra="allow")


# -- bodies that no route parses with a model -------------------------------------------


class ChatRequest(ChatBody):
    """What an AI SDK ``useChat`` client posts: the chat id and its whole history. The
    server reads only the new user message (the last message, when it is the user's) and
    the answers in the last assistant message's tool parts; other keys (the transport's
    ``body``) are allowed and ignored. ``messageId`` is at most 128 characters, and so is
    any id in an answer."""

    agentTemplate: dict[str, Any] | None = Field(
        None,
        description="the playground's working copy of the agent template, for this turn "
        "only (only where agent editing is on; 403 agent_editing_off otherwise); null: "
        "the committed agent",
    )


class UseConnectionRequest(_Out):
    """Settle a pending ``request_connection`` call with a connection the caller has."""

    chatId: str = Field(min_length=1, max_length=256)
    toolCallId: str = Field(min_length=1, max_length=256)
    connectionId: str = Field(min_length=1, max_length=256)


# -- sessions, chats and calls ----------------------------------------------------------


class SessionIssued(_Out):
    principal: str
    token: str = Field(description="the session token, for 'Authorization: Bearer'")
    expiresIn: int = Field(description="seconds")


class CallView(_Out):
    """A parked call, as ``GET /api/chats/{chat_id}`` lists it and its ``statusUrl``
    answers."""

    toolCallId: str
    toolName: str
    kind: Literal["client", "approval"]
    status: Literal["pending", "settled"]
    input: Any
    parkedCallKey: str = Field(description="toolName#RFC 8785 JSON of the input")
    messageId: str
    widget: dict[str, Any] = Field(description="the widget descriptor the playground renders")
    approvalId: Absent[str] = None
    deadline: Absent[int] = Field(None, description="epoch milliseconds")
    outcome: Absent[dict[str, Any]] = Field(
        None, description="once settled; 'by' names who decided an approval for someone else"
    )
    approvers: Absent[str] = Field(
        None, description="an approval someone other than the owner may answer: the role"
    )
    selfApproval: Absent[bool] = Field(None, description="whether its requester may answer it")
    requestedBy: Absent[str] = Field(None, description="the principal who requested it")


class SettleResult(CallView):
    fresh: bool = Field(description="false when this settle repeated the recorded outcome")
    pendingInChat: Absent[int] = None


class ChatMessagePart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str


class ChatMessage(_Out):
    """A UI message as the server rebuilds it from what it stored."""

    id: str
    role: Literal["user", "assistant"]
    parts: list[ChatMessagePart]
    metadata: Absent[dict[str, Any]] = Field(None, description="model and token usage")


class ChatView(_Out):
    id: str
    state: str = Field(description="idle, running, parked or finished")
    messageId: str | None = Field(description="the current assistant message")
    messages: list[ChatMessage]
    calls: list[CallView]


class AnswersPending(_Out):
    """Answers settled some calls; others are still pending, so nothing resumed."""

    settled: list[str] = Field(description="the toolCallIds these answers settled")
    pending: int


class Stopping(_Out):
    stopping: Literal[True]


class LiveAnswer(BaseModel):
    """A person's answer to a live question (the ``parkway-live-input`` data part)."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["accept", "decline", "cancel"]
    content: Absent[dict[str, Any]] = Field(
        default=None, description="accept only: the form's values, checked against its schema"
    )


class LiveAnswered(_Out):
    liveId: str
    toolCallId: str
    answer: LiveAnswer


# -- the agent, its library, artifacts ------------------------------------------------


class RevisionSummary(_Out):
    agentId: str
    revisionId: str
    version: int
    committedAt: int = Field(description="epoch milliseconds")
    committedBy: str = Field(description="user, agent or agent-file")
    committedByYou: bool
    summary: str


class CommittedRevision(RevisionSummary):
    """The revision a commit made."""


class BuildKit(_Out):
    agent_template_overlay: dict[str, Any]
    on_by_default: bool = Field(
        description="where the playground's kit toggle starts: on for the built-in demo agent only"
    )


class AdditionalContext(_Out):
    playground_build_kit: BuildKit


class AgentView(RevisionSummary):
    template: dict[str, Any]
    editable: bool
    mayCommit: bool
    drift: bool
    driftKeys: list[str]
    revisions: list[RevisionSummary]
    suggestions: list[str] = Field(
        description="the agent file's first messages a person might send (may be empty)"
    )
    additional_context: AdditionalContext


class ArtifactRecord(_Out):
    artifact_id: str
    bytes: int
    media_type: str
    source: str
    tool_call_id: str
    created_at: int = Field(description="epoch milliseconds")
    preview: str


class ArtifactList(_Out):
    artifacts: list[ArtifactRecord]


class FunctionSummary(_Out):
    name: str
    version: int
    description: str
    signature: str
    by: str
    at: int


class LibraryList(_Out):
    functions: list[FunctionSummary]


class FunctionVersion(_Out):
    version: int
    code: str
    description: str
    by: str
    at: int


class FunctionVersions(_Out):
    name: str
    versions: list[FunctionVersion]


# -- connections ------------------------------------------------------------------------


class ConnectionView(_Out):
    id: str
    provider: str
    providerName: str
    account: str
    scopes: list[str]
    status: Literal["active", "needs_reconnect"]
    createdAt: int
    updatedAt: int
    resource: str | None = Field(
        default=None,
        description="the MCP server URL (RFC 8707 resource) its tokens were issued for; "
        "absent for a plain connection",
    )


class ConnectionList(_Out):
    connections: list[ConnectionView]


class StartTicketRequest(_Out):
    """Ask for a start link whose ticket names the caller (docs/embedding.md)."""

    chatId: str = Field(min_length=1, max_length=256)
    toolCallId: str = Field(min_length=1, max_length=256)
    retry: bool = Field(False, description="a new flow for a call that ended unconnected")


class StartTicket(_Out):
    startUrl: str = Field(description="the start link to open in the popup, with its ticket")
    expiresAt: int = Field(description="when the ticket expires, epoch milliseconds")


class UseConnectionResult(_Out):
    outcome: dict[str, Any] = Field(description="the call's recorded outcome")


# -- health and readiness ---------------------------------------------------------------


class SandboxStatus(_Out):
    provider: str | None
    available: bool
    confined: bool
    isolation: dict[str, Any] | None = Field(
        description="the provider, whether it confines, its layers (GET /api/sandbox leaves "
        "out the detail: the sandbox's versions and paths on the host)"
    )
    reason: str | None = Field(description="why code cannot run, and the fix")
    limits: dict[str, Any]


class Health(_Out):
    status: Literal["ok"]


class Check(_Out):
    ok: bool
    reason: Absent[str] = Field(None, description="why not, when not ok")


class RedisCheck(Check):
    latency_ms: Absent[float] = None


class SandboxCheck(Check):
    required: bool = Field(
        description="the agent has execute_code and setting sandbox is not off: only then "
        "does an unavailable sandbox make the worker not ready"
    )
    available: Absent[bool] = None
    provider: str | None = None


class ModelsCheck(Check):
    model: Absent[str] = None


class OAuthCheck(Check):
    providers: list[str]


class McpServerCheck(_Out):
    name: str = Field(description="the server's name in the agent template")
    transport: Literal["http", "stdio"]
    reachable: bool | None = Field(description="null: this worker has not tried it yet")
    reason: Absent[str] = Field(None, description="why not reachable (names no address)")
    tools: Absent[int] = Field(None, description="how many tools it lists")


class McpCheck(Check):
    servers: list[McpServerCheck] = Field(description="the agent's MCP servers")
    degraded: Absent[bool] = Field(
        None,
        description="a server cannot be reached: its tools are unavailable, the worker "
        "stays ready (every worker would fail alike; runs go on without them)",
    )


class ReadinessChecks(_Out):
    redis: RedisCheck
    sandbox: SandboxCheck
    models: ModelsCheck
    oauth: OAuthCheck
    mcp: McpCheck
    worker: Check


class Readiness(_Out):
    status: Literal["ready", "not_ready"]
    checks: ReadinessChecks


class ApprovalItem(_Out):
    """An approval waiting for the caller (``GET /api/approvals``)."""

    chatId: str
    toolCallId: str
    toolName: str
    input: Any
    requestedBy: str = Field(description="the principal who requested it (the chat's owner)")
    approvers: str = Field(description="the role that answers it")
    selfApproval: bool
    allowEdits: bool
    createdAt: int = Field(description="epoch milliseconds")
    deadline: Absent[int] = Field(None, description="epoch milliseconds")
    approvalId: Absent[str] = None
    description: Absent[str] = None
    widget: dict[str, Any] = Field(description="the widget descriptor the playground renders")


class ApprovalQueue(_Out):
    approvals: list[ApprovalItem] = Field(description="newest first")
    next: str | None = Field(description="pass as ?after= for the next page; null: no more")
