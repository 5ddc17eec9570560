"""Liveness apart from readiness: ``/healthz`` answers 200 whenever the process serves,
Redis or not; ``/readyz`` answers 200 only when the worker can do its work, and says
which check failed. Every answer is held against the OpenAPI document."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import platform
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from parkway.runner.agent.agentfile import parse_agent_file
from parkway.transport.app import create_app
from parkway.transport.openapi import openapi_document
from parkway.transport.settings import Settings
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.faults import RedisProxy, RestartableRedis
from tests.helpers.openapi_check import ApiDocument
from tests.helpers.support import (
    TEST_SECRET,
    ServerThread,
    agent_doc,
    eventually,
    server_thread,
    text,
)

TURNS = [[text("hello")]]
CODE_AGENT = agent_doc(TURNS, tools=[{"type": "platform", "op": "execute_code"}])
CHECKS = {"redis", "sandbox", "models", "oauth", "mcp", "worker"}


def checked(response: httpx.Response) -> dict[str, Any]:
    """The answer's body, once it is held against the document."""
    ApiDocument(openapi_document(Settings())).check(response)
    body: dict[str, Any] = response.json()
    return body


@contextlib.asynccontextmanager
async def serving(redis_url: str, agent: dict[str, Any], **settings: Any) -> AsyncIterator[Any]:
    """The app, started (its lifespan), and an in-process client of it."""
    app = create_app(
        Settings(
            redis_url=redis_url, secret_key=SecretStr(TEST_SECRET), auth="anonymous", **settings
        ),
        agent=parse_agent_file(agent),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://parkway") as client:
            yield app, client


async def test_ready_and_live_normally(redis_url: str, redis: Redis) -> None:
    """A worker that serves, reaches Redis, has its model and its OAuth providers: 200
    on both, and /readyz names each check it made."""
    del redis
    async with serving(
        redis_url, agent_doc(TURNS), demo_oauth=True, token_key=SecretStr(TOKEN_KEY)
    ) as (_, client):
        live = checked(await client.get("/healthz"))
        ready_response = await client.get("/readyz")
    assert ready_response.status_code == 200
    ready = checked(ready_response)
    assert live == {"status": "ok"}
    assert ready["status"] == "ready"
    assert set(ready["checks"]) == CHECKS
    assert all(check["ok"] for check in ready["checks"].values()), ready
    assert ready["checks"]["redis"]["latency_ms"] >= 0
    assert ready["checks"]["oauth"]["providers"] == ["demo"]
    assert ready["checks"]["models"]["model"] == "scripted"
    assert ready["checks"]["sandbox"]["required"] is False  # no execute_code here


# -- Redis down: not ready, still alive ----------------------------------------------------


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[RedisProxy]:
    server = RestartableRedis(tmp_path).start()
    started = await RedisProxy(server.port).start()
    try:
        yield started
    finally:
        await started.aclose()
        server.stop()


async def test_redis_down_is_not_ready_but_alive_and_ready_again_when_back(
    proxy: RedisProxy,
) -> None:
    """With Redis unreachable a load balancer must stop sending requests here (503 on
    /readyz, within its 1 s PING budget), but an orchestrator must not restart the
    process (200 on /healthz): a restart would not bring Redis back. When Redis is back
    the same worker is ready again."""
    # (the proxy serves on this test's loop: the server starts and stops off it)
    server = ServerThread(proxy.url, agent_doc(TURNS), redis_pool_timeout_s=2.0)
    await asyncio.to_thread(server.start)
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
            assert (await client.get("/readyz")).status_code == 200
            proxy.down()
            not_ready = await client.get("/readyz")
            live = await client.get("/healthz")
            proxy.up()

            async def ready() -> httpx.Response | None:
                response = await client.get("/readyz")
                return response if response.status_code == 200 else None

            # (the worker's breaker lets a probe through after its cool-down:
            # docs/operations.md, "Connections, outages and limits")
            ready_again = await eventually(ready, within_s=15, every_s=0.1, what="ready")
    finally:
        await asyncio.to_thread(server.stop)
    assert not_ready.status_code == 503
    body = checked(not_ready)
    assert body["status"] == "not_ready"
    assert body["checks"]["redis"]["ok"] is False and body["checks"]["redis"]["reason"]
    assert [name for name, check in body["checks"].items() if not check["ok"]] == ["redis"]
    assert live.status_code == 200 and checked(live)["status"] == "ok"
    assert ready_again.status_code == 200, ready_again.text


# -- the sandbox, the model, shutting down ------------------------------------------------


async def test_an_unavailable_sandbox_fails_readiness_only_when_required(
    redis_url: str, redis: Redis
) -> None:
    """An agent with execute_code on a worker whose sandbox cannot run (here: no
    bubblewrap at that path) is a broken deployment: 503. The same sandbox with an agent
    that has no execute_code, or with the sandbox turned off by the operator, is
    reported and the worker stays ready."""
    del redis
    broken = {"sandbox_bwrap": "/nonexistent/bwrap"}
    async with serving(redis_url, CODE_AGENT, **broken) as (_, client):
        required = await client.get("/readyz")
    async with serving(redis_url, agent_doc(TURNS), **broken) as (_, client):
        unused = await client.get("/readyz")
    async with serving(redis_url, CODE_AGENT, sandbox="off") as (_, client):
        off = await client.get("/readyz")
    assert required.status_code == 503
    sandbox = checked(required)["checks"]["sandbox"]
    assert sandbox["ok"] is False and sandbox["required"] is True
    assert sandbox["available"] is False and sandbox["reason"]
    for response in (unused, off):
        assert response.status_code == 200, response.text
        sandbox = checked(response)["checks"]["sandbox"]
        assert sandbox["ok"] is True and sandbox["required"] is False
        assert sandbox["available"] is False and sandbox["reason"]


async def test_a_committed_model_without_its_key_is_not_ready(
    redis_url: str, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit may move the agent to a provider this worker has no key for: its runs
    would fail, so the worker is not ready, and the check names the missing key."""
    del redis
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    async with serving(redis_url, agent_doc(TURNS), agent_editing=True, editors=("*",)) as (
        _,
        client,
    ):
        session = (await client.post("/api/sessions")).json()
        client.headers["authorization"] = f"Bearer {session['token']}"
        agent = (await client.get("/api/agent")).json()
        template = {**agent["template"], "llm": "anthropic:claude-test"}
        commit = await client.post(
            "/api/agent/commit", json={"template": template, "expectedVersion": agent["version"]}
        )
        assert commit.status_code == 201, commit.text
        response = await client.get("/readyz")
    assert response.status_code == 503
    models = checked(response)["checks"]["models"]
    assert models["ok"] is False and models["model"] == "anthropic:claude-test"
    assert "ANTHROPIC_API_KEY" in models["reason"]


async def test_a_worker_shutting_down_is_not_ready(redis_url: str, redis: Redis) -> None:
    """Once the runner is closing (graceful shutdown: it takes no new runs), /readyz
    says so, while /healthz still answers."""
    del redis
    async with serving(redis_url, agent_doc(TURNS)) as (app, client):
        await app.state.runner.aclose(grace_s=1.0)
        response = await client.get("/readyz")
        live = await client.get("/healthz")
    assert response.status_code == 503
    worker = checked(response)["checks"]["worker"]
    assert worker["ok"] is False and "shutting down" in worker["reason"]
    assert live.status_code == 200


# -- what the probes say to anyone -----------------------------------------------------------

# A path on the host: a slash that starts a value or follows a space, a quote, a bracket
# or "=" (a URL's "//" and the slashes after its host are not paths)
PATH_LIKE = re.compile(r"""(?:^|[\s'"(\[=])~?/[\w.-]""")
LIMIT_WORDS = ("limit", "wall_s", "cpu_s", "memory", "bytes", "processes")


def strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, dict):
        return [*value, *(s for item in value.values() for s in strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return [value] if isinstance(value, str) else []


def versions_here() -> set[str]:
    """Version strings an attacker would look up: Parkway's, Python's, bubblewrap's."""
    found = {importlib.metadata.version("parkway"), platform.python_version()}
    bwrap = shutil.which("bwrap")
    if bwrap is not None:
        said = subprocess.run([bwrap, "--version"], capture_output=True, text=True, check=False)
        found |= set(re.findall(r"\d+\.\d+(?:\.\d+)?", said.stdout))
    return found


def test_the_probes_name_no_version_path_or_limit(redis_url: str, redis: Redis) -> None:
    """``/healthz`` and ``/readyz`` answer anyone, unauthenticated: they say whether the
    worker lives and can work, never what it runs (versions of Parkway, Python or
    bubblewrap), where (paths on the host) or within which limits, which is what an
    attacker reads first. Held for a ready worker and for one whose sandbox cannot start
    (its reason names the path it tried), on a real uvicorn."""
    del redis
    answers: list[httpx.Response] = []
    for broken in ({}, {"sandbox_bwrap": "/nonexistent/bwrap"}):
        with server_thread(redis_url, CODE_AGENT, **broken) as server:
            for path in ("/healthz", "/readyz"):
                answers.append(httpx.get(f"{server.base_url}{path}", timeout=10))
    live, ready, live_broken, not_ready = answers
    assert live.json() == live_broken.json() == {"status": "ok"}
    assert not_ready.status_code == 503, not_ready.text
    assert ready.json()["checks"]["redis"]["ok"] is True
    assert not_ready.json()["checks"]["sandbox"]["reason"]  # it still says it failed
    versions = versions_here()
    for answer in answers:
        body = answer.json()
        said = strings(body)
        text = answer.text.lower()
        assert not [v for v in versions if v in answer.text], (answer.url, versions, body)
        assert "bubblewrap" not in text and "python" not in text, body
        assert not [s for s in said if PATH_LIKE.search(s)], body
        assert not [w for w in LIMIT_WORDS if w in text], body
