"""The server side of a replay (private to :mod:`parkway.transport.cassettes`): ``parkway serve``
as a child process that can be killed and started again on the same Redis, and a
minimal HTTP client that reads whole responses.

The replay talks HTTP with the standard library so ``parkway replay`` needs nothing
beyond Parkway's own dependencies. Whatever ends a replay (a difference, an error, a
signal turned into an exception by ``parkway replay``), the server process and the
private Redis are stopped and the temporary folders removed (the replay's own, and the
server's copy of the sandbox's guest files).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from redis import Redis
from redis.exceptions import RedisError

from parkway.runner.errors import ParkwayError
from parkway.runner.sandbox import remove_stale_guests
from parkway.runner.store import EmbeddedRedis

__all__ = [
    "CassetteError",
    "ReplayServer",
    "ServerProcess",
    "check_redis",
    "http_request",
    "scratch_server",
]


class CassetteError(ValueError):
    """A cassette that cannot be read or replayed (a bad file, an agent that does not
    load, a Redis that does not answer, nothing to compare); the message says which and
    why, in one line."""


class ReplayServer(Protocol):
    """What a replay needs from a server: start it (returning its base URL), kill it
    with SIGKILL, stop it. A start after a kill must serve the same agent on the same
    Redis, signing sessions with the same key."""

    def start(self) -> str: ...

    def kill(self) -> None: ...

    def stop(self) -> None: ...


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """``parkway serve`` as a child process, for replays.

    ``PARKWAY_*`` variables of this process are not passed on (a replay serves exactly
    the cassette's agent with default settings); ``env`` adds variables and
    ``extra_args`` flags (``--record CASSETTE`` to record). The server's stderr goes to
    ``log_file``.
    """

    def __init__(
        self,
        agent_file: Path,
        redis_url: str,
        secret_key: str,
        *,
        log_file: Path,
        env: Mapping[str, str] | None = None,
        import_paths: Sequence[Path] = (),
        # generous: a busy CI machine can take 20 s or more to start a server, and one
        # that exits at startup is seen at once, not at the deadline
        startup_timeout_s: float = 120.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.agent_file = agent_file
        self.redis_url = redis_url
        self.secret_key = secret_key
        self.log_file = log_file
        self.env = dict(env or {})
        self.import_paths = [str(p) for p in import_paths]
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
        # The child runs this interpreter, so it finds Parkway where this process did
        # (never through a folder of Parkway's own: that would make its subpackages
        # importable by bare names). The user's own tool modules come from the agent's
        # folder and the project root (the working directory, which the child shares),
        # as `parkway serve` finds them.
        paths = [*self.import_paths, os.getcwd(), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        env["PARKWAY_SECRET_KEY"] = self.secret_key
        # A private loopback server only the replay talks to: anonymous sessions, as many
        # as the cassette's exchanges need (docs/security.md, "Identities").
        env["PARKWAY_AUTH"] = "anonymous"
        env["PARKWAY_SESSIONS_PER_MINUTE"] = "0"
        env.update(self.env)
        return env

    def start(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            raise CassetteError("the replay server is already running")
        port = _free_port()
        argv = [
            sys.executable, "-m", "parkway.transport.cli", "serve",
            "--host", "127.0.0.1", "--port", str(port),
            "--redis-url", self.redis_url,
            "--agent", str(self.agent_file),
            "--log-level", "warning",
            *self.extra_args,
        ]  # fmt: skip
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                argv,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.starts += 1
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CassetteError(f"the replay server exited at startup: {self._log_tail()}")
            # /healthz, not /readyz: the server answers only once its startup reached
            # Redis, and a replay must not wait on checks it does not need (a host
            # without a sandbox replays an agent that has execute_code all the same)
            with contextlib.suppress(OSError, http.client.HTTPException):
                if http_request(base_url, "GET", "/healthz", timeout_s=2.0)[0] == 200:
                    return base_url
            time.sleep(0.05)  # bounded polling for the server to come up
        self.kill()
        raise CassetteError(f"the replay server did not become healthy: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-15:]) or "(no output)"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()


def check_redis(redis_url: str) -> None:
    """Fail with one line unless ``redis_url`` is a Redis that answers."""
    try:
        client = Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    except ValueError as exc:  # redis-py's word on a malformed URL
        raise CassetteError(
            f"--redis-url {_redacted(redis_url)!r} is not a Redis URL: {exc}"
        ) from None
    try:
        client.ping()
    except (OSError, RedisError) as exc:
        raise CassetteError(f"cannot reach Redis at {_redacted(redis_url)}: {exc}") from None
    finally:
        client.close()


@contextlib.contextmanager
def scratch_server(
    agent_file: Path | None,
    agent: Mapping[str, Any],
    redis_url: str | None,
    env: Mapping[str, str] | None,
    import_paths: Sequence[Path] = (),
    *,
    extra_args: Sequence[str] = (),
) -> Iterator[ServerProcess]:
    """A server for the agent in a temporary folder, on an embedded Redis there
    (started here, so killing the server leaves Redis to the replay) or on
    ``redis_url``. It serves ``agent_file``, or a copy of ``agent`` written to the
    folder when there is no file, with ``extra_args`` on its command line."""
    if redis_url is not None:
        check_redis(redis_url)
    with tempfile.TemporaryDirectory(prefix="pw-replay-") as tmp:
        folder = Path(tmp)
        if agent_file is None:
            agent_file = folder / "agent.json"
            agent_file.write_text(json.dumps(agent), encoding="utf-8")
        embedded = EmbeddedRedis(folder / "redis") if redis_url is None else None
        server: ServerProcess | None = None
        try:
            if embedded is not None:
                try:
                    redis_url = embedded.start()
                except ParkwayError as exc:
                    raise CassetteError(f"cannot start Redis for the replay: {exc}") from None
            assert redis_url is not None
            server = ServerProcess(
                agent_file,
                redis_url,
                secrets.token_urlsafe(48),
                log_file=folder / "server.log",
                env=env,
                import_paths=import_paths,
                extra_args=extra_args,
            )
            yield server
        finally:
            if server is not None:
                server.stop()
                # a server killed with SIGKILL (--cold, or one that would not stop)
                # cannot remove its copy of the sandbox's guest files: do it for it
                remove_stale_guests()
            if embedded is not None:
                embedded.stop(force=True)  # private to this replay: nobody else uses it


def http_request(
    base_url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    timeout_s: float,
) -> tuple[int, str, bytes]:
    """Send one request; return the status, the content type and the whole body."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    headers = {"accept": "text/event-stream, application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["content-type"] = "application/json"
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("content-type") or "", response.read()
    finally:
        conn.close()
