"""Live questions: a running call asks the chat's person, and waits a bounded time.

Most questions for a person park the call (runner/parking.py). One kind cannot: an older
(2025-11-25) MCP server's form elicitation in the middle of a ``tools/call``, which the
server holds open for the answer (runner/mcp/input.py). For such a question the engine
gives the call's :class:`~parkway.runner.agent.ToolContext` a ``live_input`` made by
:meth:`LiveQuestions.asker`, only for a run streamed to its person. Asking:

1. stores the question (:class:`~parkway.runner.store.LiveStore`: whose, which call, the
   form's schema, the deadline ``wait_s`` from now);
2. puts it on the run's stream as the data part ``parkway-live-input`` (its id the
   question's ``liveId``): ``{"liveId", "toolCallId", "asker", "message",
   "requestedSchema", "deadline", "state": "open"}``; the chat's page shows it as a
   form, and the person answers with ``POST /api/chats/{chat}/calls/{call}/live/{liveId}``
   (:meth:`LiveQuestions.answer`, on any worker);
3. polls the question every ``poll_s`` until an answer wins or the deadline passes, then
   puts the same part again with ``state`` ``answered`` (and the ``action``) or
   ``expired``, and returns the answer (or :data:`~parkway.runner.agent.LIVE_CANCEL`).

The wait is live only: it is not in the chat's history, and a worker that dies during it
takes it along (the call's result is then unknown, as for any call cut short; answers
posted after are refused, runner/store/live.py). Nothing about it is durable, which is
why a server that can ask in the call's result (2026-07-28) parks instead.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from parkway.runner.agent import LIVE_CANCEL, LiveInput, LiveQuestion
from parkway.runner.canonical import canonical_json
from parkway.runner.engine.run import Emit, RunState
from parkway.runner.errors import (
    CallNotFoundError,
    InvalidOutcomeError,
    LiveQuestionClosedError,
)
from parkway.runner.events import DataPublished
from parkway.runner.store import LiveStore, chat_keys, check_call_id

__all__ = ["LIVE_ID", "LIVE_PART", "MAX_LIVE_ANSWER_BYTES", "LiveQuestions"]

log = logging.getLogger(__name__)

# The data part a live question travels as (AI SDK ``data-parkway-live-input``; AG-UI
# the ``parkway.data`` CUSTOM event with this name).
LIVE_PART = "parkway-live-input"
# An answer is a small form's content.
MAX_LIVE_ANSWER_BYTES = 64 * 1024
_ACTIONS = ("accept", "decline", "cancel")
# A question's id: "lq_" and 16 URL-safe characters (12 random bytes).
LIVE_ID = re.compile(r"^lq_[A-Za-z0-9_-]{16}$")


def _now_ms() -> int:
    return int(time.time() * 1000)


class LiveQuestions:
    """Asks and answers live questions (see the module doc)."""

    def __init__(
        self,
        store: LiveStore,
        *,
        poll_s: float = 0.25,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.store = store
        self.poll_s = poll_s
        self.clock = clock

    def asker(self, state: RunState, call_id: str, emit: Emit) -> LiveInput:
        """The ``live_input`` of the call ``call_id`` of the run ``state``."""

        async def ask(question: LiveQuestion) -> Mapping[str, Any]:
            return await self._ask(state, call_id, emit, question)

        return ask

    async def _ask(
        self, state: RunState, call_id: str, emit: Emit, question: LiveQuestion
    ) -> Mapping[str, Any]:
        live_id = "lq_" + secrets.token_urlsafe(12)
        now = self.clock()
        deadline = now + int(question.wait_s * 1000)
        schema = dict(question.requested_schema)
        await self.store.open(
            state.keys, live_id, principal=state.principal, call=call_id, schema=schema,
            now_ms=now, deadline_ms=deadline,
        )  # fmt: skip
        part: dict[str, Any] = {
            "liveId": live_id,
            "toolCallId": call_id,
            "asker": dict(question.asker),
            "message": question.message,
            "requestedSchema": schema,
            "deadline": deadline,
            "state": "open",
        }
        emit(DataPublished(LIVE_PART, part, part_id=live_id))
        answer: Any = None
        try:
            while self.clock() < deadline:
                found, answer = await self.store.poll(state.keys, live_id, self.clock())
                if found != "open":
                    break
                await asyncio.sleep(self.poll_s)
        finally:
            # an answer that won just before the deadline is still read; after it, none
            # can win (and a cancelled wait closes the question the same way)
            answer = await asyncio.shield(self.store.close(state.keys, live_id))
            if answer is None:
                emit(DataPublished(LIVE_PART, {**part, "state": "expired"}, part_id=live_id))
            else:
                closed = {**part, "state": "answered", "action": answer.get("action")}
                emit(DataPublished(LIVE_PART, closed, part_id=live_id))
        return answer if isinstance(answer, Mapping) else LIVE_CANCEL

    async def answer(
        self, chat_id: str, principal: str, call_id: str, live_id: str, body: Any
    ) -> Mapping[str, Any]:
        """The person's answer to a live question: ``{"action": "accept", "content":
        {...}}`` (checked against the question's form), ``{"action": "decline"}`` or
        ``{"action": "cancel"}``. Raises :class:`CallNotFoundError` (no such question of
        theirs), :class:`InvalidOutcomeError` (not such an answer) and
        :class:`LiveQuestionClosedError` (answered already, or the wait is over)."""
        keys = chat_keys(chat_id)
        check_call_id(call_id)
        if not LIVE_ID.fullmatch(live_id):
            raise CallNotFoundError("no such live question")
        record = await self.store.record(keys, live_id)
        if record is None or record.principal != principal or record.call != call_id:
            raise CallNotFoundError(f"no live question {live_id!r} of this call")
        answer = _checked(body, record.schema)
        won = await self.store.answer(
            keys, live_id, principal=principal, call=call_id, answer=answer, now_ms=self.clock()
        )
        if won == "missing":
            raise CallNotFoundError(f"no live question {live_id!r} of this call")
        if won == "answered":
            raise LiveQuestionClosedError("this question was answered already")
        if won == "expired":
            raise LiveQuestionClosedError(
                "this question's wait is over: the call went on without it"
            )
        return answer


def _checked(body: Any, schema: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as an answer to a question with the form ``schema``, or
    :class:`InvalidOutcomeError` saying why it is not one."""
    if not isinstance(body, Mapping) or body.get("action") not in _ACTIONS:
        raise InvalidOutcomeError('an answer is {"action": "accept" | "decline" | "cancel"}')
    action = body["action"]
    extra = set(body) - {"action", "content"}
    if extra:
        raise InvalidOutcomeError(f"an answer has no field {sorted(extra)[0][:64]!r}")
    if action != "accept":
        if "content" in body:
            raise InvalidOutcomeError(f"a {action} carries no content")
        return {"action": action}
    content = body.get("content")
    if not isinstance(content, Mapping):
        raise InvalidOutcomeError("an accept carries the form's content, an object")
    try:
        encoded = canonical_json(content)
    except Exception:
        raise InvalidOutcomeError("the content is not plain JSON") from None
    if len(encoded) > MAX_LIVE_ANSWER_BYTES:
        raise InvalidOutcomeError(f"the content is over {MAX_LIVE_ANSWER_BYTES} bytes")
    try:
        errors = sorted(
            Draft202012Validator(dict(schema)).iter_errors(content),
            key=lambda e: [str(p) for p in e.absolute_path],
        )
    except SchemaError:
        log.warning("a live question's form has an invalid schema; its answer is refused")
        raise InvalidOutcomeError("the question's form cannot be checked") from None
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        raise InvalidOutcomeError(
            f"the content does not fit the form at {where}: {errors[0].message}"
        )
    return {"action": "accept", "content": dict(content)}
