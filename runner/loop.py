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
from runner.canonical import canonical_json, parked_call_key
from runner.connection import RedisClient
from runner.credentials import Credentials
from runner.errors import (
    CallNotFoundError,
    ChatBusyError,
    ChatNotFoundError,
    DuplicateMessageError,
    IncompatibleStateError,
    ModelError,
    NothingToResumeError,
    NotPlainJSONError,
    ShuttingDownError,
)
from runner.eventlog import cancel_requested, follow
from runner.events import (
    ApprovalRequested,
    CallParked,
    DataPublished,
    Event,
    FinishReason,
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
    coalesce,
    events_to_json,
)
from runner.history import (
    assistant_entry,
    decode_entries,
    message_metadata,
    result_entry,
    to_model_messages,
    user_entry,
)
from runner.keys import chat_keys
from runner.llm.catalog import ModelCatalog
from runner.model import Model, ModelRequest, ModelStepEnd, ModelToolCall, ToolDescription
from runner.outcomes import model_result
from runner.parking import ParkedCall
from runner.run import Run, RunnerConfig, RunState, Work, new_id
from runner.settling import Answer, AnswerReport, SettleListener, SettleResult, Settling
from runner.step import StepReader
from runner.store import ChatRecord, ChatStore
from runner.template import AgentTemplate, load_template
from runner.tools import ToolContext, ToolRun, execute_tool, input_problem

__all__ = ["Answer", "AnswerReport", "Run", "Runner", "RunnerConfig", "SettleResult"]

# Answer, AnswerReport and SettleResult live in runner.settling, Run and RunnerConfig in
# runner.run; they are re-exported here, where the Runner that uses them is.

log = logging.getLogger(__name__)

