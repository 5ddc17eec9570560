"""Triage of a model step's tool calls: refuse, run now, or park.

A call the model got wrong (an unknown tool, input that is not JSON, input its schema
refuses, a value that is not plain JSON) is refused: the model gets an error result it
can correct. A server tool runs now. A client tool or an approval-gated tool parks, with
its deadline, its widget description and the schemas its answer is judged by.

Whether a server tool's call needs approval is its spec's decision for that input
(:meth:`~parkway.runner.agent.ToolSpec.asks_approval`): the template's static
``needs_approval``, or, for a tool defined in Python with a ``needs_approval`` function
(policy ``per_call``), that function's answer for the validated arguments, decided here,
on the server, before anything runs. A call it lets through runs like any server tool;
one it stops parks an approval like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from parkway.runner.agent import AgentTemplate, ToolContext, ToolSpec, input_problem
from parkway.runner.canonical import parked_call_key
from parkway.runner.engine.run import RunnerConfig, new_id
from parkway.runner.errors import NotPlainJSONError, ToolNeedsInput
from parkway.runner.events import (
    ApprovalRequested,
    CallParked,
    Event,
    ToolCallIssued,
    ToolInputRejected,
)
from parkway.runner.llm import ModelToolCall
from parkway.runner.parking import APPROVER_ROLE, ParkedCall
from parkway.runner.store import result_entry

__all__ = ["Triage", "park_for_input", "triage"]


@dataclass
class Triage:
    """A step's calls, sorted. ``events`` announce them (tell the client only once the
    step is persisted); ``refused`` are the result entries of the refused calls."""

    parked: list[ParkedCall] = field(default_factory=list)
    to_run: list[ModelToolCall] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)


def triage(
    calls: Sequence[ModelToolCall],
    template: AgentTemplate,
    config: RunnerConfig,
    *,
    message_id: str,
    now: float,
    requester: str | None = None,
    chat_id: str = "",
    refusal: Callable[[str], str | None] | None = None,
) -> Triage:
    """Sort a step's calls (see the module doc); ``now`` is the step's time in seconds,
    ``requester`` the chat's owner (an approval someone else answers records it; a
    per-call approval rule reads it as ``ctx.principal``), ``chat_id`` the chat.
    ``refusal`` says why a tool the template does not offer now is missing, when it
    knows (an MCP server that cannot be reached), instead of "unknown tool"."""
    parked: list[ParkedCall] = []
    to_run: list[ModelToolCall] = []
    events: list[Event] = []
    refused: list[dict[str, Any]] = []
    for call in calls:
        call_id = call.id or ""
        spec = template.tool(call.name)
        if spec is None:
            known = ", ".join(sorted(template.tools)) or "none"
            problem: str | None = (None if refusal is None else refusal(call.name)) or (
                f"unknown tool {call.name!r} (the tools are: {known})"
            )
        elif call.input_error is not None:
            problem = f"input for tool {call.name!r}: {call.input_error}"
        else:
            problem = input_problem(spec, call.input)
        key = None
        if problem is None:
            try:
                key = parked_call_key(call.name, call.input)
            except NotPlainJSONError:
                problem = f"input for tool {call.name!r} is not plain JSON"
        if problem is not None or spec is None or key is None:
            problem = problem or "invalid tool call"
            refused.append(result_entry(call_id, call.name, {"error": problem}, "input_error"))
            events.append(ToolInputRejected(call_id, call.name, call.input, problem))
            continue
        events.append(ToolCallIssued(call_id, call.name, call.input))
        if not _parks(spec, call, template, chat_id, requester):
            to_run.append(call)
            continue
        kind: Literal["client", "approval"] = "client" if spec.kind == "client" else "approval"
        if kind == "approval":
            default = config.approval_deadline_s
        elif spec.result_style == "connection":
            default = config.connection_deadline_s
        else:
            default = config.client_deadline_s
        approvers, self_approval = _answerers(spec, config) if kind == "approval" else (None, True)
        parked_call = ParkedCall(
            tool_call_id=call_id,
            tool_name=call.name,
            kind=kind,
            input=call.input,
            key=key,
            seq=int(now * 1000) * 1000 + len(parked),
            message_id=message_id,
            created_at=now,
            deadline=now + (spec.deadline_s or default),
            approval_id=new_id("apr") if kind == "approval" else None,
            allow_edits=spec.allow_edits,
            render=spec.render,
            result_style=spec.result_style,
            description=spec.description,
            output_schema=spec.output_schema if kind == "client" else None,
            edit_schema=spec.input_schema if kind == "approval" and spec.allow_edits else None,
            auto_resume=template.resume_policy == "auto",
            approvers=approvers,
            self_approval=self_approval,
            requester=requester if approvers is not None else None,
        )
        parked.append(parked_call)
        if parked_call.approval_id is not None:
            events.append(ApprovalRequested(call_id, parked_call.approval_id))
        events.append(CallParked(parked_call))
    return Triage(parked, to_run, events, refused)


def _parks(
    spec: ToolSpec,
    call: ModelToolCall,
    template: AgentTemplate,
    chat_id: str,
    requester: str | None,
) -> bool:
    """Whether this (valid) call waits: a client tool always, a server tool when its
    approval is asked for this input. A per-call rule sees what the call is: its chat,
    requester, id and tool (nothing the server lends a running tool)."""
    if spec.kind == "client":
        return True
    if not spec.parks:  # never asks: no rule to consult
        return False
    ctx = ToolContext(chat_id, requester or "", call.id or "", call.name, template=template)
    return spec.asks_approval(call.input, ctx)


def _answerers(spec: ToolSpec, config: RunnerConfig) -> tuple[str | None, bool]:
    """Who answers an approval of ``spec``: (the role its answerer holds, or None for
    the chat's owner as always; whether the requester may answer it too). Forbidding
    self-approval without naming a role leaves it to :data:`APPROVER_ROLE`; an op that
    runs code forbids it by default where the runner separates approvals."""
    self_approval = spec.self_approval
    if self_approval is None:
        self_approval = not (spec.others_approve and config.separate_approvals)
    approvers = spec.approvers
    if approvers is None and not self_approval:
        approvers = APPROVER_ROLE
    return approvers, self_approval


def park_for_input(
    call_id: str,
    name: str,
    tool_input: Any,
    needs: ToolNeedsInput,
    config: RunnerConfig,
    *,
    message_id: str,
    now: float,
    index: int = 0,
    auto_resume: bool = False,
    input_round: int = 1,
) -> ParkedCall:
    """The parked call of a server tool that ran and asked for a person's input
    (``needs``): a client call whose widget is ``needs.render``, whose answer is judged
    by ``needs.output_schema``, and whose record keeps ``needs.continuation`` (private:
    see :class:`~parkway.runner.parking.ParkedCall`). ``index`` orders it among the
    step's other calls parked at ``now``; ``input_round`` is the round of input it asks
    for (2 and on: the tool was run again with an answer and asks again)."""
    return ParkedCall(
        tool_call_id=call_id,
        tool_name=name,
        kind="client",
        input=tool_input,
        key=parked_call_key(name, tool_input),
        seq=int(now * 1000) * 1000 + 500 + index,
        message_id=message_id,
        created_at=now,
        deadline=now + (needs.deadline_s or config.client_deadline_s),
        render=needs.render,
        description=needs.description,
        output_schema=needs.output_schema,
        auto_resume=auto_resume,
        continuation=needs.continuation,
        input_round=input_round,
        result_style=needs.result_style,
    )
