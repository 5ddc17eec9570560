"""The runner: start a turn, park calls, settle them, resume — all through Redis.

Nothing about a run lives only in this process. A turn claims the chat's run lease
(CLAIM_TURN), runs model steps, and persists each step (COMMIT) before telling anyone
about its end; a step whose calls wait for a human is committed as *parked* and the
turn ends. Settling writes one outcome (SETTLE, first writer wins). Resuming claims the
lease only when every parked call is settled (CLAIM_RESUME, exactly one winner), loads
the history and the template snapshot from Redis, turns outcomes into tool results
(executing approved calls with exactly the approved input) and runs the next steps.

A run executes in its own task; its events go to a queue that the caller reads. If the
caller goes away (the browser disconnects) the run still finishes and persists.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.asyncio import Redis

from runner.canonical import canonical_json, parked_call_key
from runner.errors import (
    AnswerMismatchError,
    CallNotFoundError,
    ChatBusyError,
    ChatNotFoundError,
    DuplicateMessageError,
    IncompatibleStateError,
    NothingToResumeError,
    NotPlainJSONError,
    ParkwayError,
    SettleConflictError,
)
from runner.events import (
    ApprovalRequested,
    CallParked,
    Event,
    MessageFinished,
    MessageStarted,
    RunFailed,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallIssued,
    ToolDenied,
    ToolFailed,
    ToolInputRejected,
    ToolSucceeded,
)
from runner.history import (
    assistant_entry,
    decode_entries,
    result_entry,
    to_model_messages,
    user_entry,
)
from runner.keys import ChatKeys, chat_keys
from runner.model import Model, ModelRequest, ModelTextDelta, ModelToolCall, ToolDescription
from runner.outcomes import model_result, normalize_outcome
from runner.parking import ParkedCall
from runner.store import ChatRecord, ChatStore
from runner.template import AgentTemplate, ToolSpec, load_template
from runner.tools import ToolContext, ToolRun, execute_tool, input_problem

__all__ = ["Answer", "AnswerReport", "Run", "Runner", "RunnerConfig", "SettleResult"]

log = logging.getLogger(__name__)

SUPERSEDED = {"outcome": "cancelled", "reason": "superseded_by_user_message"}


@dataclass(frozen=True)
class RunnerConfig:
    """Runner limits and defaults (the transport's settings fill these in)."""

    chat_ttl_s: int = 7 * 24 * 3600
    lease_s: float = 60.0
    max_steps: int = 25
    max_output_bytes: int = 256 * 1024
    approval_deadline_s: float = 15 * 60
    client_deadline_s: float = 15 * 60


@dataclass(frozen=True)
class Answer:
    """An answer to a parked call, as a client sent it (not yet trusted).

    ``tool_input`` is the input the client says the call had; ``match_by_key`` allows
    matching by parkedCallKey when ``tool_call_id`` is not a pending call (a transcript
    replayed with fresh ids).
    """

    tool_call_id: str
    tool_name: str
    tool_input: Any
    outcome: Mapping[str, Any]
    approval_id: str | None = None
    has_input: bool = True
    match_by_key: bool = True


@dataclass(frozen=True)
class AnswerReport:
    """Which pending calls the answers settled, and how many remain pending."""

    settled: tuple[str, ...]
    pending: int


@dataclass(frozen=True)
class SettleResult:
    call: ParkedCall
    fresh: bool
    pending: int | None = None


class Run:
    """A running turn or resume. Read its events with :meth:`events`."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def _emit(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def _close(self) -> None:
        self._queue.put_nowait(None)

    async def events(self) -> AsyncIterator[Event]:
        """The run's events until it parks, finishes or fails."""
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    async def collect(self) -> list[Event]:
        return [event async for event in self.events()]


@dataclass
class _RunState:
    keys: ChatKeys
    chat_id: str
    principal: str
    token: str
    message_id: str
    template: AgentTemplate
    model_calls: int
    entries: list[dict[str, Any]]
    skip_echo: frozenset[str] = frozenset()
    unsaved: list[dict[str, Any]] = field(default_factory=list)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(12)}"


