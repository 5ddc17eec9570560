"""Tool execution and input validation for server tools.

A function tool's callable takes the input object, and optionally a :class:`ToolContext`
as a second argument; it may be sync (run in a worker thread) or async. It returns plain
JSON. (A function defined with ``@agent.tool`` is called through its binding in
runner/agent/functions.py, which validates the input into typed arguments first and
dumps the result to JSON after.) To show the model (and the user) an error message,
raise :class:`ToolError`; any other exception becomes a generic error result, so
internal details never leak.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from parkway.runner.agent.credentials import ConnectionUnavailableError, Credentials
from parkway.runner.agent.revisions import AgentStore
from parkway.runner.agent.template import AgentTemplate, ToolSpec
from parkway.runner.canonical import canonical_json
from parkway.runner.errors import ToolError, ToolNeedsInput
from parkway.runner.store import ArtifactStore

# ToolError lives with the runner's other errors (runner/errors.py); it is named here
# too because a tool's author reaches for it beside ToolContext.
__all__ = [
    "LIVE_CANCEL",
    "MAX_INPUT_ROUNDS",
    "TOO_MANY_ROUNDS",
    "LiveInput",
    "LiveQuestion",
    "ToolContext",
    "ToolError",
    "ToolNeedsInput",
    "ToolRun",
    "execute_tool",
    "input_problem",
]

# How many rounds of input one call may ask a person for (each round parks the call
# again under its id); a tool that asks once more ends with TOO_MANY_ROUNDS.
MAX_INPUT_ROUNDS = 10
TOO_MANY_ROUNDS = (
    f"the tool asked a person for input more than {MAX_INPUT_ROUNDS} times; "
    "Parkway stopped it there (it did not run to its end)"
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveQuestion:
    """A question for the chat's person that a running call waits for (an older MCP
    server's form elicitation during ``tools/call``): ``message`` and the form's
    ``requested_schema`` as the asker sent them, ``asker`` (who asks, for the card:
    ``{"server": ..., "tool": ...}``) and ``wait_s``, how long the call waits."""

    message: str
    requested_schema: Mapping[str, Any]
    asker: Mapping[str, str]
    wait_s: float


# What the asker gets when nobody answers: the wait ended, the worker is shutting down,
# or the call runs where no person watches (an MCP elicitation's "cancel").
LIVE_CANCEL: Mapping[str, Any] = {"action": "cancel"}

LiveInput = Callable[[LiveQuestion], Awaitable[Mapping[str, Any]]]
"""Asks the person a :class:`LiveQuestion` and waits (bounded by its ``wait_s``) for the
answer: ``{"action": "accept", "content": {...}}``, ``{"action": "decline"}`` or
:data:`LIVE_CANCEL`."""


@dataclass(frozen=True)
class ToolContext:
    """What a server tool is told about its call, made by the runner for each call.

    A tool defined with ``@agent.tool`` receives it as its first parameter when that is
    typed ``ToolContext`` (``def lookup(ctx: ToolContext, city: str)``); a function named
    by ``ref`` in an agent file, as its second positional argument (``def lookup(data,
    ctx)``). docs/python-api.md and docs/protocol.md ("The agent template") list the same.

    Who and what:

    - ``chat_id``: the chat the call belongs to (the id the client chose).
    - ``principal``: who the chat belongs to, the session's principal id (``usr_…``
      for Parkway's own sessions, whatever the authenticator resolves otherwise). Key
      per-user data by it; it is the identity ``access_token`` uses.
    - ``tool_call_id``: the model's id of this call (``toolCallId`` on the wire and
      in the chat's history). A tool a program calls from ``execute_code`` gets the
      ``execute_code`` call's id.
    - ``tool_name``: the tool's name in the template (one callable may serve several).

    Connections, by reference: a ``request_connection`` result gives the model a
    ``connection_id``, never a token; the tool takes that id as an argument and calls
    :meth:`access_token`, which looks the token up (and refreshes it) on the server, for
    this ``principal`` only. The token never reaches the model, the browser or a log.

    What the server lends the tool (None where the server has none, or for a tool an
    ``execute_code`` program calls, which gets ``credentials``, ``agents`` and
    ``template`` only):

    - ``credentials``: the connection store behind :meth:`access_token`; call that
      rather than this.
    - ``agents``: the agent's revisions (:class:`~parkway.runner.agent.revisions.AgentStore`),
      which the platform ops read and commit.
    - ``template``: the template the run uses
      (:class:`~parkway.runner.agent.template.AgentTemplate`; ``template.raw`` is its
      JSON): brokered tool calls look their tools up in it.
    - ``artifacts``: the chat's artifacts
      (:class:`~parkway.runner.store.artifacts.ArtifactStore`), used by the code ops; a
      tool's own output over the artifact threshold is kept there by the runner, so a tool
      returns large results as it would small ones.
    - ``code``: the code sandbox (a :class:`~parkway.runner.codemode.runtime.CodeMode`,
      typed ``object`` here because the agent layer sits below code mode), used by
      ``execute_code``.
    - ``parts``: the data parts :meth:`publish` queued, in order; the runner puts
      them on the stream after the tool's output. Use :meth:`publish`, not this list.

    A ``needs_approval`` function that takes a context gets one with ``chat_id``,
    ``principal``, ``tool_call_id``, ``tool_name`` and ``template`` only: it decides
    before the tool runs, and nothing is lent yet.

    Logging: the context has no logger. Use ``logging.getLogger(__name__)``; a record
    made while the tool runs carries the run's ``chat_id`` and ``run_id`` in Parkway's
    JSON log lines (:mod:`parkway.runner.ops.logcontext`). Log no input, output or token.

    Cancellation: the context has no cancellation signal. A call is bounded by its
    tool's ``timeout_s`` (default 30 s): an async tool is cancelled there
    (``CancelledError`` at its next ``await``) and the model gets a timeout error; a
    sync tool runs in a worker thread, which Python cannot interrupt, so it runs on
    and its result is dropped. A worker shutting down lets running turns finish for
    its grace period, then cancels them (async tools as above). A user's stop request
    cuts the model's stream short and ends the run before its next model step; a tool
    already running finishes. A worker that dies during a call leaves the model a
    "result unknown" error, never a silent second run.
    """

    chat_id: str
    principal: str
    tool_call_id: str
    tool_name: str
    credentials: Credentials | None = None
    agents: AgentStore | None = None
    template: AgentTemplate | None = None
    artifacts: ArtifactStore | None = None
    code: object | None = None
    parts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # A call run again after it parked asking for input (it raised ToolNeedsInput): its
    # private continuation and the settled outcome of its widget (``{"outcome":
    # "output", "output": ...}``, ``declined``, ``cancelled``, ...). None otherwise.
    continuation: Mapping[str, Any] | None = None
    answer: Mapping[str, Any] | None = None
    # How many rounds of a person's input the call has had answered (0 on its first
    # run): a tool that asks again past MAX_INPUT_ROUNDS gets an error instead.
    input_round: int = 0
    # Asks the person a question while the call runs and waits a bounded time for the
    # answer (runner/engine/live.py); None where nobody watches the run (it is made for
    # a run streamed to its person). Use :meth:`ask_live`.
    live_input: LiveInput | None = None

    async def ask_live(self, question: LiveQuestion) -> Mapping[str, Any]:
        """The person's answer to ``question`` (see :data:`LiveInput`), or
        :data:`LIVE_CANCEL` when nobody can answer it now."""
        if self.live_input is None:
            return LIVE_CANCEL
        return await self.live_input(question)

    def publish(self, name: str, data: dict[str, Any]) -> None:
        """Put a ``data-<name>`` part on the run's stream after the tool's output."""
        self.parts.append((name, dict(data)))

    async def access_token(self, connection_id: str, *, scopes: Sequence[str] = ()) -> str:
        """The access token of the caller's connection ``connection_id`` (a
        ``request_connection`` result names it). Raises
        :class:`parkway.runner.agent.credentials.ConnectionUnavailableError`, whose message tells
        the model what to do; a tool normally lets it propagate."""
        if self.credentials is None:
            raise ConnectionUnavailableError(
                "this server has no connection store configured",
                reason="not_found",
                provider=None,
            )
        return await self.credentials.access_token(
            self.principal, connection_id, scopes=tuple(scopes)
        )


@dataclass(frozen=True)
class ToolRun:
    """What a server tool produced: ``output`` when ``error`` is None."""

    output: Any = None
    error: str | None = None
    parts: tuple[tuple[str, dict[str, Any]], ...] = ()
    # ``output`` as canonical JSON, encoded (measured for the size limit; kept so an
    # artifact of it is not encoded twice)
    encoded: bytes | None = None
    # The tool asked for a person's input instead of finishing: the call parks
    needs_input: ToolNeedsInput | None = None


_VALIDATORS: dict[int, tuple[Mapping[str, Any], Draft202012Validator]] = {}


def _validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator per schema object (templates are cached, so their schemas live on)."""
    cached = _VALIDATORS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    validator = Draft202012Validator(schema)
    if len(_VALIDATORS) > 4096:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


