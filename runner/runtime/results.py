"""What the runtime hands back: a turn's result, a parked call, a chat's stored view.

Plain frozen dataclasses built from runner events and stored records, so that a script
or a test reads ``result.text`` and ``result.parked[0].id`` instead of walking events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from parkway.runner.events import (
    CallParked,
    Event,
    FinishReason,
    MessageFinished,
    MessageStarted,
    RunFailed,
    TextDelta,
)
from parkway.runner.llm import ModelMessage
from parkway.runner.parking import CallKind, ParkedCall

__all__ = ["CallSummary", "ChatView", "TurnResult"]


@dataclass(frozen=True)
class CallSummary:
    """A parked call: a client tool waiting for its answer, or an approval.

    ``id`` is what :meth:`Runtime.answer` and the other settles take. ``deadline`` is
    when the server settles it ``timeout`` if nobody answers (UTC; None: no deadline).
    ``outcome`` is None while the call is pending, else the recorded outcome, for example
    ``{"outcome": "output", "output": {...}}`` or ``{"outcome": "timeout"}``.
    """

    id: str
    tool: str
    kind: CallKind
    input: Any
    deadline: datetime | None
    message_id: str
    approval_id: str | None = None
    allow_edits: bool = False
    description: str = ""
    render: Mapping[str, Any] | None = None
    outcome: Mapping[str, Any] | None = None

    @property
    def status(self) -> Literal["pending", "settled"]:
        return "pending" if self.outcome is None else "settled"

    @classmethod
    def of(cls, call: ParkedCall) -> CallSummary:
        deadline = None if call.deadline is None else datetime.fromtimestamp(call.deadline, UTC)
        return cls(
            id=call.tool_call_id,
            tool=call.tool_name,
            kind=call.kind,
            input=call.input,
            deadline=deadline,
            message_id=call.message_id,
            approval_id=call.approval_id,
            allow_edits=call.allow_edits,
            description=call.description,
            render=call.render,
            outcome=call.outcome,
        )


@dataclass(frozen=True)
class TurnResult:
    """A turn, or a resume, run to its end or its park.

    ``text`` is what the assistant said in this run (every step's text, joined);
    ``parked`` the calls it parked on (empty unless ``finish_reason`` is
    ``"tool-calls"``); ``events`` everything the run reported, in order. A run the
    model could not finish ends with ``finish_reason == "error"`` and ``error`` saying
    why (safe to show; the chat stays usable). A :meth:`Runtime.answer` with
    ``resume=True`` that leaves calls pending returns a result with no events, its
    ``parked`` the calls still waiting.
    """

    chat_id: str
    message_id: str
    text: str
    parked: tuple[CallSummary, ...]
    events: tuple[Event, ...]
    finish_reason: FinishReason | None
    error: str | None = None

    @property
    def is_parked(self) -> bool:
        """Whether the run stopped on calls that wait for an answer."""
        return bool(self.parked)

    def call(self, tool: str) -> CallSummary:
        """The parked call of ``tool`` (the first, if the step called it more than once);
        :class:`LookupError` naming the parked tools when there is none."""
        for call in self.parked:
            if call.tool == tool:
                return call
        names = ", ".join(c.tool for c in self.parked) or "none"
        raise LookupError(f"no call of {tool!r} is parked (parked: {names})")

    @classmethod
    def of(cls, chat_id: str, message_id: str, events: Sequence[Event]) -> TurnResult:
        finish: FinishReason | None = None
        error = None
        for event in events:
            if isinstance(event, MessageStarted):
                message_id = event.message_id
            elif isinstance(event, MessageFinished):
                finish = event.reason
            elif isinstance(event, RunFailed):
                finish, error = "error", event.message
        return cls(
            chat_id=chat_id,
            message_id=message_id,
            text="".join(e.delta for e in events if isinstance(e, TextDelta)),
            parked=tuple(CallSummary.of(e.call) for e in events if isinstance(e, CallParked)),
            events=tuple(events),
            finish_reason=finish,
            error=error,
        )

    @classmethod
    def waiting(cls, chat_id: str, calls: Iterable[CallSummary]) -> TurnResult:
        """No run: the chat still waits on ``calls``."""
        parked = tuple(calls)
        return cls(
            chat_id=chat_id,
            message_id=parked[0].message_id if parked else "",
            text="",
            parked=parked,
            events=(),
            finish_reason="tool-calls",
        )


@dataclass(frozen=True)
class ChatView:
    """A chat as stored: its conversation (user messages, model steps with their tool
    calls, tool results; a parked call has no result yet) and its parked calls, settled
    ones with their outcomes."""

    chat_id: str
    owner: str
    messages: tuple[ModelMessage, ...]
    calls: tuple[CallSummary, ...]

    @property
    def pending(self) -> tuple[CallSummary, ...]:
        """The calls still waiting for an answer."""
        return tuple(c for c in self.calls if c.outcome is None)
