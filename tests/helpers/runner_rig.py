"""What the runner tests share: a runner over a scripted agent (optionally on a clock the
test moves by hand), a turn's events, readers of them, and a count of round trips."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from parkway.runner import Runner, parse_agent_file
from parkway.runner.events import CallParked, Event, MessageFinished, TextDelta
from tests.helpers.support import agent_doc

__all__ = [
    "Clock",
    "RoundTrips",
    "clocked_runner",
    "finish",
    "make_runner",
    "parked",
    "said",
    "turn",
]


def make_runner(redis: Redis, turns: list[list[dict[str, Any]]], **kwargs: Any) -> Runner:
    agent = parse_agent_file(agent_doc(turns, **kwargs))
    return Runner(redis, agent.model, agent.template)


def said(events: list[Event]) -> str:
    return "".join(e.delta for e in events if isinstance(e, TextDelta))


def parked(events: list[Event]) -> list[Any]:
    return [e.call for e in events if isinstance(e, CallParked)]


def finish(events: list[Event]) -> str:
    last = events[-1]
    assert isinstance(last, MessageFinished), last
    return last.reason


async def turn(
    runner: Runner, chat: str, message: str = "hi", uid: str | None = None
) -> list[Event]:
    run = await runner.start_turn(chat, "alice", message, user_message_id=uid)
    return await run.collect()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def clocked_runner(
    redis: Redis, turns: list[list[dict[str, Any]]], clock: Clock, **kwargs: Any
) -> Runner:
    agent = parse_agent_file(agent_doc(turns, **kwargs))
    return Runner(redis, agent.model, agent.template, clock=clock)


class RoundTrips:
    """Counts network round trips (``send_packed_command`` calls, as bench/roundtrips.py
    does): a command, a pipeline or a script call is one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original: Callable[..., Any] = AbstractConnection.send_packed_command

        async def counted(
            conn: AbstractConnection, command: Any, check_health: bool = True
        ) -> None:
            self.count += 1
            await original(conn, command, check_health)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
