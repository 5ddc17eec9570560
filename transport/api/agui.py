"""``POST /api/agui``: the AG-UI 1.0 endpoint (CopilotKit, every ``@ag-ui/client``).

The same runner, principals, admission, limits and errors as ``POST /api/chat``; only
the wire differs. What a run does, by what its ``RunAgentInput`` carries:

- a new user message (the last message, with an id the chat has not stored): a turn;
  tool messages and ``resume`` entries that come with it settle what they answer
  first, and whatever is still pending is superseded, as on the AI SDK wire;
- tool messages answering pending frontend tool calls, and/or ``resume`` entries
  answering interrupts: they settle the calls through the runner's one-winner settle
  (checked first, :func:`parkway.transport.agui.messages.plan_resume`) and, once none is
  pending, the run continues the same message;
- nothing new: the chat as it is (a client that reloaded, or lost its state): a
  ``MESSAGES_SNAPSHOT`` and the pending interrupts or frontend tool calls again; a chat
  whose calls were all settled elsewhere (the settle route, an OAuth callback, an
  approver) continues; a run in progress, on any worker, is followed live after a
  snapshot of the chat as it was when the run began; a run whose worker died is taken
  over once its lease lapsed (a server tool it was running is never run again: the
  model is told its result is unknown).

``threadId`` is the chat id; the input's ``runId`` comes back on the run's events.
A resume the AG-UI rules refuse ends the run with ``RUN_ERROR`` (its ``code`` names the
rule) before anything changes; a body that is not a valid input gets the JSON error
``/api/chat`` would give.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ag_ui.core import MessagesSnapshotEvent, RunErrorEvent, Tool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from parkway.runner.agent import AgentTemplate, load_template_json
from parkway.runner.canonical import canonical_json
from parkway.runner.engine import Run, Runner
from parkway.runner.errors import ChatNotFoundError, NothingToResumeError, TemplateError
from parkway.runner.parking import ParkedCall, may_answer
from parkway.runner.store import ChatRecord, chat_keys, check_chat_id
from parkway.transport.agui import (
    AguiEncoder,
    AguiPost,
    ResumeProblem,
    agui_messages,
    agui_response,
    interrupt_of,
    parse_agui_post,
    plan_resume,
    steps_of,
)
from parkway.transport.aisdk import run_events
from parkway.transport.api.chats import run_start, run_streamed, streamed
from parkway.transport.api.requests import principal_of, read_json, roles_of, runner_of
from parkway.transport.errors import HTTPError
from parkway.transport.settings import Settings

__all__ = ["agui_routes"]

log = logging.getLogger(__name__)

MAX_TOOL_DESCRIPTION = 4000


class _Context:
    """One AG-UI request: its input, the chat as stored, and how to describe calls."""

    def __init__(self, request: Request, principal: str, post: AguiPost) -> None:
        self.request = request
        self.principal = principal
        self.post = post
        self.chat_id = post.thread_id
        self.runner: Runner = runner_of(request)
        self.frontend = frozenset(t.name for t in post.tools)

    def interrupts(self, calls: Sequence[ParkedCall]) -> list[Any]:
        describe = self.request.app.state.describe
        return [interrupt_of(call, describe(self.chat_id, call)) for call in calls]

    def encoder(self, steps_before: int = 0) -> AguiEncoder:
        return AguiEncoder(
            self.post.thread_id,
            self.post.run_id,
            frontend=self.frontend,
            steps_before=steps_before,
        )

    async def pending(self) -> list[ParkedCall]:
        _, calls = await self.runner.store.calls(chat_keys(self.chat_id))
        return calls

    def respond(self, steps_before: int = 0) -> Any:
        def respond(run: Run) -> Response:
            return agui_response(
                self.encoder(steps_before),
                events=run_events(self.chat_id, self.runner, run),
                pending=self.pending,
                interrupts=self.interrupts,
            )

        return respond

    def status(self, record: ChatRecord | None) -> Response:
        """The chat as it is: a snapshot of its messages, then its pending calls."""
        messages = [] if record is None else agui_messages(record)
        calls = [] if record is None else [c for c in record.calls if c.outcome is None]

        async def pending() -> list[ParkedCall]:
            return calls

        return streamed(
            self.request,
            self.principal,
            agui_response(
                self.encoder(),
                events=None,
                pending=pending,
                interrupts=self.interrupts,
                prefix=[MessagesSnapshotEvent(messages=messages)],
            ),
        )

    def refused(self, problem: ResumeProblem) -> Response:
        encoder = self.encoder()
        encoder.ended = True  # nothing but RUN_STARTED and the error

        async def nothing() -> list[ParkedCall]:
            return []

        return agui_response(
            encoder,
            events=None,
            pending=nothing,
            interrupts=self.interrupts,
            prefix=[RunErrorEvent(message=problem.message, code=problem.code)],
        )


async def frontend_template(runner: Runner, tools: Sequence[Tool]) -> AgentTemplate | None:
    """The agent's template with the client's frontend tools as client tools (for this
    turn, and kept in the run's snapshot for its resumes); None when there are none to
    add. A frontend tool named like one of the agent's client tools answers that tool;
    one named like a server tool is refused (the client cannot replace it)."""
    if not tools:
        return None
    base = await runner.current_template()
    added: list[dict[str, Any]] = []
    names: set[str] = set()
    for tool in tools:
        if tool.name in names:
            raise HTTPError(422, "invalid_tools", f"tool {tool.name!r} is declared twice")
        names.add(tool.name)
        own = base.tool(tool.name)
        if own is not None:
            if own.kind == "client":
                continue
            raise HTTPError(
                422,
                "tool_name_taken",
                f"{tool.name!r} is one of the agent's own tools; a frontend tool cannot replace it",
            )
        schema = tool.parameters if tool.parameters is not None else {"type": "object"}
        if not isinstance(schema, dict):
            raise HTTPError(
                422, "invalid_tools", f"tool {tool.name!r}: parameters must be a JSON Schema object"
            )
        added.append(
            {
                "type": "client",
                "name": tool.name,
                "description": tool.description[:MAX_TOOL_DESCRIPTION],
                "input_schema": schema,
            }
        )
    if not added:
        return None
    document = dict(base.raw)
    document["tools"] = [*document.get("tools", ()), *added]
    try:
        return load_template_json(canonical_json(document))
    except (TemplateError, ValueError) as exc:
        raise HTTPError(422, "invalid_tools", str(exc)) from None


def _is_new_message(record: ChatRecord | None, message_id: str | None) -> bool:
    """Whether the input's last user message starts a turn: the chat has not stored it,
    or it is the chat's last entry, left unanswered by a run that failed or stopped
    (sent again, it is a retry, as an AI SDK ``regenerate()`` is)."""
    if record is None or not message_id:
        return True
    if not any(e["t"] == "user" and e.get("uid") == message_id for e in record.entries):
        return True
    last = record.entries[-1] if record.entries else None
    return (
        last is not None
        and last["t"] == "user"
        and last.get("uid") == message_id
        and record.meta.get("state", "idle") == "idle"
    )


async def post_agui(request: Request) -> Response:
    principal = principal_of(request)
    body = await read_json(request)
    post = parse_agui_post(body)
    check_chat_id(post.thread_id)
    ctx = _Context(request, principal, post)
    runner = ctx.runner
    settings: Settings = request.app.state.settings
    log.info("AG-UI run %s", post.run_id[:64])
    try:
        record: ChatRecord | None = await runner.chat(ctx.chat_id, principal)
    except ChatNotFoundError:
        record = None
    new_message = post.user_text is not None and _is_new_message(record, post.user_message_id)
    answers = list(post.answers)
    if post.resume:
        calls = [] if record is None else list(record.calls)
        open_ids = {
            c.tool_call_id
            for c in calls
            if c.outcome is None and not (c.kind == "client" and c.tool_name in ctx.frontend)
        }
        try:
            plan = plan_resume(
                post.resume,
                calls,
                open_ids=open_ids,
                superseding=new_message,
                now=runner.clock(),
                max_bytes=settings.max_output_bytes,
                answerable=lambda call: (
                    may_answer(call, principal, roles_of(request), principal) == "yes"
                ),
            )
        except ResumeProblem as problem:
            return streamed(request, principal, ctx.refused(problem))
        answers.extend(plan.answers)
        # the client reads an interrupt's result on the run (it has no tool message)
        echo = frozenset(a.tool_call_id for a in plan.answers)
    else:
        echo = frozenset()
    if new_message:
        assert post.user_text is not None
        template = await frontend_template(runner, post.tools)
        user_text = post.user_text
        return await run_streamed(
            request,
            principal,
            ctx.chat_id,
            lambda: runner.start_turn(
                ctx.chat_id,
                principal,
                user_text,
                user_message_id=post.user_message_id,
                template=template,
                answers=answers,
                roles=roles_of(request),
            ),
            ctx.respond(),
        )
    if record is None:
        return ctx.status(None)
    message_id = record.meta.get("message_id") or ""
    steps = steps_of(record, message_id)
    state = record.meta.get("state")
    if answers and state != "running":
        # (a running chat has nothing pending: its answers were taken, by this client's
        # earlier request or another's, and the run is followed below)
        return await _answer(ctx, answers, steps, echo)
    if state == "parked" and not any(c.outcome is None for c in record.calls):
        # every call was settled elsewhere (an OAuth callback, an approver, the settle
        # route, a deadline): the run goes on
        return await _resume(ctx, steps, record)
    if state == "running":
        if float(record.meta.get("lease_until", "0")) < runner.clock() * 1000:
            # its worker died and the lease lapsed: the run is taken over from its last
            # stored step (the model is told a tool it was running has no known result)
            return await _resume(ctx, steps, record)
        # a run in progress, on this worker or another: followed live
        start_id = record.meta.get("run_start") or await run_start(runner, ctx.chat_id)
        if start_id is not None:
            return _follow(ctx, record, start_id)
        # it ended meanwhile: the chat as it is now
        return ctx.status(await runner.chat(ctx.chat_id, principal))
    return ctx.status(record)


def _follow(ctx: _Context, record: ChatRecord, start_id: str) -> Response:
    """A run in progress (on any worker), for a client that reconnects: the chat as it
    was when the run began, then the run live from its first event. A run whose worker
    died ends with the error that says so."""
    stored = int(record.meta.get("run_hist", len(record.entries)))
    # what the run has stored so far comes again from its log; the turn's user message
    # (stored with the run's first step) does not
    users = [e for e in record.entries[stored:] if e["t"] == "user"]
    earlier = ChatRecord(
        meta=record.meta, entries=[*record.entries[:stored], *users], calls=record.calls
    )
    message_id = record.meta.get("message_id") or ""
    return streamed(
        ctx.request,
        ctx.principal,
        agui_response(
            ctx.encoder(steps_of(earlier, message_id)),
            events=ctx.runner.follow(ctx.chat_id, start_id),
            pending=ctx.pending,
            interrupts=ctx.interrupts,
            prefix=[MessagesSnapshotEvent(messages=agui_messages(earlier))],
        ),
    )


class _StillPending(Exception):
    pass


async def _answer(ctx: _Context, answers: list[Any], steps: int, echo: frozenset[str]) -> Response:
    request, runner = ctx.request, ctx.runner

    async def start() -> Run:
        _, run = await runner.answer_and_resume(
            ctx.chat_id, ctx.principal, answers, roles=roles_of(request), echo=echo
        )
        if run is None:
            raise _StillPending
        return run

    try:
        return await run_streamed(request, ctx.principal, ctx.chat_id, start, ctx.respond(steps))
    except (_StillPending, NothingToResumeError):
        # calls are still pending (or another request resumed the chat first): the
        # chat as it is now
        return ctx.status(await runner.chat(ctx.chat_id, ctx.principal))


async def _resume(ctx: _Context, steps: int, record: ChatRecord) -> Response:
    request, runner = ctx.request, ctx.runner
    try:
        return await run_streamed(
            request,
            ctx.principal,
            ctx.chat_id,
            lambda: runner.resume(ctx.chat_id, ctx.principal),
            ctx.respond(steps),
        )
    except NothingToResumeError:
        return ctx.status(await runner.chat(ctx.chat_id, ctx.principal))


def agui_routes() -> list[Route]:
    return [Route("/api/agui", post_agui, methods=["POST"])]
