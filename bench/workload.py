"""The benchmark's chats: agent, script, seeded histories, clones, stored bytes.

Every benchmark chat uses the built-in demo agent's template (four tools, among them
the client tool ``choose_option`` with an output schema) and a scripted model. A chat
"with N messages" has N entries in its stored history before the measured turn starts:

- ``N // 4`` *tool cycles* of four messages each: a user question, an assistant step
  that says a sentence and calls ``choose_option`` (which parks), the tool result once
  the call is settled with ``{"choice": "Oslo"}``, and the assistant's answer;
- then ``(N % 4) // 2`` plain turns: a user question and an assistant answer.

So 2 messages is one plain turn, 20 is five tool cycles and 200 is fifty, each history
built by really running the turns through a :class:`parkway.runner.engine.runner.Runner` (start,
park, settle, resume). Messages are of realistic size (user ~150 B, assistant ~300-450 B,
tool result ~50 B), about 64 KB of history at 200 messages.

The *measured* turn then asks one more question: the model says one short sentence and
calls ``choose_option`` (the run parks); once that call is settled, the resumed run
answers with one short sentence (14 words) and the run finishes.

Building 200-message histories for every sample would dominate the benchmark, so each
size is seeded once per principal and copied for every sample with ``DUMP`` /
``RESTORE`` (:class:`SeedSnapshot`): a copy is byte-for-byte the seeded chat under a
new chat id. Copying and deleting copies happen outside the measured regions.

A chat's keys are found with ``SCAN MATCH`` on its hash tag (:func:`chat_key_names`),
not taken from a fixed list, so copies, deletions and :func:`stored_bytes` cover every
key the runner writes for a chat, including keys added after this module was written.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from parkway.runner.agent.template import AgentTemplate, load_template
from parkway.runner.demo import DEMO_AGENT
from parkway.runner.engine.runner import Run, Runner, RunnerConfig
from parkway.runner.events import CallParked, Event, MessageFinished, RunFailed
from parkway.runner.llm.scripted import ScriptedModel
from parkway.runner.store import Quotas
from parkway.runner.store.keys import DEADLINES, chat_keys, usage_keys

__all__ = [
    "BENCH_CONFIG",
    "BENCH_PRINCIPAL",
    "CHOICE",
    "KEY_NAMES",
    "PARK_TOOL",
    "SeedSnapshot",
    "StoredBytes",
    "Workload",
    "chat_key_names",
    "drop_chats",
    "finished_reason",
    "finished_run",
    "measured_user_text",
    "parked_call_id",
    "seed_chat",
    "stored_bytes",
]

# The runner as the server builds it: with quotas (runner/store/usage.py), whose counting
# rides on the scripts measured here. The limits are out of reach (a benchmark's one
# principal makes thousands of chats), which changes no step of the counting.
BENCH_CONFIG = RunnerConfig(
    quotas=Quotas(stored_bytes=2**50, live_chats=2**40, artifacts_per_chat=2**30)
)

BENCH_PRINCIPAL = "bench-principal"
PARK_TOOL = "choose_option"
CHOICE: Mapping[str, Any] = {"outcome": "output", "output": {"choice": "Oslo"}}
# The chat's keys in the order the tables list them; keys found beyond these follow.
KEY_NAMES = ("meta", "history", "calls", "outcomes", "pending", "events")
CLONE_TTL_MS = 3600 * 1000
# Keys that expire this soon are transient (a settle's nonce lives 60 s): a chat built
# over a real conversation would not hold those of its seeding, so copies leave them out.
TRANSIENT_MS = 10 * 60 * 1000
_SCAN_COUNT = 1000


def _user_text(i: int) -> str:
    return (
        f"Question {i}: could you compare the weather outlook for Lisbon, Oslo and Paris "
        "this week and tell me which city suits a short outdoor trip best?"
    )


def _ask_text(i: int) -> str:
    return (
        f"Happy to help with question {i}. All three cities have something going for them "
        "this week, so before I compare them in detail, tell me which one matters most to "
        "you and I will focus the report on it."
    )


def _answer_text(i: int) -> str:
    return (
        f"Here is the comparison for question {i}. Oslo will be cold, around four degrees "
        "with light snow in the afternoons, so plan indoor visits and bring warm layers. "
        "Lisbon stays sunny near twenty-one degrees, ideal for walking along the river, "
        "and Paris is cloudy at fourteen degrees with a chance of showers on Thursday. For "
        "a short outdoor trip Lisbon is the safest bet; Oslo suits you if you like snow."
    )


def _ask_input(label: str) -> dict[str, Any]:
    return {
        "question": f"Which city should report {label} cover?",
        "options": ["Lisbon", "Oslo", "Paris"],
    }


MEASURED_ASK = "Let me ask which city you want me to cover."
MEASURED_ANSWER = "Thanks, Oslo it is: expect light snow and four degrees, so pack warm layers."


def measured_user_text(i: int) -> str:
    """The user message of the measured turn number ``i``."""
    return f"Measured question {i}: which city should the weekend report cover?"


def _script(messages: int) -> list[list[dict[str, Any]]]:
    cycles, rest = divmod(messages, 4)
    turns: list[list[dict[str, Any]]] = []
    for i in range(cycles):
        turns.append(
            [
                {"text": _ask_text(i)},
                {"tool_call": {"name": PARK_TOOL, "input": _ask_input(str(i))}},
            ]
        )
        turns.append([{"text": _answer_text(i)}])
    turns.extend([{"text": _answer_text(cycles + j)}] for j in range(rest // 2))
    turns.append(
        [{"text": MEASURED_ASK}, {"tool_call": {"name": PARK_TOOL, "input": _ask_input("next")}}]
    )
    turns.append([{"text": MEASURED_ANSWER}])
    return turns


@dataclass(frozen=True)
class Workload:
    """The agent and script for chats seeded with ``messages`` history messages."""

    messages: int

    def __post_init__(self) -> None:
        if self.messages < 2 or self.messages % 2:
            raise ValueError("history sizes must be even and at least 2")

    def agent_document(self) -> dict[str, Any]:
        """An agent file document (``parkway serve --agent``) for this workload."""
        return {
            "template": copy.deepcopy(DEMO_AGENT["template"]),
            "model": {"scripted": {"turns": _script(self.messages)}},
        }

    def template(self) -> AgentTemplate:
        return load_template(copy.deepcopy(DEMO_AGENT["template"]))

    def model(self) -> ScriptedModel:
        return ScriptedModel(_script(self.messages))


def parked_call_id(events: list[Event]) -> str:
    """The toolCallId of the one call a run parked; fails loudly otherwise."""
    parked = [e.call.tool_call_id for e in events if isinstance(e, CallParked)]
    if len(parked) != 1:
        raise RuntimeError(f"expected one parked call, got {len(parked)}: {_failure(events)}")
    return parked[0]


def finished_reason(events: list[Event]) -> str:
    """The finish reason of a run's events; fails loudly if the run did not finish."""
    for event in events:
        if isinstance(event, MessageFinished):
            return event.reason
    raise RuntimeError(f"the run did not finish: {_failure(events)}")


