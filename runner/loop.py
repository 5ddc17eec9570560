"""The runner: start a turn, park calls, settle them, resume — all through Redis.

Nothing about a run lives only in this process. A turn claims the chat's run lease
(CLAIM_TURN), runs model steps, and persists each step (COMMIT) before telling anyone
about its end; a step whose calls wait for a human is committed as *parked* and the
turn ends. Settling writes one outcome (SETTLE, first writer wins). Resuming claims the
lease only when every parked call is settled (CLAIM_RESUME, exactly one winner), loads
the history and the template snapshot from Redis, turns outcomes into tool results
(executing approved calls with exactly the approved input) and runs the next steps.

A run executes in its own task; its events go to the caller and to the chat's event log
(which HTTP responses follow). If the caller goes away (the browser disconnects) the run
still finishes and persists. Settling and answer matching are in :mod:`runner.settling`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

from runner.agents import AgentStore
from runner.canonical import canonical_json
from runner.connection import RedisClient
from runner.credentials import Credentials
from runner.errors import (
    CallNotFoundError,
    ChatBusyError,
    ChatNotFoundError,
    IncompatibleStateError,
    ModelError,
    NothingToResumeError,
    ShuttingDownError,
)
from runner.eventlog import follow
from runner.events import (
    Event,
    FinishReason,
    MessageStarted,
    RunFailed,
    StepFinished,
    StepStarted,
    ToolDenied,
    ToolFailed,
    ToolSucceeded,
)
from runner.execution import ToolExecutor, record_tool_run
from runner.history import (
    assistant_entry,
    call_entry,
    result_entry,
    to_model_messages,
    user_entry,
)
from runner.keys import chat_keys
from runner.llm.catalog import ModelCatalog
from runner.logwatch import LogWatch
from runner.model import Model, ModelRequest, ToolDescription
from runner.outcomes import model_result
from runner.parking import ParkedCall
from runner.run import Run, RunnerConfig, RunState, Work, new_id
from runner.settling import Answer, AnswerReport, SettleListener, SettleResult, Settling
from runner.step import (
    StepReader,
    consume,
    end_failed,
    end_stopped,
    end_with_notice,
    finish_message,
)
from runner.store import SCHEMA_VERSION, ChatRecord, ChatStore
from runner.supervisor import RunSupervisor
from runner.template import AgentTemplate, load_template
from runner.triage import triage

__all__ = ["Answer", "AnswerReport", "Run", "Runner", "RunnerConfig", "SettleResult"]

# Answer, AnswerReport and SettleResult live in runner.settling, Run and RunnerConfig in
# runner.run; they are re-exported here, where the Runner that uses them is.

log = logging.getLogger(__name__)

SUPERSEDED = {"outcome": "cancelled", "reason": "superseded_by_user_message"}
# How a model's finish reason ends a message whose last step called no tools.
_FINAL_REASONS: dict[str, FinishReason] = {"length": "length", "content-filter": "content-filter"}
FAILED_HINT = "Send your message again, or resume the chat."
LOG_FLUSH_S = 5.0  # how long a finished run waits for its last events to reach the log


class Runner(Settling):
    """Runs chat turns for one agent template and model, with Redis as the only state."""

    def __init__(
        self,
        redis: RedisClient,
        model: Model | None,
        template: AgentTemplate,
        *,
        config: RunnerConfig | None = None,
        clock: Callable[[], float] = time.time,
        credentials: Credentials | None = None,
        agents: AgentStore | None = None,
        models: ModelCatalog | None = None,
    ) -> None:
        """``model`` is the agent file's model; ``models`` chooses the model of each run
        (an override, the run's template ``llm``, else ``model``) and builds provider
        models; without it, a catalog over ``model`` and the process environment."""
        self.config = config or RunnerConfig()
        self.credentials = credentials
        self.agents = agents
        self.settle_listeners: list[SettleListener] = []
        self.store = ChatStore(redis, self.config.chat_ttl_s)
        self.logwatch = LogWatch(redis, read_slots=self.config.follower_reads)
        self.supervisor = RunSupervisor(self.store, self.config, clock)
        self.executor = ToolExecutor(credentials, agents, self.config.max_output_bytes)
        self.models = models or ModelCatalog(model)
        self.template = template
        self.clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self.closing = False

    @property
    def model(self) -> Model | None:
        """The default model (the agent file's)."""
        return self.models.default

    @model.setter
    def model(self, model: Model | None) -> None:
        self.models.default = model

    # -- helpers -------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def _lease_ms(self) -> int:
        return int(self.config.lease_s * 1000)

    def _refuse_if_closing(self) -> None:
        if self.closing:
            raise ShuttingDownError("this worker is shutting down; another one will take it")

    def _start(self, run: Run, state: RunState, work: Work) -> Run:
        async def main() -> None:
            watcher = asyncio.create_task(self.supervisor.watch(state))
            writer = asyncio.create_task(self.supervisor.write_log(run, state))
            try:
                run._emit(MessageStarted(state.message_id))
                await work(run, state)
            except asyncio.CancelledError:
                # Shutting down: hand the chat over at once instead of at lease expiry.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.store.release(state.keys, token=state.token))
                run._emit(RunFailed("The run was interrupted; it can be resumed."))
                raise
            except Exception:
                ref = secrets.token_hex(4)
                log.exception("run failed (chat %s, ref %s)", state.chat_id, ref)
                # Nothing the run did not commit is written now: a step whose commit
                # failed (its parked calls included) is dropped whole, never stored as
                # calls without records. If even this fails, the lease lapses instead.
                with contextlib.suppress(Exception):
                    await self.store.fail(state.keys, token=state.token, now_ms=self._now_ms())
                run._emit(RunFailed(f"The run failed (reference {ref}). {FAILED_HINT}"))
            finally:
                watcher.cancel()
                run._close()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(writer), LOG_FLUSH_S)

        task = asyncio.create_task(main(), name=f"parkway-run-{state.chat_id}")
        run.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Shut down gracefully: take no new runs, let running ones finish (up to
        ``grace_s``), then cancel the rest, which hand their chats over at once (their
        leases are released, their followers told the run was interrupted)."""
        self.closing = True
        for task in list(self._background):
            task.cancel()
        tasks = list(self._tasks)
        if tasks:
            _, still = await asyncio.wait(tasks, timeout=grace_s)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still)
        await self.logwatch.aclose()

    async def _commit(
        self,
        state: RunState,
        next_state: Literal["running", "parked", "idle"],
        *,
        calls: Sequence[ParkedCall] = (),
        parked_ids: Sequence[str] | None = None,
    ) -> None:
        if parked_ids is None and state.clear_parked:
            parked_ids = []
        state.quiet.clear()
        try:
            ok = await self._store_commit(state, next_state, calls, parked_ids)
        finally:
            state.quiet.set()
        if not ok:
            raise ChatBusyError("this run lost the chat's lease to another worker")
        state.entries.extend(state.unsaved)
        state.unsaved = []
        state.clear_parked = False

    async def _store_commit(
        self,
        state: RunState,
        next_state: str,
        calls: Sequence[ParkedCall],
        parked_ids: Sequence[str] | None,
    ) -> bool:
        state.commits += 1
        return await self.store.commit(
            state.keys,
            token=state.token,
            seq=state.commits,
            state=next_state,
            model_calls=state.model_calls,
            now_ms=self._now_ms(),
            lease_ms=self._lease_ms,
            entries=state.unsaved,
            calls=calls,
            parked_ids=parked_ids,
            # The duplicate guard is written with the user message itself, never before.
            last_uid=state.user_message_id
            if any(e["t"] == "user" for e in state.unsaved)
            else None,
        )

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
        ``superseded_by_user_message``) first, atomically with taking the lease; calls
        already answered keep their outcome (an approved call runs before the turn).
        """
        self._refuse_if_closing()
        keys = chat_keys(chat_id)
        if template is None:
            template = (
                await self.agents.current_template() if self.agents is not None else self.template
            )
        message_id = new_id("msg")
        token = secrets.token_hex(16)
        claim = await self.store.claim_turn(
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
        state = RunState(
            keys=keys,
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=message_id,
            template=template,
            model_calls=claim.model_calls,
            entries=claim.entries,
            parked_ids=claim.parked_ids,
            user_message_id=user_message_id,
        )
        previous = claim.previous_template

        async def work(run: Run, state: RunState) -> None:
            # The earlier message's calls finish off-stream (this is a new message), with
            # the template they were made under.
            earlier = load_template(json.loads(previous)) if previous else None
            await self._apply_outcomes(run, state, emit=False, template=earlier)
            state.unsaved.append(user_entry(text, user_message_id))
            await self._drive(run, state)

        return self._start(Run(message_id), state, work)

    async def resume(
        self, chat_id: str, principal: str, *, skip_echo: frozenset[str] = frozenset()
    ) -> Run:
        """Continue a parked chat whose calls are all settled (or take over a chat whose
        worker died, once its lease lapsed). Exactly one caller wins; the others get
        :class:`NothingToResumeError` or :class:`ChatBusyError`.

        ``skip_echo`` names client calls whose output the caller supplied itself; their
        results are not reported back to it. Approvals are always reported: the caller
        needs the execution result or the denial to finish the tool part.
        """
        self._refuse_if_closing()
        keys = chat_keys(chat_id)
        token = secrets.token_hex(16)
        claim = await self.store.claim_resume(
            keys, principal=principal, token=token, now_ms=self._now_ms(), lease_ms=self._lease_ms
        )
        state = RunState(
            keys=keys,
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=claim.message_id,
            template=self.template,
            model_calls=claim.model_calls,
            entries=claim.entries,
            parked_ids=claim.parked_ids,
            parked_calls=claim.calls,
            skip_echo=skip_echo,
        )
        try:
            if claim.template_json:
                state.template = load_template(json.loads(claim.template_json))
        except Exception:
            # Hand the chat back untouched, so a fixed deployment can resume it.
            await self.store.commit(
                keys,
                token=token,
                seq=1,
                state="parked",
                model_calls=state.model_calls,
                now_ms=self._now_ms(),
                lease_ms=self._lease_ms,
                entries=(),
            )
            raise

        async def work(run: Run, state: RunState) -> None:
            await self._apply_outcomes(run, state, emit=True)
            await self._drive(run, state)

        return self._start(Run(state.message_id), state, work)

    async def _apply_outcomes(
        self, run: Run, state: RunState, *, emit: bool, template: AgentTemplate | None = None
    ) -> None:
        """Turn the outcomes of the parked step into tool results, running approved calls
        with exactly the approved input."""
        if not state.parked_ids:
            return
        if state.parked_calls is not None:
            calls = state.parked_calls
        else:
            _, calls = await self.store.calls(state.keys, state.parked_ids, drop_deadlines=True)
        state.clear_parked = True
        approved: list[tuple[ParkedCall, Any]] = []
        for call in calls:
            outcome = call.outcome or SUPERSEDED
            if call.kind == "approval" and outcome["outcome"] == "approved":
                approved.append((call, outcome.get("input", call.input)))
                continue
            res, status = model_result(call, outcome)
            state.unsaved.append(
                result_entry(call.tool_call_id, call.tool_name, res, status, outcome["outcome"])
            )
            if not emit or (call.kind == "client" and call.tool_call_id in state.skip_echo):
                continue  # a new message, or the caller supplied this output itself
            if status == "denied":
                run._emit(ToolDenied(call.tool_call_id, outcome.get("reason")))
            elif status == "error":
                run._emit(ToolFailed(call.tool_call_id, str(res.get("error", ""))))
            else:
                run._emit(ToolSucceeded(call.tool_call_id, res))
        if not approved:
            return
        # Persist the known results, and that execution starts, before running anything:
        # if this worker dies mid-tool, the model later reads "result unknown" for it
        # instead of the tool silently running twice.
        await self._commit(state, "running")
        runs = await asyncio.gather(
            *(
                self.executor.execute(
                    state, call.tool_call_id, call.tool_name, tool_input, template
                )
                for call, tool_input in approved
            )
        )
        for (call, _), tool_run in zip(approved, runs, strict=True):
            record_tool_run(run, state, call.tool_call_id, call.tool_name, tool_run, emit=emit)

    async def _drive(self, run: Run, state: RunState) -> None:
        """Model steps until the model stops calling tools, a call parks, or the step
        limit is reached."""
        template = state.template
        tools = tuple(
            ToolDescription(s.name, s.description, s.input_schema) for s in template.tools.values()
        )
        try:
            model = self.models.model_for(template.llm)
        except ModelError as exc:
            await end_failed(run, state, None, exc, self._commit)
            return
        invalid_steps = 0
        for _ in range(self.config.max_steps):
            if state.stop.is_set():
                await end_stopped(run, state, None, self._commit)
                return
            run._emit(StepStarted())
            request = ModelRequest(
                chat_id=state.chat_id,
                call_index=state.model_calls,
                instructions=template.instructions,
                messages=to_model_messages([*state.entries, *state.unsaved]),
                tools=tools,
            )
            step = StepReader(run._emit, f"t{state.model_calls}")
            try:
                await consume(state, request, model, step)
            except ModelError as exc:
                step.finish()
                await end_failed(run, state, step, exc, self._commit)
                return
            step.finish()
            state.model_calls += 1
            if state.stop.is_set():
                await end_stopped(run, state, step, self._commit)
                return
            calls = step.final_calls()
            state.unsaved.append(
                assistant_entry(
                    state.message_id,
                    "".join(step.text),
                    [call_entry(c) for c in calls],
                    end=step.end,
                )
            )
            if not calls:
                await self._commit(state, "idle", parked_ids=[])
                run._emit(StepFinished())
                reason = step.end.finish_reason if step.end is not None else None
                finish_message(run, state, _FINAL_REASONS.get(reason or "", "stop"))
                return
            sorted_calls = triage(
                calls,
                state.template,
                self.config,
                message_id=state.message_id,
                now=self.clock(),
            )
            state.unsaved.extend(sorted_calls.refused)
            parked, to_run = sorted_calls.parked, sorted_calls.to_run
            announced = sorted_calls.events
            ids = [p.tool_call_id for p in parked]
            if to_run:
                # Persist the step (and its parked calls) before server tools run, then
                # tell the client: a widget never names a call the server does not have.
                await self._commit(state, "running", calls=parked, parked_ids=ids or None)
                for event in announced:
                    run._emit(event)
                runs = await asyncio.gather(
                    *(self.executor.execute(state, c.id or "", c.name, c.input) for c in to_run)
                )
                for call, tool_run in zip(to_run, runs, strict=True):
                    record_tool_run(run, state, call.id or "", call.name, tool_run)
                if parked:
                    await self._commit(state, "parked", parked_ids=ids)
                else:
                    await self._commit(state, "running")
            elif parked:
                await self._commit(state, "parked", calls=parked, parked_ids=ids)
                for event in announced:
                    run._emit(event)
            else:
                await self._commit(state, "running")
                for event in announced:
                    run._emit(event)
            run._emit(StepFinished())
            if parked:
                finish_message(run, state, "tool-calls")
                return
            # A step whose every call was refused (unknown tool, input the schema does
            # not accept, not JSON) goes back to the model to correct, a bounded number
            # of times in a row.
            invalid_steps = invalid_steps + 1 if not to_run else 0
            if invalid_steps > self.config.max_invalid_steps:
                await end_with_notice(
                    run,
                    state,
                    f"(stopped: the model's tool calls were refused {invalid_steps} times in "
                    "a row)",
                    "other",
                    self._commit,
                )
                return
        # Out of steps. End on a text-only step: ending on a step whose tool calls are
        # all answered would make an AI SDK client resend the message automatically.
        await end_with_notice(
            run,
            state,
            f"(stopped after {self.config.max_steps} steps without a final answer)",
            "length",
            self._commit,
        )

    # -- background resume ("auto" policy) ------------------------------------------------

    def resume_in_background(self, chat_id: str) -> None:
        """Resume a settled chat on this worker without a client request ("auto" resume
        policy). Its events go to the chat's log, where a reconnecting client finds them.
        Losing the race to another resume is fine: someone continued the chat."""

        async def resume() -> None:
            keys = chat_keys(chat_id)
            owner = await self.store.owner(keys)
            if owner is None:
                return
            try:
                run = await self.resume(chat_id, owner)
            except (NothingToResumeError, ChatBusyError, ShuttingDownError):
                return
            if run.task is not None:
                await run.task

        task = asyncio.create_task(resume(), name=f"parkway-auto-resume-{chat_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def on_timeout(self, chat_id: str, tool_call_id: str, pending: int) -> None:
        """Sweeper hook: a call timed out; resume its chat if that was the last one and
        the chat's agent resumes automatically."""
        if pending:
            return
        _, calls = await self.store.calls(chat_keys(chat_id), [tool_call_id])
        if calls and calls[0].auto_resume:
            self.resume_in_background(chat_id)

    # -- following and stopping ------------------------------------------------------------

    def follow(
        self, chat_id: str, start_id: str, *, skip_start: bool = False
    ) -> AsyncIterator[Event]:
        """The events of the run that starts at ``start_id`` in the chat's log, live.
        Ownership is the caller's to check (see :meth:`chat`)."""
        return follow(
            self.store,
            chat_keys(chat_id),
            start_id,
            watch=self.logwatch,
            skip_start=skip_start,
            quiet_s=self.config.follow_quiet_s,
            clock=self.clock,
        )

    async def stop(self, chat_id: str, principal: str) -> bool:
        """Ask the chat's running run to stop (it keeps its partial answer). False when
        nothing is running."""
        keys = chat_keys(chat_id)
        owner = await self.store.owner(keys)
        if owner is None or owner != principal:
            raise ChatNotFoundError("no such chat")
        return await self.store.request_stop(keys)

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
        if record.meta.get("v") != SCHEMA_VERSION:
            raise IncompatibleStateError(
                f"this chat was stored with schema version {record.meta.get('v')}; this "
                f"Parkway reads version {SCHEMA_VERSION}"
            )
        return record
