"""A private, throw-away Redis on a loopback TCP port for the benchmarks.

It runs the same ``redis-server`` binary the embedded default uses
(:func:`parkway.runner.store.embedded.redis_server_binary`), without persistence (``--save ''
--appendonly no``), so the numbers measure Redis' in-memory work and the loopback
network, not disk writes. :meth:`LoopbackRedis.stop` ends the process this object
started, and nothing else.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from parkway.runner.store.embedded import redis_server_binary

__all__ = ["LoopbackRedis", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class LoopbackRedis:
    """Starts ``redis-server`` on a free 127.0.0.1 port; use as a context manager."""

    def __init__(self) -> None:
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0, attempts: int = 3) -> str:
        """Start the server and wait until it answers PING; return its URL.

        A port picked free can be taken by someone else before the server binds it, so
        a server that exits at once is retried on a new port.
        """
        self._dir = tempfile.TemporaryDirectory(prefix="parkway-bench-")
        for _ in range(attempts):
            self.port = free_port()
            args = [
                redis_server_binary(),
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--save", "",
                "--appendonly", "no",
                "--dir", self._dir.name,
                "--daemonize", "no",
                "--logfile", str(Path(self._dir.name) / "redis.log"),
            ]  # fmt: skip
            self._proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._proc.poll() is None:
                if _answers(self.port):
                    return self.url
                time.sleep(0.02)
            self._terminate()
        self.stop()
        raise RuntimeError("the benchmark's redis-server did not start")

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        """Stop the server this object started and remove its folder."""
        self._terminate()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> LoopbackRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