def _failure(events: list[Event]) -> str:
    failed = [e.message for e in events if isinstance(e, RunFailed)]
    return failed[0] if failed else f"events {[e.kind for e in events]}"


async def finished_run(run: Run) -> list[Event]:
    """All of ``run``'s events, once its task has ended too.

    The caller holds ``MessageFinished`` before the run's last event-log batch is
    written; an operation started on the chat meanwhile takes the lease from under that
    write (``ChatBusyError('no event log')``). Waiting for ``run.task`` prevents that."""
    events = await run.collect()
    if run.task is not None:
        await run.task
    return events


async def seed_chat(runner: Runner, chat_id: str, principal: str, messages: int) -> None:
    """Run real turns until ``chat_id`` holds ``messages`` history entries, each
    operation starting only once the previous run has ended (:func:`finished_run`)."""
    cycles, rest = divmod(messages, 4)
    for i in range(cycles):
        run = await runner.start_turn(chat_id, principal, _user_text(i), user_message_id=f"s{i}")
        call_id = parked_call_id(await finished_run(run))
        await runner.settle(chat_id, principal, call_id, CHOICE)
        resumed = await finished_run(await runner.resume(chat_id, principal))
        if finished_reason(resumed) != "stop":
            raise RuntimeError("a seeding cycle did not end with an answer")
    for j in range(rest // 2):
        uid = f"p{j}"
        run = await runner.start_turn(
            chat_id, principal, _user_text(cycles + j), user_message_id=uid
        )
        if finished_reason(await finished_run(run)) != "stop":
            raise RuntimeError("a plain seeding turn did not end with an answer")
    stored = await runner.store.redis.llen(chat_keys(chat_id).history)
    if stored != messages:
        raise RuntimeError(f"seeded {stored} history entries instead of {messages}")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _tag(chat_id: str) -> str:
    """The prefix every key of the chat starts with: its hash tag (runner/store/keys.py)."""
    return chat_keys(chat_id).meta.removesuffix(":meta")


async def _scan(redis: Redis, pattern: str) -> AsyncIterator[str]:
    async for key in redis.scan_iter(match=pattern, count=_SCAN_COUNT):
        yield _text(key)


async def chat_key_names(redis: Redis, chat_id: str) -> dict[str, str]:
    """Every key of the chat, by its name after the tag (``meta``, ``history``, ...,
    ``settled:<call>``): ``SCAN MATCH`` on the chat's hash tag, never ``KEYS``."""
    tag = _tag(chat_id)
    return {key[len(tag) + 1 :]: key async for key in _scan(redis, f"{tag}:*")}


async def drop_chats(redis: Redis, id_prefix: str) -> int:
    """Delete every key of the chats whose id starts with ``id_prefix`` (a ``SCAN``
    over their tags), and their members of the deadline index; the keys deleted."""
    tag = chat_keys(id_prefix).meta.removesuffix("}:meta")
    deleted = 0
    batch: list[str] = []
    async for key in _scan(redis, f"{tag}*"):
        batch.append(key)
        if len(batch) >= _SCAN_COUNT:
            deleted += await redis.unlink(*batch)
            batch = []
    if batch:
        deleted += await redis.unlink(*batch)
    members = [_text(m) async for m, _ in redis.zscan_iter(DEADLINES, match=f"{id_prefix}*")]
    if members:
        await redis.zrem(DEADLINES, *members)
    usage = usage_keys(BENCH_PRINCIPAL)  # (the counts of its chats: rebuilt as they go on)
    deleted += await redis.unlink(usage.bytes, usage.chats)
    return deleted


class SeedSnapshot:
    """A seeded chat's keys as ``DUMP`` payloads, restorable under any chat id."""

    def __init__(self, payloads: Mapping[str, bytes]) -> None:
        self.payloads = dict(payloads)

    @classmethod
    async def take(cls, redis: Redis, chat_id: str) -> SeedSnapshot:
        """Every key of the chat but the transient ones (:data:`TRANSIENT_MS`)."""
        payloads: dict[str, bytes] = {}
        for name, key in (await chat_key_names(redis, chat_id)).items():
            if 0 <= await redis.pttl(key) < TRANSIENT_MS:
                continue
            payload = await redis.dump(key)
            if payload is not None:
                payloads[name] = payload
        return cls(payloads)

    async def clone(self, redis: Redis, chat_id: str) -> None:
        """Write a copy of the seeded chat as ``chat_id`` (replacing any such chat)."""
        tag = _tag(chat_id)
        pipe = redis.pipeline(transaction=False)
        for name, payload in self.payloads.items():
            pipe.restore(f"{tag}:{name}", CLONE_TTL_MS, payload, replace=True)
        await pipe.execute()

    @staticmethod
    async def drop(redis: Redis, chat_id: str) -> None:
        keys = {*chat_keys(chat_id).all(), *(await chat_key_names(redis, chat_id)).values()}
        await redis.delete(*keys)


@dataclass(frozen=True)
class StoredBytes:
    """What one chat keeps in Redis, per key name: payload bytes and ``MEMORY USAGE``.

    Keys named ``<kind>:<id>`` (``settled:<call>``) are summed under ``<kind>:*``;
    ``keys`` is the number of keys."""

    payload: Mapping[str, int]
    memory: Mapping[str, int]
    history_entries: int
    template_bytes: int
    keys: int = 0

    @property
    def payload_total(self) -> int:
        return sum(self.payload.values())

    @property
    def memory_total(self) -> int:
        return sum(self.memory.values())


async def stored_bytes(redis: Redis, chat_id: str) -> StoredBytes:
    """Measure every key of the chat (:func:`chat_key_names`).

    Payload bytes are the stored strings themselves: hash field names and values,
    list and set elements, strings, stream field names and values, sorted-set members
    (plus 8 bytes per score). ``MEMORY USAGE ... SAMPLES 0`` adds Redis' own overhead
    (key, encodings, dict entries).
    """
    payload: dict[str, int] = {}
    memory: dict[str, int] = {}
    entries = 0
    template = 0
    found = await chat_key_names(redis, chat_id)
    names = [n for n in KEY_NAMES if n in found] + sorted(set(found) - set(KEY_NAMES))
    for name in names:
        key = found[name]
        kind = _text(await redis.type(key))
        if kind == "none":
            continue
        group = f"{name.split(':', 1)[0]}:*" if ":" in name else name
        memory[group] = memory.get(group, 0) + int(await redis.memory_usage(key, samples=0) or 0)
        if kind == "hash":
            fields = await redis.hgetall(key)
            size = sum(len(k) + len(v) for k, v in fields.items())
            template += len(fields.get(b"template", b""))
        elif kind == "list":
            items = await redis.lrange(key, 0, -1)
            size = sum(len(x) for x in items)
            if name == "history":
                entries = len(items)
        elif kind == "zset":
            size = sum(len(m) + 8 for m in await redis.zrange(key, 0, -1))
        elif kind == "set":
            size = sum(len(m) for m in await redis.smembers(key))
        elif kind == "string":
            size = int(await redis.strlen(key))
        elif kind == "stream":
            logged: Any = await redis.xrange(key)
            size = sum(len(k) + len(v) for _, f in logged for k, v in f.items())
        else:
            raise RuntimeError(f"unexpected Redis type {kind} for {key}")
        payload[group] = payload.get(group, 0) + size
    return StoredBytes(payload, memory, entries, template, keys=len(found))
