"""What the sweeper tests share: a runner on a clock the test moves, parking helpers, and
a reader of a run's text."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis

from parkway.runner import (
    ParkedCall,
    Runner,
    RunnerConfig,
    parse_agent_file,
)
from parkway.runner.events import CallParked, Event, MessageFinished, TextDelta
from tests.helpers.support import CONFIRM_TOOL, agent_doc

__all__ = [
    "QUICK_TOOL",
    "START",
    "TIMEOUT",
    "Clock",
    "deadline_ms",
    "make_runner",
    "park",
    "park_many",
    "resume",
    "said",
]

TIMEOUT = {"outcome": "timeout"}
START = 1_800_000_000.0
# a client tool with a 30 s deadline
QUICK_TOOL = {**CONFIRM_TOOL, "name": "quick", "deadline_s": 30}


class Clock:
    """A clock the test moves by hand (seconds since the epoch)."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def at_ms(self, ms: int) -> None:
        """Set the clock to exactly ``ms`` milliseconds since the epoch."""
        self.now = ms / 1000


def make_runner(
    redis: Redis,
    turns: list[list[dict[str, Any]]],
    clock: Clock,
    tools: Iterable[Any] | None = None,
    config: RunnerConfig | None = None,
) -> Runner:
    doc = agent_doc(turns) if tools is None else agent_doc(turns, tools=list(tools))
    agent = parse_agent_file(doc)
    return Runner(redis, agent.model, agent.template, config=config, clock=clock)


async def park(runner: Runner, chat_id: str, principal: str = "alice") -> list[ParkedCall]:
    run = await runner.start_turn(chat_id, principal, "go")
    events = await run.collect()
    last = events[-1]
    assert isinstance(last, MessageFinished) and last.reason == "tool-calls", events
    return [e.call for e in events if isinstance(e, CallParked)]


async def park_many(runner: Runner, chat_ids: list[str], concurrency: int = 32) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(chat_id: str) -> None:
        async with gate:
            await park(runner, chat_id)

    await asyncio.gather(*(one(c) for c in chat_ids))


def deadline_ms(call: ParkedCall) -> int:
    assert call.deadline is not None
    return int(call.deadline * 1000)


def said(events: list[Event]) -> str:
    return "".join(e.delta for e in events if isinstance(e, TextDelta))


async def resume(runner: Runner, chat_id: str) -> list[Event]:
    return await (await runner.resume(chat_id, "alice")).collect()
