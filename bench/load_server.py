"""The worker under load: one ``parkway serve`` process, and what it holds.

:class:`Worker` runs ``python -m parkway.transport.cli serve`` (the ``parkway serve`` command,
with its uvicorn options: one process, one event loop) against the benchmark's Redis,
with only the ``PARKWAY_*`` settings the benchmark gives it, and its log in a file (a pipe nobody
reads would fill up and stall the worker when thousands of requests log at once).

:class:`RedisConnections` counts the connections the worker holds to Redis *as Redis
lists them* (``CLIENT LIST``). Over TCP they are told apart by their client port: the
worker's own sockets to the Redis port are read from ``/proc/<pid>/fd`` and
``/proc/<pid>/net/tcp{,6}``. Where that is not possible (a Unix socket, no ``/proc``),
they are the clients of the benchmark's database that were not there before the worker
started and do not carry the benchmark's own client name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.connection import parse_url

from bench.load_client import Connection, Endpoint, HttpFailure
from bench.redis_server import free_port

__all__ = [
    "BENCH_CLIENT_NAME",
    "RedisConnections",
    "Worker",
    "cpu_seconds",
    "rss_bytes",
    "sample_every",
    "worker_redis_ports",
]

ROOT = Path(__file__).resolve().parent.parent
BENCH_CLIENT_NAME = "parkway-load-bench"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Worker:
    """``parkway serve`` in a child process; stopped by :meth:`stop`."""

    def __init__(
        self, *, redis_url: str, agent_file: Path, env: Mapping[str, str], log_file: Path
    ) -> None:
        self.endpoint = Endpoint("127.0.0.1", free_port())
        self.redis_url = redis_url
        self.agent_file = agent_file
        self.env = dict(env)
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the worker was not started")
        return self.proc.pid

    def start(self) -> None:
        """Start the process (see :meth:`wait_until_healthy`)."""
        self._log = self.log_file.open("ab")
        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [
                sys.executable, "-m", "parkway.transport.cli", "serve",
                "--host", self.endpoint.host,
                "--port", str(self.endpoint.port),
                "--redis-url", self.redis_url,
                "--agent", str(self.agent_file),
                "--log-level", "warning",
            ],
            cwd=ROOT,
            env={**_inherited(), **self.env},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )  # fmt: skip

    async def wait_until_healthy(self, timeout_s: float = 30.0) -> None:
        """Poll ``/healthz`` until the worker answers 200."""
        proc = self.proc
        if proc is None:
            raise RuntimeError("the worker was not started")
        probe = Connection(self.endpoint, timeout_s=1.0)
        try:
            async with asyncio.timeout(timeout_s):
                while proc.poll() is None:
                    with contextlib.suppress(HttpFailure):
                        if (await probe.request("GET", "/healthz")).status == 200:
                            return
                    await asyncio.sleep(0.05)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"the worker did not become healthy:\n{self.log_tail()}") from None
        finally:
            probe.close()
        self.stop()
        raise RuntimeError(f"the worker exited:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the process this object started (SIGTERM, then SIGKILL after 20 s)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:].strip()
        except OSError:
            return ""

    def log_problems(self) -> int:
        """Lines of the worker's log that report an error or a traceback."""
        return len(self.problem_lines(None))

    def problem_lines(self, limit: int | None) -> list[str]:
        """The first ``limit`` lines of the worker's log that report an error or a
        traceback, with the line after each (a traceback's first frame)."""
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return []
        found = [
            " | ".join(lines[i : i + 2])[:300]
            for i, line in enumerate(lines)
            if "ERROR" in line or "Traceback" in line
        ]
        return found if limit is None else found[:limit]


def _inherited() -> dict[str, str]:
    """This process's environment without ``PARKWAY_*``: the worker's settings are only
    the ones the benchmark gives (and reports), whatever the caller's shell holds."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far; 0.0 without ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


def rss_bytes(pid: int) -> int:
    """Resident memory of the process; 0 without ``/proc``."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    folder = f"/proc/{pid}/fd"
    for name in os.listdir(folder):
        with contextlib.suppress(OSError):  # closed between listdir and readlink
            target = os.readlink(f"{folder}/{name}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def worker_redis_ports(pid: int, redis_port: int) -> set[int]:
    """Client ports of the process's established TCP connections to ``redis_port``."""
    inodes = _socket_inodes(pid)
    wanted = f":{redis_port:04X}"
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st ... inode (field 9); st 01 = ESTABLISHED
            if fields[2].endswith(wanted) and fields[3] == "01" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _client_port(entry: Mapping[str, Any]) -> int | None:
    addr = str(entry.get("addr", ""))
    port = addr.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


class RedisConnections:
    """Counts the connections a worker holds to Redis (see the module docstring)."""

    def __init__(self, redis: Redis, redis_url: str) -> None:
        self.redis = redis
        parts = urlsplit(redis_url)
        self.tcp_port = (parts.port or 6379) if parts.scheme in {"redis", "rediss"} else None
        self.db = str(parse_url(redis_url).get("db", 0))
        self.by_port = self.tcp_port is not None
        self._before: set[str] = set()
        self._pid = 0

    @property
    def method(self) -> str:
        """How the worker's connections are told apart from the others (for the report)."""
        if self.by_port:
            return "by client port (CLIENT LIST and the worker's sockets in /proc)"
        return "new clients of the benchmark's database (CLIENT LIST)"

    async def before_worker(self) -> None:
        """Note the clients already connected (the fallback method leaves them out)."""
        self._before = {str(c.get("id")) for c in await self.redis.client_list()}

    def watch(self, pid: int) -> None:
        """Count the connections of the process ``pid`` from now on."""
        self._pid = pid
        self.by_port = self.tcp_port is not None and Path(f"/proc/{pid}/fd").is_dir()

    async def count(self) -> int:
        """The worker's connections that Redis lists right now."""
        clients = await self.redis.client_list()
        if self.by_port and self.tcp_port is not None:
            try:
                ports = await asyncio.to_thread(worker_redis_ports, self._pid, self.tcp_port)
            except OSError:
                ports = set()
            return sum(1 for c in clients if _client_port(c) in ports)
        return sum(
            1
            for c in clients
            if str(c.get("id")) not in self._before
            and c.get("name") != BENCH_CLIENT_NAME
            and str(c.get("db")) == self.db
        )


async def sample_every(
    interval_s: float, stop: asyncio.Event, action: Callable[[], Awaitable[None]]
) -> None:
    """Call ``await action()`` every ``interval_s`` until ``stop`` is set."""
    while not stop.is_set():
        started = time.monotonic()
        await action()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, interval_s - (time.monotonic() - started)))
