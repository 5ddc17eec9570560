"""The AG-UI encoder: runner events in, AG-UI 1.0 events out.

A pure translator, like the AI SDK encoder beside it: no Starlette, no Redis, no I/O.
Every event it makes is a model of the official ``ag-ui-protocol`` package.

AG-UI gives each assistant step its own message (an assistant message with content and
tool calls, then one tool message per result), where the AI SDK keeps one message with
parts. The ids are made so that a run's live events and a later snapshot of the chat
(:mod:`parkway.transport.agui.messages`) name the same messages: step ``k`` of the
runner's message ``M`` is ``M`` (k = 0) or ``M-k``; its reasoning parts ``<step>-r<n>``;
a tool's result ``<toolCallId>-result``.

How a run ends (:meth:`AguiEncoder.finish`) depends on the calls the chat has parked:
none, a ``success`` outcome; only frontend tools (tools the client declared in its
``RunAgentInput.tools``), ``success`` naming them in ``pendingToolCallIds``; anything
else (approvals, connections, client tools no frontend declared), an ``interrupt``
outcome with one interrupt per such call (:func:`parkway.transport.agui.messages.interrupt_of`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import (
    RunFinishedCancelledOutcome,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
)

from parkway.runner.events import (
    ApprovalRequested,
    CallParked,
    DataPublished,
    Event,
    MessageFinished,
    MessageStarted,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    RunFailed,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallIssued,
    ToolDenied,
    ToolFailed,
    ToolInputDelta,
    ToolInputRejected,
    ToolInputStarted,
    ToolSucceeded,
)
from parkway.runner.parking import ParkedCall

__all__ = [
    "DATA_EVENT",
    "AguiEncoder",
    "Interrupts",
    "result_message_id",
    "step_message_id",
    "tool_result_text",
]

# A tool's data part (``DataPublished``) travels as a CUSTOM event of this name.
DATA_EVENT = "parkway.data"

# How the stream layer turns a finished run's parked calls into interrupts.
Interrupts = Callable[[Sequence[ParkedCall]], list[Any]]


def step_message_id(message_id: str, step: int) -> str:
    """The AG-UI assistant message of step ``step`` (from 0) of runner message ``message_id``."""
    return message_id if step == 0 else f"{message_id}-{step}"


def result_message_id(tool_call_id: str) -> str:
    return f"{tool_call_id}-result"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tool_result_text(result: Any) -> str:
    """A tool result as a tool message's content: JSON text (AG-UI carries text)."""
    return _json(result)


def _usage(metadata: Mapping[str, Any] | None) -> list[TokenUsage] | None:
    if not metadata or not isinstance(metadata.get("usage"), Mapping):
        return None
    usage = metadata["usage"]
    return [
        TokenUsage(
            model=metadata.get("model"),
            input_tokens=usage.get("inputTokens"),
            output_tokens=usage.get("outputTokens"),
            reasoning_tokens=usage.get("reasoningTokens"),
            total_tokens=usage.get("totalTokens"),
        )
    ]


