"""Settling: recording the outcome of parked calls, and matching a client's answers.

The first writer of a call's outcome wins, atomically in Redis (the SETTLE script); an
identical repeat is accepted, a different one is refused with the winner's outcome.
Answers a client sends (the AI SDK resends its whole history) are matched to pending
calls by toolCallId, then by parkedCallKey; anything else never reaches the model.

:class:`Settling` is the component the :class:`~parkway.runner.engine.runner.Runner` settles
through; it tells its owner when a settle leaves a chat with no call pending (``on_all_settled``).
:class:`AutoResume` is what the runner does then: an agent with the ``auto`` resume
policy continues without waiting for a client's request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from parkway.runner.canonical import canonical_json, parked_call_key
from parkway.runner.engine.run import Run
from parkway.runner.errors import (
    AnswerMismatchError,
    ApprovalByOthersError,
    CallNotFoundError,
    ChatBusyError,
    ChatNotFoundError,
    NothingToResumeError,
    NotPlainJSONError,
    ParkwayError,
    SettleConflictError,
    ShuttingDownError,
)
from parkway.runner.ops import CALLS_SETTLED, settle_span
from parkway.runner.outcomes import normalize_outcome
from parkway.runner.parking import ParkedCall, may_answer
from parkway.runner.store import AuditSource, ChatKeys, ChatStore, chat_keys, settle_audit

__all__ = [
    "AllSettled",
    "Answer",
    "AnswerPlan",
    "AnswerReport",
    "AutoResume",
    "SettleListener",
    "SettleResult",
    "Settled",
    "Settling",
    "count_settle",
]

log = logging.getLogger(__name__)


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
class AnswerPlan:
    """Answers matched to calls of a chat's parked step (``parked_ids``), each with its
    judged outcome: what the ANSWER script writes (:meth:`Settling.plan`)."""

    chat_id: str
    parked_ids: tuple[str, ...]
    outcomes: list[tuple[ParkedCall, dict[str, Any]]]

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(call.tool_call_id for call, _ in self.outcomes)


@dataclass(frozen=True)
class SettleResult:
    call: ParkedCall
    fresh: bool
    pending: int | None = None


@dataclass(frozen=True)
class Settled:
    """A call this worker has just settled (the winner of the settle), as listeners see
    it. ``by`` is who recorded the outcome: ``client`` (the browser) or ``server``;
    ``source`` where the decision came from, as its audit entry says."""

    chat_id: str
    call: ParkedCall
    by: Literal["client", "server"]
    source: AuditSource = "browser"


SettleListener = Callable[[Settled], Awaitable[None]]

AllSettled = Callable[[str, ParkedCall], None]
"""``on_all_settled(chat_id, call)``: a settle this worker won left no call of the chat
pending; ``call`` is the call it settled (its ``auto_resume`` says whether the chat's
agent continues without a client request)."""


class Settling:
    """Settles parked calls and matches a client's answers to them, through ``store``.

    ``listeners`` are awaited after each settle this worker wins (for example, the
    connect flow forgets a call's OAuth ``state`` once the user cancels it); a
    listener's failure is logged and never undoes the settle. ``max_output_bytes``
    bounds an output or edited input (canonical JSON).
    """

    def __init__(
        self,
        store: ChatStore,
        *,
        max_output_bytes: int,
        on_all_settled: AllSettled | None = None,
    ) -> None:
        self.store = store
        self.max_output_bytes = max_output_bytes
        self.on_all_settled = on_all_settled
        self.listeners: list[SettleListener] = []

    async def settle(
        self,
        chat_id: str,
        principal: str,
        tool_call_id: str,
        outcome: Mapping[str, Any],
        *,
        by: Literal["client", "server"] = "client",
        source: AuditSource | None = None,
        roles: frozenset[str] = frozenset(),
    ) -> SettleResult:
        """Record the outcome of one parked call. The first writer wins; an identical
        repeat returns the same result, a different one raises
        :class:`SettleConflictError` carrying the winner's outcome. The winner's audit
        entry names ``principal`` and ``source`` (by default ``browser`` for a client's
        settle, ``server`` for the server's).

        A client (``principal``, holding ``roles``) settles a call of its own chat, or
        an approval whose policy lets it answer (:func:`may_answer`); such an approval's
        requester is refused with :class:`ApprovalByOthersError`, and its outcome names
        who decided (``by``).

        One round trip when this worker knows the call's record (it parked the call, or
        read it lately): the outcome is judged by the record, and SETTLE checks the
        chat's owner and the call's existence itself. Otherwise the record is read first.
        """
        keys = chat_keys(chat_id)
        source = source or ("browser" if by == "client" else "server")
        known = self.store.known_calls.recall(chat_id, tool_call_id)
        if known is not None and known.for_others and by == "client":
            # The record (immutable) names the requester, who owns the chat: it decides.
            self._check_answerer(known, principal, roles, known.requester or "")
            with settle_span(known, source):
                return await self._settle_one(
                    keys, known, outcome, by=by, who=principal, source=source, signer=principal
                )
        if known is not None:
            try:
                normalized = normalize_outcome(
                    known, outcome, by=by, max_bytes=self.max_output_bytes
                )
            except ParkwayError:
                known = None  # judged below as before (a repeat of a server outcome, say)
            else:
                with settle_span(known, source):
                    return await self._write(
                        keys,
                        known,
                        outcome,
                        normalized,
                        principal,
                        by=by,
                        who=principal,
                        source=source,
                    )
        call = await self.call(chat_id, principal, tool_call_id, roles=roles)
        signer = None
        if call.for_others and by == "client":
            self._check_answerer(call, principal, roles, call.requester or "")
            signer = principal
        with settle_span(call, source):
            return await self._settle_one(
                keys, call, outcome, by=by, who=principal, source=source, signer=signer
            )

    async def call(
        self,
        chat_id: str,
        principal: str,
        tool_call_id: str,
        *,
        roles: frozenset[str] = frozenset(),
    ) -> ParkedCall:
        """One parked call of ``principal``'s chat, with its outcome; or an approval of
        another chat that ``principal`` (holding ``roles``) may answer. Anything else
        reads as missing."""
        owner, calls = await self.store.calls(chat_keys(chat_id), [tool_call_id])
        if owner is None:
            raise ChatNotFoundError("no such chat")
        if owner != principal and (
            not calls or may_answer(calls[0], principal, roles, owner) != "yes"
        ):
            raise ChatNotFoundError("no such chat")
        if not calls:
            raise CallNotFoundError(f"no parked call {tool_call_id!r} in this chat")
        return calls[0]

    @staticmethod
    def _check_answerer(
        call: ParkedCall, principal: str, roles: frozenset[str], owner: str
    ) -> None:
        """Refuse a client that may not answer ``call``: its requester (403), anyone
        else it is none of (the chat reads as missing)."""
        verdict = may_answer(call, principal, roles, owner)
        if verdict == "self":
            who = (
                "someone else"
                if call.self_approval is False
                else f"a principal with the role {call.approvers!r}"
            )
            raise ApprovalByOthersError(
                f"call {call.tool_call_id!r} is an approval for {who} to answer; "
                "its requester cannot answer it"
            )
        if verdict == "no":
            raise ChatNotFoundError("no such chat")

    async def _settle_one(
        self,
        keys: ChatKeys,
        call: ParkedCall,
        outcome: Mapping[str, Any],
        *,
        by: Literal["client", "server"],
        who: str,
        source: AuditSource,
        signer: str | None = None,
    ) -> SettleResult:
        """Settle ``call`` (read already, its owner or answerer checked). ``signer``: who
        decides an approval answered for someone else; the outcome records it (``by``),
        so every wire and the chat say who decided."""
        if call.outcome is not None:
            # Already settled: an identical repeat is fine; anything else conflicts.
            if self._same(call, outcome, call.outcome, signer):
                return SettleResult(call, fresh=False)
            raise SettleConflictError("the call is already settled", dict(call.outcome))
        normalized = normalize_outcome(call, outcome, by=by, max_bytes=self.max_output_bytes)
        if signer is not None:
            normalized["by"] = signer
        return await self._write(
            keys, call, outcome, normalized, "", by=by, who=who, source=source, signer=signer
        )

    async def _write(
        self,
        keys: ChatKeys,
        call: ParkedCall,
        outcome: Mapping[str, Any],
        normalized: Mapping[str, Any],
        principal: str,
        *,
        by: Literal["client", "server"],
        who: str,
        source: AuditSource,
        signer: str | None = None,
    ) -> SettleResult:
        """SETTLE ``normalized`` for ``call`` (in ``principal``'s chat, when given), and
        tell the listeners if this write won (its audit entry: ``who``, ``source``)."""
        reply = await self.store.settle(
            keys,
            call.tool_call_id,
            canonical_json(normalized),
            principal=principal,
            audit=settle_audit(call, normalized, who=who, source=source),
        )
        if reply.status == "settled":
            settled = call.with_outcome(normalized)
            for listener in self.listeners:
                try:
                    await listener(Settled(keys.chat_id, settled, by, source))
                except Exception:
                    log.exception("settle listener failed (chat %s)", keys.chat_id)
            if reply.pending == 0 and self.on_all_settled is not None:
                self.on_all_settled(keys.chat_id, settled)
            return SettleResult(settled, fresh=True, pending=reply.pending)
        if reply.status in {"same", "conflict"}:
            existing = json.loads(reply.existing)
            if reply.status == "same" or self._same(call, outcome, existing, signer):
                return SettleResult(call.with_outcome(existing), fresh=False)
            raise SettleConflictError("the call is already settled", existing)
        if reply.status == "forbidden":
            raise ChatNotFoundError("no such chat")
        raise CallNotFoundError(f"no parked call {call.tool_call_id!r} in this chat")

    def _same(
        self,
        call: ParkedCall,
        outcome: Mapping[str, Any],
        existing: Any,
        signer: str | None = None,
    ) -> bool:
        """Whether ``outcome`` repeats the recorded ``existing`` one: identical as sent,
        or once checked (as the server would record it, signed by ``signer``)."""
        try:
            if canonical_json(dict(outcome)) == canonical_json(existing):
                return True
            normalized = normalize_outcome(
                call, outcome, by="server", max_bytes=self.max_output_bytes
            )
            if signer is not None:
                normalized["by"] = signer
            return canonical_json(normalized) == canonical_json(existing)
        except ParkwayError:
            return False

    async def answer(
        self,
        chat_id: str,
        principal: str,
        answers: Sequence[Answer],
        *,
        roles: frozenset[str] = frozenset(),
    ) -> AnswerReport:
        """Settle the pending calls that ``answers`` answer; ignore the rest.

        The answers come from the chat's owner (``principal``, holding ``roles``): one
        that answers an approval its policy leaves to someone else is refused with
        :class:`ApprovalByOthersError` before anything is settled.

        Matching: exact toolCallId first, then (for answers that allow it) parkedCallKey,
        first-in-first-out among identical pending calls. An answer that names a pending
        call but carries different input is refused with :class:`AnswerMismatchError`;
        an answer for a call that is not pending never reaches the model.
        """
        keys = chat_keys(chat_id)
        owner, pending = await self.store.calls(keys)
        if owner is None or owner != principal:
            raise ChatNotFoundError("no such chat")
        # An answer naming a call this chat has (settled already) is that call's answer,
        # never a stand-in for another pending call with the same key.
        # (Looked up only for answers that could otherwise take a pending call's place.)
        candidates = self._stand_ins(pending, answers)
        known = await self.store.existing_calls(keys, candidates) if candidates else set()
        matched = self._match(pending, answers, known)
        for call, _ in matched:
            if call.for_others:
                self._check_answerer(call, principal, roles, owner)
        left: int | None = len(pending)
        for call, answer in matched:
            result = await self._settle_one(
                keys,
                call,
                answer.outcome,
                by="client",
                who=principal,
                source="browser",
                signer=principal if call.for_others else None,
            )
            left = result.pending  # SETTLE counts what is still pending; a repeat does not
        if left is None:
            left = await self.store.pending_count(keys)
        return AnswerReport(settled=tuple(c.tool_call_id for c, _ in matched), pending=left)

    def plan(self, chat_id: str, answers: Sequence[Answer]) -> AnswerPlan | None:
        """The answers matched against the chat's parked step as this worker parked it,
        and their outcomes judged, without reading anything; None when that is not
        possible (this worker did not park the step, an answer could stand in for
        another call, one is refused, or one is an approval for someone else) and
        :meth:`answer` must decide instead."""
        step = self.store.known_calls.step(chat_id)
        if step is None:
            return None
        parked_ids, calls = step
        try:
            if self._stand_ins(calls, answers):
                return None
            matched = self._match(calls, answers, set())
            if any(call.for_others for call, _ in matched):
                return None  # who may answer it is for answer() to decide
            limit = self.max_output_bytes
            outcomes = [
                (call, normalize_outcome(call, a.outcome, by="client", max_bytes=limit))
                for call, a in matched
            ]
        except ParkwayError:
            return None
        return AnswerPlan(chat_id, parked_ids, outcomes) if outcomes else None

    async def settled_by(self, plan: AnswerPlan) -> None:
        """Tell the listeners of the calls ``plan`` settled (its ANSWER won)."""
        for call, outcome in plan.outcomes:
            settled = call.with_outcome(outcome)
            for listener in self.listeners:
                try:
                    await listener(Settled(plan.chat_id, settled, "client"))
                except Exception:
                    log.exception("settle listener failed (chat %s)", plan.chat_id)

    def _stand_ins(self, pending: Sequence[ParkedCall], answers: Sequence[Answer]) -> list[str]:
        """Ids of answers that name no pending call but could take one's place by key."""
        pending_keys = {self._call_key(c) for c in pending}
        by_id = {c.tool_call_id for c in pending}
        return [
            a.tool_call_id
            for a in answers
            if a.match_by_key and a.tool_call_id not in by_id and self._key_of(a) in pending_keys
        ]

    def _match(
        self, pending: Sequence[ParkedCall], answers: Sequence[Answer], known: set[str]
    ) -> list[tuple[ParkedCall, Answer]]:
        """Pending calls and the answers that answer them (see :meth:`answer`); ``known``:
        ids of the chat's calls that are not pending."""
        by_id = {c.tool_call_id: c for c in pending}
        # Each call's key, recomputed from its stored input: a call parked before keys
        # were RFC 8785 holds an older form of its key (``{"x":1.0}``), and recomputing
        # gives the form an answer's key has now (``{"x":1}``), with no migration.
        call_keys = {c.tool_call_id: self._call_key(c) for c in pending}
        used: set[str] = set()
        matched: list[tuple[ParkedCall, Answer]] = []
        for answer in answers:
            call = by_id.get(answer.tool_call_id)
            if call is not None and call.tool_call_id not in used:
                if answer.has_input and self._key_of(answer) != call_keys[call.tool_call_id]:
                    raise AnswerMismatchError(
                        f"the answer for call {call.tool_call_id!r} carries other input than "
                        "the call had"
                    )
                if answer.approval_id is not None and answer.approval_id != call.approval_id:
                    raise AnswerMismatchError(
                        f"approval id {answer.approval_id!r} does not belong to call "
                        f"{call.tool_call_id!r}"
                    )
            elif (
                answer.match_by_key
                and answer.tool_call_id not in by_id
                and answer.tool_call_id not in known
            ):
                key = self._key_of(answer)
                call = next(
                    (
                        c
                        for c in pending
                        if call_keys[c.tool_call_id] == key and c.tool_call_id not in used
                    ),
                    None,
                )
            else:
                call = None
            if call is None:
                continue
            used.add(call.tool_call_id)
            matched.append((call, answer))
        return matched

    @staticmethod
    def _key_of(answer: Answer) -> str | None:
        try:
            return parked_call_key(answer.tool_name, answer.tool_input)
        except NotPlainJSONError:
            return None

    @staticmethod
    def _call_key(call: ParkedCall) -> str:
        """The call's parkedCallKey in today's canonical form, from its stored input; the
        stored key only if that input has no canonical form now (an older Parkway
        accepted lone surrogates and integers past the double range), so such a call
        matches no answer's key."""
        try:
            return parked_call_key(call.tool_name, call.input)
        except NotPlainJSONError:
            return call.key


class AutoResume:
    """Continues the chats of agents with the ``auto`` resume policy on this worker.

    When a settle (a client's, or a timeout the sweeper recorded) leaves no call of such
    a chat pending, the chat is resumed in the background with ``resume`` (the runner's)
    as its owner. Its events go to the chat's log, where a reconnecting client finds
    them. Losing the race to another resume is fine: someone continued the chat.
    """

    def __init__(self, store: ChatStore, resume: Callable[[str, str], Awaitable[Run]]) -> None:
        self.store = store
        self.resume = resume
        self._tasks: set[asyncio.Task[None]] = set()

    def on_all_settled(self, chat_id: str, call: ParkedCall) -> None:
        """The ``on_all_settled`` of :class:`Settling`."""
        if call.auto_resume:
            self.start(chat_id)

    async def on_timeout(self, chat_id: str, tool_call_id: str, pending: int) -> None:
        """The sweeper's hook: a call timed out, leaving ``pending`` calls of its chat."""
        if pending:
            return
        _, calls = await self.store.calls(chat_keys(chat_id), [tool_call_id])
        if calls:
            self.on_all_settled(chat_id, calls[0])

    def start(self, chat_id: str) -> None:
        """Resume the chat in a task of its own (:meth:`cancel` ends them all)."""
        task = asyncio.create_task(self._resume(chat_id), name=f"parkway-auto-resume-{chat_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _resume(self, chat_id: str) -> None:
        owner = await self.store.owner(chat_keys(chat_id))
        if owner is None:
            return
        try:
            run = await self.resume(chat_id, owner)
        except (NothingToResumeError, ChatBusyError, ShuttingDownError):
            return
        if run.task is not None:
            await run.task


async def count_settle(settled: Settled) -> None:
    """A settle listener: count a settle this worker won in ``parkway_calls_settled_total``,
    by the source its audit entry names (the sweeper counts its timeouts itself)."""
    outcome = settled.call.outcome or {}
    name = outcome.get("outcome")
    CALLS_SETTLED.labels(
        settled.call.kind, name if isinstance(name, str) else "unknown", settled.source
    ).inc()
