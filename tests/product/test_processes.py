"""Claims about processes, tested with real processes: cold resume after SIGKILL, the
embedded Redis persisting across restarts, and startup validation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.helpers.support import (
    ROOT,
    Api,
    ParkwayProcess,
    agent_doc,
    answered,
    call,
    eventually,
    free_port,
    sse_chunks,
    text,
    turn_once_the_lease_lapses,
)

pytestmark = pytest.mark.slow

# These tests race one principal's requests on purpose; admission control (its own
# tests are in test_admission.py) must not turn the race into 429s.
UNLIMITED = {
    "PARKWAY_MAX_RUNS_PER_PRINCIPAL": "100000",
    "PARKWAY_MAX_STREAMS_PER_PRINCIPAL": "100000",
}


def write_agent(tmp_path: Path, turns: list[list[dict[str, Any]]]) -> Path:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent_doc(turns)))
    return path


async def test_cold_resume_after_sigkill_continues_on_a_new_process(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Nothing about a parked run lives only in a process: process A parks and is killed
    with SIGKILL; process B, sharing only Redis (and the session key), takes the answer
    and continues with the right script turn in the same assistant message."""
    agent = write_agent(
        tmp_path,
        [
            [text("first"), call("get_weather", {"city": "Paris"}), call("pick", {"q": "city"})],
            [text("resumed with {{last_tool_results}}")],
        ],
    )
    first = ParkwayProcess(redis_url, agent).start()
    try:
        api = await Api(first.base_url).login()
        chunks = await api.say("cold", "hi")
        await api.aclose()
    finally:
        first.kill()
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}

    second = ParkwayProcess(redis_url, agent).start()
    try:
        # Same principal: session tokens are signed with the key all workers share.
        other = api.same_user(second.base_url)
        response = await other.chat("cold", answered(chunks, {"choice": "Paris"}, tool="pick"))
        await other.aclose()
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    cont = sse_chunks(response.text)
    assert cont[0] == {"type": "start", "messageId": chunks[0]["messageId"]}
    said = "".join(c.get("delta", "") for c in cont)
    assert said == (
        'resumed with [{"result":{"city":"Paris","sky":"cloudy","temperature_c":14},'
        '"tool":"get_weather"},{"result":{"choice":"Paris"},"tool":"pick"}]'
    )


