"""``make load`` scenario 2: concurrent new turns from one session.

A fresh worker with the default admission limits; one session sends ``turns`` new
turns (``POST /api/chat``, each on a new chat id) at once. Each must either run to the
end (200, ``finish`` and ``[DONE]``) or be refused with 429 and ``Retry-After``; any
5xx, other status or lost connection is a failure.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from bench.load_client import Connection, Endpoint, HttpFailure, open_stream
from bench.load_report import TurnsResult
from bench.load_server import Worker
from bench.load_workload import LoadConfig, Log, chat_body, new_session, replying_agent, worker_env

__all__ = ["run_turns"]


async def run_turns(
    config: LoadConfig, redis_url: str, folder: Path, prefix: str, log: Log
) -> TurnsResult:
    """Scenario 2 (see the module docstring)."""
    result = TurnsResult(config.turns)
    agent_file = folder / f"{prefix}-turns.json"
    agent_file.write_text(json.dumps(replying_agent()))
    worker = Worker(
        redis_url=redis_url,
        agent_file=agent_file,
        env=worker_env(),
        log_file=folder / "turns-worker.log",
    )
    worker.start()
    try:
        await worker.wait_until_healthy()
        conn = Connection(worker.endpoint, timeout_s=config.timeout_s)
        try:
            token = await new_session(conn)
        finally:
            conn.close()
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        examples: dict[int | str, str] = {}
        log(f"turns: {config.turns} new turns at once from one session")
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                _turn(
                    worker.endpoint,
                    headers=headers,
                    chat_id=f"{prefix}-t{i}",
                    config=config,
                    result=result,
                    examples=examples,
                )
                for i in range(config.turns)
            )
        )
        result.wall_s = time.perf_counter() - t0
        for status, example in examples.items():
            log(f"turns: example of {status}: {example}")
    finally:
        worker.stop()
    result.worker_log_problems = worker.log_problems()
    for line in worker.problem_lines(3):
        log(f"turns: worker log: {line}")
    return result


async def _turn(
    endpoint: Endpoint,
    *,
    headers: dict[str, str],
    chat_id: str,
    config: LoadConfig,
    result: TurnsResult,
    examples: dict[int | str, str],
) -> None:
    started = time.perf_counter()
    try:
        stream = await open_stream(
            endpoint,
            "POST",
            "/api/chat",
            headers,
            chat_body(chat_id, "Say something."),
            timeout_s=config.timeout_s,
        )
    except HttpFailure as exc:
        result.no_response[exc.kind] += 1
        examples.setdefault(exc.kind, str(exc))
        return
    answered = time.perf_counter() - started
    try:
        if stream.status == 200:
            finished = done = False
            failed = False
            async with asyncio.timeout(config.timeout_s):
                async for payload in stream.payloads():
                    done = done or payload == "[DONE]"
                    finished = finished or '"type":"finish"' in payload
                    failed = failed or '"type":"error"' in payload
            if finished and done and not failed:
                result.completed += 1
                result.to_status_ok.add(answered)
                result.to_done.add(time.perf_counter() - started)
            else:
                result.incomplete += 1
            return
        body = await asyncio.wait_for(stream.body(), config.timeout_s)
        if stream.status == 429:
            result.limited += 1
            result.to_status_limited.add(answered)
            if not stream.headers.get("retry-after", "").strip():
                result.limited_without_retry_after += 1
            return
        bucket = result.server_errors if stream.status >= 500 else result.other
        bucket[stream.status] += 1
        examples.setdefault(stream.status, body[:300].decode(errors="replace"))
    except (HttpFailure, TimeoutError) as exc:
        if stream.status == 200:
            result.incomplete += 1
        else:
            result.no_response[getattr(exc, "kind", "timeout")] += 1
    finally:
        stream.close()
