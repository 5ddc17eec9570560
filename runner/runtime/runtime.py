"""The runtime: an agent's chats run, parked, answered and resumed from Python, no HTTP.

What ``parkway serve`` does around the runner, for a script, a worker or a test: Redis
(the embedded one in a data folder when no URL is given), the model (the agent's, or one
swapped in), the runner, and the deadline sweeper, all started on entering ``async with``
and closed on leaving it::

    async with Runtime(agent) as rt:
        result = await rt.send("chat-1", "Book me a trip")
        call = result.call("pick_dates")
        result = await rt.answer("chat-1", call.id, {"from": "2026-05-01"}, resume=True)

Every guarantee is the runner's, the same as over HTTP: a settle is one atomic step in
Redis (the first writer wins; an identical repeat is accepted, a different one raises
:class:`~parkway.runner.errors.SettleConflictError`), a parked chat resumes in any
process on the same Redis (a second ``Runtime``, a server), and a call nobody answers is
settled ``timeout`` at its deadline by the sweeper of any runtime or server on that Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self, overload, runtime_checkable

from pydantic import BaseModel

from parkway.runner.agent import AgentFile
from parkway.runner.codemode import CodeMode
from parkway.runner.engine import Runner, RunnerConfig, Sweeper, SweepReport
from parkway.runner.errors import ModelError, StateError, TemplateError
from parkway.runner.events import Event
from parkway.runner.llm import Model, ModelCatalog, ModelSpec, parse_model_spec
from parkway.runner.mcp import McpTools
from parkway.runner.runtime.results import CallSummary, ChatView, TurnResult
from parkway.runner.store import EmbeddedRedis, RedisClient, chat_keys, connect, stored_messages

__all__ = ["DEFAULT_PRINCIPAL", "AgentSource", "Runtime"]

DEFAULT_PRINCIPAL = "local"
"""Who sends and answers when a call names nobody: the one user of a script or test."""


@runtime_checkable
class AgentSource(Protocol):
    """Anything that gives an agent file: an agent defined in code compiles to one."""

    def agent_file(self) -> AgentFile: ...


class Runtime:
    """Runs one agent's chats on Redis, with no HTTP (see the module doc).

    ``agent``: an :class:`~parkway.runner.agent.AgentFile` or anything with an
    ``agent_file()`` method (an agent defined in code). ``redis_url``: the Redis to use;
    None starts the embedded one in ``data_dir`` (a new temporary folder, removed on
    close, when that is None too; give a folder to keep parked chats across runs).
    ``model`` overrides the agent's model for every run: a model object (a test model)
    or a name such as ``"anthropic:claude-sonnet-4-6"`` (keys from ``environ``, by
    default the process environment, where MCP servers' headers are read too).
    ``principal`` is who sends and answers when a
    method is not told. ``clock`` (seconds since the epoch) drives leases and deadlines;
    ``sweep_interval_s`` is how often the sweeper looks for expired deadlines (None: no
    background sweeper; :meth:`sweep` sweeps once). ``code`` turns on ``execute_code``.
    """

    def __init__(
        self,
        agent: AgentFile | AgentSource,
        *,
        redis_url: str | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        model: Model | str | None = None,
        config: RunnerConfig | None = None,
        principal: str = DEFAULT_PRINCIPAL,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        sweep_interval_s: float | None = 0.25,
        code: CodeMode | None = None,
    ) -> None:
        self.agent = agent if isinstance(agent, AgentFile) else agent.agent_file()
        if not isinstance(self.agent, AgentFile):
            raise TypeError(
                f"Runtime needs an AgentFile or an object whose agent_file() returns one, "
                f"not {type(agent).__name__}"
            )
        if sweep_interval_s is not None and not sweep_interval_s > 0:
            raise ValueError(f"sweep_interval_s must be positive or None, not {sweep_interval_s}")
        self.principal = principal
        self.config = config or RunnerConfig()
        self.clock = clock
        self.sweep_interval_s = sweep_interval_s
        self.code = code
        self._url = redis_url
        self._data_dir = None if data_dir is None else Path(data_dir)
        self._models = _catalog(self.agent, model, environ)
        self._environ = environ
        _check_model(self._models, self.agent)
        self._embedded: EmbeddedRedis | None = None
        self._scratch: Path | None = None
        self._redis: RedisClient | None = None
        self._runner: Runner | None = None
        self._sweeper: Sweeper | None = None
        self._sweeping: asyncio.Task[None] | None = None

    # -- opening and closing ----------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Connect to Redis (starting the embedded one if need be), build the runner and
        start the sweeper. ``async with`` calls it."""
        if self._runner is not None:
            raise StateError("this Runtime is already started")
        try:
            url = self._url
            if url is None:
                folder = self._data_dir
                if folder is None:
                    # short: the embedded server's unix socket path must stay under ~100
                    self._scratch = folder = Path(tempfile.mkdtemp(prefix="parkway-"))
                self._embedded = EmbeddedRedis(folder)
                url = await asyncio.to_thread(self._embedded.start)
            self._url = url
            self._redis = connect(url)
            await self._redis.ping()
            if self.code is not None:
                await self.code.start()
            self._runner = Runner(
                self._redis,
                self._models.default,
                self.agent.template,
                config=self.config,
                clock=self.clock,
                models=self._models,
                code=self.code,
                mcp=McpTools(environ=self._environ),
            )
            self._sweeper = Sweeper(self._runner, on_timeout=self._runner.on_timeout)
            if self.sweep_interval_s is not None:
                self._sweeping = asyncio.create_task(
                    self._sweeper.run(self.sweep_interval_s), name="parkway-runtime-sweeper"
                )
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop the sweeper, let running turns finish (they persist), close the model
        clients, Redis, and the embedded server this runtime started. Idempotent."""
        sweeping, self._sweeping = self._sweeping, None
        if sweeping is not None:
            sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeping
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.aclose()
        await self._models.aclose()
        if self.code is not None:
            await self.code.close()
        redis, self._redis = self._redis, None
        if redis is not None:
            await redis.aclose()
        embedded, self._embedded = self._embedded, None
        if embedded is not None:
            # a scratch folder's server is this runtime's alone; a data folder's may be
            # shared with another process, which keeps it running
            await asyncio.to_thread(embedded.stop, force=self._scratch is not None)
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            await asyncio.to_thread(shutil.rmtree, scratch, True)

    @property
    def runner(self) -> Runner:
        """The runner (for what this class does not wrap: approvals across chats,
        artifacts, stop)."""
        if self._runner is None:
            raise StateError("the Runtime is not started: use 'async with Runtime(...)'")
        return self._runner

    @property
    def redis_url(self) -> str:
        """The Redis URL in use (the embedded server's unix socket when it runs one):
        another process opens ``Runtime(agent, redis_url=rt.redis_url)`` on the same
        chats."""
        if self._url is None or self._runner is None:
            raise StateError("the Runtime is not started: use 'async with Runtime(...)'")
        return self._url

    async def sweep(self) -> SweepReport:
        """Settle ``timeout`` every parked call whose deadline has passed, now (on the
        runtime's clock), instead of waiting for the background sweeper."""
        self.runner  # noqa: B018 - raises when not started
        assert self._sweeper is not None
        return await self._sweeper.sweep_once()

    # -- turns --------------------------------------------------------------------------

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        principal: str | None = None,
        message_id: str | None = None,
    ) -> TurnResult:
        """Send a user message and run the turn to its end or its park.

        A chat that does not exist yet is created, owned by ``principal``. Calls still
        pending in the chat are settled ``cancelled`` (reason
        ``superseded_by_user_message``) first. ``message_id`` makes a retry safe: the
        same id is taken once (:class:`~parkway.runner.errors.DuplicateMessageError`).
        """
        run = await self.runner.start_turn(
            chat_id, principal or self.principal, text, user_message_id=message_id
        )
        return TurnResult.of(chat_id, run.message_id, await run.collect())

    async def stream(
        self,
        chat_id: str,
        text: str,
        *,
        principal: str | None = None,
        message_id: str | None = None,
    ) -> AsyncIterator[Event]:
        """:meth:`send`, yielding the run's events as they happen. Leaving the loop early
        leaves the run going: it finishes and persists on its own."""
        run = await self.runner.start_turn(
            chat_id, principal or self.principal, text, user_message_id=message_id
        )
        async for event in run.events():
            yield event

    async def resume(self, chat_id: str, *, principal: str | None = None) -> TurnResult:
        """Continue a parked chat whose calls are all settled, to its end or its next
        park. Raises :class:`~parkway.runner.errors.NothingToResumeError` while a call is
        pending (or nothing is parked), :class:`~parkway.runner.errors.ChatBusyError`
        when another process is resuming it."""
        run = await self.runner.resume(chat_id, principal or self.principal)
        return TurnResult.of(chat_id, run.message_id, await run.collect())

    async def stream_resume(
        self, chat_id: str, *, principal: str | None = None
    ) -> AsyncIterator[Event]:
        """:meth:`resume`, yielding the run's events as they happen."""
        run = await self.runner.resume(chat_id, principal or self.principal)
        async for event in run.events():
            yield event

    # -- settling -----------------------------------------------------------------------

    @overload
    async def settle(
        self,
        chat_id: str,
        call_id: str,
        outcome: Mapping[str, Any],
        *,
        principal: str | None = ...,
        roles: frozenset[str] = ...,
        resume: Literal[False] = ...,
    ) -> CallSummary: ...
    @overload
    async def settle(
        self,
        chat_id: str,
        call_id: str,
        outcome: Mapping[str, Any],
        *,
        principal: str | None = ...,
        roles: frozenset[str] = ...,
        resume: Literal[True],
    ) -> TurnResult: ...
    async def settle(
        self,
        chat_id: str,
        call_id: str,
        outcome: Mapping[str, Any],
        *,
        principal: str | None = None,
        roles: frozenset[str] = frozenset(),
        resume: bool = False,
    ) -> CallSummary | TurnResult:
        """Record the outcome of a parked call, as the browser would
        (``POST /api/chats/{chat}/calls/{call}``): ``{"outcome": "output", "output": ...}``,
        ``"error"`` (with ``message``), ``"declined"``, ``"cancelled"``; for approvals
        ``"approved"`` (optionally with an edited ``input``) or ``"denied"`` (optionally
        with a ``reason``). The first settle wins, atomically; repeating it is accepted,
        another outcome raises :class:`~parkway.runner.errors.SettleConflictError`
        carrying the recorded one.

        Returns the settled call; with ``resume=True``, the result of resuming the chat
        once no call is left pending, or (calls still pending) a result with no events
        whose ``parked`` are the calls still waiting. ``roles``: the principal's, for an
        approval answered by someone other than the chat's owner.
        """
        who = principal or self.principal
        settled = await self.runner.settle(chat_id, who, call_id, outcome, roles=roles)
        if not resume:
            return CallSummary.of(settled.call)
        view = await self.chat(chat_id, principal=who)
        if view.pending:
            return TurnResult.waiting(chat_id, view.pending)
        return await self.resume(chat_id, principal=who)

    @overload
    async def answer(
        self, chat_id: str, call_id: str, output: Any, *, principal: str | None = ...,
        resume: Literal[False] = ...,
    ) -> CallSummary: ...  # fmt: skip
    @overload
    async def answer(
        self, chat_id: str, call_id: str, output: Any, *, principal: str | None = ...,
        resume: Literal[True],
    ) -> TurnResult: ...  # fmt: skip
    async def answer(
        self,
        chat_id: str,
        call_id: str,
        output: Any,
        *,
        principal: str | None = None,
        resume: bool = False,
    ) -> CallSummary | TurnResult:
        """Answer a client-tool call with its ``output`` (checked against the tool's
        output schema, if it has one): plain JSON in the shape the browser's widget
        sends (a ``choice`` returning ``str`` takes ``"Apollo"``, one returning a model
        ``{"project": "Apollo"}``), or an instance of the pydantic model the tool
        returns, sent as its JSON. See :meth:`settle` for ``resume``."""
        if isinstance(output, BaseModel):
            output = output.model_dump(mode="json", by_alias=True)
        outcome = {"outcome": "output", "output": output}
        if resume:
            return await self.settle(chat_id, call_id, outcome, principal=principal, resume=True)
        return await self.settle(chat_id, call_id, outcome, principal=principal)

    @overload
    async def approve(
        self, chat_id: str, call_id: str, *, input: Any = ..., principal: str | None = ...,
        roles: frozenset[str] = ..., resume: Literal[False] = ...,
    ) -> CallSummary: ...  # fmt: skip
    @overload
    async def approve(
        self, chat_id: str, call_id: str, *, input: Any = ..., principal: str | None = ...,
        roles: frozenset[str] = ..., resume: Literal[True],
    ) -> TurnResult: ...  # fmt: skip
    async def approve(
        self,
        chat_id: str,
        call_id: str,
        *,
        input: Any = None,
        principal: str | None = None,
        roles: frozenset[str] = frozenset(),
        resume: bool = False,
    ) -> CallSummary | TurnResult:
        """Approve an approval-gated call; ``input``, when given, is the edited input it
        runs with (only where the tool allows edits). See :meth:`settle` for ``resume``."""
        outcome: dict[str, Any] = {"outcome": "approved"}
        if input is not None:
            outcome["input"] = input
        if resume:
            return await self.settle(
                chat_id, call_id, outcome, principal=principal, roles=roles, resume=True
            )
        return await self.settle(chat_id, call_id, outcome, principal=principal, roles=roles)

    @overload
    async def deny(
        self, chat_id: str, call_id: str, *, reason: str | None = ...,
        principal: str | None = ..., roles: frozenset[str] = ..., resume: Literal[False] = ...,
    ) -> CallSummary: ...  # fmt: skip
    @overload
    async def deny(
        self, chat_id: str, call_id: str, *, reason: str | None = ...,
        principal: str | None = ..., roles: frozenset[str] = ..., resume: Literal[True],
    ) -> TurnResult: ...  # fmt: skip
    async def deny(
        self,
        chat_id: str,
        call_id: str,
        *,
        reason: str | None = None,
        principal: str | None = None,
        roles: frozenset[str] = frozenset(),
        resume: bool = False,
    ) -> CallSummary | TurnResult:
        """Deny an approval-gated call; the model gets a denial carrying ``reason``. See
        :meth:`settle` for ``resume``."""
        outcome = _with_reason("denied", reason)
        if resume:
            return await self.settle(
                chat_id, call_id, outcome, principal=principal, roles=roles, resume=True
            )
        return await self.settle(chat_id, call_id, outcome, principal=principal, roles=roles)

    @overload
    async def decline(
        self, chat_id: str, call_id: str, *, reason: str | None = ...,
        principal: str | None = ..., resume: Literal[False] = ...,
    ) -> CallSummary: ...  # fmt: skip
    @overload
    async def decline(
        self, chat_id: str, call_id: str, *, reason: str | None = ...,
        principal: str | None = ..., resume: Literal[True],
    ) -> TurnResult: ...  # fmt: skip
    async def decline(
        self,
        chat_id: str,
        call_id: str,
        *,
        reason: str | None = None,
        principal: str | None = None,
        resume: bool = False,
    ) -> CallSummary | TurnResult:
        """Settle a client-tool call ``declined`` (the human said "not now"). See
        :meth:`settle` for ``resume``."""
        outcome = _with_reason("declined", reason)
        if resume:
            return await self.settle(chat_id, call_id, outcome, principal=principal, resume=True)
        return await self.settle(chat_id, call_id, outcome, principal=principal)

    @overload
    async def cancel(
        self, chat_id: str, call_id: str, *, reason: str | None = ...,
        principal: str | None = ..., resume: Literal[False] = ...,
    ) -> CallSummary: ...  # fmt: skip
    @overload
    async def cancel(
        self, chat_id: str, call_id: str, *, reason: str | None = ...,
        principal: str | None = ..., resume: Literal[True],
    ) -> TurnResult: ...  # fmt: skip
    async def cancel(
        self,
        chat_id: str,
        call_id: str,
        *,
        reason: str | None = None,
        principal: str | None = None,
        resume: bool = False,
    ) -> CallSummary | TurnResult:
        """Settle a parked call ``cancelled`` (the human closed the widget). See
        :meth:`settle` for ``resume``."""
        outcome = _with_reason("cancelled", reason)
        if resume:
            return await self.settle(chat_id, call_id, outcome, principal=principal, resume=True)
        return await self.settle(chat_id, call_id, outcome, principal=principal)

    # -- reading ------------------------------------------------------------------------

    async def chat(self, chat_id: str, *, principal: str | None = None) -> ChatView:
        """The chat as stored: its messages and its parked calls with their outcomes.
        Another principal's chat, or none, raises
        :class:`~parkway.runner.errors.ChatNotFoundError`."""
        chat_keys(chat_id)  # a malformed id is refused before Redis is asked
        record = await self.runner.chat(chat_id, principal or self.principal)
        return ChatView(
            chat_id=chat_id,
            owner=record.owner or "",
            messages=stored_messages(record.entries),
            calls=tuple(CallSummary.of(call) for call in record.calls),
        )

    async def call(
        self, chat_id: str, call_id: str, *, principal: str | None = None
    ) -> CallSummary:
        """One parked call with its outcome (None while pending)."""
        found = await self.runner.call(chat_id, principal or self.principal, call_id)
        return CallSummary.of(found)


def _with_reason(name: str, reason: str | None) -> dict[str, Any]:
    outcome: dict[str, Any] = {"outcome": name}
    if reason is not None:
        outcome["reason"] = reason
    return outcome


def _check_model(models: ModelCatalog, agent: AgentFile) -> None:
    """Refuse at once, as ``parkway serve`` does at startup, a runtime whose model cannot
    be built here (a missing key names its variable) or that has no model at all."""
    spec = models.chosen(agent.template.llm)
    problem = models.problem(spec)
    if problem is not None:
        raise ModelError(problem)
    if spec is None and models.default is None and models.pinned is None:
        raise TemplateError(
            "no model: give the agent a model (an agent file's 'model', the template's "
            "'llm') or the Runtime one (model=...)"
        )


def _catalog(
    agent: AgentFile, model: Model | str | None, environ: Mapping[str, str] | None
) -> ModelCatalog:
    """The models of the runtime's runs: ``model`` when given (an object pinned for every
    run, or a name overriding the agent's), else the agent's, as the server chooses."""
    pinned: Model | None = None
    override: ModelSpec | None = None
    if isinstance(model, str):
        override = parse_model_spec(model, "model")
    elif model is not None:
        pinned = model
    return ModelCatalog(
        agent.model,
        default_spec=agent.spec,
        override=override,
        environ=environ,
        pinned=pinned,
    )
