"""``make load`` scenario 1: many SSE followers of running chats on one worker.

Each chat gets its own session and a new turn whose run stays running (the agent's
``hold`` tool); that first response is dropped once the tool is called. Followers,
``GET /api/chat/{id}/stream`` with the chat owner's token, are spread evenly over the
chats and opened in batches; all are then held open for ``hold_s`` while ``/healthz`` is
timed (:class:`HealthProber`) and the worker's Redis connections are counted
(:class:`bench.load_server.RedisConnections`). Then the runs are let go and every
follower must read ``finish`` and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import time
from collections import Counter
from pathlib import Path

from redis.asyncio import Redis

from bench.load_client import Connection, Endpoint, Follower, HttpFailure, open_stream
from bench.load_report import FollowersResult
from bench.load_server import RedisConnections, Worker, cpu_seconds, rss_bytes, sample_every
from bench.load_workload import (
    HOLD_TOOL,
    LoadConfig,
    Log,
    chat_body,
    holding_agent,
    new_session,
    worker_env,
)
from bench.stats import Latency

__all__ = ["HealthProber", "run_followers"]

SETTLE_S = 0.5  # between the ramp and the hold (see _follow)


class HealthProber:
    """``GET /healthz`` every ``every_s`` on its own keep-alive connection; samples,
    failures (by status or failure kind) and the client's own event-loop lag (how late
    the loop wakes the prober: a busy client would inflate every latency it measures)
    are kept per phase. A probe that spans two phases counts in neither."""

    def __init__(self, endpoint: Endpoint, every_s: float) -> None:
        self.endpoint = endpoint
        self.every_s = every_s
        self.phase = "ramp"
        self.samples: dict[str, Latency] = {"ramp": Latency(), "hold": Latency()}
        self.failures: dict[str, Counter[str]] = {"ramp": Counter(), "hold": Counter()}
        self.lag_max_s: dict[str, float] = {"ramp": 0.0, "hold": 0.0}

    async def run(self, stop: asyncio.Event) -> None:
        conn = Connection(self.endpoint, timeout_s=10.0)
        loop = asyncio.get_running_loop()
        due = loop.time()
        try:
            while not stop.is_set():
                phase = self.phase
                started = time.perf_counter()
                try:
                    status = str((await conn.request("GET", "/healthz")).status)
                except HttpFailure as exc:
                    status = exc.kind
                took = time.perf_counter() - started
                if phase in self.samples and phase == self.phase:
                    if status == "200":
                        self.samples[phase].add(took)
                    else:
                        self.failures[phase][status] += 1
                due = max(due + self.every_s, loop.time())
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                    if self.phase in self.lag_max_s:
                        lag = loop.time() - due
                        self.lag_max_s[self.phase] = max(self.lag_max_s[self.phase], lag)
        finally:
            conn.close()


async def _start_chats(
    endpoint: Endpoint, config: LoadConfig, prefix: str, log: Log
) -> list[tuple[str, str]]:
    """Start ``config.chats`` held runs, each with its own session; return (chat id,
    token) of those whose ``hold`` tool call arrived."""
    limit = asyncio.Semaphore(config.start_concurrency)
    failures: list[str] = []

    async def start(i: int) -> tuple[str, str] | None:
        chat_id = f"{prefix}-c{i}"
        async with limit:
            conn = Connection(endpoint, timeout_s=config.timeout_s)
            try:
                token = await new_session(conn)
                stream = await open_stream(
                    endpoint,
                    "POST",
                    "/api/chat",
                    {"authorization": f"Bearer {token}", "content-type": "application/json"},
                    chat_body(chat_id, "Hold on."),
                    timeout_s=config.timeout_s,
                )
                try:
                    if stream.status != 200:
                        failures.append(f"status {stream.status}: {(await stream.body())[:200]!r}")
                        return None
                    async with asyncio.timeout(config.timeout_s):
                        async for payload in stream.payloads():
                            if '"tool-input-available"' in payload and HOLD_TOOL in payload:
                                return chat_id, token  # dropping the response: the run goes on
                finally:
                    stream.close()
                failures.append("the stream ended before the hold tool was called")
            except (HttpFailure, TimeoutError) as exc:
                failures.append(str(exc) or "timeout")
            finally:
                conn.close()
        return None

    started = await asyncio.gather(*(start(i) for i in range(config.chats)))
    if failures:
        log(f"{len(failures)} chat(s) did not start, e.g. {failures[0]}")
    return [s for s in started if s is not None]


def _live(followers: list[Follower]) -> int:
    """Followers streaming right now: established, no ``error`` chunk, not ended."""
    return sum(1 for f in followers if f.established_at and not f.error_at and not f.ended_at)


def _classify(result: FollowersResult, followers: list[Follower], release_at: float) -> None:
    for f in followers:
        if f.status != 200:
            result.refused[f.failure or f"status {f.status}"] += 1
        elif f.error_chunks:
            result.error_chunks += 1
            result.error_texts[f.error_text] += 1
            if f.error_at < release_at:
                result.errors_before_release += 1
        elif f.ended_at and f.ended_at < release_at:
            result.ended_early += 1
        elif not (f.finished and f.done):
            result.unfinished += 1
        else:
            result.release_to_done.add(f.ended_at - release_at)


async def run_followers(
    config: LoadConfig, redis_url: str, *, redis: Redis, folder: Path, prefix: str, log: Log
) -> FollowersResult:
    """Scenario 1 (see the module docstring)."""
    result = FollowersResult(config.followers, config.chats)
    per_chat = math.ceil(config.followers / config.chats)
    # Raised only as far as this scenario needs: each chat's owner holds its followers
    # (+ its dropped first response, until the worker notices), the worker all of them.
    result.settings = {
        "PARKWAY_MAX_STREAMS_PER_PRINCIPAL": str(max(32, per_chat + 2)),
        "PARKWAY_MAX_STREAMS_PER_WORKER": str(max(12_000, config.followers + config.chats + 64)),
        "PARKWAY_MAX_RUNS_PER_WORKER": str(max(256, config.chats)),
    }
    gate = folder / "gate"
    agent_file = folder / f"{prefix}-followers.json"
    agent_file.write_text(json.dumps(holding_agent(gate)))
    worker = Worker(
        redis_url=redis_url,
        agent_file=agent_file,
        env={**worker_env(), **result.settings},
        log_file=folder / "followers-worker.log",
    )
    counter = RedisConnections(redis, redis_url)
    await counter.before_worker()
    result.redis_method = counter.method
    worker.start()
    try:
        await worker.wait_until_healthy()
        counter.watch(worker.pid)
        result.redis_method = counter.method
        log(f"followers: starting {config.chats} held runs")
        chats = await _start_chats(worker.endpoint, config, prefix, log)
        result.chats_started = len(chats)
        if not chats:
            raise RuntimeError(f"no chat could be started; worker log:\n{worker.log_tail()}")
        await _follow(
            config, worker=worker, counter=counter, chats=chats, gate=gate, result=result, log=log
        )
    finally:
        gate.touch()
        worker.stop()
    result.worker_log_problems = worker.log_problems()
    for line in worker.problem_lines(3):
        log(f"followers: worker log: {line}")
    return result


async def _ramp(
    config: LoadConfig,
    worker: Worker,
    followers: list[Follower],
    tasks: list[asyncio.Task[None]],
    *,
    result: FollowersResult,
    log: Log,
) -> None:
    """Open the followers a batch at a time (each batch waits for its first chunks, so
    the listen queue never overflows), adding their tasks to ``tasks``."""
    endpoint, pid = worker.endpoint, worker.pid
    t0, client0, worker0 = time.perf_counter(), time.process_time(), cpu_seconds(pid)
    for first in range(0, len(followers), config.batch):
        batch = followers[first : first + config.batch]
        tasks.extend(asyncio.create_task(f.run(endpoint, config.timeout_s)) for f in batch)
        await asyncio.wait([f.ready for f in batch], timeout=config.timeout_s + 5)
        opened = sum(1 for f in followers[: first + len(batch)] if f.established_at)
        log(f"followers: {opened:,} of {first + len(batch):,} established")
    t1, client1, worker1 = time.perf_counter(), time.process_time(), cpu_seconds(pid)
    result.ramp_s = t1 - t0
    result.client_cpu_ramp_s, result.worker_cpu_ramp_s = client1 - client0, worker1 - worker0
    result.established = sum(1 for f in followers if f.established_at)


async def _follow(
    config: LoadConfig,
    *,
    worker: Worker,
    counter: RedisConnections,
    chats: list[tuple[str, str]],
    gate: Path,
    result: FollowersResult,
    log: Log,
) -> None:
    endpoint, pid = worker.endpoint, worker.pid
    prober = HealthProber(endpoint, config.healthz_every_s)
    stop_probe, stop_sampling = asyncio.Event(), asyncio.Event()

    async def sample() -> None:
        result.redis_connections.append(await counter.count())

    probing = asyncio.create_task(prober.run(stop_probe))
    sampling = asyncio.create_task(sample_every(config.sample_every_s, stop_sampling, sample))
    followers = [Follower(*chats[i % len(chats)]) for i in range(config.followers)]
    tasks: list[asyncio.Task[None]] = []
    gc.freeze()  # the imported modules' objects: never garbage, costly to scan
    try:
        await _ramp(config, worker, followers, tasks, result=result, log=log)
        # A full collection over the followers' objects can stall this process for
        # hundreds of milliseconds, and every probe behind it: collect once now, keep
        # what exists out of later collections (gc.freeze), and let the prober's first
        # wake-up after the pause pass before the hold starts.
        prober.phase = "settle"
        gc.collect()
        gc.freeze()
        await asyncio.sleep(SETTLE_S)
        h0, client_h0, worker_h0 = time.perf_counter(), time.process_time(), cpu_seconds(pid)
        result.live_hold_start = _live(followers)
        prober.phase = "hold"
        log(f"followers: holding {config.hold_s:g} s")
        await asyncio.sleep(config.hold_s)
        prober.phase = "drain"
        stop_sampling.set()
        await sampling
        h1, client_h1, worker_h1 = time.perf_counter(), time.process_time(), cpu_seconds(pid)
        result.live_hold_end = _live(followers)
        result.load_average = os.getloadavg()[0]
        result.hold_s = h1 - h0
        result.client_cpu_hold_s = client_h1 - client_h0
        result.worker_cpu_hold_s = worker_h1 - worker_h0
        result.worker_rss = rss_bytes(pid)
        release_at = time.perf_counter()
        await asyncio.to_thread(gate.touch)
        log("followers: runs released, waiting for every stream to end")
        if tasks:
            await asyncio.wait(tasks, timeout=config.drain_s)
        _classify(result, followers, release_at)
    finally:
        gc.unfreeze()
        stop_probe.set()
        stop_sampling.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, probing, sampling, return_exceptions=True)
    result.healthz, result.healthz_ramp = prober.samples["hold"], prober.samples["ramp"]
    result.healthz_failures = prober.failures["hold"]
    result.client_lag_ramp_ms = prober.lag_max_s["ramp"] * 1000
    result.client_lag_hold_ms = prober.lag_max_s["hold"] * 1000
