"""The floor: what the same Redis and client library cost for the least work Parkway's
operations could be, measured in the same run so targets can be stated as ratios to it.

One operation at a time, on the runner's redis-py asyncio client (``connect(url)``, as the
server builds it), ``time.perf_counter`` around each command (its own round trip, reply
parsed by redis-py):

- **PING**;
- **SET of 4 KB** (a 4,096-byte value), timed alone: the denominator of "park <= 3x the
  floor's SET";
- **GETDEL of 4 KB**, timed alone right after that SET: the denominator of "settle +
  resume <= 3x the floor" at 2 messages;
- **SET + GETDEL of 4 KB**: both of the above in one region (the issue's reference);
- **GETDEL of ~64 KB + json.loads**: the real 200-message history, as the runner stores
  it (the entries of a chat seeded by :func:`bench.workload.seed_chat`, joined into one
  JSON array, about 59 KB), SET untimed, then GETDEL and ``json.loads`` of the reply
  timed: a 200-message history read, the denominator of "settle + resume <= 4x the
  floor" at 200 messages.

All of them use the key ``bench:baseline``, deleted afterwards.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from redis.asyncio import Redis

from bench.stats import Latency
from bench.workload import BENCH_CONFIG, SeedSnapshot, Workload, seed_chat
from parkway.runner.engine.runner import Runner
from parkway.runner.store.keys import chat_keys

__all__ = ["BASELINE_KEY", "HISTORY_MESSAGES", "Floor", "run_floor"]

BASELINE_KEY = "bench:baseline"
HISTORY_MESSAGES = 200
_VALUE_4K = b"x" * 4096
_WARMUP = 100


@dataclass
class Floor:
    """The floor operations' latencies; ``history_bytes`` is the size of the JSON array
    the 64 KB row reads."""

    ping: Latency = field(default_factory=Latency)
    set_4k: Latency = field(default_factory=Latency)
    getdel_4k: Latency = field(default_factory=Latency)
    set_getdel_4k: Latency = field(default_factory=Latency)
    getdel_history: Latency = field(default_factory=Latency)
    history_bytes: int = 0
    history_messages: int = HISTORY_MESSAGES


async def history_array(redis: Redis) -> bytes:
    """The stored history of a freshly seeded 200-message chat, as one JSON array."""
    workload = Workload(HISTORY_MESSAGES)
    chat_id = f"bench-floor-{HISTORY_MESSAGES}"
    await SeedSnapshot.drop(redis, chat_id)
    runner = Runner(redis, workload.model(), workload.template(), config=BENCH_CONFIG)
    try:
        await seed_chat(runner, chat_id, "bench-principal", HISTORY_MESSAGES)
        entries = [
            e if isinstance(e, bytes) else e.encode()
            for e in await redis.lrange(chat_keys(chat_id).history, 0, -1)
        ]
    finally:
        await runner.aclose()
        await SeedSnapshot.drop(redis, chat_id)
    return b"[" + b",".join(entries) + b"]"


async def run_floor(redis: Redis, iterations: int) -> Floor:
    """Measure every floor operation ``iterations`` times (after a warm-up)."""
    floor = Floor()
    history = await history_array(redis)
    if len(json.loads(history)) != HISTORY_MESSAGES:
        raise RuntimeError("the floor's history array does not hold 200 entries")
    floor.history_bytes = len(history)
    for i in range(iterations + _WARMUP):
        t0 = time.perf_counter()
        await redis.ping()
        t1 = time.perf_counter()
        await redis.set(BASELINE_KEY, _VALUE_4K)
        t2 = time.perf_counter()
        await redis.getdel(BASELINE_KEY)
        t3 = time.perf_counter()
        await redis.set(BASELINE_KEY, history)
        t4 = time.perf_counter()
        reply = await redis.getdel(BASELINE_KEY)
        parsed = json.loads(reply) if reply is not None else None
        t5 = time.perf_counter()
        if parsed is None:
            raise RuntimeError("the floor's history value was not read back")
        if i >= _WARMUP:
            floor.ping.add(t1 - t0)
            floor.set_4k.add(t2 - t1)
            floor.getdel_4k.add(t3 - t2)
            floor.set_getdel_4k.add(t3 - t1)
            floor.getdel_history.add(t5 - t4)
    await redis.delete(BASELINE_KEY)
    return floor