async def test_a_worker_killed_mid_tool_leaves_result_unknown_never_a_rerun(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """A server tool whose worker died while it ran is never silently run again: the
    next turn (on another worker, once the dead worker's lease lapses) tells the model
    the result is unknown."""
    marker = tmp_path / "marker.txt"
    hang_tool = {
        "type": "function",
        "name": "hang",
        "ref": "tests.helpers.tools:hang",
        "timeout_s": 60,
    }
    agent = tmp_path / "agent.json"
    agent.write_text(
        json.dumps(
            agent_doc(
                [[call("hang", {"marker": str(marker)})], [text("{{last_tool_results}}")]],
                tools=[hang_tool],
            )
        )
    )
    first = ParkwayProcess(redis_url, agent, env={"PARKWAY_LEASE_S": "1"}).start()
    api = await Api(first.base_url).login()
    try:
        sending = asyncio.create_task(api.say("crash", "go", "u1"))
        await eventually(lambda: marker.exists() and marker.read_text() == "started\n", within_s=30)
        first.kill()
        with contextlib.suppress(httpx.HTTPError):
            await sending
    finally:
        first.kill()
        await api.aclose()

    second = ParkwayProcess(redis_url, agent, env={"PARKWAY_LEASE_S": "1"}).start()
    try:
        response = await turn_once_the_lease_lapses(api, second.base_url, "crash", "again", "u2")
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    said = "".join(c.get("delta", "") for c in sse_chunks(response.text))
    [result] = json.loads(said)
    assert result["tool"] == "hang"
    assert result["result"]["error"].startswith("result unknown")
    assert marker.read_text() == "started\n"  # executed exactly once


def _serve_embedded(data_dir: Path, agent: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--port", str(port),
         "--data-dir", str(data_dir), "--agent", str(agent), "--log-level", "warning"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _wait_healthy(base_url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "parkway serve exited early"
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError("server did not become healthy")


async def test_embedded_redis_keeps_parked_runs_across_a_restart(tmp_path: Path) -> None:
    """The default needs no Redis at all, and a parked run survives stopping and
    starting Parkway again on the same data folder."""
    data_dir = Path(os.path.relpath(tmp_path / "data"))  # relative: keeps the socket path short
    agent = write_agent(
        tmp_path, [[call("pick", {"q": "a"})], [text("after restart {{last_tool_results}}")]]
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve_embedded(data_dir, agent, port)
    try:
        _wait_healthy(base, proc)
        api = await Api(base).login()
        chunks = await api.say("persist", "hi")
        await api.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert b"Parkway is serving" in out and b"embedded" in out
    assert (data_dir / "secret.key").exists()

    proc = _serve_embedded(data_dir, agent, port)
    try:
        _wait_healthy(base, proc)
        again = api.same_user(base)
        response = await again.chat("persist", answered(chunks, {"choice": "kept"}, tool="pick"))
        await again.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert response.status_code == 200, response.text
    assert "after restart" in "".join(c.get("delta", "") for c in sse_chunks(response.text))


def test_an_invalid_agent_file_fails_at_startup_naming_the_entry(tmp_path: Path) -> None:
    """A bad template never reaches a run: startup fails with the entry named."""
    bad = tmp_path / "bad.json"
    doc = agent_doc(
        [[text("x")]], tools=[{"type": "function", "name": "f", "ref": "no.such.module:fn"}]
    )
    bad.write_text(json.dumps(doc))
    result = subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--agent", str(bad), "--data-dir", str(tmp_path / "d")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert b"tools[0] 'f'" in result.stderr and b"no.such.module" in result.stderr


def test_an_external_redis_without_a_secret_key_is_refused_at_startup(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Several workers must share one signing key, so it is required with an external
    Redis (one that answers: an unreachable one is reported first); the error says
    which variable to set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    result = subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--auth", "anonymous", "--redis-url", redis_url],
        cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert b"PARKWAY_SECRET_KEY is required" in result.stderr


async def test_resumes_racing_across_three_worker_processes_have_one_winner(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Resume vs resume across processes: 60 requests spread over three workers that
    share only Redis produce exactly one continuation, and the model runs once."""
    agent = write_agent(tmp_path, [[call("pick", {"q": "a"})], [text("the one continuation")]])
    workers = [ParkwayProcess(redis_url, agent, env=UNLIMITED).start() for _ in range(3)]
    try:
        owner = await Api(workers[0].base_url).login()
        chunks = await owner.say("race", "hi")
        call_id = next(c["toolCallId"] for c in chunks if c["type"] == "tool-input-available")
        settled = await owner.settle(
            "race", call_id, {"outcome": "output", "output": {"choice": "a"}}
        )
        assert settled.status_code == 200
        clients = []
        for worker in workers:
            client = owner.same_user(worker.base_url)
            clients.append(client)
        responses = await asyncio.gather(*(clients[i % 3].resume("race") for i in range(60)))
        state = await owner.state("race")
        for client in [owner, *clients]:
            await client.aclose()
    finally:
        for worker in workers:
            worker.stop()
    assert sorted(r.status_code for r in responses) == [200] + [409] * 59
    winner = next(r for r in responses if r.status_code == 200)
    assert "".join(c.get("delta", "") for c in sse_chunks(winner.text)) == "the one continuation"
    steps = [p for p in state["messages"][1]["parts"] if p["type"] == "step-start"]
    assert len(steps) == 2


async def test_a_worker_killed_during_a_resume_is_taken_over_by_another(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Resume vs crash with real processes: worker A resumes a settled chat and is
    killed with SIGKILL while the continuation's server tool runs; once A's lease lapses,
    worker B resumes the chat from the last persisted step, and the tool is never run a
    second time (the model is told its result is unknown)."""
    marker = tmp_path / "marker.txt"
    hang_tool = {
        "type": "function",
        "name": "hang",
        "ref": "tests.helpers.tools:hang",
        "timeout_s": 60,
    }
    pick = {"type": "client", "name": "pick", "input_schema": {"type": "object"}}
    turns = [
        [call("pick", {"q": "a"})],
        [text("working"), call("hang", {"marker": str(marker)})],
        [text("after the crash: {{last_tool_results}}")],
    ]
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(agent_doc(turns, tools=[pick, hang_tool])))
    first = ParkwayProcess(redis_url, agent, env={"PARKWAY_LEASE_S": "1"}).start()
    api = await Api(first.base_url).login()
    try:
        chunks = await api.say("rk", "go")
        call_id = next(c["toolCallId"] for c in chunks if c["type"] == "tool-input-available")
        settled = await api.settle("rk", call_id, {"outcome": "output", "output": {"x": 1}})
        assert settled.status_code == 200
        resuming = asyncio.create_task(api.resume("rk"))
        await eventually(lambda: marker.exists() and marker.read_text() == "started\n", within_s=30)
        first.kill()
        with contextlib.suppress(httpx.HTTPError):
            await resuming
    finally:
        first.kill()
        await api.aclose()

    second = ParkwayProcess(redis_url, agent, env={"PARKWAY_LEASE_S": "1"}).start()
    try:
        other = api.same_user(second.base_url)

        async def take_over() -> httpx.Response | None:
            response = await other.resume("rk")
            return None if response.status_code == 409 else response

        # busy until A's lease lapses
        response = await eventually(take_over, within_s=30, every_s=0.05)
        await other.aclose()
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    cont = sse_chunks(response.text)
    assert cont[0] == {"type": "start", "messageId": chunks[0]["messageId"]}
    said = "".join(c.get("delta", "") for c in cont)
    assert said.startswith("after the crash: ")
    [result] = json.loads(said[len("after the crash: ") :])
    assert result["tool"] == "hang"
    assert result["result"]["error"].startswith("result unknown")
    assert marker.read_text() == "started\n"  # never run twice
