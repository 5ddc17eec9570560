"""One model step as it streams: turning model events into run events and a stored step.

A :class:`StepReader` takes the model's events one by one. It reports text, reasoning
and tool-call input to the run as they arrive (a reasoning part is closed when anything
else starts), gives each tool call the Parkway id its streamed input was announced
under, and collects what the step stores: its text, its calls and the model's closing
:class:`~runner.model.ModelStepEnd`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.events import (
    Event,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolInputDelta,
    ToolInputStarted,
)
from runner.model import (
    ModelEvent,
    ModelReasoningDelta,
    ModelStepEnd,
    ModelTextDelta,
    ModelToolCall,
    ModelToolInputDelta,
    ModelToolInputStart,
)
from runner.run import new_id

__all__ = ["StepReader"]


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

    @staticmethod
    def stored_call(call: ModelToolCall) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": call.id, "name": call.name, "input": call.input}
        if call.provider_id and call.provider_id != call.id:
            entry["pid"] = call.provider_id
        if call.input_error is not None:
            entry["bad"] = True
        return entry
