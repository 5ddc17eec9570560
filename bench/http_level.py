"""HTTP benchmark: park, settle and resume through the real app over loopback HTTP.

For each history size the app runs in its own process (:mod:`bench.serve`: the
``parkway serve`` app and uvicorn options, agent file for the size's script) against the
same Redis, and an ``httpx.AsyncClient`` with keep-alive drives it with bearer-token
sessions, one request at a time, as an AI SDK ``useChat`` client would. Request bodies
carry the whole chat history as UI messages (``GET /api/chats/{id}`` of the seed), the
way the AI SDK sends it; they are encoded before the clock starts.

Definitions (client-side wall clock, from sending the request):

- **park**: ``POST /api/chat`` with the new user message until ``data: [DONE]``; the
  run parks on ``choose_option`` (``finish`` with ``finishReason: "tool-calls"``).
- **settle**: ``POST /api/chats/{id}/calls/{callId}`` with ``{"outcome": "output",
  "output": {"choice": "Oslo"}}`` until the JSON response is read.
- **resume**: ``POST /api/chats/{id}/resume`` after that settle: until the first SSE
  chunk (``start``: the lease is claimed and the run is loaded) and until ``[DONE]``.
- **answer + resume**: ``POST /api/chat`` carrying the tool output in the assistant
  message (the AI SDK's ``addToolOutput`` + ``sendAutomaticallyWhen``): settles and
  resumes in one response; until the first chunk and until ``[DONE]``.
  Settle + resume and answer + resume alternate between samples.
- **healthz**: ``GET /healthz`` (liveness: no Redis, a small JSON answer).
- **bare**: ``POST /bench/bare`` with the park request's body, until the JSON response
  is read; **bare SSE**: ``POST /bench/bare-sse`` with the park request's body (and, in
  answer + resume cycles, with the answer request's body), until ``[DONE]``. Both are
  bare Starlette routes on the same server (:mod:`bench.serve`: no Parkway code, no
  Redis): the floor of an HTTP request and of an SSE response here, which the
  overhead of Parkway's HTTP layer is measured net of.

Redis round trips per request are read from the server's ``/_bench/redis`` probe in a
separate, untimed pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from bench.redis_server import free_port
from bench.serve import BARE_PATH, BARE_SSE_PATH, PROBE_PATH, SERVER_PATH
from bench.stats import Counts, Latency
from bench.workload import (
    BENCH_CONFIG,
    CHOICE,
    PARK_TOOL,
    SeedSnapshot,
    Workload,
    measured_user_text,
    seed_chat,
)
from parkway.runner.engine.runner import Runner
from parkway.transport.sse import DONE, SseDecoder

__all__ = ["HTTP_OPERATIONS", "HTTP_REQUESTS", "HttpResult", "run_http_size"]

ROOT = Path(__file__).resolve().parent.parent
HTTP_OPERATIONS = (
    "healthz",
    "park",
    "settle",
    "resume_first",
    "resume_done",
    "answer_first",
    "answer_done",
    "bare",
    "bare_sse_park",
    "bare_sse_answer",
)
HTTP_REQUESTS = ("healthz", "park", "settle", "resume", "answer")


@dataclass
class HttpResult:
    """Everything measured over HTTP for one history size."""

    messages: int
    latency: dict[str, Latency] = field(
        default_factory=lambda: {k: Latency() for k in HTTP_OPERATIONS}
    )
    round_trips: dict[str, Counts] = field(
        default_factory=lambda: {k: Counts() for k in HTTP_REQUESTS}
    )
    park_body_bytes: int = 0
    answer_body_bytes: int = 0
    # The server's event loop and HTTP protocol, as it reports them (bench/serve.py).
    server_loop: str = ""
    server_http: str = ""


class _Server:
    """``python -m bench.serve`` in a child process; stopped by :meth:`stop`."""

    def __init__(self, redis_url: str, agent: Mapping[str, Any], folder: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.agent_file = folder / "agent.json"
        self.agent_file.write_text(json.dumps(agent))
        self.redis_url = redis_url
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        """Start the server process (see :meth:`wait_until_healthy`)."""
        env = {
            **os.environ,
            "PARKWAY_SECRET_KEY": secrets.token_urlsafe(48),
            # a loopback benchmark server: anonymous sessions, minted without a pace limit
            "PARKWAY_AUTH": "anonymous",
            "PARKWAY_SESSIONS_PER_MINUTE": "0",
            # quotas counted as a server counts them, with limits out of reach: its few
            # sessions make thousands of chats
            "PARKWAY_QUOTA_LIVE_CHATS": str(2**40),
            "PARKWAY_QUOTA_STORED_BYTES": str(2**50),
        }
        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [
                sys.executable, "-m", "bench.serve",
                "--port", str(self.port),
                "--redis-url", self.redis_url,
                "--agent", str(self.agent_file),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip

    async def wait_until_healthy(self) -> None:
        """Poll ``/healthz`` until the server answers (30 s at most)."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the benchmark server was not started")
        try:
            async with (
                asyncio.timeout(30),
                httpx.AsyncClient(base_url=self.base_url, timeout=1) as client,
            ):
                while proc.poll() is None:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/healthz")).status_code == 200:
                            return
                    await asyncio.sleep(0.05)
        except TimeoutError:
            self.stop()
            raise RuntimeError("the benchmark server did not become healthy") from None
        err = proc.stderr.read().decode() if proc.stderr else ""
        self.stop()
        raise RuntimeError(f"the benchmark server exited: {err.strip()[-2000:]}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@dataclass
class _Stream:
    """An SSE response: its chunks, and when the first chunk and ``[DONE]`` arrived."""

    chunks: list[dict[str, Any]]
    first_at: float
    done_at: float


async def _post_stream(client: httpx.AsyncClient, url: str, body: bytes) -> _Stream:
    chunks: list[dict[str, Any]] = []
    first_at = done_at = 0.0
    headers = {"content-type": "application/json"}
    async with client.stream("POST", url, content=body, headers=headers) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            raise RuntimeError(f"POST {url}: {response.status_code} {text[:500]}")
        decoder = SseDecoder()
        async for piece in response.aiter_bytes():
            for payload in decoder.feed(piece):
                if not first_at:
                    first_at = time.perf_counter()
                if payload == DONE:
                    done_at = time.perf_counter()
                    continue
                chunks.append(json.loads(payload))
    if not done_at:
        raise RuntimeError(f"POST {url}: the stream ended without [DONE]")
    return _Stream(chunks, first_at, done_at)


def _finish_reason(stream: _Stream) -> str | None:
    for chunk in stream.chunks:
        if chunk.get("type") == "finish":
            reason = chunk.get("finishReason")
            return reason if isinstance(reason, str) else None
    return None


def _encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _assistant_answer(stream: _Stream) -> tuple[dict[str, Any], str]:
    """The assistant UI message an AI SDK client holds after the parked turn, with the
    tool output added; and the parked call's id."""
    message_id = ""
    text: list[str] = []
    call: dict[str, Any] = {}
    for chunk in stream.chunks:
        kind = chunk.get("type")
        if kind == "start":
            message_id = str(chunk.get("messageId", ""))
        elif kind == "text-delta":
            text.append(str(chunk.get("delta", "")))
        elif kind == "tool-input-available" and chunk.get("toolName") == PARK_TOOL:
            call = chunk
    if not call or not message_id:
        raise RuntimeError("the parked turn's stream has no start or no tool call")
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    if text:
        parts.append({"type": "text", "text": "".join(text), "state": "done"})
    parts.append(
        {
            "type": f"tool-{PARK_TOOL}",
            "toolCallId": call["toolCallId"],
            "state": "output-available",
            "input": call["input"],
            "output": dict(CHOICE["output"]),
        }
    )
    return {"id": message_id, "role": "assistant", "parts": parts}, str(call["toolCallId"])


async def _round_trips(client: httpx.AsyncClient) -> int:
    return int((await client.get(PROBE_PATH)).json()["round_trips"])


async def run_http_size(
    redis_url: str,
    helper: Redis,
    workload: Workload,
    *,
    iterations: int,
    warmup: int,
    probes: int,
) -> HttpResult:
    """Measure ``iterations`` park/settle/resume cycles over HTTP at one history size."""
    result = HttpResult(workload.messages)
    with tempfile.TemporaryDirectory(prefix="parkway-bench-http-") as folder:
        server = _Server(redis_url, workload.agent_document(), Path(folder))
        server.spawn()
        try:
            await server.wait_until_healthy()
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
                await _run(
                    client,
                    helper,
                    workload,
                    result,
                    iterations=iterations,
                    warmup=warmup,
                    probes=probes,
                )
        finally:
            server.stop()
    return result


async def _run(
    client: httpx.AsyncClient,
    helper: Redis,
    workload: Workload,
    result: HttpResult,
    *,
    iterations: int,
    warmup: int,
    probes: int,
) -> None:
    session = await client.post("/api/sessions")
    session.raise_for_status()
    principal = str(session.json()["principal"])
    facts = (await client.get(SERVER_PATH)).json()
    result.server_loop, result.server_http = str(facts["loop"]), str(facts["http"])
    client.headers["authorization"] = f"Bearer {session.json()['token']}"
    seed_id = f"bench-http-seed-{workload.messages}"
    await SeedSnapshot.drop(helper, seed_id)
    seeder = Runner(helper, workload.model(), workload.template(), config=BENCH_CONFIG)
    await seed_chat(seeder, seed_id, principal, workload.messages)
    snapshot = await SeedSnapshot.take(helper, seed_id)
    seed_view = await client.get(f"/api/chats/{seed_id}")
    seed_view.raise_for_status()
    history: list[dict[str, Any]] = seed_view.json()["messages"]
    total = warmup + iterations + probes
    for i in range(total):
        measured = warmup <= i < warmup + iterations
        probe = i >= warmup + iterations
        chat_id = f"bench-http-{workload.messages}-{i}"
        await snapshot.clone(helper, chat_id)
        await _cycle(
            client,
            chat_id,
            history,
            i,
            timed=result if measured else None,
            probe=probe,
            result=result,
        )
        await SeedSnapshot.drop(helper, chat_id)
    await SeedSnapshot.drop(helper, seed_id)


async def _references(
    client: httpx.AsyncClient, park_body: bytes, timed: HttpResult | None
) -> None:
    """``GET /healthz``, then the bare routes with the park request's body."""
    await _healthz(client, timed)
    await _bare(client, park_body, timed, "bare")
    await _bare(client, park_body, timed, "bare_sse_park")


async def _healthz(client: httpx.AsyncClient, timed: HttpResult | None) -> None:
    """``GET /healthz`` (liveness: no Redis)."""
    t0 = time.perf_counter()
    health = await client.get("/healthz")
    t1 = time.perf_counter()
    if health.status_code != 200:
        raise RuntimeError(f"GET /healthz: {health.status_code}")
    if timed is not None:
        timed.latency["healthz"].add(t1 - t0)


async def _cycle(
    client: httpx.AsyncClient,
    chat_id: str,
    history: list[dict[str, Any]],
    i: int,
    *,
    timed: HttpResult | None,
    probe: bool,
    result: HttpResult,
) -> None:
    """One park, then settle + resume (even ``i``) or answer + resume (odd ``i``)."""

    async def counted(name: str, rt_before: int) -> None:
        if probe:
            result.round_trips[name].add(await _round_trips(client) - rt_before)

    user = {
        "id": f"hu{i}",
        "role": "user",
        "parts": [{"type": "text", "text": measured_user_text(i)}],
    }
    park_body = _encode({"id": chat_id, "messages": [*history, user], "trigger": "submit-message"})
    rt = await _round_trips(client) if probe else 0
    await _references(client, park_body, timed)
    await counted("healthz", rt)  # the bare routes make none

    rt = await _round_trips(client) if probe else 0
    t0 = time.perf_counter()
    parked = await _post_stream(client, "/api/chat", park_body)
    if _finish_reason(parked) != "tool-calls":
        raise RuntimeError("the HTTP turn did not park")
    if timed is not None:
        timed.latency["park"].add(parked.done_at - t0)
        timed.park_body_bytes = len(park_body)
    await counted("park", rt)
    assistant, call_id = _assistant_answer(parked)

    if i % 2 == 0:
        settle_body = _encode(dict(CHOICE))
        rt = await _round_trips(client) if probe else 0
        t0 = time.perf_counter()
        settled = await client.post(
            f"/api/chats/{chat_id}/calls/{call_id}",
            content=settle_body,
            headers={"content-type": "application/json"},
        )
        t1 = time.perf_counter()
        if settled.status_code != 200:
            raise RuntimeError(f"settle: {settled.status_code} {settled.text[:500]}")
        if timed is not None:
            timed.latency["settle"].add(t1 - t0)
        await counted("settle", rt)
        rt = await _round_trips(client) if probe else 0
        t0 = time.perf_counter()
        resumed = await _post_stream(client, f"/api/chats/{chat_id}/resume", b"")
        names = ("resume_first", "resume_done", "resume")
    else:
        answer_body = _encode(
            {"id": chat_id, "messages": [*history, user, assistant], "trigger": "submit-message"}
        )
        await _bare(client, answer_body, timed, "bare_sse_answer")
        rt = await _round_trips(client) if probe else 0
        t0 = time.perf_counter()
        resumed = await _post_stream(client, "/api/chat", answer_body)
        names = ("answer_first", "answer_done", "answer")
        if timed is not None:
            timed.answer_body_bytes = len(answer_body)
    if _finish_reason(resumed) != "stop":
        raise RuntimeError("the HTTP resume did not finish with an answer")
    if timed is not None:
        timed.latency[names[0]].add(resumed.first_at - t0)
        timed.latency[names[1]].add(resumed.done_at - t0)
    await counted(names[2], rt)


async def _bare(
    client: httpx.AsyncClient, body: bytes, timed: HttpResult | None, name: str
) -> None:
    """One request to a bare route: ``bare`` (JSON), else the SSE one."""
    t0 = time.perf_counter()
    if name == "bare":
        response = await client.post(
            BARE_PATH, content=body, headers={"content-type": "application/json"}
        )
        done_at = time.perf_counter()
        if response.status_code != 200 or response.json()["bytes"] != len(body):
            raise RuntimeError(f"POST {BARE_PATH}: {response.status_code}")
    else:
        stream = await _post_stream(client, BARE_SSE_PATH, body)
        done_at = stream.done_at
        if len(stream.chunks) != 2:
            raise RuntimeError(f"POST {BARE_SSE_PATH}: {len(stream.chunks)} chunks")
    if timed is not None:
        timed.latency[name].add(done_at - t0)
