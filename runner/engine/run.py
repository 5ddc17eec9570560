"""A run and its settings: what a turn or a resume is while it executes.

A :class:`Run` is handed to whoever started it; its events come from the run's
:class:`~parkway.runner.engine.supervisor.RunSupervisor`, which also writes them to the chat's event
log. :class:`RunState` is what the run's code reads and changes as it goes.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from parkway.runner.agent import AgentTemplate
from parkway.runner.events import Event
from parkway.runner.parking import ParkedCall
from parkway.runner.store import AddressQuotas, ChatKeys, ModelView, Quotas

__all__ = ["Emit", "Run", "RunState", "RunnerConfig", "new_id"]


@dataclass(frozen=True)
class RunnerConfig:
    """Runner limits and defaults (the transport's settings fill these in)."""

    chat_ttl_s: int = 7 * 24 * 3600
    lease_s: float = 60.0
    max_steps: int = 25
    # Steps in a row whose every tool call was refused before the run gives up.
    max_invalid_steps: int = 3
    max_output_bytes: int = 256 * 1024
    # A server tool's output over this many bytes (of JSON) is kept as an artifact, and
    # the model sees its reference (runner/store/artifacts.py).
    artifact_threshold_bytes: int = 32 * 1024
    approval_deadline_s: float = 15 * 60
    client_deadline_s: float = 15 * 60
    connection_deadline_s: float = 10 * 60
    # Whether ops that run code (execute_code, save_function) are approved by someone
    # other than the requester unless their entry allows self-approval: on any server but
    # a local playground, whose one user is the operator (runner/engine/triage.py).
    separate_approvals: bool = False
    follow_quiet_s: float = 5.0  # a follower's read and liveness check without wake-ups
    # How long the event log keeps a run that ended (it is replayable from the history;
    # a follower still reading it has this long): runner/store/scripts/_functions.py, log_append.
    log_keep_s: int = 600
    # How long a chat's audit trail keeps an entry (runner/store/audit.py); it outlives the
    # chat's own keys.
    audit_keep_s: int = 90 * 24 * 3600
    # What one principal may store (runner/store/usage.py); None: no quotas.
    quotas: Quotas | None = None
    # What the principals of one address may store together, and each one's address
    # (runner/store/addresses.py; the transport's anonymous sessions); None: not counted.
    addresses: AddressQuotas | None = None
    # How long a chat's artifacts live after their write or the chat's last turn (at
    # most chat_ttl_s; None: chat_ttl_s).
    artifact_ttl_s: int | None = None
    # followers' reads in flight at once on a worker (the rest of its Redis connections
    # stay free for the runs' own commands)
    follower_reads: int = 16


class Run:
    """A running turn or resume, as the caller that started it sees it.

    :meth:`events` yields what the run reports, in this process, from ``queue`` (its
    supervisor's, which closes it with ``None``). The same events go to the chat's event
    log in Redis, which HTTP responses follow and which any worker, or a reconnecting
    browser, reads; ``log_start`` resolves to the id of the run's first entry there.
    """

    def __init__(self, message_id: str, queue: asyncio.Queue[Event | None]) -> None:
        self.message_id = message_id
        self.task: asyncio.Task[None] | None = None
        self.log_start: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        # A run nobody follows through the log (a background resume, a test collecting
        # its events) may never look at a failed log start: mark it seen, so asyncio
        # does not report "Future exception was never retrieved".
        self.log_start.add_done_callback(_seen)
        self._queue = queue

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
class RunState:
    keys: ChatKeys
    chat_id: str
    principal: str
    token: str
    message_id: str
    template: AgentTemplate
    model_calls: int
    entries: list[dict[str, Any]]
    parked_ids: list[str] = field(default_factory=list)
    # The parked step's calls, when the claim already brought them (a resume).
    parked_calls: list[ParkedCall] | None = None
    skip_echo: frozenset[str] = frozenset()
    unsaved: list[dict[str, Any]] = field(default_factory=list)
    # Set once the parked ids handed over by the claim are consumed: the next commit
    # clears them together with the results it appends.
    clear_parked: bool = False
    user_message_id: str | None = None
    # The run ends without the turn's answer (the model could not answer, or a stop came
    # before it said anything): its last commit clears the duplicate guard, so the
    # turn's user message may be sent again as its retry.
    retry_open: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    consumer: asyncio.Task[None] | None = None
    # How many commits and log batches the run has sent (each carries its number, so a
    # replay of one whose reply was lost is recognised by the script).
    commits: int = 0
    log_batches: int = 0
    # The model's view of the history, grown as the run appends (not rebuilt per step).
    view: ModelView = field(default_factory=ModelView)
    # For logs, metrics and traces (runner/ops/telemetry.py): the run's own id (never the
    # lease token), how it started, the trace it continues (a resume continues the turn
    # that parked: an OpenTelemetry context, None to start one), and when its resume
    # was claimed (perf_counter; cleared once its next model request is sent).
    run_id: str = field(default_factory=lambda: new_id("run"))
    start: Literal["turn", "resume"] = "turn"
    trace_parent: Any = None
    claimed_at: float | None = None


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(12)}"


Emit = Callable[[Event], None]
"""Reports an event of the run (to its caller and to the chat's event log)."""


def _seen(future: asyncio.Future[str]) -> None:
    if not future.cancelled():
        future.exception()
