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
disconnects) the run still finishes and persists. The claims that start runs, and the
runs' tasks, are the :class:`~parkway.runner.engine._launcher.RunLauncher` the runner
holds; settling and answer matching are its
:class:`~parkway.runner.engine.settling.Settling`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal

from parkway.runner.agent import AgentStore, AgentTemplate, Credentials
from parkway.runner.codemode import CodeMode, input_artifact_ids
from parkway.runner.engine._launcher import RunLauncher
from parkway.runner.engine.driver import StepDriver
from parkway.runner.engine.execution import ToolExecutor
from parkway.runner.engine.links import LinkSettler
from parkway.runner.engine.live import LiveQuestions
from parkway.runner.engine.run import Run, RunnerConfig
from parkway.runner.engine.settling import (
    Answer,
    AnswerReport,
    AutoResume,
    SettleListener,
    SettleResult,
    Settling,
    count_settle,
)
from parkway.runner.engine.supervisor import RunWatch
from parkway.runner.errors import ArtifactNotFoundError, ChatNotFoundError, IncompatibleStateError
from parkway.runner.eventlog import LogWatch, follow
from parkway.runner.events import Event
from parkway.runner.llm import Model, ModelCatalog
from parkway.runner.mcp import McpTools
from parkway.runner.ops import logcontext
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
    chat_keys,
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
        # Starting runs (claims, each run's task), and the worker's running runs.
        self._launcher = RunLauncher(
            self.store, config=self.config, settling=self.settling, driver=self.driver,
            watch=self.watch, logwatch=self.logwatch, agents=agents, template=template,
            clock=clock,
        )  # fmt: skip

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

    @property
    def template(self) -> AgentTemplate:
        """The agent file's template: what a turn runs when no agent head is kept and its
        request brings none."""
        return self._launcher.template

    @template.setter
    def template(self, template: AgentTemplate) -> None:
        self._launcher.template = template

    @property
    def clock(self) -> Callable[[], float]:
        """The wall clock of the claims, the runs' leases and the approvals' ages."""
        return self._launcher.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._launcher.clock = clock

    @property
    def closing(self) -> bool:
        """Set when the worker shuts down: no new run starts (:meth:`aclose`)."""
        return self._launcher.closing

    @closing.setter
    def closing(self, closing: bool) -> None:
        self._launcher.closing = closing

    # -- helpers -------------------------------------------------------------------

    def _now_ms(self) -> int:
        return self._launcher.now_ms()

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Shut down gracefully: take no new runs, let running ones finish (up to
        ``grace_s``), then cancel the rest, which hand their chats over at once (their
        leases are released, their followers told the run was interrupted)."""
        self.closing = True
        self.auto_resume.cancel()
        await self._launcher.drain(grace_s)
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
        return await self._launcher.start_turn(
            chat_id, principal, text, user_message_id=user_message_id, template=template,
            answers=answers, roles=roles,
        )  # fmt: skip

    async def current_template(self) -> AgentTemplate:
        """The template a new turn runs when its request brings none (the agent's head,
        or the agent file's)."""
        template, _ = await self._launcher.head_template()
        return template

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
        return await self._launcher.resume(chat_id, principal, skip_echo=skip_echo)

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
        return await self._launcher.answer_and_resume(
            chat_id, principal, answers, roles=roles, echo=echo
        )

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
