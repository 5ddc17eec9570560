"""One sweeper in its own OS process, for the multi-process test in test_sweeper.py.

``python -m tests.helpers.sweep_worker REDIS_URL NOW_S BATCH``: connects, prints ``ready``,
waits for a line on standard input (so that all workers start sweeping together), then
runs ``sweep_once`` with a clock fixed at ``NOW_S`` until a sweep finds nothing
expired, and prints one JSON line: its summed counts and the calls it timed out itself.
"""

from __future__ import annotations

import asyncio
import json
import sys

from redis.asyncio import Redis

from parkway.runner import Runner, Sweeper, parse_agent_file
from tests.helpers.support import agent_doc, text


async def sweep(url: str, now: float, batch: int) -> dict[str, object]:
    redis = Redis.from_url(url)
    try:
        await redis.ping()
        agent = parse_agent_file(agent_doc([[text("unused")]]))
        runner = Runner(redis, agent.model, agent.template, clock=lambda: now)
        mine: list[str] = []

        async def record(chat_id: str, tool_call_id: str, pending_left: int) -> None:
            mine.append(f"{chat_id} {tool_call_id}")

        sweeper = Sweeper(runner, batch=batch, on_timeout=record)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        totals = {"sweeps": 0, "expired": 0, "settled": 0, "already_settled": 0, "missing": 0}
        while True:
            report = await sweeper.sweep_once()
            totals["sweeps"] += 1
            if report.expired == 0:
                break
            totals["expired"] += report.expired
            totals["settled"] += report.settled
            totals["already_settled"] += report.already_settled
            totals["missing"] += report.missing + report.failed
        return {**totals, "mine": mine}
    finally:
        await redis.aclose()


if __name__ == "__main__":
    result = asyncio.run(sweep(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps(result), flush=True)
