"""Running a run's server tools, and recording tool results.

:class:`ToolExecutor` runs one server tool call of a run with the template it was made
under (an approval granted under an older template still runs that template's tool),
refusing a tool the template no longer has or denies by policy. :func:`record_tool_run`
turns what a tool produced into the call's history entry and, when the caller is
watching, its events; :func:`record_outcomes` does the same for the settled calls of a
parked step that do not run now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from parkway.runner.agent import (
    AgentStore,
    AgentTemplate,
    Credentials,
    ToolContext,
    ToolRun,
    execute_tool,
)
from parkway.runner.codemode import CodeMode
from parkway.runner.engine.live import LiveQuestions
from parkway.runner.engine.run import Emit, RunState
from parkway.runner.errors import QuotaExceededError
from parkway.runner.events import DataPublished, ToolDenied, ToolFailed, ToolSucceeded
from parkway.runner.mcp import McpTools
from parkway.runner.ops import mark_failed, span
from parkway.runner.outcomes import SUPERSEDED, model_result
from parkway.runner.parking import ParkedCall
from parkway.runner.store import ArtifactStore, part_ids, result_entry

__all__ = [
    "NO_ANSWER",
    "ToolExecutor",
    "keep_large_answers",
    "record_outcomes",
    "record_tool_run",
]

# What the model reads for a tool that asked a person for input nobody gave in time.
NO_ANSWER = "the person did not answer in time; the tool did not run to its end"


class ToolExecutor:
    """Runs server tools with the runner's credentials, agents and output limit. With an
    artifact store, an output over its threshold is kept there and the call's result is
    the artifact's reference (runner/store/artifacts.py). An MCP server's tool, which no
    template lists, is found through ``mcp`` (a call approved on another worker, say)."""

    def __init__(
        self,
        credentials: Credentials | None,
        agents: AgentStore | None,
        max_output_bytes: int,
        *,
        artifacts: ArtifactStore | None = None,
        code: CodeMode | None = None,
        mcp: McpTools | None = None,
        live: LiveQuestions | None = None,
    ) -> None:
        self.mcp = mcp
        self.live = live
        self.credentials = credentials
        self.agents = agents
        self.max_output_bytes = max_output_bytes
        self.artifacts = artifacts
        self.code = code

    async def execute(
        self,
        state: RunState,
        call_id: str,
        name: str,
        tool_input: Any,
        template: AgentTemplate | None = None,
        *,
        resumed: ParkedCall | None = None,
        emit: Emit | None = None,
    ) -> ToolRun:
        """Run the call; ``resumed``: a parked call of a tool that asked a person for
        input, now answered (the tool gets its continuation and the answer). ``emit``:
        the run's events, when its person watches it (the tool may then ask them a
        live question, runner/engine/live.py)."""
        made_under = template or state.template
        spec = made_under.tool(name)
        if spec is None and made_under.mcps and self.mcp is not None:
            found = await self.mcp.find(made_under, name, state.principal)
            if isinstance(found, str):
                return ToolRun(error=found)
            spec = found
        if spec is None:
            return ToolRun(error=f"tool {name!r} is no longer in the agent template")
        if spec.denied_by_policy:
            return ToolRun(error=f"tool {name!r} is not allowed: its approval policy is 'deny'")
        ctx = ToolContext(
            state.chat_id,
            state.principal,
            call_id,
            name,
            self.credentials,
            self.agents,
            template=made_under,
            artifacts=self.artifacts,
            code=self.code,
            continuation=resumed.continuation if resumed is not None else None,
            answer=resumed.outcome if resumed is not None else None,
            input_round=resumed.input_round if resumed is not None else 0,
            live_input=(
                self.live.asker(state, call_id, emit)
                if self.live is not None and emit is not None
                else None
            ),
        )
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        }
        with span(f"execute_tool {name}", attributes=attributes) as current:
            run = await execute_tool(spec, tool_input, ctx, max_bytes=self.max_output_bytes)
            if run.error is not None:
                mark_failed(current, "tool_error")
        if run.error is not None or run.needs_input is not None or self.artifacts is None:
            return run
        try:
            output = await self.artifacts.keep_if_large(
                state.chat_id, run.output, source=name, tool_call_id=call_id,
                encoded=run.encoded, principal=state.principal,
            )  # fmt: skip
        except QuotaExceededError as exc:  # (the model learns why it has no result)
            return ToolRun(error=f"the tool's output was not kept: {exc}")
        return ToolRun(output=output, parts=run.parts)


def record_tool_run(
    state: RunState, call_id: str, name: str, tool_run: ToolRun, emit: Emit | None
) -> None:
    """Append the call's result entry; unless ``emit`` is None (nobody is watching: the
    call finishes off-stream), report its output (and any data parts the tool published)
    or its error."""
    if tool_run.error is None:
        entry = result_entry(call_id, name, tool_run.output, "ok", parts=tool_run.parts)
        state.unsaved.append(entry)
        if emit is not None:
            emit(ToolSucceeded(call_id, tool_run.output))
            ids = part_ids(call_id, [part_name for part_name, _ in tool_run.parts])
            for (part_name, data), part_id in zip(tool_run.parts, ids, strict=True):
                emit(DataPublished(part_name, data, part_id=part_id))
    else:
        state.unsaved.append(result_entry(call_id, name, {"error": tool_run.error}, "error"))
        if emit is not None:
            emit(ToolFailed(call_id, tool_run.error))


def record_outcomes(
    state: RunState, calls: Sequence[ParkedCall], emit: Emit | None
) -> list[tuple[ParkedCall, Any]]:
    """Append the result entry of each settled call that does not run now (a call with
    no outcome was superseded), reporting it unless ``emit`` is None or the caller
    supplied the output itself; return the calls to run now with their input: the
    approved calls (exactly the input the human approved), and the answered calls of a
    server tool that asked a person for input (run again with the answer; unanswered in
    time, the model reads :data:`NO_ANSWER` instead)."""
    approved: list[tuple[ParkedCall, Any]] = []
    for call in calls:
        outcome = call.outcome or SUPERSEDED
        decider = outcome.get("by")
        if emit is not None and call.for_others and isinstance(decider, str):
            # An approval someone else answered: the requester's stream says who.
            data = {"toolCallId": call.tool_call_id, "outcome": outcome["outcome"], "by": decider}
            emit(DataPublished("parkway-decision", data, part_id=call.tool_call_id))
        if call.kind == "approval" and outcome["outcome"] == "approved":
            approved.append((call, outcome.get("input", call.input)))
            continue
        if (
            call.continuation is not None
            and call.outcome is not None
            and outcome["outcome"] != "timeout"
            and outcome.get("reason") != SUPERSEDED.get("reason")
        ):  # the tool runs again with the person's answer
            approved.append((call, call.input))
            continue
        res, status = model_result(call, outcome)
        if call.continuation is not None and outcome["outcome"] == "timeout":
            res, status = {"error": NO_ANSWER}, "error"
        state.unsaved.append(
            result_entry(call.tool_call_id, call.tool_name, res, status, outcome["outcome"])
        )
        if emit is None or (call.kind == "client" and call.tool_call_id in state.skip_echo):
            continue  # a new message, or the caller supplied this output itself
        if status == "denied":
            emit(ToolDenied(call.tool_call_id, str(res.get("reason") or "denied")))
        elif status == "error":
            emit(ToolFailed(call.tool_call_id, str(res.get("error", ""))))
        else:
            emit(ToolSucceeded(call.tool_call_id, res))
    return approved


async def keep_large_answers(
    artifacts: ArtifactStore | None, state: RunState, calls: Sequence[ParkedCall]
) -> list[ParkedCall]:
    """``calls``, where a client call answered with an output over the artifact
    threshold now has the artifact's reference as its output (the model reads that), or,
    past the owner's quota, an error saying so in its place."""
    if artifacts is None:
        return list(calls)
    kept = []
    for call in calls:
        outcome = call.outcome
        if call.kind != "client" or outcome is None or outcome["outcome"] != "output":
            kept.append(call)
            continue
        try:
            output = await artifacts.keep_if_large(
                state.chat_id, outcome["output"], source=call.tool_name,
                tool_call_id=call.tool_call_id, principal=state.principal,
            )  # fmt: skip
        except QuotaExceededError as exc:
            output = {"error": f"the answer was not kept: {exc}"}
        kept.append(dataclasses.replace(call, outcome={**outcome, "output": output}))
    return kept
