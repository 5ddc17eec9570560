"""Running a run's server tools and recording what they produced.

:class:`ToolExecutor` runs one server tool call of a run with the template it was made
under (an approval granted under an older template still runs that template's tool),
refusing a tool the template no longer has or denies by policy. :func:`record_tool_run`
turns the outcome into the call's history entry and, when the caller is watching, its
events.
"""

from __future__ import annotations

from typing import Any

from runner.agents import AgentStore
from runner.credentials import Credentials
from runner.events import DataPublished, ToolFailed, ToolSucceeded
from runner.history import result_entry
from runner.run import Run, RunState
from runner.template import AgentTemplate
from runner.tools import ToolContext, ToolRun, execute_tool

__all__ = ["ToolExecutor", "record_tool_run"]


class ToolExecutor:
    """Runs server tools with the runner's credentials, agents and output limit."""

    def __init__(
        self, credentials: Credentials | None, agents: AgentStore | None, max_output_bytes: int
    ) -> None:
        self.credentials = credentials
        self.agents = agents
        self.max_output_bytes = max_output_bytes

    async def execute(
        self,
        state: RunState,
        call_id: str,
        name: str,
        tool_input: Any,
        template: AgentTemplate | None = None,
    ) -> ToolRun:
        spec = (template or state.template).tool(name)
        if spec is None:
            return ToolRun(error=f"tool {name!r} is no longer in the agent template")
        if spec.denied_by_policy:
            return ToolRun(error=f"tool {name!r} is not allowed: its approval policy is 'deny'")
        ctx = ToolContext(
            state.chat_id, state.principal, call_id, name, self.credentials, self.agents
        )
        return await execute_tool(spec, tool_input, ctx, max_bytes=self.max_output_bytes)


def record_tool_run(
    run: Run, state: RunState, call_id: str, name: str, tool_run: ToolRun, *, emit: bool = True
) -> None:
    """Append the call's result entry; with ``emit``, report its output (and any data
    parts the tool published) or its error."""
    if tool_run.error is None:
        state.unsaved.append(result_entry(call_id, name, tool_run.output, "ok"))
        if emit:
            run._emit(ToolSucceeded(call_id, tool_run.output))
            for part_name, data in tool_run.parts:
                run._emit(DataPublished(part_name, data, part_id=call_id))
    else:
        state.unsaved.append(result_entry(call_id, name, {"error": tool_run.error}, "error"))
        if emit:
            run._emit(ToolFailed(call_id, tool_run.error))
