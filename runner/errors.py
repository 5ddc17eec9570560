"""Errors raised by the runner.

The tree::

    ParkwayError                      root of everything the runner raises
    ├── CallerError                   the caller's mistake; the message names the bad value
    │   ├── TemplateError             an agent template or agent file is invalid
    │   ├── NotPlainJSONError         a value that must be plain JSON is not
    │   ├── InvalidOutcomeError       an outcome that the call's kind or schema does not allow
    │   ├── OutcomeNotAllowedError    an outcome this settler may not record (403)
    │   ├── ApprovalByOthersError     the requester answers an approval someone else must (403)
    │   ├── EditingDisabledError      agent editing is off on this server (403)
    │   ├── ChatNotFoundError         no such chat, or not the caller's (callers cannot tell)
    │   ├── CallNotFoundError         no such parked call in the chat
    │   └── AnswerMismatchError       an answer names a pending call but carries other input
    ├── ConflictError                 a state transition lost a race or is not allowed now
    │   ├── SettleConflictError       the call is already settled with another outcome
    │   ├── ChatBusyError             another worker holds the chat's run lease
    │   ├── NothingToResumeError      the chat is not parked, or calls are still pending
    │   ├── DuplicateMessageError     the user message was already taken
    │   └── ShuttingDownError         this worker takes no new runs (503)
    ├── QuotaExceededError            the principal's quota is used up (429; it names the
    │                                 quota and its limit; nothing was stored)
    ├── StateError                    stored state the running code cannot use
    │   └── IncompatibleStateError    a record with a schema version this code cannot read
    └── ModelError                    the model provider could not answer (bad key, unknown
                                      model, context too long, retries exhausted, a stream
                                      cut short); the message names the provider and the
                                      cause and is safe to show

    ToolError                         raised by a server tool's own code, never by the
    │                                 runner: its message is the error result the model
    │                                 sees (any other exception a tool raises becomes a
    │                                 generic error result)
    ├── ConnectionUnavailableError    a connection cannot give a token now
    │                                 (:mod:`parkway.runner.agent.credentials`)
    └── McpUnavailableError           an MCP server cannot be reached now (its message
                                      names the server and why, in words safe for the
                                      model and for /readyz: never a URL, header or
                                      variable's value; :mod:`parkway.runner.mcp`)

``ToolError`` is not a ``ParkwayError``: it never leaves the tool call that raised it
(the runner turns it into the call's result), so nothing that handles the runner's
errors may catch it by accident.

Redis being unreachable is not a ``ParkwayError`` either: it surfaces as redis-py's
``ConnectionError`` or ``TimeoutError`` (the store's circuit breaker refuses with
``RedisUnavailableError``, one of them), which
:func:`parkway.runner.store.is_redis_outage` recognises; the HTTP layer answers 503.

    ToolNeedsInput                    a control-flow signal, not an error: a running
                                      server tool ends asking a person for input (an
                                      MCP server's input request); the runner parks the
                                      call and runs the tool again with the answer

Control flow (a call parks) is otherwise not an exception: the run loop returns a
parked step.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AnswerMismatchError",
    "ApprovalByOthersError",
    "ArtifactNotFoundError",
    "CallNotFoundError",
    "CallerError",
    "ChatBusyError",
    "ChatNotFoundError",
    "ConflictError",
    "DuplicateMessageError",
    "EditingDisabledError",
    "IncompatibleStateError",
    "InvalidOutcomeError",
    "McpUnavailableError",
    "ModelError",
    "NotPlainJSONError",
    "NothingToResumeError",
    "OutcomeNotAllowedError",
    "ParkwayError",
    "QuotaExceededError",
    "SettleConflictError",
    "ShuttingDownError",
    "StateError",
    "TemplateError",
    "ToolError",
    "ToolNeedsInput",
]


class ParkwayError(Exception):
    """Root of the runner's errors. ``code`` is a stable machine-readable name."""

    code = "parkway_error"


class CallerError(ParkwayError):
    code = "invalid_request"


class TemplateError(CallerError):
    code = "invalid_template"


class NotPlainJSONError(CallerError):
    code = "not_plain_json"


class InvalidOutcomeError(CallerError):
    code = "invalid_outcome"