class AguiEncoder:
    """Encodes one AG-UI run (one response) from the runner events of one run.

    ``frontend``: the tool names the client declared (its calls end the run as pending
    frontend tool calls, not interrupts). ``steps_before``: how many steps the runner's
    message already has when this run continues it (a resume), so step ids go on.
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        frontend: Collection[str] = (),
        steps_before: int = 0,
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.frontend = frozenset(frontend)
        self.message_id = ""
        self._steps = steps_before
        self._step_name: str | None = None
        self._step_id: str | None = None  # the AG-UI message of the step, once it shows
        self._reasonings = 0
        self._text_open = False
        self._reasoning: str | None = None
        self._tools_open: dict[str, bool] = {}  # tool calls started, and whether args came
        self.parked: list[ParkedCall] = []
        self.finished: MessageFinished | None = None
        self.ended = False

    # -- the run's frame -------------------------------------------------------------

    def start(self) -> list[BaseEvent]:
        return [
            RunStartedEvent(
                thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION
            )
        ]

    def fail(self, message: str, code: str) -> list[BaseEvent]:
        """End the run with RUN_ERROR (nothing may follow it)."""
        if self.ended:
            return []
        self.ended = True
        return [RunErrorEvent(message=message, code=code)]

    def finish(
        self,
        calls: Sequence[ParkedCall],
        interrupts: Interrupts,
        *,
        reason: str = "stop",
        metadata: Mapping[str, Any] | None = None,
    ) -> list[BaseEvent]:
        """Close what is open and end the run with RUN_FINISHED; ``calls``: the chat's
        pending parked calls (empty unless the run parked)."""
        if self.ended:
            return []
        out = self._close_all()
        self.ended = True
        usage = _usage(metadata)
        pending = [c for c in calls if c.outcome is None]
        asked = [c for c in pending if not self._answered_by_frontend(c)]
        if asked:
            outcome: Any = RunFinishedInterruptOutcome(interrupts=interrupts(asked))
        elif reason == "interrupted":
            outcome = RunFinishedCancelledOutcome()
        else:
            ids = [c.tool_call_id for c in pending]
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=ids or None)
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=usage
            )
        )
        return out

    def _answered_by_frontend(self, call: ParkedCall) -> bool:
        return call.kind == "client" and call.tool_name in self.frontend

    # -- steps and their messages ----------------------------------------------------

    def _step_message(self) -> str:
        """The AG-UI message of the current step, numbered once the step shows
        something (a step that shows nothing is not stored either)."""
        if self._step_id is None:
            self._step_id = step_message_id(self.message_id, self._steps)
            self._steps += 1
            self._reasonings = 0
        return self._step_id

    def _close_text(self) -> list[BaseEvent]:
        if not self._text_open:
            return []
        self._text_open = False
        return [TextMessageEndEvent(message_id=self._step_message())]

    def _close_reasoning(self) -> list[BaseEvent]:
        if self._reasoning is None:
            return []
        rid, self._reasoning = self._reasoning, None
        return [ReasoningMessageEndEvent(message_id=rid), ReasoningEndEvent(message_id=rid)]

    def _close_tool(self, call_id: str) -> list[BaseEvent]:
        if self._tools_open.pop(call_id, None) is None:
            return []
        return [ToolCallEndEvent(tool_call_id=call_id)]

    def _close_all(self) -> list[BaseEvent]:
        out = [*self._close_text(), *self._close_reasoning()]
        for call_id in list(self._tools_open):
            out.extend(self._close_tool(call_id))
        if self._step_name is not None:
            out.append(StepFinishedEvent(step_name=self._step_name))
            self._step_name = None
        return out

    def _tool_start(self, call_id: str, name: str) -> list[BaseEvent]:
        out = [*self._close_text(), *self._close_reasoning()]
        self._tools_open[call_id] = False
        out.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=name,
                parent_message_id=self._step_message(),
            )
        )
        return out

    def _tool_issued(self, call_id: str, name: str, tool_input: Any) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if call_id not in self._tools_open:
            out.extend(self._tool_start(call_id, name))
        if not self._tools_open.get(call_id):  # no streamed arguments: all of them now
            out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=_json(tool_input)))
        out.extend(self._close_tool(call_id))
        return out

    def _result(self, call_id: str, result: Any) -> list[BaseEvent]:
        out = self._close_tool(call_id)
        out.append(
            ToolCallResultEvent(
                message_id=result_message_id(call_id),
                tool_call_id=call_id,
                content=tool_result_text(result),
                role="tool",
            )
        )
        return out

    # -- one runner event --------------------------------------------------------------

    def encode(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events that stand for ``event`` (often none, sometimes several)."""
        if self.ended:
            return []
        out = self._encode_tool(event)
        return out if out is not None else self._encode_other(event)

    def _encode_tool(self, event: Event) -> list[BaseEvent] | None:
        """Tool calls and their results; None for any other event."""
        match event:
            case ToolInputStarted(tool_call_id=call_id, tool_name=name):
                return self._tool_start(call_id, name)
            case ToolInputDelta(tool_call_id=call_id, delta=delta):
                if call_id not in self._tools_open or not delta:
                    return []
                self._tools_open[call_id] = True
                return [ToolCallArgsEvent(tool_call_id=call_id, delta=delta)]
            case ToolCallIssued(tool_call_id=call_id, tool_name=name, input=tool_input):
                return self._tool_issued(call_id, name, tool_input)
            case ToolInputRejected(tool_call_id=call_id, tool_name=name, input=tool_input, error=e):
                out = self._tool_issued(call_id, name, tool_input)
                out.extend(self._result(call_id, {"error": e}))
                return out
            case ApprovalRequested():
                return []  # the interrupt at the run's end asks for it
            case CallParked(call=call):
                self.parked.append(call)
                return []
            case ToolSucceeded(tool_call_id=call_id, output=output):
                return self._result(call_id, output)
            case ToolFailed(tool_call_id=call_id, error=error):
                return self._result(call_id, {"error": error})
            case ToolDenied(tool_call_id=call_id, reason=reason):
                return self._result(call_id, {"approved": False, "reason": reason or "denied"})
        return None

    def _encode_other(self, event: Event) -> list[BaseEvent]:
        match event:
            case MessageStarted(message_id=message_id):
                self.message_id = message_id
                return []
            case StepStarted():
                out = self._close_all()
                self._step_id = None
                self._step_name = f"step-{self._steps}"
                out.append(StepStartedEvent(step_name=self._step_name))
                return out
            case StepFinished():
                out = self._close_all()
                self._step_id = None
                return out
            case TextStarted():
                out = self._close_reasoning()
                if not self._text_open:
                    self._text_open = True
                    out.append(
                        TextMessageStartEvent(message_id=self._step_message(), role="assistant")
                    )
                return out
            case TextDelta(delta=delta):
                if not delta:
                    return []
                out = [] if self._text_open else self.encode(TextStarted(""))
                out.append(TextMessageContentEvent(message_id=self._step_message(), delta=delta))
                return out
            case TextEnded():
                return self._close_text()
            case ReasoningStarted():
                out = [*self._close_text(), *self._close_reasoning()]
                rid = f"{self._step_message()}-r{self._reasonings}"
                self._reasonings += 1
                self._reasoning = rid
                out.append(ReasoningStartEvent(message_id=rid))
                out.append(ReasoningMessageStartEvent(message_id=rid, role="reasoning"))
                return out
            case ReasoningDelta(delta=delta):
                if self._reasoning is None or not delta:
                    return []
                return [ReasoningMessageContentEvent(message_id=self._reasoning, delta=delta)]
            case ReasoningEnded():
                return self._close_reasoning()
            case DataPublished(name=name, data=data, part_id=part_id):
                value: dict[str, Any] = {"name": name, "data": dict(data)}
                if part_id is not None:
                    value["id"] = part_id
                return [CustomEvent(name=DATA_EVENT, value=value)]
            case MessageFinished():
                self.finished = event
                return self._close_all()
            case RunFailed(message=message):
                out = self._close_all()
                out.extend(self.fail(message, "run_failed"))
                return out
        raise TypeError(f"not a runner event: {event!r}")
