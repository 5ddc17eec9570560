"""One model step: streaming it, turning its events into run events, and ending a message.

:func:`stream_step` asks the model for one step of a run and ends the run instead when
it is stopped or the model fails. :func:`consume` streams one model response into a
:class:`StepReader`, cancellable by a stop. A :class:`StepReader` takes the model's
events one by one. It reports text, reasoning and tool-call input to the run as they
arrive (a reasoning part is closed when anything else starts), gives each tool call the
Parkway id its streamed input was announced under, and collects what the step stores:
its text, its calls and the model's closing :class:`~parkway.runner.llm.model.ModelStepEnd`. The
``end_*`` functions end a message that did not end with a model's answer: a notice, a
stop, a model failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from parkway.runner.engine.run import Emit, RunState, new_id
from parkway.runner.errors import ModelError
from parkway.runner.events import (
    Event,
    FinishReason,
    MessageFinished,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    RunFailed,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolInputDelta,
    ToolInputStarted,
)
from parkway.runner.llm import (
    Model,
    ModelEvent,
    ModelReasoningDelta,
    ModelRequest,
    ModelStepEnd,
    ModelTextDelta,
    ModelToolCall,
    ModelToolInputDelta,
    ModelToolInputStart,
    ToolDescription,
)
from parkway.runner.ops import RESUME_SECONDS, ModelLabel, model_span, model_step_done
from parkway.runner.parking import ParkedCall
from parkway.runner.store import assistant_entry, call_entry, message_metadata

__all__ = [
    "Commit",
    "StepReader",
    "consume",
    "end_failed",
    "end_stopped",
    "end_with_notice",
    "finished",
    "stream_step",
]


class Commit(Protocol):
    """The commit of a run's unsaved entries
    (:meth:`parkway.runner.engine.supervisor.RunSupervisor.commit`)."""

    def __call__(
        self,
        next_state: Any,
        *,
        calls: Sequence[ParkedCall] = (),
        parked_ids: Sequence[str] | None = None,
        then: Sequence[Event] = (),
    ) -> Awaitable[None]: ...


@dataclass
class StepReader:
    """Collects one model step (see the module doc); ``emit`` reports to the run."""

    emit: Callable[[Event], None]
    text_id: str
    text: list[str] = field(default_factory=list)
    calls: list[ModelToolCall] = field(default_factory=list)
    end: ModelStepEnd | None = None
    streamed_ids: dict[str, str] = field(default_factory=dict)
    said: bool = False  # the step showed the user something (text, reasoning, a call)
    _reasoning_id: str | None = None
    _reasoning_count: int = 0

    def _close_reasoning(self) -> None:
        if self._reasoning_id is not None:
            self.emit(ReasoningEnded(self._reasoning_id))
            self._reasoning_id = None

    def take(self, item: ModelEvent) -> None:
        if not isinstance(item, ModelStepEnd):
            self.said = True
        if isinstance(item, ModelTextDelta):
            if not item.text:
                return
            self._close_reasoning()
            if not self.text:
                self.emit(TextStarted(self.text_id))
            self.text.append(item.text)
            self.emit(TextDelta(self.text_id, item.text))
        elif isinstance(item, ModelReasoningDelta):
            if not item.text:
                return
            if self._reasoning_id is None:
                self._reasoning_id = f"{self.text_id}-r{self._reasoning_count}"
                self._reasoning_count += 1
                self.emit(ReasoningStarted(self._reasoning_id))
            self.emit(ReasoningDelta(self._reasoning_id, item.text))
        elif isinstance(item, ModelToolInputStart):
            self._close_reasoning()
            call_id = new_id("call")
            self.streamed_ids[item.key] = call_id
            self.emit(ToolInputStarted(call_id, item.name))
        elif isinstance(item, ModelToolInputDelta):
            streamed = self.streamed_ids.get(item.key)
            if streamed is not None and item.delta:
                self.emit(ToolInputDelta(streamed, item.delta))
        elif isinstance(item, ModelToolCall):
            self._close_reasoning()
            self.calls.append(item)
        elif isinstance(item, ModelStepEnd):
            self.end = item

    def finish(self) -> None:
        """Close what is still open once the model's stream has ended (or was cut)."""
        self._close_reasoning()
        if self.text:
            self.emit(TextEnded(self.text_id))

    def entry(self, message_id: str, calls: Sequence[ModelToolCall] = ()) -> dict[str, Any]:
        """The step's history entry: its text, ``calls`` (its final calls, or none when
        they are dropped) and the model's closing event."""
        return assistant_entry(
            message_id, "".join(self.text), [call_entry(c) for c in calls], end=self.end
        )

    def final_calls(self) -> list[ModelToolCall]:
        """The step's calls with their Parkway ids (the streamed one, the model's, or new)."""
        out = []
        for call in self.calls:
            call_id = self.streamed_ids.get(call.stream_key or "") or call.id or new_id("call")
            out.append(
                ModelToolCall(
                    call.name,
                    {} if call.input is None else call.input,
                    call_id,
                    provider_id=call.provider_id,
                    input_error=call.input_error,
                )
            )
        return out


