"""Code Mode benchmarks: the sandbox's start, ``execute_code`` after approval, and a grep
over a 10 MB artifact (docs/code-mode.md; targets from the Code Mode issue).

- **sandbox start to first output**: the provider's ``run`` of ``print(1)``, timed from
  the call to the moment the result is back (which includes the first byte of stdout,
  and the sandbox's exit after it): an upper bound of "start to first byte";
- **execute_code after approval**: at the runner level, from the approval's settle to
  the call's output event in the resumed run (settle, resume claim, the sandbox run of
  ``result(1)``, the commit), trivial code;
- **grep over 10 MB**: ``pw.grep`` over a 10 MB text artifact mounted read-only,
  the provider's wall time (reported, no target).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis

from bench.stats import Latency
from bench.workload import BENCH_CONFIG, finished_run
from parkway.runner import Runner, parse_agent_file
from parkway.runner.codemode.runtime import CodeMode
from parkway.runner.events import CallParked, ToolSucceeded
from parkway.runner.sandbox.bwrap import BwrapProvider
from parkway.runner.sandbox.provider import RunRequest, SandboxUnavailable
from parkway.runner.store.keys import chat_keys

__all__ = ["CodeModeResult", "run_code_mode"]

FIRST_OUTPUT_TARGET_MS = 25.0
AFTER_APPROVAL_TARGET_MS = 60.0
GREP_BYTES = 10 * 2**20


@dataclass
class CodeModeResult:
    first_output: Latency
    after_approval: Latency
    grep_10mb: Latency
    grep_matches: int
    isolation: str
    unavailable: str | None = None


def _log_text() -> bytes:
    """About 10 MB of log lines, one in 1,000 an ERROR."""
    lines = []
    size, n = 0, 0
    while size < GREP_BYTES:
        level = "ERROR" if n % 1000 == 0 else "INFO"
        line = (
            f"2026-10-{1 + n % 28:02d} 12:{n % 60:02d} {level} request {n} served in {n % 97} ms\n"
        )
        lines.append(line)
        size += len(line)
        n += 1
    return "".join(lines).encode()


async def _first_output(provider: BwrapProvider, samples: int, warmup: int) -> Latency:
    latency = Latency()
    for index in range(samples + warmup):
        start = time.perf_counter()
        result = await provider.run(RunRequest(code="print(1)"))
        elapsed = time.perf_counter() - start
        if result.status != "ok" or result.stdout != b"1\n":
            raise RuntimeError(f"print(1) in the sandbox: {result.status} {result.message}")
        if index >= warmup:
            latency.add(elapsed)
    return latency


def _log_folder() -> Path:
    """A folder the sandbox uid can read, holding the 10 MB log as ``log``."""
    folder = Path(tempfile.mkdtemp(prefix="parkway-bench-"))
    folder.chmod(0o755)
    log = folder / "log"
    log.write_bytes(_log_text())
    log.chmod(0o644)
    return folder


async def _grep(provider: BwrapProvider, samples: int) -> tuple[Latency, int]:
    latency, matches = Latency(), 0
    folder = await asyncio.to_thread(_log_folder)
    try:
        code = "result(len(pw.grep(r'ERROR', artifacts.text('log'), max_matches=100000)))"
        for _ in range(samples):
            start = time.perf_counter()
            result = await provider.run(RunRequest(code=code, inputs={"log": folder / "log"}))
            elapsed = time.perf_counter() - start
            if result.status != "ok":
                raise RuntimeError(f"grep in the sandbox: {result.status} {result.message}")
            latency.add(elapsed)
            matches = int(result.result)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return latency, matches


async def _after_approval(redis: Redis, code: CodeMode, samples: int, warmup: int) -> Latency:
    doc = {
        "template": {
            "instructions": "bench",
            "tools": [{"type": "platform", "op": "execute_code"}],
        },
        "model": {
            "scripted": {
                "turns": [
                    [{"tool_call": {"name": "execute_code", "input": {"code": "result(1)"}}}],
                    [{"text": "done"}],
                ]
            }
        },
    }
    agent = parse_agent_file(doc)
    runner = Runner(redis, agent.model, agent.template, code=code, config=BENCH_CONFIG)
    latency = Latency()
    try:
        for index in range(samples + warmup):
            chat = f"bench-code-{index}"
            events = await finished_run(await runner.start_turn(chat, "bench", "go"))
            [parked] = [e.call for e in events if isinstance(e, CallParked)]
            start = time.perf_counter()
            await runner.settle(chat, "bench", parked.tool_call_id, {"outcome": "approved"})
            run = await runner.resume(chat, "bench")
            async for event in run.events():
                if isinstance(event, ToolSucceeded):
                    elapsed = time.perf_counter() - start
                    if event.output.get("status") != "ok":
                        raise RuntimeError(f"execute_code: {event.output}")
                    if index >= warmup:
                        latency.add(elapsed)
            if run.task is not None:
                await run.task  # its last log batch, before the chat's keys are deleted
            keys = chat_keys(chat)
            await redis.delete(*keys.all(), keys.artifacts, keys.artifact_data)
    finally:
        await runner.aclose()
    return latency


async def run_code_mode(redis: Redis, *, samples: int, warmup: int) -> CodeModeResult:
    provider = BwrapProvider()
    try:
        isolation = await asyncio.to_thread(provider.check)
    except SandboxUnavailable as exc:
        empty = Latency()
        return CodeModeResult(empty, empty, empty, 0, "", unavailable=str(exc))
    code = CodeMode(provider)
    await code.start()
    first = await _first_output(provider, samples, warmup)
    after = await _after_approval(redis, code, max(samples // 2, 10), warmup)
    grep, matches = await _grep(provider, max(samples // 20, 5))
    return CodeModeResult(
        first_output=first,
        after_approval=after,
        grep_10mb=grep,
        grep_matches=matches,
        isolation=", ".join(isolation.layers),
    )