class OutcomeNotAllowedError(CallerError):
    code = "outcome_not_allowed"


class ApprovalByOthersError(CallerError):
    """The call is an approval its policy leaves to someone else (a role the caller
    lacks, or no self-approval), and the caller requested it: refused, never matched."""

    code = "approval_by_others"


class EditingDisabledError(CallerError):
    code = "agent_editing_off"


class ChatNotFoundError(CallerError):
    code = "chat_not_found"


class CallNotFoundError(CallerError):
    code = "call_not_found"


class ArtifactNotFoundError(CallerError):
    code = "artifact_not_found"


class AnswerMismatchError(CallerError):
    code = "answer_mismatch"


class ConflictError(ParkwayError):
    code = "conflict"


class SettleConflictError(ConflictError):
    """The call was settled first with a different outcome; ``existing`` is the winner's."""

    code = "already_settled"

    def __init__(self, message: str, existing: dict[str, Any]) -> None:
        super().__init__(message)
        self.existing = existing


class LiveQuestionClosedError(ConflictError):
    """A live question (runner/engine/live.py) was answered already, or its wait ended."""

    code = "live_question_closed"


class ChatBusyError(ConflictError):
    code = "chat_busy"


class NothingToResumeError(ConflictError):
    code = "nothing_to_resume"


class DuplicateMessageError(ConflictError):
    code = "duplicate_message"


class ShuttingDownError(ConflictError):
    code = "shutting_down"


class QuotaExceededError(ParkwayError):
    """A write that would take the principal past one of its quotas (runner/quotas.py):
    refused whole, nothing of it stored. ``quota`` names the quota (``stored_bytes``,
    ``live_chats``, ``artifacts_per_chat``), ``limit`` its value."""

    code = "quota_exceeded"

    def __init__(self, quota: str, limit: int, message: str) -> None:
        super().__init__(message)
        self.quota = quota
        self.limit = limit


class StateError(ParkwayError):
    code = "state_error"


class IncompatibleStateError(StateError):
    code = "incompatible_state"


class ModelError(ParkwayError):
    """The model provider could not answer. The message is safe to show a user: it names
    the provider and the cause, never a key or a raw provider body. ``retryable`` says
    whether trying again later may help (a rate limit, an outage) or not (a bad key)."""

    code = "model_error"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ToolError(Exception):
    """Raised by a tool to report an error whose message the model may see."""


class McpUnavailableError(ToolError):
    """An MCP server cannot be reached now: its tools are unavailable, and a call of one
    ends with this message as its result. ``server`` is the server's name in the
    template, ``reason`` the short cause (``"connection refused"``)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(
            f"MCP server {server!r} is unreachable ({reason}): its tools are unavailable right now"
        )
        self.server = server
        self.reason = reason


class ToolNeedsInput(Exception):
    """Raised by a running server tool that needs a person's answer before it can finish.

    The runner parks the call (a client call, deadline ``deadline_s`` or the client
    default) with ``render`` as its widget (JSON-safe, shown to the browser) and
    ``output_schema`` judging the answer. ``continuation`` is private JSON the tool
    needs to go on (an MCP server's ``requestState``, say): it is stored with the parked
    call on the server only, never shown to a browser or the model, and handed back to
    the tool (``ctx.continuation``, with the settled outcome as ``ctx.answer``) when the
    run resumes on any worker. A tool run again with an answer may raise this again:
    the call parks once more under its id, with the new widget and continuation, up to
    :data:`~parkway.runner.agent.tools.MAX_INPUT_ROUNDS` rounds (then the model gets an
    error instead): a form after a form, or a sign-in again after the server refused the
    new token. ``result_style="connection"`` makes it a connection call: only the
    server's OAuth callback records a successful connection
    (:mod:`parkway.runner.outcomes`)."""

    def __init__(
        self,
        *,
        render: dict[str, Any],
        output_schema: dict[str, Any],
        continuation: dict[str, Any],
        description: str = "",
        deadline_s: float | None = None,
        result_style: str | None = None,
    ) -> None:
        super().__init__("the tool needs input from a person")
        self.render = render
        self.output_schema = output_schema
        self.continuation = continuation
        self.description = description
        self.deadline_s = deadline_s
        self.result_style = result_style