SUPERSEDED = {"outcome": "cancelled", "reason": "superseded_by_user_message"}
# How a model's finish reason ends a message whose last step called no tools.
_FINAL_REASONS: dict[str, FinishReason] = {"length": "length", "content-filter": "content-filter"}
STOP_POLL_S = 0.2  # how often a running run checks for a stop request
LOG_FLUSH_S = 5.0  # how long a finished run waits for its last events to reach the log
WRITER_YIELDS = 3  # event-loop turns the log writer lets the run have before each batch


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
        async def watch() -> None:
            # Renew the lease (long tools must not let it lapse: another worker would
            # take over) and notice a stop request (POST .../stop, from any worker).
            renew_every = self.config.lease_s / 3
            since_renew = 0.0
            while not cancel_requested():
                await asyncio.sleep(STOP_POLL_S)
                since_renew += STOP_POLL_S
                try:
                    if await self.store.stop_requested(state.keys, state.token):
                        state.stop.set()
                        if state.consumer is not None:
                            state.consumer.cancel()
                    if since_renew >= renew_every:
                        since_renew = 0.0
                        held = await self.store.renew(
                            state.keys,
                            token=state.token,
                            now_ms=self._now_ms(),
                            lease_ms=self._lease_ms,
                        )
                        if not held:
                            log.warning("run of chat %s lost its lease", state.chat_id)
                            return
                except Exception:
                    # Try again next period; commits stay fenced by the token.
                    log.warning("could not check on the run of chat %s", state.chat_id)

        async def write_log() -> None:
            while True:
                await run._wake.wait()
                # The run goes first: its next step (the model call, a commit) is not
                # held up by the log, a commit never queues behind the log in Redis, and
                # more events gather into this batch meanwhile.
                for _ in range(WRITER_YIELDS):
                    await asyncio.sleep(0)
                await state.quiet.wait()
                await asyncio.sleep(0)
                run._wake.clear()
                batch, run._unlogged = run._unlogged, []
                finish, run._finish = run._finish, ""
                if batch:
                    try:
                        first = await self.store.append_events(
                            state.keys,
                            token=state.token,
                            batch=events_to_json(coalesce(batch)),
                            finish=finish,
                            now_ms=self._now_ms(),
                        )
                    except Exception:
                        log.exception("could not append events of chat %s", state.chat_id)
                        first = ""
                    if not run.log_start.done():
                        if first:
                            run.log_start.set_result(first)
                        else:
                            run.log_start.set_exception(ChatBusyError("no event log"))
                if run._closed and not run._unlogged:
                    return

        async def main() -> None:
            watcher = asyncio.create_task(watch())
            writer = asyncio.create_task(write_log())
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
                with contextlib.suppress(Exception):
                    # Parked ids stay: calls already stored are finished by the next turn.
                    await self._commit(state, "idle")
                run._emit(RunFailed(f"The run failed (reference {ref})."))
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
        if not tasks:
            return
        _, still = await asyncio.wait(tasks, timeout=grace_s)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still)

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
        return await self.store.commit(
            state.keys,
            token=state.token,
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

    def _check_claim(self, result: Sequence[str]) -> None:
        status = result[0]
        if status == "ok":
            return
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
        raise ChatBusyError(f"unexpected claim result {status!r}")

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
        result = await self.store.claim_turn(
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
        state = RunState(
            keys=keys,
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=message_id,
            template=template,
            model_calls=int(result[1]),
            entries=decode_entries(result[4:]),
            parked_ids=json.loads(result[2]),
            user_message_id=user_message_id,
        )
        previous = result[3]

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
        result, parked_calls = await self.store.claim_resume(
            keys, principal=principal, token=token, now_ms=self._now_ms(), lease_ms=self._lease_ms
        )
        self._check_claim(result)
        state = RunState(
            keys=keys,
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=result[2],
            template=self.template,
            model_calls=int(result[1]),
            entries=decode_entries(result[5:]),
            parked_ids=json.loads(result[3]),
            parked_calls=parked_calls,
            skip_echo=skip_echo,
        )
        try:
            if result[4]:
                state.template = load_template(json.loads(result[4]))
        except Exception:
            # Hand the chat back untouched, so a fixed deployment can resume it.
            await self.store.commit(
                keys,
                token=token,
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
                self._execute(state, call.tool_call_id, call.tool_name, tool_input, template)
                for call, tool_input in approved
            )
        )
        for (call, _), tool_run in zip(approved, runs, strict=True):
            self._record_run(run, state, call.tool_call_id, call.tool_name, tool_run, emit=emit)

    async def _execute(
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
        return await execute_tool(spec, tool_input, ctx, max_bytes=self.config.max_output_bytes)

    def _record_run(
        self,
        run: Run,
        state: RunState,
        call_id: str,
        name: str,
        tool_run: ToolRun,
        *,
        emit: bool = True,
    ) -> None:
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
            await self._model_failed(run, state, None, exc)
            return
        invalid_steps = 0
        for _ in range(self.config.max_steps):
            if state.stop.is_set():
                await self._stopped(run, state, [], opened_step=False)
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
                await self._consume(run, state, request, model, step)
            except ModelError as exc:
                step.finish()
                await self._model_failed(run, state, step, exc)
                return
            step.finish()
            state.model_calls += 1
            if state.stop.is_set():
                await self._stopped(run, state, step.text, opened_step=True, end=step.end)
                return
            calls = step.final_calls()
            state.unsaved.append(
                assistant_entry(
                    state.message_id,
                    "".join(step.text),
                    [StepReader.stored_call(c) for c in calls],
                    end=step.end,
                )
            )
            if not calls:
                await self._commit(state, "idle", parked_ids=[])
                run._emit(StepFinished())
                reason = step.end.finish_reason if step.end is not None else None
                self._finish(run, state, _FINAL_REASONS.get(reason or "", "stop"))
                return
            parked, to_run, announced = self._classify(state, calls)
            ids = [p.tool_call_id for p in parked]
            if to_run:
                # Persist the step (and its parked calls) before server tools run, then
                # tell the client: a widget never names a call the server does not have.
                await self._commit(state, "running", calls=parked, parked_ids=ids or None)
                for event in announced:
                    run._emit(event)
                runs = await asyncio.gather(
                    *(self._execute(state, c.id or "", c.name, c.input) for c in to_run)
                )
                for call, tool_run in zip(to_run, runs, strict=True):
                    self._record_run(run, state, call.id or "", call.name, tool_run)
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
                self._finish(run, state, "tool-calls")
                return
            # A step whose every call was refused (unknown tool, input the schema does
            # not accept, not JSON) goes back to the model to correct, a bounded number
            # of times in a row.
            invalid_steps = invalid_steps + 1 if not to_run else 0
            if invalid_steps > self.config.max_invalid_steps:
                await self._notice(
                    run,
                    state,
                    f"(stopped: the model's tool calls were refused {invalid_steps} times in "
                    "a row)",
                    "other",
                )
                return
        # Out of steps. End on a text-only step: ending on a step whose tool calls are
        # all answered would make an AI SDK client resend the message automatically.
        await self._notice(
            run,
            state,
            f"(stopped after {self.config.max_steps} steps without a final answer)",
            "length",
        )

    def _finish(self, run: Run, state: RunState, reason: FinishReason) -> None:
        """The message's end, with its model and token use when the model reported them."""
        metadata = message_metadata([*state.entries, *state.unsaved], state.message_id)
        run._emit(MessageFinished(reason, metadata))

    async def _notice(self, run: Run, state: RunState, notice: str, reason: FinishReason) -> None:
        """End the message with a text-only step saying why."""
        run._emit(StepStarted())
        text_id = f"t{state.model_calls}-notice"
        run._emit(TextStarted(text_id))
        run._emit(TextDelta(text_id, notice))
        run._emit(TextEnded(text_id))
        state.unsaved.append(assistant_entry(state.message_id, notice, []))
        await self._commit(state, "idle", parked_ids=[])
        run._emit(StepFinished())
        self._finish(run, state, reason)

    async def _model_failed(
        self, run: Run, state: RunState, step: StepReader | None, exc: ModelError
    ) -> None:
        """The model could not answer: keep what it streamed, leave the chat idle for the
        next message, and end the run with the error's message.

        When the turn's first model request fails before anything was said, the turn's
        user message is not kept either: the chat is as it was, and the same message can
        simply be sent again (an AI SDK ``regenerate()`` resends it with the same id)."""
        said = step is not None and step.said
        if step is not None:
            if said:
                state.model_calls += 1
                state.unsaved.append(
                    assistant_entry(state.message_id, "".join(step.text), [], end=step.end)
                )
            run._emit(StepFinished())
        if not said and not any(e["t"] == "assistant" for e in state.unsaved):
            state.unsaved = [e for e in state.unsaved if e["t"] != "user"]
        await self._commit(state, "idle", parked_ids=[])
        run._emit(RunFailed(str(exc)))

    async def _consume(
        self, run: Run, state: RunState, request: ModelRequest, model: Model, step: StepReader
    ) -> None:
        """Stream one model response into ``step``, reporting it as it comes; a stop
        request cancels the stream at once, even mid-wait, and closes the model's
        connection (the stream is closed, not left to the garbage collector)."""

        async def consume() -> None:
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
        state.consumer = asyncio.create_task(consume())
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

    async def _stopped(
        self,
        run: Run,
        state: RunState,
        text: Sequence[str],
        *,
        opened_step: bool,
        end: ModelStepEnd | None = None,
    ) -> None:
        """End a run someone asked to stop: keep the partial answer, drop the tool calls
        the model had not finished asking for, and finish cleanly."""
        if opened_step:
            state.unsaved.append(assistant_entry(state.message_id, "".join(text), [], end=end))
        await self._commit(state, "idle")
        if opened_step:
            run._emit(StepFinished())
        self._finish(run, state, "stop")

    def _classify(
        self, state: RunState, calls: Sequence[ModelToolCall]
    ) -> tuple[list[ParkedCall], list[ModelToolCall], list[Event]]:
        """Sort a step's calls: those that park, the server calls to run now, and the
        events announcing them (emitted only once the step is persisted)."""
        parked: list[ParkedCall] = []
        to_run: list[ModelToolCall] = []
        events: list[Event] = []
        now = self.clock()
        for call in calls:
            call_id = call.id or ""
            spec = state.template.tool(call.name)
            if spec is None:
                known = ", ".join(sorted(state.template.tools)) or "none"
                problem: str | None = f"unknown tool {call.name!r} (the tools are: {known})"
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
                state.unsaved.append(
                    result_entry(call_id, call.name, {"error": problem}, "input_error")
                )
                events.append(ToolInputRejected(call_id, call.name, call.input, problem))
                continue
            events.append(ToolCallIssued(call_id, call.name, call.input))
            if not spec.parks:
                to_run.append(call)
                continue
            kind: Literal["client", "approval"] = "client" if spec.kind == "client" else "approval"
            if kind == "approval":
                default = self.config.approval_deadline_s
            elif spec.result_style == "connection":
                default = self.config.connection_deadline_s
            else:
                default = self.config.client_deadline_s
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
                approval_id=new_id("apr") if kind == "approval" else None,
                allow_edits=spec.allow_edits,
                render=spec.render,
                result_style=spec.result_style,
                description=spec.description,
                output_schema=spec.output_schema if kind == "client" else None,
                edit_schema=spec.input_schema if kind == "approval" and spec.allow_edits else None,
                auto_resume=state.template.resume_policy == "auto",
            )
            parked.append(parked_call)
            if parked_call.approval_id is not None:
                events.append(ApprovalRequested(call_id, parked_call.approval_id))
            events.append(CallParked(parked_call))
        return parked, to_run, events

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
            skip_start=skip_start,
            block_ms=self.config.follow_block_ms,
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
        if record.meta.get("v") != "1":
            raise IncompatibleStateError(
                f"this chat was stored with schema version {record.meta.get('v')}; this "
                "Parkway reads version 1"
            )
        return record
