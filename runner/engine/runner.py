"""The runner: start a turn, park calls, settle them, resume — all through Redis.

Nothing about a run lives only in this process. A turn claims the chat's run lease
(CLAIM_TURN), runs model steps, and persists each step (COMMIT) before telling anyone
about its end; a step whose calls wait for a human is committed as *parked* and the
turn ends. Settling writes one outcome (SETTLE, first writer wins). Resuming claims the
lease only when every parked call is settled (CLAIM_RESUME, exactly one winner), loads
the history and the template snapshot from Redis, turns outcomes into tool results
(executing approved calls with exactly the approved input) and runs the next steps.

A run executes in its own task, beside its :class:`~parkway.runner.engine.supervisor.RunSupervisor`
(lease, stops, the event log), and its steps are driven by the runner's
:class:`~parkway.runner.engine.driver.StepDriver`; its events go to the caller and to the
chat's event log (which HTTP responses follow). If the caller goes away (the browser
disconnects) the run still finishes and persists. Settling and answer matching are the
:class:`~parkway.runner.engine.settling.Settling` the runner holds.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal

from parkway.runner.agent import AgentStore, AgentTemplate, Credentials, load_template_json
from parkway.runner.canonical import canonical_json
from parkway.runner.codemode import CodeMode, input_artifact_ids
from parkway.runner.engine.driver import StepDriver
from parkway.runner.engine.execution import (
    ToolExecutor,
)
from parkway.runner.engine.links import LinkSettler
from parkway.runner.engine.live import LiveQuestions
from parkway.runner.engine.run import Run, RunnerConfig, RunState, new_id
from parkway.runner.engine.settling import (
    Answer,
    AnswerReport,
    AutoResume,
    SettleListener,
    SettleResult,
    Settling,
    count_settle,
)
from parkway.runner.engine.supervisor import RunSupervisor, RunWatch, Work
from parkway.runner.errors import (
    ArtifactNotFoundError,
    ChatNotFoundError,
    IncompatibleStateError,
    ShuttingDownError,
)
from parkway.runner.eventlog import LogWatch, follow
from parkway.runner.events import Event
from parkway.runner.llm import Model, ModelCatalog
from parkway.runner.mcp import McpTools
from parkway.runner.ops import context_of, logcontext
from parkway.runner.outcomes import SUPERSEDED
from parkway.runner.parking import ParkedCall
from parkway.runner.store import (
    SCHEMA_VERSION,
    ApprovalPage,
    Artifact,
    ArtifactStore,
    ChatRecord,
    ChatStore,
    LiveStore,
    McpLinks,
    RedisClient,
    ResumeClaim,
    TurnClaim,
    chat_keys,
    is_retry,
    user_entry,
)

__all__ = ["Answer", "AnswerReport", "Run", "Runner", "RunnerConfig", "SettleResult"]

# Answer, AnswerReport and SettleResult live in runner.settling, Run and RunnerConfig in
# runner.run; they are re-exported here, where the Runner that uses them is.


class Runner:
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
        code: CodeMode | None = None,
        mcp: McpTools | None = None,
    ) -> None:
        """``model`` is the agent file's model; ``models`` chooses the model of each run
        (an override, the run's template ``llm``, else ``model``) and builds provider
        models; without it, a catalog over ``model`` and the process environment.
        ``mcp`` holds the worker's MCP sessions (a new one by default; the runner closes
        it when it closes)."""
        self.config = config or RunnerConfig()
        self._credentials = credentials
        self.agents = agents
        self.store = ChatStore(
            redis, self.config.chat_ttl_s, log_keep_s=self.config.log_keep_s,
            audit_keep_s=self.config.audit_keep_s, quotas=self.config.quotas,
            artifact_ttl_s=self.config.artifact_ttl_s, addresses=self.config.addresses,
        )  # fmt: skip
        self.auto_resume = AutoResume(self.store, self.resume)
        self.settling = Settling(
            self.store,
            max_output_bytes=self.config.max_output_bytes,
            on_all_settled=self.auto_resume.on_all_settled,
        )
        self.settling.listeners.append(count_settle)  # parkway_calls_settled_total
        self.logwatch = LogWatch(redis, read_slots=self.config.follower_reads)
        self.watch = RunWatch(self.store, lease_s=self.config.lease_s, clock=clock)
        # Large tool results are kept as the chat's artifacts; ``code`` runs execute_code.
        self.artifacts = ArtifactStore(
            redis, self.store.artifact_ttl_s, threshold_bytes=self.config.artifact_threshold_bytes,
            quotas=self.config.quotas, chat_ttl_s=self.config.chat_ttl_s,
            cluster=self.store.cluster, addresses=self.store.addresses,
        )  # fmt: skip
        self.code = code
        # The MCP servers' sessions of this worker (runner/mcp/), for every template.
        self.mcp = mcp or McpTools()
        if self.mcp.credentials is None:  # servers that need OAuth send users' tokens
            self.mcp.credentials = credentials
        # Questions a running call puts to the chat's person (runner/engine/live.py).
        self.live = LiveQuestions(LiveStore(redis))
        self.executor = ToolExecutor(
            credentials,
            agents,
            self.config.max_output_bytes,
            artifacts=self.artifacts,
            code=code,
            mcp=self.mcp,
            live=self.live,
        )
        self.models = models or ModelCatalog(model)
        self.template = template
        self.clock = clock
        # A link an MCP server says was completed settles the call waiting for it.
        links = McpLinks(redis)
        self.mcp.on_link_done = LinkSettler(links, self.settling, self.auto_resume.start)
        self.driver = StepDriver(
            self.store,
            artifacts=self.artifacts,
            executor=self.executor,
            models=self.models,
            config=self.config,
            clock=clock,
            mcp=self.mcp,
            links=links,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.closing = False

    @property
    def model(self) -> Model | None:
        """The default model (the agent file's)."""
        return self.models.default

    @model.setter
    def model(self, model: Model | None) -> None:
        self.models.default = model

    @property
    def credentials(self) -> Credentials | None:
        """The connection store server tools and MCP servers that need OAuth read
        tokens from (set after construction by the connect flow's start)."""
        return self._credentials

    @credentials.setter
    def credentials(self, credentials: Credentials | None) -> None:
        self._credentials = credentials
        self.executor.credentials = credentials
        self.mcp.credentials = credentials

    @property
    def settle_listeners(self) -> list[SettleListener]:
        """Awaited after each settle this worker wins (see :class:`Settling`)."""
        return self.settling.listeners

    # -- helpers -------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def _lease_ms(self) -> int:
        return int(self.config.lease_s * 1000)

    def _refuse_if_closing(self) -> None:
        if self.closing:
            raise ShuttingDownError("this worker is shutting down; another one will take it")

    def _start(self, state: RunState, work: Work) -> Run:
        """Run ``work`` in a task of its own, beside its supervisor."""
        supervisor = RunSupervisor(
            state,
            store=self.store,
            config=self.config,
            clock=self.clock,
            watch=self.watch,
            logwatch=self.logwatch,
        )
        task = asyncio.create_task(supervisor.supervise(work), name=f"parkway-run-{state.chat_id}")
        supervisor.run.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return supervisor.run

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Shut down gracefully: take no new runs, let running ones finish (up to
        ``grace_s``), then cancel the rest, which hand their chats over at once (their
        leases are released, their followers told the run was interrupted)."""
        self.closing = True
        self.auto_resume.cancel()
        tasks = list(self._tasks)
        if tasks:
            _, still = await asyncio.wait(tasks, timeout=grace_s)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still)
        await self.watch.aclose()
        await self.logwatch.aclose()
        await self.mcp.aclose()  # after the runs: none calls a tool any more

    # -- starting and resuming ----------------------------------------------------------

    async def start_turn(
        self,
        chat_id: str,
        principal: str,
        text: str,
        *,
        user_message_id: str | None = None,
        template: AgentTemplate | None = None,
        answers: Sequence[Answer] = (),
        roles: frozenset[str] = frozenset(),
    ) -> Run:
        """Start a new turn with a user message.

        Pending calls of a parked step are settled ``cancelled`` (reason
        ``superseded_by_user_message``) first, atomically with taking the lease; calls
        already answered keep their outcome (an approved call runs before the turn).
        ``answers`` that come with the message (an AI SDK client resends its tool
        outputs with every message) settle what they answer before that, as
        :meth:`answer` would (``roles``: the principal's); the claim itself says whether
        any call is pending, so while none is they cost no round trip.
        """
        self._refuse_if_closing()
        keys = chat_keys(chat_id)
        head: tuple[str, int] | None = None
        if template is None:
            template, head = await self._head_template()
        message_id = new_id("msg")
        token = secrets.token_hex(16)
        answers_first = bool(answers)
        while True:  # at most three claims: each reason to step aside is dealt with once
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
                answers_first=answers_first,
                agent_head=head,
            )
            if isinstance(claim, TurnClaim):
                break
            if claim == "agent_moved":  # an editor committed since this worker read it
                template, head = await self._head_template(fresh=True)
            else:  # calls are pending: the answers settle theirs first
                await self.answer(chat_id, principal, answers, roles=roles)
                answers_first = False
        state = RunState(
            keys=keys,
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=message_id,
            template=template,
            model_calls=claim.model_calls,
            entries=claim.entries,
            view=claim.view,
            parked_ids=claim.parked_ids,
            user_message_id=user_message_id,
        )
        previous = claim.previous_template

        async def work(supervisor: RunSupervisor) -> None:
            # The earlier message's calls finish off-stream (this is a new message), with
            # the template they were made under.
            earlier = load_template_json(previous) if previous else None
            await self.driver.apply_outcomes(supervisor, emit=False, template=earlier)
            if not is_retry(supervisor.state.entries, user_message_id):
                supervisor.state.unsaved.append(user_entry(text, user_message_id))
            await self.driver.drive(supervisor)

        return self._start(state, work)

    async def current_template(self) -> AgentTemplate:
        """The template a new turn runs when its request brings none (the agent's head,
        or the agent file's)."""
        template, _ = await self._head_template()
        return template

    async def _head_template(
        self, *, fresh: bool = False
    ) -> tuple[AgentTemplate, tuple[str, int] | None]:
        """The template a new turn runs when its request brings none, and the agent's head
        (its key and version) the turn's claim must still find, if any.

        On a single Redis, a worker that has read the head before hands its claim the
        version it read instead of reading it again: the claim checks it in the same
        round trip (one less per turn) and steps aside if an editor has committed since.
        On a Cluster the head is in another slot than the chat, so it is read first;
        ``fresh`` reads it first too."""
        if self.agents is None:
            return self.template, None
        last = None if fresh or self.store.cluster else self.agents.last_head()
        if last is None:
            return await self.agents.current_template(), None
        version, template = last
        return template, (self.agents.keys.head, version)

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
        claimed_at = time.perf_counter()
        claim = await self.store.claim_resume(
            keys, principal=principal, token=token, now_ms=self._now_ms(), lease_ms=self._lease_ms
        )
        return await self._resumed(
            chat_id, principal, token, claim, skip_echo, claimed_at=claimed_at
        )

    async def answer_and_resume(
        self,
        chat_id: str,
        principal: str,
        answers: Sequence[Answer],
        *,
        roles: frozenset[str] = frozenset(),
        echo: frozenset[str] = frozenset(),
    ) -> tuple[AnswerReport, Run | None]:
        """Settle the pending calls ``answers`` answer and, when none is left pending,
        resume the chat (the AI SDK path: a client sends tool outputs and reads the run's
        continuation in the same response). The run is None while calls are pending.

        On the worker that parked the step, in one round trip (the ANSWER script);
        otherwise, or when the chat has moved on, as :meth:`answer` then :meth:`resume`.
        The answered client calls are not echoed back (``skip_echo``), except those named
        in ``echo`` (a caller that answered them for someone else's view, say).
        """
        self._refuse_if_closing()
        if not answers:
            return AnswerReport((), 0), await self.resume(chat_id, principal)
        plan = self.settling.plan(chat_id, answers)
        if plan is not None:
            keys = chat_keys(chat_id)
            token = secrets.token_hex(16)
            claimed_at = time.perf_counter()
            claimed = await self.store.answer(
                keys,
                principal=principal,
                token=token,
                now_ms=self._now_ms(),
                lease_ms=self._lease_ms,
                parked_ids=plan.parked_ids,
                outcomes=[(c.tool_call_id, canonical_json(o)) for c, o in plan.outcomes],
            )
            if claimed is not None:
                await self.settling.settled_by(plan)
                if isinstance(claimed, int):
                    return AnswerReport(plan.call_ids, claimed), None
                run = await self._resumed(
                    chat_id,
                    principal,
                    token,
                    claimed,
                    frozenset(plan.call_ids) - echo,
                    claimed_at=claimed_at,
                )
                return AnswerReport(plan.call_ids, 0), run
        report = await self.answer(chat_id, principal, answers, roles=roles)
        if report.pending:
            return report, None
        skip = frozenset(report.settled) - echo
        return report, await self.resume(chat_id, principal, skip_echo=skip)

    async def _resumed(
        self,
        chat_id: str,
        principal: str,
        token: str,
        claim: ResumeClaim,
        skip_echo: frozenset[str],
        *,
        claimed_at: float,
    ) -> Run:
        """Start the run of a resume whose claim (under ``token``, sent at ``claimed_at``
        on the perf_counter clock) was won. The run continues the trace of the turn that
        parked the calls it resumes."""
        parked = claim.calls or []
        state = RunState(
            keys=chat_keys(chat_id),
            chat_id=chat_id,
            principal=principal,
            token=token,
            message_id=claim.message_id,
            template=self.template,
            model_calls=claim.model_calls,
            entries=claim.entries,
            view=claim.view,
            parked_ids=claim.parked_ids,
            parked_calls=claim.calls,
            skip_echo=skip_echo,
            start="resume",
            trace_parent=context_of({c.tool_call_id: c.trace for c in parked}),
            claimed_at=claimed_at,
        )
        if claim.template_json:
            state.template = await self._load_snapshot(state, claim.template_json)

        async def work(supervisor: RunSupervisor) -> None:
            if await self.driver.apply_outcomes(supervisor, emit=True):
                return  # a call asked a person for input: parked again
            await self.driver.drive(supervisor)

        return self._start(state, work)

    async def _load_snapshot(self, state: RunState, template_json: str) -> AgentTemplate:
        """The template the resumed run started with; if it no longer loads, the chat is
        handed back untouched (so a fixed deployment can resume it) and the error raised."""
        try:
            return load_template_json(template_json)
        except Exception:
            await self.store.commit(
                state.keys,
                token=state.token,
                seq=1,
                state="parked",
                model_calls=state.model_calls,
                now_ms=self._now_ms(),
                lease_ms=self._lease_ms,
                entries=(),
            )
            raise

    # -- settling and the background resume (runner.settling) ------------------------

    async def settle(
        self,
        chat_id: str,
        principal: str,
        tool_call_id: str,
        outcome: Mapping[str, Any],
        *,
        by: Literal["client", "server"] = "client",
        roles: frozenset[str] = frozenset(),
    ) -> SettleResult:
        """Record the outcome of one parked call (:meth:`Settling.settle`); ``roles``
        are the principal's, as the transport resolved them (who may answer an approval
        for someone else)."""
        with logcontext.bound(chat_id=chat_id, call_id=tool_call_id):
            return await self.settling.settle(
                chat_id, principal, tool_call_id, outcome, by=by, roles=roles
            )

    async def answer(
        self,
        chat_id: str,
        principal: str,
        answers: Sequence[Answer],
        *,
        roles: frozenset[str] = frozenset(),
    ) -> AnswerReport:
        """Settle the pending calls that ``answers`` answer (:meth:`Settling.answer`)."""
        return await self.settling.answer(chat_id, principal, answers, roles=roles)

    def resume_in_background(self, chat_id: str) -> None:
        """Resume a settled chat on this worker without a client request ("auto" resume
        policy; see :class:`AutoResume`)."""
        self.auto_resume.start(chat_id)

    async def on_timeout(self, chat_id: str, tool_call_id: str, pending: int) -> None:
        """Sweeper hook: a call timed out; resume its chat if that was the last one and
        the chat's agent resumes automatically."""
        await self.auto_resume.on_timeout(chat_id, tool_call_id, pending)

    # -- following, stopping and reading -----------------------------------------------

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

    async def answer_live(
        self, chat_id: str, principal: str, tool_call_id: str, live_id: str, body: Any
    ) -> Mapping[str, Any]:
        """Answer the live question ``live_id`` of a running call (runner/engine/live.py):
        the first answer of its owner wins while the call waits; the answer recorded."""
        return await self.live.answer(chat_id, principal, tool_call_id, live_id, body)

    async def stop(self, chat_id: str, principal: str) -> bool:
        """Ask the chat's running run to stop (it keeps its partial answer). False when
        nothing is running."""
        keys = chat_keys(chat_id)
        owner = await self.store.owner(keys)
        if owner is None or owner != principal:
            raise ChatNotFoundError("no such chat")
        return await self.store.request_stop(keys)

    async def call(
        self,
        chat_id: str,
        principal: str,
        tool_call_id: str,
        *,
        roles: frozenset[str] = frozenset(),
    ) -> ParkedCall:
        """One parked call with its outcome (for a widget watching its status, or an
        approver reading an approval it may answer)."""
        return await self.settling.call(chat_id, principal, tool_call_id, roles=roles)

    async def call_inputs(
        self,
        chat_id: str,
        principal: str,
        tool_call_id: str,
        *,
        roles: frozenset[str] = frozenset(),
    ) -> list[Artifact]:
        """The records of the artifacts an ``execute_code`` call mounts, for whoever may
        read the call (:meth:`call`: its chat's owner, or an approver it is left to).
        A reviewer reads what the code would read, and nothing else of the chat."""
        call = await self.call(chat_id, principal, tool_call_id, roles=roles)
        return await self.artifacts.records(chat_id, input_artifact_ids(call.tool_name, call.input))

    async def call_input(
        self,
        chat_id: str,
        principal: str,
        tool_call_id: str,
        artifact_id: str,
        *,
        roles: frozenset[str] = frozenset(),
    ) -> tuple[Artifact, bytes]:
        """One artifact an ``execute_code`` call mounts, and its bytes (see
        :meth:`call_inputs`); any other artifact of the chat reads as missing."""
        call = await self.call(chat_id, principal, tool_call_id, roles=roles)
        found = None
        if artifact_id in input_artifact_ids(call.tool_name, call.input):
            found = await self.artifacts.get(chat_id, artifact_id)
        if found is None:
            raise ArtifactNotFoundError("this call reads no such artifact")
        return found

    async def approvals(
        self,
        principal: str,
        roles: frozenset[str],
        *,
        limit: int = 50,
        after: str | None = None,
    ) -> ApprovalPage:
        """The pending approvals, across chats, that ``principal`` (holding ``roles``)
        may answer, newest first, a page after the cursor ``after``."""
        return await self.store.approvals.page(
            principal, roles, now=self.clock(), limit=limit, after=after
        )

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
