"""Counting Redis network round trips, not commands.

redis-py writes every request to the socket through
``AbstractConnection.send_packed_command`` and then waits for the reply: a single
command is one call, a whole pipeline (or MULTI/EXEC) is one call carrying every
command, and the ``SCRIPT EXISTS`` check a pipeline sends before running Lua scripts is
a call of its own. So the number of calls *is* the number of round trips a caller
waits for. :func:`install` wraps that method once per process and counts calls and
bytes written into :data:`ROUND_TRIPS`.

The counter is process-wide: read it around a region in which only the code being
measured talks to Redis (the benchmarks run one operation at a time). One worker-wide
periodic task is counted apart, in ``background``: the runner's run watch
(``parkway-run-watch``: one pipelined read of stop requests every 0.2 s, and one
pipelined lease renewal every ``lease_s / 3``, for all the runs a worker has running).
It is not a round trip of any one operation, and lands in a measured region only when
its timer happens to fire there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.asyncio.connection import AbstractConnection

__all__ = ["BACKGROUND_TASKS", "ROUND_TRIPS", "RoundTrips", "install"]

# Names of worker-wide periodic tasks whose round trips go to ``background``.
BACKGROUND_TASKS = frozenset({"parkway-run-watch"})


@dataclass
class RoundTrips:
    """Round trips to Redis and request bytes written, since the process started."""

    count: int = 0
    bytes_sent: int = 0
    background: int = 0

    def snapshot(self) -> tuple[int, int]:
        return self.count, self.bytes_sent


ROUND_TRIPS = RoundTrips()
_installed = False


def _size(command: bytes | str | Iterable[bytes]) -> int:
    if isinstance(command, bytes | str):
        return len(command)
    return sum(len(part) for part in command)


def install() -> RoundTrips:
    """Start counting (idempotent) and return the process-wide counter."""
    global _installed  # noqa: PLW0603 - one patch per process, guarded here
    if _installed:
        return ROUND_TRIPS
    original = AbstractConnection.send_packed_command

    async def counted(
        self: AbstractConnection,
        command: bytes | str | Iterable[bytes],
        check_health: bool = True,
    ) -> None:
        if not isinstance(command, bytes | str):
            command = list(command)
        task = asyncio.current_task()
        if task is not None and task.get_name() in BACKGROUND_TASKS:
            ROUND_TRIPS.background += 1
        else:
            ROUND_TRIPS.count += 1
            ROUND_TRIPS.bytes_sent += _size(command)
        await original(self, command, check_health)

    patched: Any = counted
    AbstractConnection.send_packed_command = patched  # type: ignore[method-assign]
    _installed = True
    return ROUND_TRIPS