async def consume(state: RunState, request: ModelRequest, model: Model, step: StepReader) -> None:
    """Stream one model response into ``step``, reporting it as it comes; a stop request
    cancels the stream at once, even mid-wait, and closes the model's connection (the
    stream is closed, not left to the garbage collector)."""

    async def read() -> None:
        events = model.stream(request)
        try:
            async for item in events:
                step.take(item)
        finally:
            closing = getattr(events, "aclose", None)
            if closing is not None:
                await closing()

    if state.stop.is_set():
        return
    # A task of its own, so that a stop (the watcher) can cancel the model mid-wait.
    state.consumer = asyncio.create_task(read())
    try:
        await asyncio.shield(state.consumer)
    except asyncio.CancelledError:
        if not state.consumer.cancelled():
            state.consumer.cancel()  # the run itself is being cancelled
            raise
        if not state.stop.is_set():
            raise
    finally:
        state.consumer = None


async def stream_step(
    emit: Emit,
    state: RunState,
    model: Model,
    tools: Sequence[ToolDescription],
    commit: Commit,
    *,
    label: ModelLabel,
    instructions: str | None = None,
) -> StepReader | None:
    """Ask the model for the run's next step, reporting it as it streams. None when the
    run ended instead: a stop before or during the step (the partial answer is kept), or
    the model failing. ``label`` names the model in metrics and spans; ``instructions``
    are the step's (the template's, with notes such as an MCP server being down)."""
    if state.stop.is_set():
        await end_stopped(emit, state, None, commit)
        return None
    emit(StepStarted())
    request = ModelRequest(
        chat_id=state.chat_id,
        call_index=state.model_calls,
        instructions=state.template.instructions if instructions is None else instructions,
        messages=state.view.update([*state.entries, *state.unsaved]),
        tools=tuple(tools),
    )
    step = StepReader(emit, f"t{state.model_calls}")
    if state.claimed_at is not None:  # the resume's first model request goes out now
        RESUME_SECONDS.observe(time.perf_counter() - state.claimed_at)
        state.claimed_at = None
    failure: ModelError | None = None
    with model_span(label) as current:
        try:
            await consume(state, request, model, step)
        except ModelError as exc:
            failure = exc
        step.finish()
        model_step_done(current, label, step.end, failure, stopped=state.stop.is_set())
    if failure is not None:
        await end_failed(emit, state, step, failure, commit)
        return None
    state.model_calls += 1
    if state.stop.is_set():
        await end_stopped(emit, state, step, commit)
        return None
    return step


def finished(state: RunState, reason: FinishReason) -> MessageFinished:
    """The message's end, with its model and token use when the model reported them."""
    metadata = message_metadata([*state.entries, *state.unsaved], state.message_id)
    return MessageFinished(reason, metadata)


async def end_with_notice(
    emit: Emit, state: RunState, notice: str, reason: FinishReason, commit: Commit
) -> None:
    """End the message with a text-only step saying why (an AI SDK client must not see
    the message end on a step whose tool calls are all answered: it would resend)."""
    emit(StepStarted())
    text_id = f"t{state.model_calls}-notice"
    emit(TextStarted(text_id))
    emit(TextDelta(text_id, notice))
    emit(TextEnded(text_id))
    state.unsaved.append(assistant_entry(state.message_id, notice, []))
    await commit("idle", parked_ids=[], then=[StepFinished(), finished(state, reason)])


async def end_stopped(emit: Emit, state: RunState, step: StepReader | None, commit: Commit) -> None:
    """End a run someone asked to stop: keep the partial answer of the step that was
    streaming (if any), drop the tool calls the model had not finished, finish cleanly.
    Stopped before anything was said, the turn's user message has no answer: it may be
    sent again (Retry), as after a failure."""
    then: list[Event] = []
    if step is not None:
        if step.said:  # an empty reply is not kept (a provider may refuse it later)
            state.unsaved.append(step.entry(state.message_id))
        then.append(StepFinished())
    history = [*state.entries, *state.unsaved]
    state.retry_open = bool(history) and history[-1]["t"] == "user"
    then.append(finished(state, "stop"))
    await commit("idle", then=then)


async def end_failed(
    emit: Emit, state: RunState, step: StepReader | None, exc: ModelError, commit: Commit
) -> None:
    """The model could not answer: keep what it streamed and the turn's user message,
    leave the chat idle for the next message, and end the run with the error's message.

    The run's commit clears the duplicate guard: the same user message, with the same
    id, may be sent again (the playground's Retry, an AI SDK ``regenerate()``) and runs
    the model again on the history as stored, without storing the message twice."""
    said = step is not None and step.said
    if step is not None:
        if said:
            state.model_calls += 1
            state.unsaved.append(step.entry(state.message_id))
        emit(StepFinished())
    state.retry_open = True
    await commit("idle", parked_ids=[], then=[RunFailed(str(exc))])
