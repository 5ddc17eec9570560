"""Starting runs: a turn's claim or a resume's, and the run in a task of its own.

The :class:`~parkway.runner.engine.runner.Runner`'s entry points that start a run
(``start_turn``, ``resume``, ``answer_and_resume``) are :class:`RunLauncher`'s: it
claims the chat's run lease (CLAIM_TURN, CLAIM_RESUME, or ANSWER with the answers that
allow the resume), builds the run's state from what the claim handed back (the history,
the parked calls, the template it runs with), and runs its work in a task beside its
:class:`~parkway.runner.engine.supervisor.RunSupervisor`, driven by the runner's
:class:`~parkway.runner.engine.driver.StepDriver`. It keeps the worker's running runs,
so that a worker shutting down takes no new one and lets the others finish.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence

from parkway.runner.agent import AgentStore, AgentTemplate, load_template_json
from parkway.runner.canonical import canonical_json
from parkway.runner.engine.driver import StepDriver
from parkway.runner.engine.run import Run, RunnerConfig, RunState, new_id
from parkway.runner.engine.settling import Answer, AnswerReport, Settling
from parkway.runner.engine.supervisor import RunSupervisor, RunWatch, Work
from parkway.runner.errors import ShuttingDownError
from parkway.runner.eventlog import LogWatch
from parkway.runner.ops import context_of
from parkway.runner.outcomes import SUPERSEDED
from parkway.runner.store import ChatStore, ResumeClaim, TurnClaim, chat_keys, is_retry, user_entry

__all__ = ["RunLauncher"]


class RunLauncher:
    """Starts this worker's runs (see the module doc). ``template`` is the agent file's,
    run when no agent head is kept (``agents``) and no request brings one; ``clock``
    stamps the claims and the runs' leases; once ``closing``, no run starts."""

    def __init__(
        self,
        store: ChatStore,
        *,
        config: RunnerConfig,
        settling: Settling,
        driver: StepDriver,
        watch: RunWatch,
        logwatch: LogWatch,
        agents: AgentStore | None,
        template: AgentTemplate,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.config = config
        self.settling = settling
        self.driver = driver
        self.watch = watch
        self.logwatch = logwatch
        self.agents = agents
        self.template = template
        self.clock = clock
        self.closing = False
        self._tasks: set[asyncio.Task[None]] = set()

    def now_ms(self) -> int:
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

    async def drain(self, grace_s: float) -> None:
        """Let the running runs finish (up to ``grace_s``), then cancel the rest, which
        hand their chats over at once."""
        tasks = list(self._tasks)
        if tasks:
            _, still = await asyncio.wait(tasks, timeout=grace_s)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still)

    # -- a turn --------------------------------------------------------------------------

    async def start_turn(
        self,
        chat_id: str,
        principal: str,
        text: str,
        *,
        user_message_id: str | None,
        template: AgentTemplate | None,
        answers: Sequence[Answer],
        roles: frozenset[str],
    ) -> Run:
        """:meth:`Runner.start_turn <parkway.runner.engine.runner.Runner.start_turn>`."""
        self._refuse_if_closing()
        keys = chat_keys(chat_id)
        head: tuple[str, int] | None = None
        if template is None:
            template, head = await self.head_template()
        message_id = new_id("msg")
        token = secrets.token_hex(16)
        answers_first = bool(answers)
        while True:  # at most three claims: each reason to step aside is dealt with once
            claim = await self.store.claim_turn(
                keys,
                principal=principal,
                token=token,
                now_ms=self.now_ms(),
                lease_ms=self._lease_ms,
                user_message_id=user_message_id or "",
                user_entry=user_entry(text, user_message_id),
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
                template, head = await self.head_template(fresh=True)
            else:  # calls are pending: the answers settle theirs first
                await self.settling.answer(chat_id, principal, answers, roles=roles)
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
            earlier = load_template_json(previous, stored=True) if previous else None
            await self.driver.apply_outcomes(supervisor, emit=False, template=earlier)
            if not is_retry(supervisor.state.entries, user_message_id):
                supervisor.state.unsaved.append(user_entry(text, user_message_id))
            await self.driver.drive(supervisor)

        return self._start(state, work)

    async def head_template(
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

    # -- a resume ------------------------------------------------------------------------

    async def resume(self, chat_id: str, principal: str, *, skip_echo: frozenset[str]) -> Run:
        """:meth:`Runner.resume <parkway.runner.engine.runner.Runner.resume>`."""
        self._refuse_if_closing()
        keys = chat_keys(chat_id)
        token = secrets.token_hex(16)
        claimed_at = time.perf_counter()
        claim = await self.store.claim_resume(
            keys, principal=principal, token=token, now_ms=self.now_ms(), lease_ms=self._lease_ms
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
        roles: frozenset[str],
        echo: frozenset[str],
    ) -> tuple[AnswerReport, Run | None]:
        """:meth:`Runner.answer_and_resume
        <parkway.runner.engine.runner.Runner.answer_and_resume>`."""
        self._refuse_if_closing()
        if not answers:
            return AnswerReport((), 0), await self.resume(chat_id, principal, skip_echo=frozenset())
        plan = self.settling.plan(chat_id, answers)
        if plan is not None:
            keys = chat_keys(chat_id)
            token = secrets.token_hex(16)
            claimed_at = time.perf_counter()
            claimed = await self.store.answer(
                keys,
                principal=principal,
                token=token,
                now_ms=self.now_ms(),
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
        report = await self.settling.answer(chat_id, principal, answers, roles=roles)
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
            return load_template_json(template_json, stored=True)
        except Exception:
            await self.store.commit(
                state.keys,
                token=state.token,
                seq=1,
                state="parked",
                model_calls=state.model_calls,
                now_ms=self.now_ms(),
                lease_ms=self._lease_ms,
                entries=(),
            )
            raise
