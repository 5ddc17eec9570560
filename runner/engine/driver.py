"""Driving a run: its model steps, and the tool calls each step makes.

A :class:`StepDriver` is what a run's work does once its lease is held (see
:class:`~parkway.runner.engine.runner.Runner`): it turns the outcomes of a parked step into tool
results (running approved calls with exactly the approved input), then asks the model
for steps until the model answers without calling tools, a call parks, or the step
limit is reached. Each step is persisted (COMMIT, through the run's supervisor) before
anyone hears of its calls, and a step that parks ends the message with its commit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parkway.runner.agent import AgentTemplate, ToolRun
from parkway.runner.engine.execution import (
    ToolExecutor,
    keep_large_answers,
    record_outcomes,
    record_tool_run,
)
from parkway.runner.engine.run import RunnerConfig, RunState
from parkway.runner.engine.step import end_failed, end_with_notice, finished, stream_step
from parkway.runner.engine.supervisor import RunSupervisor
from parkway.runner.engine.triage import Triage, park_for_input, triage
from parkway.runner.errors import ModelError, ToolNeedsInput
from parkway.runner.events import CallParked, Event, FinishReason, StepFinished
from parkway.runner.llm import ModelCatalog, ModelToolCall, ScriptedModel, ToolDescription
from parkway.runner.mcp import McpOffer, McpTools
from parkway.runner.ops import ModelLabel, Stopwatch, count_parked, span, traceparent
from parkway.runner.parking import ParkedCall
from parkway.runner.store import ArtifactStore, ChatStore, McpLink, McpLinks

__all__ = ["StepDriver"]

log = logging.getLogger(__name__)

# A tool run off-stream (a new message came) that asks a person for input: nobody is
# there to answer it.
NOT_ASKED = "the tool asked for a person's input, but the chat had moved on to a new message"

# How a model's finish reason ends a message whose last step called no tools.
_FINAL_REASONS: dict[str, FinishReason] = {"length": "length", "content-filter": "content-filter"}


class StepDriver:
    """Runs a run's steps with the worker's models, tools and limits."""

    def __init__(
        self,
        store: ChatStore,
        *,
        artifacts: ArtifactStore,
        executor: ToolExecutor,
        models: ModelCatalog,
        config: RunnerConfig,
        clock: Callable[[], float],
        mcp: McpTools,
        links: McpLinks | None = None,
    ) -> None:
        self.store = store
        self.artifacts = artifacts
        self.executor = executor
        self.mcp = mcp
        self.models = models
        self.config = config
        self.clock = clock
        self.links = links

    async def apply_outcomes(
        self, supervisor: RunSupervisor, *, emit: bool, template: AgentTemplate | None = None
    ) -> bool:
        """Turn the outcomes of the parked step into tool results, running approved calls
        with exactly the approved input (and answered calls of tools that asked a person
        for input, with the answer); without ``emit`` (a new message), off-stream. True
        when a call ran and asked a person for input: the run parked again (and ended
        its message)."""
        state = supervisor.state
        report = supervisor.emit if emit else None
        if not state.parked_ids:
            return False
        if state.parked_calls is not None:
            calls = state.parked_calls
        else:
            _, calls = await self.store.calls(state.keys, state.parked_ids, drop_deadlines=True)
        state.clear_parked = True
        calls = await keep_large_answers(self.artifacts, state, calls)
        approved = record_outcomes(state, calls, report)
        if not approved:
            return False
        # Persist the known results, and that execution starts, before running anything:
        # if this worker dies mid-tool, the model later reads "result unknown" for it
        # instead of the tool silently running twice.
        await supervisor.commit("running")
        runs = await asyncio.gather(
            *(
                self.executor.execute(
                    state,
                    call.tool_call_id,
                    call.tool_name,
                    tool_input,
                    template,
                    resumed=call if call.continuation is not None else None,
                    emit=report,
                )
                for call, tool_input in approved
            )
        )
        asking: list[ParkedCall] = []
        for (call, tool_input), tool_run in zip(approved, runs, strict=True):
            needs = tool_run.needs_input
            if needs is not None and report is not None:
                # an approved tool that now asks a person for input parks again, as does
                # one run again with an answer that asks for the next round
                asking.append(
                    self._asking(state, needs, call_id=call.tool_call_id,
                                 name=call.tool_name, tool_input=tool_input,
                                 index=len(asking), trace=call.trace,
                                 input_round=call.input_round + 1)
                )  # fmt: skip
                continue
            # off-stream (a new message came), nobody is there to ask
            done = ToolRun(error=NOT_ASKED) if needs is not None else tool_run
            record_tool_run(state, call.tool_call_id, call.tool_name, done, report)
        if not asking:
            return False
        await self._remember_links(state, asking)
        ids = [a.tool_call_id for a in asking]
        with span("parkway.park", attributes={"parkway.calls": len(ids)}):
            await supervisor.commit(
                "parked", calls=asking, parked_ids=ids,
                then=[*(CallParked(a) for a in asking), finished(state, "tool-calls")],
            )  # fmt: skip
        return True

    async def drive(self, supervisor: RunSupervisor) -> None:
        """Model steps until the model stops calling tools, a call parks, or the step
        limit is reached."""
        state, emit, template = supervisor.state, supervisor.emit, supervisor.state.template
        try:
            model = self.models.model_for(template.llm)
        except ModelError as exc:
            await end_failed(emit, state, None, exc, supervisor.commit)
            return
        spec = self.models.chosen(template.llm)
        if spec is None and self.models.pinned is None:
            spec = self.models.default_spec
        if spec is not None:
            label = ModelLabel.of(spec.name)
        elif isinstance(model, ScriptedModel):
            label = ModelLabel.of("scripted")
        else:
            label = ModelLabel.of_model(model)
        invalid_steps = 0
        for _ in range(self.config.max_steps):
            # The step's tools: the template's, and its MCP servers' as listed now (a
            # server's tools may change between steps; one that is down offers none).
            offer = await self.mcp.offer(template, state.principal)
            tools = tuple(
                ToolDescription(s.name, s.description, s.input_schema)
                for s in offer.template.tools.values()
            )
            step = await stream_step(
                emit, state, model, tools, supervisor.commit, label=label,
                instructions=offer.template.instructions,
            )  # fmt: skip
            if step is None:
                return  # stopped, or the model failed: the run has ended
            calls = step.final_calls()
            state.unsaved.append(step.entry(state.message_id, calls))
            if not calls:
                reason = step.end.finish_reason if step.end is not None else None
                end = finished(state, _FINAL_REASONS.get(reason or "", "stop"))
                await supervisor.commit("idle", parked_ids=[], then=[StepFinished(), end])
                return
            sorted_calls = await self._take_calls(supervisor, calls, offer)
            if sorted_calls.parked:
                return  # the step's commit ended the message
            emit(StepFinished())
            # A step whose every call was refused (unknown tool, input the schema does
            # not accept, not JSON) goes back to the model to correct, a bounded number
            # of times in a row.
            invalid_steps = invalid_steps + 1 if not sorted_calls.to_run else 0
            if invalid_steps > self.config.max_invalid_steps:
                notice = (
                    f"(stopped: the model's tool calls were refused {invalid_steps} times in a row)"
                )
                await end_with_notice(emit, state, notice, "other", supervisor.commit)
                return
        # Out of steps. End on a text-only step: ending on a step whose tool calls are
        # all answered would make an AI SDK client resend the message automatically.
        notice = f"(stopped after {self.config.max_steps} steps without a final answer)"
        await end_with_notice(emit, state, notice, "length", supervisor.commit)

    async def _take_calls(
        self, supervisor: RunSupervisor, calls: Sequence[ModelToolCall], offer: McpOffer
    ) -> Triage:
        r"""Classify a step's calls (refuse, run now, park) by what the step ``offer``\ ed,
        persist the step with its parked calls, announce the calls and run the server
        ones. A step that parks ends the message with its last commit."""
        state, emit = supervisor.state, supervisor.emit
        watch = Stopwatch()
        sorted_calls = triage(
            calls,
            offer.template,
            self.config,
            message_id=state.message_id,
            now=self.clock(),
            requester=state.principal,
            chat_id=state.chat_id,
            refusal=offer.refusal,
        )
        state.unsaved.extend(sorted_calls.refused)
        parked, to_run = sorted_calls.parked, sorted_calls.to_run
        here = traceparent()
        if here is not None:  # the resume and the settles continue this trace
            parked = [dataclasses.replace(p, trace=here) for p in parked]
        ids = [p.tool_call_id for p in parked]
        # The step is persisted (with its parked calls) before the client hears of its
        # calls, in the same atomic step: a widget never names a call the server does
        # not have.
        if not to_run:
            if parked:
                end: list[Event] = [StepFinished(), finished(state, "tool-calls")]
                with span("parkway.park", attributes={"parkway.calls": len(parked)}):
                    await supervisor.commit(
                        "parked", calls=parked, parked_ids=ids, then=[*sorted_calls.events, *end]
                    )
                count_parked(parked, watch)
            else:
                await supervisor.commit("running", then=sorted_calls.events)
            return sorted_calls
        # Server tools run once the step is persisted.
        await supervisor.commit(
            "running", calls=parked, parked_ids=ids or None, then=sorted_calls.events
        )
        runs = await asyncio.gather(
            *(
                self.executor.execute(state, c.id or "", c.name, c.input, offer.template, emit=emit)
                for c in to_run
            )
        )
        asking: list[ParkedCall] = []
        for call, tool_run in zip(to_run, runs, strict=True):
            if tool_run.needs_input is not None:  # it ran and asks a person: it parks
                asking.append(
                    self._asking(state, tool_run.needs_input, call_id=call.id or "",
                                 name=call.name, tool_input=call.input, index=len(asking),
                                 trace=here)
                )  # fmt: skip
            else:
                record_tool_run(state, call.id or "", call.name, tool_run, emit)
        if parked or asking:
            await self._remember_links(state, asking)
            watch = Stopwatch()  # the calls were stored with the step: this commit parks
            sorted_calls.parked.extend(asking)
            all_ids = [*ids, *(a.tool_call_id for a in asking)]
            announce: list[Event] = [CallParked(a) for a in asking]
            with span("parkway.park", attributes={"parkway.calls": len(all_ids)}):
                await supervisor.commit(
                    "parked", calls=asking, parked_ids=all_ids,
                    then=[*announce, StepFinished(), finished(state, "tool-calls")],
                )  # fmt: skip
            count_parked([*parked, *asking], watch)
        else:
            await supervisor.commit("running")
        return sorted_calls

    async def _remember_links(self, state: RunState, calls: Sequence[ParkedCall]) -> None:
        """Index the links (URL elicitations) ``calls`` wait for, before they park, so
        the server's completion finds its call on any worker (runner/store/links.py).
        An index that cannot be written costs only that: the person says they finished."""
        if self.links is None:
            return
        for call in calls:
            mcp = (call.continuation or {}).get("mcp")
            if not isinstance(mcp, Mapping) or mcp.get("kind") != "url_elicitation":
                continue
            scope, keys = mcp.get("scope"), tuple(str(k) for k in mcp.get("keys") or ())
            if not isinstance(scope, str) or not keys:
                continue
            link = McpLink(state.chat_id, call.tool_call_id, state.principal, keys)
            ttl_s = (call.deadline or self.clock()) - self.clock()
            try:
                await self.links.remember(scope, link, ttl_s)
            except Exception:
                log.warning("the links of call %s were not indexed", call.tool_call_id,
                            exc_info=True)  # fmt: skip

    def _asking(
        self,
        state: RunState,
        needs: ToolNeedsInput,
        *,
        call_id: str,
        name: str,
        tool_input: Any,
        index: int,
        trace: str | None,
        input_round: int = 1,
    ) -> ParkedCall:
        """The parked call of a server tool that ran and asked for a person's input
        (``input_round``: the how-manieth time for this call)."""
        call = park_for_input(
            call_id, name, tool_input, needs, self.config, message_id=state.message_id,
            now=self.clock(), index=index, auto_resume=state.template.resume_policy == "auto",
            input_round=input_round,
        )  # fmt: skip
        return dataclasses.replace(call, trace=trace) if trace is not None else call
