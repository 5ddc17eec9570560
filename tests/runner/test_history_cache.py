"""A worker keeps each chat's decoded history (runner/store/histcache.py): a resume on the
worker that ran the chat decodes only what is new, asks the model exactly what a worker
decoding from scratch would, and anything else in Redis than what was kept is decoded
afresh."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis

from parkway.runner import Runner, parse_agent_file
from parkway.runner.llm.model import ModelEvent, ModelMessage, ModelRequest, UserTurn
from parkway.runner.store.histcache import HistoryCache
from parkway.runner.store.history import ModelView, decode_entries, to_model_messages
from parkway.runner.store.keys import chat_keys
from tests.helpers.runner_rig import finish, parked, turn
from tests.helpers.support import agent_doc, call


class Asked:
    """A scripted model that keeps the conversation of every request."""

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        self.model = parse_agent_file(agent_doc(turns)).model
        self.seen: list[tuple[ModelMessage, ...]] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.seen.append(tuple(request.messages))
        return self.model.stream(request)


def runner_with(redis: Redis, model: Asked) -> Runner:
    agent = parse_agent_file(agent_doc([]))
    return Runner(redis, model, agent.template)  # type: ignore[arg-type]


async def stored(redis: Redis, chat: str) -> list[dict[str, Any]]:
    return decode_entries(await redis.lrange(chat_keys(chat).history, 0, -1))


async def test_a_resume_on_the_same_worker_asks_what_a_fresh_decode_gives(redis: Redis) -> None:
    turns = [
        [{"text": "first answer"}],
        [{"text": "looking"}, call("get_weather", {"city": "Oslo"})],
        [{"text": "let me ask"}, call("pick", {"q": "Which?"})],
        [{"text": "you chose a"}],
    ]
    model = Asked(turns)
    runner = runner_with(redis, model)
    try:
        assert finish(await turn(runner, "c", "one")) == "stop"
        events = await turn(runner, "c", "two")
        assert finish(events) == "tool-calls"
        waiting = parked(events)[0]
        await runner.settle(
            "c", "alice", waiting.tool_call_id, {"outcome": "output", "output": {"choice": "a"}}
        )
        hits = runner.store.histories.hits
        resumed = await (await runner.resume("c", "alice")).collect()
        assert finish(resumed) == "stop"
        assert runner.store.histories.hits == hits + 1  # the parked turn's history, reused
        history = await stored(redis, "c")
        # asked with everything but the answer it gave, exactly as converted from Redis
        assert model.seen[-1] == to_model_messages(history[:-1])
        assert len(model.seen[-1]) == len(history) - 1
    finally:
        await runner.aclose()


async def test_a_history_changed_in_redis_is_decoded_afresh(redis: Redis) -> None:
    model = Asked([[{"text": "one"}], [{"text": "two"}], [{"text": "three"}]])
    runner = runner_with(redis, model)
    try:
        assert finish(await turn(runner, "c", "first question")) == "stop"
        assert finish(await turn(runner, "c", "second question")) == "stop"  # keeps 2 entries
        # another worker (or an edit) rewrote the first entry: other bytes, same length
        first = json.loads(await redis.lindex(chat_keys("c").history, 0))
        first["text"] = "rewritten question"
        await redis.lset(chat_keys("c").history, 0, json.dumps(first))
        hits = runner.store.histories.hits
        assert finish(await turn(runner, "c", "third question")) == "stop"
        assert runner.store.histories.hits == hits
        assert model.seen[-1][0] == UserTurn("rewritten question")
        assert model.seen[-1] == to_model_messages(await stored(redis, "c"))[:-1]
    finally:
        await runner.aclose()


def entry(text: str) -> bytes:
    return json.dumps({"t": "user", "text": text, "uid": None}).encode()


def test_what_a_run_gets_is_its_own() -> None:
    cache = HistoryCache()
    raw = [entry("a"), entry("b")]
    entries, view = cache.decode("c", raw)
    entries.append({"t": "user", "text": "not stored", "uid": None})
    assert view.update(entries)[-1] == UserTurn("not stored")
    again, view_again = cache.decode("c", [*raw, entry("c")])
    assert [e["text"] for e in again] == ["a", "b", "c"]
    assert view_again.update(again) == (UserTurn("a"), UserTurn("b"), UserTurn("c"))
    assert cache.hits == 1


def test_a_shorter_or_different_history_is_not_taken_for_the_kept_one() -> None:
    cache = HistoryCache()
    cache.decode("c", [entry("a"), entry("b")])
    entries, _ = cache.decode("c", [entry("a")])
    assert [e["text"] for e in entries] == ["a"]
    entries, _ = cache.decode("c", [entry("x"), entry("b"), entry("c")])
    assert [e["text"] for e in entries] == ["x", "b", "c"]
    assert cache.hits == 0


def test_the_cache_keeps_within_its_byte_budget() -> None:
    cache = HistoryCache(max_bytes=300)
    cache.decode("a", [entry("x" * 100)])
    cache.decode("b", [entry("y" * 100)])
    cache.decode("c", [entry("z" * 100)])  # over 300 B: the least recently used goes
    assert len(cache) == 2
    cache.decode("a", [entry("x" * 100)])
    assert cache.hits == 0  # it had been let go
    cache.decode("big", [entry("w" * 400)])  # larger than the budget: decoded, not kept
    assert len(cache) == 2
    entries, view = cache.decode("big", [entry("w" * 400)])
    assert cache.hits == 0 and isinstance(view, ModelView) and len(entries) == 1


def test_decoding_reads_what_the_fast_parser_refuses() -> None:
    big = {"t": "result", "id": "c", "name": "t", "result": 2**70 + 1, "status": "ok"}
    nan = {"t": "result", "id": "d", "name": "t", "result": math.nan, "status": "ok"}
    raw = [json.dumps(big).encode(), json.dumps(nan).encode()]
    entries = decode_entries(raw)
    assert entries[0] == big and isinstance(entries[0]["result"], int)
    assert math.isnan(entries[1]["result"])