class Runner:
    """Runs chat turns for one agent template and model, with Redis as the only state."""

    def __init__(
        self,
        redis: Redis,
        model: Model,
        template: AgentTemplate,
        *,
        config: RunnerConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or RunnerConfig()
        self.store = ChatStore(redis, self.config.chat_ttl_s)
        self.model = model
        self.template = template
        self.clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    # -- helpers -------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def _lease_ms(self) -> int:
        return int(self.config.lease_s * 1000)

    def _start(self, run: Run, state: _RunState, prelude: Sequence[Event], work: Any) -> Run:
        async def main() -> None:
            try:
                for event in prelude:
                    run._emit(event)
                await work(run, state)
            except asyncio.CancelledError:
                run._emit(RunFailed("The run was stopped before it finished."))
                raise
            except Exception:
                ref = secrets.token_hex(4)
                log.exception("run failed (chat %s, ref %s)", state.chat_id, ref)
                with contextlib.suppress(Exception):
                    await self._commit(state, "idle", parked_ids=[])
                run._emit(RunFailed(f"The run failed (reference {ref})."))
            finally:
                run._close()

        task = asyncio.create_task(main(), name=f"parkway-run-{state.chat_id}")
        run.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Let running turns finish (up to ``grace_s``), then cancel the rest."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, still = await asyncio.wait(tasks, timeout=grace_s)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still)

    async def _commit(
        self,
        state: _RunState,
        next_state: Literal["running", "parked", "idle"],
        *,
        calls: Sequence[ParkedCall] = (),
        parked_ids: Sequence[str] | None = None,
    ) -> None:
        ok = await self.store.commit(
            state.keys,
            token=state.token,
            state=next_state,
            model_calls=state.model_calls,
            now_ms=self._now_ms(),
            lease_ms=self._lease_ms,
            entries=state.unsaved,
            calls=calls,
            parked_ids=parked_ids,
        )
        if not ok:
            raise ChatBusyError("this run lost the chat's lease to another worker")
        state.entries.extend(state.unsaved)
        state.unsaved = []

    def _check_claim(self, result: Sequence[str]) -> None:
        status = result[0]
        if status == "incompatible":
            raise IncompatibleStateError(
                f"this chat was stored with schema version {result[1]}; this Parkway reads "
                "version 1"
            )
        if status in {"forbidden", "missing"}:
            raise ChatNotFoundError("no such chat")
        if status == "busy":
            raise ChatBusyError("a run of this chat is in progress; try again when it ends")
        if status == "duplicate":
            raise DuplicateMessageError("this user message was already taken")
        if status == "not_parked":
            raise NothingToResumeError(f"the chat is {result[1]}, not waiting on any call")
        if status == "pending":
            raise NothingToResumeError(f"{result[1]} parked call(s) are still pending")

    # -- public operations ------------------------------------------------------------

    async def start_turn(
        self,
        chat_id: str,
        principal: str,
        text: str,
        *,
        user_message_id: str | None = None,
        template: AgentTemplate | None = None,
    ) -> Run:
        """Start a new turn with a user message.

        Pending calls of a parked step are settled ``cancelled`` (reason
        ``superseded_by_user_message``) first, atomically with taking the lease.
        """
        keys = chat_keys(chat_id)
        template = template or self.template
        message_id = _new_id("msg")
        token = secrets.token_hex(16)
        result, history = await self.store.claim_turn(
            keys,
            principal=principal,
            token=token,
            now_ms=self._now_ms(),
            lease_ms=self._lease_ms,
            user_message_id=user_message_id or "",
            supersede_outcome=canonical_json(SUPERSEDED),
            message_id=message_id,
            template_digest=template.digest,
            template_json=template.canonical,
        )
        self._check_claim(result)
        state = _RunState(
            keys=keys,
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=message_id,
            template=template,
            model_calls=int(result[1]),
            entries=decode_entries(history),
        )
        parked_ids = json.loads(result[3]) if result[2] == "parked" else []
        if parked_ids:
            _, calls = await self.store.calls(keys, parked_ids)
            for call in calls:
                outcome = call.outcome or SUPERSEDED
                res, status = model_result(call, outcome)
                state.unsaved.append(
                    result_entry(call.tool_call_id, call.tool_name, res, status, outcome["outcome"])
                )
        state.unsaved.append(user_entry(text, user_message_id))
        run = Run(message_id)
        return self._start(run, state, [MessageStarted(message_id)], self._drive)

    async def resume(
        self, chat_id: str, principal: str, *, skip_echo: frozenset[str] = frozenset()
    ) -> Run:
        """Continue a parked chat whose calls are all settled. Exactly one caller wins;
        the others get :class:`NothingToResumeError` or :class:`ChatBusyError`.

        ``skip_echo`` names client calls whose output the caller supplied itself; their
        results are not reported back to it. Approvals are always reported: the caller
        needs the execution result or the denial to finish the tool part.
        """
        keys = chat_keys(chat_id)
        token = secrets.token_hex(16)
        result, history = await self.store.claim_resume(
            keys, principal=principal, token=token, now_ms=self._now_ms(), lease_ms=self._lease_ms
        )
        self._check_claim(result)
        template = load_template(json.loads(result[4])) if result[4] else self.template
        state = _RunState(
            keys=keys,
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=result[2],
            template=template,
            model_calls=int(result[1]),
            entries=decode_entries(history),
            skip_echo=skip_echo,
        )
        parked_ids = json.loads(result[3])
        run = Run(state.message_id)
        return self._start(
            run, state, [MessageStarted(state.message_id)], self._resume_work(parked_ids)
        )

    def _resume_work(self, parked_ids: Sequence[str]) -> Any:
        async def work(run: Run, state: _RunState) -> None:
            _, calls = await self.store.calls(state.keys, parked_ids) if parked_ids else (None, [])
            approved: list[tuple[ParkedCall, ToolSpec | None, Any]] = []
            for call in calls:
                outcome = call.outcome
                assert outcome is not None, "resume claimed with a pending call"
                if call.kind == "approval" and outcome["outcome"] == "approved":
                    tool_input = outcome.get("input", call.input)
                    approved.append((call, state.template.tool(call.tool_name), tool_input))
                    continue
                res, status = model_result(call, outcome)
                state.unsaved.append(
                    result_entry(call.tool_call_id, call.tool_name, res, status, outcome["outcome"])
                )
                if call.kind == "client" and call.tool_call_id in state.skip_echo:
                    continue  # the caller supplied this output itself
                if status == "denied":
                    run._emit(ToolDenied(call.tool_call_id, outcome.get("reason")))
                elif status == "error":
                    run._emit(ToolFailed(call.tool_call_id, str(res.get("error", ""))))
                else:
                    run._emit(ToolSucceeded(call.tool_call_id, res))
            if approved:
                # Persist the known outcomes and that execution is starting: if this worker
                # dies while an approved tool runs, the model later reads "result unknown"
                # for it instead of the tool silently running twice.
                await self._commit(state, "running")
            runs = await asyncio.gather(
                *(
                    self._execute(state, call.tool_call_id, spec, call.tool_name, inp)
                    for call, spec, inp in approved
                )
            )
            for (call, _, _), tool_run in zip(approved, runs, strict=True):
                self._record_run(run, state, call.tool_call_id, call.tool_name, tool_run)
            await self._drive(run, state)

        return work

    async def _execute(
        self, state: _RunState, call_id: str, spec: ToolSpec | None, name: str, tool_input: Any
    ) -> ToolRun:
        if spec is None:
            return ToolRun(error=f"tool {name!r} is no longer in the agent template")
        ctx = ToolContext(state.chat_id, state.principal, call_id, name)
        return await execute_tool(spec, tool_input, ctx)

    def _record_run(
        self, run: Run, state: _RunState, call_id: str, name: str, tool_run: ToolRun
    ) -> None:
        if tool_run.error is None:
            state.unsaved.append(result_entry(call_id, name, tool_run.output, "ok"))
            run._emit(ToolSucceeded(call_id, tool_run.output))
        else:
            state.unsaved.append(result_entry(call_id, name, {"error": tool_run.error}, "error"))
            run._emit(ToolFailed(call_id, tool_run.error))

    async def _drive(self, run: Run, state: _RunState) -> None:
        """Model steps until the model stops calling tools, a call parks, or the step
        limit is reached."""
        template = state.template
        tools = tuple(
            ToolDescription(s.name, s.description, s.input_schema) for s in template.tools.values()
        )
        for _ in range(self.config.max_steps):
            run._emit(StepStarted())
            request = ModelRequest(
                chat_id=state.chat_id,
                call_index=state.model_calls,
                instructions=template.instructions,
                messages=to_model_messages([*state.entries, *state.unsaved]),
                tools=tools,
            )
            text_id = f"t{state.model_calls}"
            text: list[str] = []
            tool_calls: list[ModelToolCall] = []
            async for item in self.model.stream(request):
                if isinstance(item, ModelTextDelta):
                    if not item.text:
                        continue
                    if not text:
                        run._emit(TextStarted(text_id))
                    text.append(item.text)
                    run._emit(TextDelta(text_id, item.text))
                else:
                    tool_calls.append(item)
            if text:
                run._emit(TextEnded(text_id))
            state.model_calls += 1
            calls = [
                ModelToolCall(c.name, {} if c.input is None else c.input, c.id or _new_id("call"))
                for c in tool_calls
            ]
            state.unsaved.append(
                assistant_entry(
                    state.message_id,
                    "".join(text),
                    [{"id": c.id, "name": c.name, "input": c.input} for c in calls],
                )
            )
            if not calls:
                await self._commit(state, "idle", parked_ids=[])
                run._emit(StepFinished())
                run._emit(MessageFinished("stop"))
                return
            parked, to_run = self._classify(run, state, calls)
            if to_run:
                # Persist the step before its server tools run, for the same reason.
                await self._commit(state, "running")
            runs = await asyncio.gather(
                *(self._execute(state, c.id or "", spec, c.name, c.input) for c, spec in to_run)
            )
            for (call, _), tool_run in zip(to_run, runs, strict=True):
                self._record_run(run, state, call.id or "", call.name, tool_run)
            if parked:
                ids = [p.tool_call_id for p in parked]
                await self._commit(state, "parked", calls=parked, parked_ids=ids)
                run._emit(StepFinished())
                run._emit(MessageFinished("tool-calls"))
                return
            await self._commit(state, "running")
            run._emit(StepFinished())
        await self._commit(state, "idle", parked_ids=[])
        run._emit(MessageFinished("length"))

    def _classify(
        self, run: Run, state: _RunState, calls: Sequence[ModelToolCall]
    ) -> tuple[list[ParkedCall], list[tuple[ModelToolCall, ToolSpec]]]:
        """Emit each call; return the calls that park and the server calls to run now."""
        parked: list[ParkedCall] = []
        to_run: list[tuple[ModelToolCall, ToolSpec]] = []
        now = self.clock()
        for call in calls:
            call_id = call.id or ""
            spec = state.template.tool(call.name)
            problem = (
                f"unknown tool {call.name!r}" if spec is None else input_problem(spec, call.input)
            )
            key = None
            if problem is None:
                try:
                    key = parked_call_key(call.name, call.input)
                except NotPlainJSONError:
                    problem = f"input for tool {call.name!r} is not plain JSON"
            if problem is not None or spec is None or key is None:
                problem = problem or "invalid tool call"
                state.unsaved.append(
                    result_entry(call_id, call.name, {"error": problem}, "input_error")
                )
                run._emit(ToolInputRejected(call_id, call.name, call.input, problem))
                continue
            run._emit(ToolCallIssued(call_id, call.name, call.input))
            if not spec.parks:
                to_run.append((call, spec))
                continue
            kind: Literal["client", "approval"] = "client" if spec.kind == "client" else "approval"
            default = (
                self.config.client_deadline_s
                if kind == "client"
                else self.config.approval_deadline_s
            )
            parked_call = ParkedCall(
                tool_call_id=call_id,
                tool_name=call.name,
                kind=kind,
                input=call.input,
                key=key,
                seq=self._now_ms() * 1000 + len(parked),
                message_id=state.message_id,
                created_at=now,
                deadline=now + (spec.deadline_s or default),
                approval_id=_new_id("apr") if kind == "approval" else None,
                allow_edits=spec.allow_edits,
                render=spec.render,
                result_style=spec.result_style,
                description=spec.description,
            )
            parked.append(parked_call)
            if parked_call.approval_id is not None:
                run._emit(ApprovalRequested(call_id, parked_call.approval_id))
            run._emit(CallParked(parked_call))
        return parked, to_run

    # -- settling -----------------------------------------------------------------------

    async def settle(
        self,
        chat_id: str,
        principal: str,
        tool_call_id: str,
        outcome: Mapping[str, Any],
        *,
        by: Literal["client", "server"] = "client",
        template: AgentTemplate | None = None,
    ) -> SettleResult:
        """Record the outcome of one parked call. The first writer wins; an identical
        repeat returns the same result, a different one raises
        :class:`SettleConflictError` carrying the winner's outcome."""
        keys = chat_keys(chat_id)
        owner, calls = await self.store.calls(keys, [tool_call_id])
        if owner is None or owner != principal:
            raise ChatNotFoundError("no such chat")
        if not calls:
            raise CallNotFoundError(f"no parked call {tool_call_id!r} in this chat")
        return await self._settle_one(keys, calls[0], outcome, by=by, template=template)

    async def _settle_one(
        self,
        keys: ChatKeys,
        call: ParkedCall,
        outcome: Mapping[str, Any],
        *,
        by: Literal["client", "server"],
        template: AgentTemplate | None,
    ) -> SettleResult:
        spec = (template or self.template).tool(call.tool_name)
        if call.outcome is not None:
            # Already settled: an identical repeat is fine; anything else conflicts.
            try:
                same = canonical_json(dict(outcome)) == canonical_json(dict(call.outcome))
                if not same:
                    normalized = normalize_outcome(
                        call, outcome, spec, by="server", max_bytes=self.config.max_output_bytes
                    )
                    same = canonical_json(normalized) == canonical_json(dict(call.outcome))
            except ParkwayError:
                same = False
            if same:
                return SettleResult(call, fresh=False)
            raise SettleConflictError("the call is already settled", dict(call.outcome))
        normalized = normalize_outcome(
            call, outcome, spec, by=by, max_bytes=self.config.max_output_bytes
        )
        text = canonical_json(normalized)
        result = await self.store.settle(keys, call.tool_call_id, text)
        status = result[0]
        if status == "settled":
            return SettleResult(call.with_outcome(normalized), fresh=True, pending=int(result[1]))
        if status == "same":
            return SettleResult(call.with_outcome(normalized), fresh=False)
        if status == "conflict":
            raise SettleConflictError("the call is already settled", json.loads(result[1]))
        raise CallNotFoundError(f"no parked call {call.tool_call_id!r} in this chat")

    async def answer(
        self,
        chat_id: str,
        principal: str,
        answers: Sequence[Answer],
        *,
        template: AgentTemplate | None = None,
    ) -> AnswerReport:
        """Settle the pending calls that ``answers`` answer; ignore the rest.

        Matching: exact toolCallId first, then (for answers that allow it) parkedCallKey,
        first-in-first-out among identical pending calls. An answer that names a pending
        call but carries different input is refused with :class:`AnswerMismatchError`;
        an answer for a call that is not pending never reaches the model.
        """
        keys = chat_keys(chat_id)
        owner, pending = await self.store.calls(keys)
        if owner is None or owner != principal:
            raise ChatNotFoundError("no such chat")
        by_id = {c.tool_call_id: c for c in pending}
        used: set[str] = set()
        matched: list[tuple[ParkedCall, Answer]] = []
        for answer in answers:
            call = by_id.get(answer.tool_call_id)
            if call is not None and call.tool_call_id not in used:
                if answer.has_input and self._key_of(answer) != call.key:
                    raise AnswerMismatchError(
                        f"the answer for call {call.tool_call_id!r} carries other input than "
                        "the call had"
                    )
                if answer.approval_id is not None and answer.approval_id != call.approval_id:
                    raise AnswerMismatchError(
                        f"approval id {answer.approval_id!r} does not belong to call "
                        f"{call.tool_call_id!r}"
                    )
            elif answer.match_by_key and answer.tool_call_id not in by_id:
                key = self._key_of(answer)
                call = next(
                    (c for c in pending if c.key == key and c.tool_call_id not in used), None
                )
            else:
                call = None
            if call is None:
                continue
            used.add(call.tool_call_id)
            matched.append((call, answer))
        for call, answer in matched:
            await self._settle_one(keys, call, answer.outcome, by="client", template=template)
        left = await self.store.pending_count(keys) if matched else len(pending)
        return AnswerReport(settled=tuple(c.tool_call_id for c, _ in matched), pending=left)

    @staticmethod
    def _key_of(answer: Answer) -> str | None:
        try:
            return parked_call_key(answer.tool_name, answer.tool_input)
        except NotPlainJSONError:
            return None

    # -- reading ------------------------------------------------------------------------

    async def call(self, chat_id: str, principal: str, tool_call_id: str) -> ParkedCall:
        """One parked call with its outcome (for a widget watching its status)."""
        owner, calls = await self.store.calls(chat_keys(chat_id), [tool_call_id])
        if owner is None or owner != principal:
            raise ChatNotFoundError("no such chat")
        if not calls:
            raise CallNotFoundError(f"no parked call {tool_call_id!r} in this chat")
        return calls[0]

    async def chat(self, chat_id: str, principal: str) -> ChatRecord:
        """Everything stored for the chat. Another principal's chat reads as missing."""
        record = await self.store.load(chat_keys(chat_id))
        if record is None or record.owner != principal:
            raise ChatNotFoundError("no such chat")
        if record.meta.get("v") != "1":
            raise IncompatibleStateError(
                f"this chat was stored with schema version {record.meta.get('v')}; this "
                "Parkway reads version 1"
            )
        return record