def input_problem(spec: ToolSpec, tool_input: Any) -> str | None:
    """A deterministic message saying why ``tool_input`` is not valid for ``spec``."""
    try:
        validator = _validator(spec.input_schema)
        canonical_json(tool_input)
    except Exception:
        return f"input for tool {spec.name!r} is not plain JSON"
    errors = sorted(
        validator.iter_errors(tool_input),
        key=lambda e: ([str(p) for p in e.absolute_path], e.message),
    )
    if not errors:
        # A tool defined in Python checks what its typed arguments accept beyond the
        # schema (validators, formats), so the model hears of that here as well.
        problem = spec.check_input(tool_input) if spec.check_input is not None else None
        return None if problem is None else f"invalid input for tool {spec.name!r} at {problem}"
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(root)"
    return f"invalid input for tool {spec.name!r} at {where}: {first.message}"


def _wants_context(func: Callable[..., Any]) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(func).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2


async def execute_tool(
    spec: ToolSpec, tool_input: Mapping[str, Any], ctx: ToolContext, *, max_bytes: int
) -> ToolRun:
    """Run a server tool with a timeout; never raises for the tool's own failures."""
    func = spec.func
    if func is None:
        return ToolRun(error=f"tool {spec.name!r} has no server implementation")
    args: tuple[Any, ...] = (tool_input, ctx) if _wants_context(func) else (tool_input,)
    try:
        async with asyncio.timeout(spec.timeout_s):
            if inspect.iscoroutinefunction(func):
                output = await func(*args)
            else:
                output = await asyncio.to_thread(func, *args)
    except TimeoutError:
        return ToolRun(error=f"tool {spec.name!r} timed out after {spec.timeout_s:g}s")
    except ToolNeedsInput as exc:
        if ctx.input_round >= MAX_INPUT_ROUNDS:
            return ToolRun(error=TOO_MANY_ROUNDS)
        return ToolRun(needs_input=exc)
    except ToolError as exc:
        return ToolRun(error=str(exc)[:2000] or f"tool {spec.name!r} failed")
    except Exception:
        log.exception("tool %s raised (chat %s, call %s)", spec.name, ctx.chat_id, ctx.tool_call_id)
        return ToolRun(error=f"tool {spec.name!r} failed with an internal error")
    try:
        encoded = canonical_json(output).encode()
    except Exception:
        return ToolRun(error=f"tool {spec.name!r} returned a value that is not plain JSON")
    if len(encoded) > max_bytes:
        return ToolRun(
            error=f"tool {spec.name!r} returned {len(encoded)} bytes, over the {max_bytes} limit"
        )
    return ToolRun(output=output, parts=tuple(ctx.parts), encoded=encoded)
