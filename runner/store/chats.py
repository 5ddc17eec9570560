"""The Redis store: the only place that talks to Redis about chats.

Every transition that can race runs as one Lua script (:mod:`parkway.runner.store.scripts`); reads
are pipelined so a park or a resume costs a fixed, small number of round trips,
whatever the history's length.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from parkway.runner.parking import CallCache, ParkedCall, decode_call, encode_call
from parkway.runner.store import scripts
from parkway.runner.store.addresses import AddressQuotas, AddressUsage
from parkway.runner.store.approvals import ApprovalIndex, approval_score
from parkway.runner.store.audit import AUDIT_KEEP_S, SettleAudit, answer_audit
from parkway.runner.store.client import RedisClient, as_text
from parkway.runner.store.deadlines import DeadlineIndex
from parkway.runner.store.histcache import HistoryCache
from parkway.runner.store.history import dump_entry, with_turn_message
from parkway.runner.store.keys import (
    APPROVALS,
    DEADLINES,
    ChatKeys,
    deadline_member,
    usage_keys,
)
from parkway.runner.store.replies import (
    SCHEMA_VERSION,
    ChatRecord,
    LogBatch,
    ResumeClaim,
    SettleReply,
    SettleStatus,
    TurnClaim,
    commit_reply,
    decode_pairs,
    raise_for_claim,
    settle_reply,
)
from parkway.runner.store.usage import Quotas, UsageGate, quota_error

__all__ = [
    "SCHEMA_VERSION",
    "ChatRecord",
    "ChatStore",
    "LogBatch",
    "ResumeClaim",
    "SettleReply",
    "SettleStatus",
    "StepAside",
    "TurnClaim",
]

EVENT_LOG_MAXLEN = 2_000  # batches (each one or more events)

# Why CLAIM_TURN stepped aside, changing nothing (ChatStore.claim_turn).
StepAside = Literal["answers_first", "agent_moved"]


_s = as_text


def _flat(mapping: Mapping[str, int]) -> list[Any]:
    """ZADD arguments: score, member, score, member, ..."""
    out: list[Any] = []
    for member, score in mapping.items():
        out.extend((score, member))
    return out


class ChatStore:
    """Chat state in Redis. ``ttl_s`` is given to every chat key on every write."""

    def __init__(self, redis: RedisClient, ttl_s: int, *, log_keep_s: int = 600,
                 audit_keep_s: int = AUDIT_KEEP_S, quotas: Quotas | None = None,
                 artifact_ttl_s: int | None = None,
                 addresses: AddressQuotas | None = None) -> None:  # fmt: skip
        self.redis = redis
        self.ttl_s = ttl_s
        # The owner's quotas, checked by a turn's claim (runner/store/usage.py); None: none.
        self.quotas = quotas
        # How long a chat's artifacts live after its last turn (at most the chat's TTL).
        self.artifact_ttl_s = min(artifact_ttl_s or ttl_s, ttl_s)
        self.audit_keep_s = audit_keep_s  # how long a chat's audit keeps an entry
        # How long the event log of a chat whose last run ended is kept (scripts/_functions.py,
        # log_append): a follower still reading that run has this long to finish.
        self.log_keep_s = log_keep_s
        # On a Cluster the global deadline index lives in another slot than a chat, so
        # it cannot be written by a chat's script.
        self.cluster = isinstance(redis, RedisCluster)
        self.usage_gate = None if quotas is None else UsageGate(redis, quotas, ttl_s)
        # What the principals of one address store together (runner/store/addresses.py).
        self.addresses: AddressUsage | None = None
        if addresses is not None:
            self.addresses = AddressUsage(redis, addresses, ttl_s, cluster=self.cluster)
        # Records of parked calls this worker wrote or read (a settle of one is one
        # round trip).
        self.known_calls = CallCache()
        self.histories = HistoryCache()
        self._claim_turn = redis.register_script(scripts.CLAIM_TURN)
        self._claim_resume = redis.register_script(scripts.CLAIM_RESUME)
        self._answer = redis.register_script(scripts.ANSWER)
        self._commit = redis.register_script(scripts.COMMIT)
        self._settle = redis.register_script(scripts.SETTLE)
        self._renew = redis.register_script(scripts.RENEW)
        self._append = redis.register_script(scripts.APPEND)
        self._stop = redis.register_script(scripts.STOP)
        self._release = redis.register_script(scripts.RELEASE)
        self._fail = redis.register_script(scripts.FAIL)
        self._pending = redis.register_script(scripts.PENDING)
        # What the deadline sweeper reads and settles (runner/engine/sweeper.py).
        self.deadlines = DeadlineIndex(redis, self._settle, ttl_s=ttl_s, audit_keep_s=audit_keep_s)
        # What an approver's queue reads (runner/store/approvals.py).
        self.approvals = ApprovalIndex(redis)

    async def claim_turn(
        self,
        keys: ChatKeys,
        *,
        principal: str,
        token: str,
        now_ms: int,
        lease_ms: int,
        user_message_id: str,
        user_entry: Mapping[str, Any] | None = None,
        supersede_outcome: str,
        message_id: str,
        template_digest: str,
        template_json: str,
        answers_first: bool = False,
        agent_head: tuple[str, int] | None = None,
    ) -> TurnClaim | StepAside:
        """Run CLAIM_TURN (one round trip; the history comes back with the claim), or
        raise the domain error its refusal stands for. It steps aside, changing nothing,
        with ``"answers_first"`` when the new message carries answers to tool calls
        (``answers_first``) and the chat has calls pending, which the caller settles
        before claiming again; and with ``"agent_moved"`` when the template was the
        agent's head at version ``agent_head`` (its key, the version; single Redis only)
        and the head has moved on since. Past the owner's quotas it raises
        :class:`~parkway.runner.errors.QuotaExceededError` (runner/store/usage.py)."""
        chat = [keys.meta, keys.pending, keys.outcomes, keys.history, keys.calls,
                keys.events, keys.artifacts, keys.artifact_data, keys.audit]  # fmt: skip
        quota_args: list[Any] = ["", "", ""]
        if self.quotas is not None and self.usage_gate is not None:
            if self.cluster:  # (the usage keys are in another slot)
                await self.usage_gate.check_turn(keys, principal, now_ms)
            else:
                usage = usage_keys(principal)
                chat.extend((usage.bytes, usage.chats))
                quota_args = [keys.chat_id, self.quotas.stored_bytes, self.quotas.live_chats]
        taken = None  # (the address's keys are in a slot of their own: a step of its own)
        if self.addresses is not None:
            taken = await self.addresses.take_turn(keys, principal, now_ms)
        result = await self._claim_turn(
            keys=chat if agent_head is None else [*chat, agent_head[0]],
            args=[SCHEMA_VERSION, principal, token, now_ms, lease_ms, user_message_id,
                  supersede_outcome, self.ttl_s, message_id, template_digest, template_json,
                  self.audit_keep_s, "1" if answers_first else "",
                  "" if agent_head is None else str(agent_head[1]), *quota_args,
                  self.artifact_ttl_s, "" if user_entry is None else dump_entry(user_entry)],
        )  # fmt: skip
        fields = [_s(x) for x in result[:4]]
        if taken is not None and fields[0] != "ok":  # (the claim changed nothing)
            await taken.give_back()
        if fields[0] == "quota" and self.quotas is not None:
            raise quota_error(fields[1], self.quotas)
        if fields[0] == "answers_first":
            return "answers_first"
        if fields[0] == "agent_moved":
            return "agent_moved"
        raise_for_claim(fields)
        self.known_calls.forget_step(keys.chat_id)
        entries, view = self.histories.decode(keys.chat_id, result[4:])
        return TurnClaim(
            model_calls=int(fields[1]),
            parked_ids=json.loads(fields[2]),
            previous_template=fields[3],
            entries=entries,
            view=view,
        )

    async def claim_resume(
        self, keys: ChatKeys, *, principal: str, token: str, now_ms: int, lease_ms: int
    ) -> ResumeClaim:
        """Run CLAIM_RESUME, or raise the domain error its refusal stands for. One round
        trip brings the claim's fields, the parked step's calls with their outcomes, and
        the history."""
        raw = await self._claim_resume(
            keys=[keys.meta, keys.pending, keys.history, keys.calls, keys.outcomes],
            args=[SCHEMA_VERSION, principal, token, now_ms, lease_ms, self.ttl_s],
        )
        if _s(raw[0]) != "ok":
            raise_for_claim([_s(x) for x in raw])
        return self._resume_claim(keys, raw)

    def _resume_claim(self, keys: ChatKeys, raw: Sequence[Any]) -> ResumeClaim:
        """The ResumeClaim of claim_resume's 'ok' reply."""
        self.known_calls.forget_step(keys.chat_id)
        count = int(raw[5])
        calls = decode_pairs(raw[6 : 6 + 2 * count])
        self.known_calls.remember(keys.chat_id, calls)
        entries, view = self.histories.decode(keys.chat_id, raw[6 + 2 * count :])
        return ResumeClaim(
            model_calls=int(raw[1]),
            message_id=_s(raw[2]),
            parked_ids=json.loads(_s(raw[3])),
            template_json=_s(raw[4]),
            calls=calls,
            entries=entries,
            view=view,
        )

    async def answer(
        self,
        keys: ChatKeys,
        *,
        principal: str,
        token: str,
        now_ms: int,
        lease_ms: int,
        parked_ids: Sequence[str],
        outcomes: Sequence[tuple[str, str]],
    ) -> ResumeClaim | int | None:
        """Run ANSWER: settle ``outcomes`` ((toolCallId, canonical outcome JSON) of calls
        of the parked step ``parked_ids``) and, if none is left pending, claim the resume.

        Returns the claim, or the number of calls still pending, or None when the chat
        is not at that parked step any more (nothing written: take the general path).
        Raises the domain error of a chat that is missing or another principal's. Not
        for a Cluster (the deadline index is in another slot): None there."""
        if self.cluster:
            return None
        args: list[Any] = [
            SCHEMA_VERSION,
            principal,
            token,
            now_ms,
            lease_ms,
            self.ttl_s,
            json.dumps(list(parked_ids)),
            len(outcomes),
            *("browser", self.audit_keep_s),  # the audit's source and retention
        ]
        for call_id, outcome_json in outcomes:
            args.extend((call_id, outcome_json, deadline_member(keys.chat_id, call_id)))
            call = self.known_calls.recall(keys.chat_id, call_id)  # (this worker parked it)
            args.extend(answer_audit(call, outcome_json, who=principal).answer_args())
        raw = await self._answer(
            keys=[
                keys.meta,
                keys.pending,
                keys.history,
                keys.calls,
                keys.outcomes,
                DEADLINES,
                keys.settle_attempt(outcomes[0][0]),
                keys.audit,
            ],
            args=args,
        )
        status = _s(raw[0])
        if status == "ok":
            return self._resume_claim(keys, raw)
        if status == "settled":
            return int(raw[1])
        if status == "stale":
            return None
        raise_for_claim([_s(x) for x in raw])
        return None

    async def append_events(
        self, keys: ChatKeys, *, token: str, batch: str, finish: str, now_ms: int, seq: int
    ) -> str:
        """Append a batch of a run's events (a JSON array) to the chat's log as one entry
        and wake the chat's followers; '' if the run is no longer current. ``seq`` numbers
        the run's batches from 1 (a replayed append is recognised by it)."""
        entry = await self._append(
            keys=[keys.events, keys.meta],
            args=[
                token,
                EVENT_LOG_MAXLEN,
                self.ttl_s,
                finish,
                now_ms,
                batch,
                seq,
                keys.wake,
                self.log_keep_s,
            ],
        )
        return _s(entry)

    async def read_events(
        self, keys: ChatKeys, after: str, *, block_ms: int | None, count: int = 500
    ) -> list[tuple[str, str]]:
        """Log entries after ``after`` (exclusive) as (id, batch JSON); with ``block_ms``,
        wait up to that long for the first one."""
        reply = await self.redis.xread({keys.events: after}, count=count, block=block_ms)
        if not reply:
            return []
        # redis-py answers a list of [stream, entries] (RESP2) or a dict (RESP3).
        streams: Any = reply.items() if isinstance(reply, dict) else reply
        out: list[tuple[str, str]] = []
        for _, entries in streams:
            for entry_id, fields in entries:
                if fields:
                    out.append((_s(entry_id), _s(fields.get(b"b", fields.get("b")))))
        return out

    async def run_info(self, keys: ChatKeys) -> dict[str, str]:
        """The meta fields that describe the chat's current run."""
        names = ("owner", "state", "message_id", "run_start", "run_hist", "run_token",
                 "lease_until", "last_finish", "finished_at", "stop_for")  # fmt: skip
        values = await self.redis.hmget(keys.meta, list(names))
        return {n: _s(v) for n, v in zip(names, values, strict=True) if v is not None}

    async def request_stop(self, keys: ChatKeys) -> bool:
        return bool(await self._stop(keys=[keys.meta], args=[]))

    async def stops_requested(self, runs: Sequence[tuple[ChatKeys, str]]) -> list[bool]:
        """Whether each (chat, lease token) run was asked to stop: one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for keys, _ in runs:
            pipe.hget(keys.meta, "stop_for")
        replies = await pipe.execute()
        return [_s(r or b"") == token for r, (_, token) in zip(replies, runs, strict=True)]

    async def release(self, keys: ChatKeys, *, token: str) -> bool:
        return bool(await self._release(keys=[keys.meta], args=[token]))

    async def fail(self, keys: ChatKeys, *, token: str, now_ms: int,
                   principal: str | None = None) -> str:  # fmt: skip
        """End a failed run (FAIL): the state the chat was left in, '' if the lease was
        no longer the caller's. The chat's count is rolled up into its owner's
        (``principal``'s) address, as a commit that ends a run does."""
        left = _s(await self._fail(keys=[keys.meta], args=[token, now_ms]))
        if left and self.addresses is not None:
            await self.addresses.roll_up(keys, principal, now_ms)
        return left

    async def renew_many(
        self, runs: Sequence[tuple[ChatKeys, str]], *, now_ms: int, lease_ms: int
    ) -> list[bool]:
        """Extend the leases of many (chat, lease token) runs, each only if its token
        still holds it: one pipelined round trip (RENEW per run). Whether each held."""
        pipe = self.redis.pipeline(transaction=False)
        for keys, token in runs:
            # (redis-py queues a script on a pipeline, loading it first if Redis lost it;
            # its annotation names clients only)
            await self._renew(keys=[keys.meta], args=[token, now_ms, lease_ms], client=pipe)  # type: ignore[arg-type]
        return [bool(r) for r in await pipe.execute()]

    async def commit(
        self,
        keys: ChatKeys,
        *,
        token: str,
        state: str,
        model_calls: int,
        now_ms: int,
        lease_ms: int,
        entries: Sequence[Mapping[str, Any]],
        seq: int,
        calls: Sequence[ParkedCall] = (),
        parked_ids: Sequence[str] | None = None,
        last_uid: str | None = None,
        forget_uid: bool = False,
        log: LogBatch | None = None,
        principal: str | None = None,
    ) -> str | None:
        """Persist a step if ``token`` still holds the lease, with ``log`` (the run's
        events not yet logged) appended to the event log in the same atomic step.

        ``last_uid`` sets the duplicate guard (the last user message id stored);
        ``forget_uid`` clears it instead (a failed run: its turn's message may be sent
        again, as its retry).

        Returns the log entry's id ('' when there was no batch), None if the lease was
        lost (nothing written). ``seq`` numbers the run's commits from 1 (a replayed
        commit is recognised by it). A commit that parks or ends the run rolls the chat's
        stored bytes up into ``principal``'s (its owner's) quota count in the same step
        (runner/store/usage.py; on a single Redis: a Cluster's count catches up at the
        chat's next turn), and into its address's in a step of its own
        (runner/store/addresses.py)."""
        args: list[Any] = [
            token,
            state,
            self.ttl_s,
            model_calls,
            now_ms,
            lease_ms,
            "" if parked_ids is None else json.dumps(list(parked_ids)),
            "-" if forget_uid else last_uid or "",
            len(entries),
            len(calls),
            keys.chat_id,
            seq,
            "" if log is None else log.batch,
            0 if log is None else log.seq,
            "" if log is None else log.finish,
            EVENT_LOG_MAXLEN,
            keys.wake,
            self.log_keep_s,
        ]
        args.extend(dump_entry(e) for e in entries)
        for call in calls:
            deadline = "" if call.deadline is None else int(call.deadline * 1000)
            score = "" if not call.for_others else approval_score(call)
            args.extend((call.tool_call_id, encode_call(call), call.seq, deadline, score))
        script_keys = [
            keys.meta,
            keys.history,
            keys.calls,
            keys.pending,
            keys.outcomes,
            keys.events,
        ]
        if not self.cluster:
            # One Redis: the deadlines (and approvals) go into their indexes inside the
            # same atomic step.
            indexes = [DEADLINES, APPROVALS]
            if principal is not None and self.quotas is not None and state != "running":
                usage = usage_keys(principal)
                indexes.extend((usage.bytes, usage.chats))
            reply = await self._commit(keys=[*script_keys, *indexes], args=args)
        else:
            deadlines = {
                deadline_member(keys.chat_id, c.tool_call_id): int(c.deadline * 1000)
                for c in calls
                if c.deadline is not None
            }
            # The deadline index is a global key (another Cluster slot), so it cannot be
            # written inside the script; it goes first in the same round trip. A deadline
            # for a call whose commit then fails is harmless: the sweeper finds no such
            # call.
            extra = [("ZADD", DEADLINES, *_flat(deadlines))] if deadlines else []
            approvals = {
                deadline_member(keys.chat_id, c.tool_call_id): approval_score(c)
                for c in calls
                if c.for_others
            }
            if approvals:  # (likewise: the queue's read skips a call that is not there)
                extra.append(("ZADD", APPROVALS, *_flat(approvals)))
            reply = (await self._pipeline_with(self._commit, script_keys, args, extra))[-1]
        entry_id = commit_reply(reply)
        if entry_id is not None and state != "running" and self.addresses is not None:
            await self.addresses.roll_up(keys, principal, now_ms)  # (its own slot)
        if entry_id is not None:
            self.known_calls.remember(keys.chat_id, calls)
            if state == "parked" and parked_ids:
                self.known_calls.remember_step(keys.chat_id, parked_ids)
        return entry_id

    async def settle(self, keys: ChatKeys, tool_call_id: str, outcome_json: str, *,
                     audit: SettleAudit, principal: str = "") -> SettleReply:  # fmt: skip
        """Run SETTLE and drop the call's deadline and its place in the approvals index
        (one round trip): once a call has an outcome, settled now or earlier, it has
        nothing left to time out or to answer. With
        ``principal``, a chat of anyone else's answers ``forbidden``, and nothing is
        written, its deadline left alone. (On a Cluster the deadline index is in another
        slot: it is dropped in a second round trip.) A winner records ``audit``."""
        script_keys = [
            keys.calls,
            keys.outcomes,
            keys.pending,
            keys.meta,
            keys.history,
            keys.settle_attempt(tool_call_id),
            keys.audit,
        ]
        member = deadline_member(keys.chat_id, tool_call_id)
        args: list[Any] = [
            tool_call_id,
            outcome_json,
            self.ttl_s,
            secrets.token_hex(8),
            principal,
            member,
            *audit.args(self.audit_keep_s),
        ]
        if not self.cluster:
            return settle_reply(
                await self._settle(keys=[*script_keys, DEADLINES, APPROVALS], args=args)
            )
        reply = settle_reply(await self._settle(keys=script_keys, args=args))
        if reply.status != "forbidden":
            pipe = self.redis.pipeline(transaction=False)
            pipe.zrem(DEADLINES, member)
            pipe.zrem(APPROVALS, member)
            await pipe.execute()
        return reply

    async def _pipeline_with(
        self,
        script: Any,
        keys: Sequence[str],
        args: Sequence[Any],
        extra: Sequence[tuple[Any, ...]],
    ) -> list[Any]:
        """A few plain commands, then a script, in one round trip.

        The script goes as a raw EVALSHA: a registered Script inside a pipeline makes
        redis-py send SCRIPT EXISTS first, an extra round trip. On NOSCRIPT (the first use
        after Redis started) the script is loaded and the whole pipeline sent again; the
        extra commands are idempotent and the script did not run.
        """
        for attempt in range(2):
            pipe = self.redis.pipeline(transaction=False)
            for command in extra:
                pipe.execute_command(*command)
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            results = await pipe.execute(raise_on_error=False)
            outcome = results[-1]
            missing = isinstance(outcome, NoScriptError) or (
                isinstance(outcome, ResponseError) and "NOSCRIPT" in str(outcome)
            )
            if missing and attempt == 0:
                await self.redis.script_load(script.script)
                continue
            for item in results:
                if isinstance(item, Exception):
                    raise item
            return list(results)
        raise RuntimeError("unreachable")

    async def pending_count(self, keys: ChatKeys) -> int:
        return int(await self.redis.zcard(keys.pending))

    async def owner(self, keys: ChatKeys) -> str | None:
        value = await self.redis.hget(keys.meta, "owner")
        return None if value is None else _s(value)

    async def calls(
        self, keys: ChatKeys, ids: Sequence[str] | None = None, *, drop_deadlines: bool = False
    ) -> tuple[str | None, list[ParkedCall]]:
        """The chat's owner and its parked calls named by ``ids``, with their outcomes.

        With ``ids=None``: the pending calls, in park order. One round trip either way.
        """
        if ids is None:
            raw = await self._pending(
                keys=[keys.meta, keys.pending, keys.calls, keys.outcomes], args=[]
            )
            owner_raw = _s(raw[0])
            pending = decode_pairs(raw[2:])
            self.known_calls.remember(keys.chat_id, pending)
            return (owner_raw or None), pending
        if not ids:
            owner = await self.redis.hget(keys.meta, "owner")
            return (None if owner is None else _s(owner)), []
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(keys.meta, "owner")
        pipe.hmget(keys.calls, list(ids))
        pipe.hmget(keys.outcomes, list(ids))
        if drop_deadlines:  # the caller finishes these calls: nothing left to time out
            pipe.zrem(DEADLINES, *(deadline_member(keys.chat_id, i) for i in ids))
        owner, records, outcomes, *_ = await pipe.execute()
        calls = [decode_call(rec, out) for rec, out in zip(records, outcomes, strict=True) if rec]
        self.known_calls.remember(keys.chat_id, calls)
        return (None if owner is None else _s(owner)), calls

    async def existing_calls(self, keys: ChatKeys, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are parked calls of the chat (pending or settled)."""
        records = await self.redis.hmget(keys.calls, list(ids))
        return {i for i, rec in zip(ids, records, strict=True) if rec is not None}

    async def load(self, keys: ChatKeys) -> ChatRecord | None:
        """The whole chat (meta, history, every parked call), or None if absent."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.meta)
        pipe.lrange(keys.history, 0, -1)
        pipe.hgetall(keys.calls)
        pipe.hgetall(keys.outcomes)
        meta_raw, history, calls_raw, outcomes_raw = await pipe.execute()
        if not meta_raw:
            return None
        meta = {_s(k): _s(v) for k, v in meta_raw.items()}
        outcomes = {_s(k): v for k, v in outcomes_raw.items()}
        calls = sorted(
            (decode_call(v, outcomes.get(_s(k))) for k, v in calls_raw.items()),
            key=lambda c: c.seq,
        )
        entries = with_turn_message(meta, [json.loads(h) for h in history])
        return ChatRecord(meta=meta, entries=entries, calls=calls)
