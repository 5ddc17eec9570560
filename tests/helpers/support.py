"""Test support: real servers (in a thread or as a process), SSE parsing, agent builders."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from parkway.runner.agent.agentfile import AgentFile, parse_agent_file
from parkway.transport.app import create_app
from parkway.transport.settings import Settings
from parkway.transport.sse import sse_chunks

TEST_SECRET = "parkway-test-secret-" + "x" * 32
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def types(chunks: Sequence[Mapping[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


async def eventually(
    check: Callable[[], Any], *, within_s: float = 20, every_s: float = 0.01, what: str = ""
) -> Any:
    """Poll ``check`` (sync, or async) until it returns something other than None or
    False, and return that; fail the test after ``within_s`` seconds.

    For waiting on what another task or process does (a model reached its gate, a chat
    went idle): the wait is bounded, and a condition never reached fails, naming
    ``what``, instead of letting the test go on (or time out) somewhere else.
    """
    deadline = time.monotonic() + within_s
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value is not None and value is not False:
            return value
        assert time.monotonic() < deadline, f"not reached within {within_s:g} s: {what or check}"
        await asyncio.sleep(every_s)


# -- agents ---------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "ref": "parkway.runner.demo:get_weather",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
PICK_TOOL = {
    "type": "client",
    "name": "pick",
    "description": "Pick one option.",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    "output_schema": {
        "type": "object",
        "properties": {"choice": {"type": "string"}},
        "required": ["choice"],
    },
}
CONFIRM_TOOL = {
    "type": "client",
    "name": "confirm",
    "description": "Ask a yes/no question.",
    "input_schema": {"type": "object"},
}
PUBLISH_TOOL = {
    "type": "function",
    "name": "publish",
    "ref": "tests.helpers.tools:publish",
    "needs_approval": True,
    "input_schema": {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    },
}
EDITABLE_PUBLISH_TOOL = {**PUBLISH_TOOL, "name": "publish_editable", "allow_edits": True}
CONNECT_EMBED = {
    "@ag.embed": {"@ag.references": {"workflow": {"slug": "__ag__request_connection"}}}
}
ALL_TOOLS = [
    WEATHER_TOOL,
    PICK_TOOL,
    CONFIRM_TOOL,
    PUBLISH_TOOL,
    EDITABLE_PUBLISH_TOOL,
    CONNECT_EMBED,
]


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def call(name: str, tool_input: Any = None) -> dict[str, Any]:
    return {"tool_call": {"name": name, "input": {} if tool_input is None else tool_input}}


# The source of a user's own tool module (written into a test's project folder): a
# server tool `hold` that holds its call while $HOLD_DIR/hold exists (bounded), after
# noting that it was entered, so a test knows a server is busy and keeps a turn running.
HOLD_TOOL_CODE = '''import os, time
from pathlib import Path


def hold(data):
    """Hold while asked to, then answer."""
    folder = os.environ.get("HOLD_DIR")
    if folder:
        Path(folder, "entered").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while Path(folder, "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"held": True}
'''


# A server tool that holds its run until the test creates a file (tests/helpers/tools.py).
WAIT_FOR_FILE_TOOL = {
    "type": "function",
    "name": "wait_for_file",
    "ref": "tests.helpers.tools:wait_for_file",
}


def held_agent_doc(turns: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """:func:`agent_doc` with ``wait_for_file`` among the tools."""
    return agent_doc(turns, tools=[*ALL_TOOLS, WAIT_FOR_FILE_TOOL])


def agent_doc(
    turns: Sequence[Sequence[Mapping[str, Any]]], tools: Sequence[Any] = ALL_TOOLS
) -> dict[str, Any]:
    return {
        "template": {"instructions": "test agent", "tools": list(tools)},
        "model": {"scripted": {"turns": [list(t) for t in turns]}},
    }


# -- servers --------------------------------------------------------------------------


def user_message(text_value: str, message_id: str = "u1") -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text_value}]}


def answered(
    chunks: Sequence[Mapping[str, Any]], output: Any, *, tool: str | None = None, user: str = "hi"
) -> list[dict[str, Any]]:
    """The history an AI SDK client posts after answering a parked client call: the user
    message, then the assistant message as its stream built it, with the tool part (the
    first one, or ``tool``'s) now ``output-available``."""
    part = next(
        c
        for c in chunks
        if c["type"] == "tool-input-available" and (tool is None or c["toolName"] == tool)
    )
    said = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    if said:
        parts.append({"type": "text", "text": said, "state": "done"})
    parts.append(
        {
            "type": f"tool-{part['toolName']}",
            "toolCallId": part["toolCallId"],
            "state": "output-available",
            "input": part["input"],
            "output": output,
        }
    )
    return [
        user_message(user),
        {"id": chunks[0]["messageId"], "role": "assistant", "parts": parts},
    ]


class ServerThread:
    """A real uvicorn serving Parkway in a background thread."""

    def __init__(
        self,
        redis_url: str,
        agent: Mapping[str, Any],
        *,
        model: Any = None,
        port: int | None = None,
        authenticator: Any = None,
        **settings: Any,
    ) -> None:
        self.port = port or free_port()
        # Test servers play the local playground: agent editing on unless a test says.
        settings.setdefault("agent_editing", True)
        # ... where every session is an editor (a shared Redis is no local playground,
        # so they are named: "*").
        settings.setdefault("editors", ("*",))
        # ... and anonymous sessions, chosen explicitly (a shared Redis is no local
        # playground, where anonymous is the default).
        settings.setdefault("auth", "anonymous")
        # ... and where the requester approves their own code, as on a local playground
        # (tests of approvals by others set code_self_approval=None or False).
        settings.setdefault("code_self_approval", True)
        self.settings = Settings(
            redis_url=redis_url,
            secret_key=SecretStr(TEST_SECRET),
            port=self.port,
            **settings,
        )
        parsed = parse_agent_file(agent)
        if isinstance(model, str):  # a model name: the server's --model
            self.settings = self.settings.model_copy(update={"model": model})
        elif model is not None:
            parsed = AgentFile(parsed.template, model)
        self.app = create_app(self.settings, agent=parsed, authenticator=authenticator)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


class ParkwayProcess:
    """``parkway serve`` as a real OS process (for kill -9 and multi-worker tests)."""

    def __init__(
        self,
        redis_url: str,
        agent_file: Path,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.extra_env = dict(env or {})
        # descriptors the server inherits, as from a shell or a supervisor
        self.pass_fds = tuple(pass_fds)
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.redis_url = redis_url
        self.agent_file = agent_file
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ParkwayProcess:
        env = {
            **os.environ,
            "PARKWAY_SECRET_KEY": TEST_SECRET,
            "PARKWAY_AUTH": "anonymous",  # a shared Redis is no local playground
            "PYTHONPATH": str(ROOT),
            # the requester approves their own code, as on a local playground (as
            # ServerThread's servers do)
            "PARKWAY_CODE_SELF_APPROVAL": "1",
            **self.extra_env,
        }
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "parkway.transport.cli", "serve",
                "--port", str(self.port),
                "--redis-url", self.redis_url,
                "--agent", str(self.agent_file),
                "--log-level", "warning",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            pass_fds=self.pass_fds,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                self._close_pipe()
                raise RuntimeError(f"parkway serve exited: {err}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise RuntimeError("parkway serve did not become healthy")

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no goodbyes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_pipe()


class Api:
    """A client of a running Parkway with its own session (principal)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        # Idle connections are dropped well before the server's keep-alive timeout (5 s):
        # a request sent on a connection the server is closing at that moment fails
        # with ReadError, which a busy machine made happen (an HTTP race, not Parkway's).
        self.http = httpx.AsyncClient(
            base_url=base_url, timeout=30, limits=httpx.Limits(keepalive_expiry=2)
        )
        self.token = ""
        self.principal = ""

    async def login(self) -> Api:
        response = await self.http.post("/api/sessions")
        assert response.status_code == 201, response.text
        body = response.json()
        self.token, self.principal = body["token"], body["principal"]
        self.http.headers["authorization"] = f"Bearer {self.token}"
        self.http.cookies.clear()
        return self

    async def chat(
        self, chat_id: str, messages: list[dict[str, Any]], **extra: Any
    ) -> httpx.Response:
        body = {"id": chat_id, "messages": messages, "trigger": "submit-message", **extra}
        return await self.http.post("/api/chat", json=body)

    async def say(
        self, chat_id: str, text_value: str, message_id: str = "u1"
    ) -> list[dict[str, Any]]:
        response = await self.chat(chat_id, [user_message(text_value, message_id)])
        assert response.status_code == 200, response.text
        return sse_chunks(response.text)

    async def state(self, chat_id: str) -> dict[str, Any]:
        response = await self.http.get(f"/api/chats/{chat_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    async def settle(self, chat_id: str, call_id: str, outcome: dict[str, Any]) -> httpx.Response:
        return await self.http.post(f"/api/chats/{chat_id}/calls/{call_id}", json=outcome)

    async def resume(self, chat_id: str) -> httpx.Response:
        return await self.http.post(f"/api/chats/{chat_id}/resume")

    def same_user(self, base_url: str) -> Api:
        """A client of another worker with this client's session (tokens are signed with
        the key all workers share)."""
        other = Api(base_url)
        other.token, other.principal = self.token, self.principal
        other.http.headers["authorization"] = f"Bearer {self.token}"
        return other

    async def aclose(self) -> None:
        await self.http.aclose()


async def turn_once_the_lease_lapses(
    api: Api, base_url: str, chat_id: str, text_value: str, message_id: str
) -> httpx.Response:
    """A new turn in ``chat_id`` on the worker at ``base_url``, as ``api``'s user, sent
    until the chat's previous worker (killed) has let its lease lapse (409 until then)."""
    other = api.same_user(base_url)

    async def next_turn() -> httpx.Response | None:
        response = await other.chat(chat_id, [user_message(text_value, message_id)])
        return None if response.status_code == 409 else response

    try:
        response: httpx.Response = await eventually(next_turn, within_s=30, every_s=0.05)
    finally:
        await other.aclose()
    return response


def run_sync(coro: Any) -> Any:
    return asyncio.run(coro)


@contextlib.contextmanager
def server_thread(
    redis_url: str,
    agent: Mapping[str, Any],
    *,
    model: Any = None,
    port: int | None = None,
    **settings: Any,
) -> Iterator[ServerThread]:
    server = ServerThread(redis_url, agent, model=model, port=port, **settings).start()
    try:
        yield server
    finally:
        server.stop()


def run_node_vectors(script: Path, vectors: Path, what: str) -> dict[str, Any]:
    """Run a Node vector script (tests/helpers/vectors/vector_run.mjs) over ``vectors``
    and return the summary it prints; skip when Node is missing (``what`` names the code
    unchecked)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"node is not on PATH: {what} cannot be checked")
    done = subprocess.run(
        [node, str(script), str(vectors)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.stdout, f"the node runner printed nothing; stderr: {done.stderr}"
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary
