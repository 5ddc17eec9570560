"""Fault injection with real parts: a Redis with AOF that can be restarted (SHUTDOWN or
SIGKILL) on the same port, and a TCP proxy in front of a Redis that can lose the reply
of a chosen command, refuse a chosen command, or go down and come back.

The proxy matches commands by bytes the client sends (a script's SHA names the script
in an EVALSHA), so a test can make exactly the park commit or exactly one settle fail
the way a dying connection makes it fail, while every other command goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.helpers.support import free_port
from tests.helpers.topologies import HOST, TopologyUnavailableError, _binaries, unavailable

__all__ = ["RedisProxy", "RestartableRedis"]


class RestartableRedis:
    """A redis-server on loopback with AOF (every write fsynced), restartable in place."""

    def __init__(self, folder: Path) -> None:
        try:
            self.binary, _ = _binaries()
        except TopologyUnavailableError as exc:
            unavailable("REDIS FAULT", str(exc))
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> RestartableRedis:
        argv = [
            self.binary,
            "--bind", HOST,
            "--port", str(self.port),
            "--dir", str(self.folder),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.folder / "redis.log"),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with redis.Redis(host=HOST, port=self.port, socket_timeout=1) as client:
                    if client.ping():
                        return self
            except (redis.RedisError, OSError):
                if self.proc.poll() is not None:
                    log = self.folder / "redis.log"
                    raise RuntimeError(f"redis-server exited; see {log}") from None
            time.sleep(0.02)
        raise RuntimeError("redis-server did not answer within 15 s")

    def shutdown(self) -> None:
        """A clean stop: SHUTDOWN (the AOF is complete). The client does not retry: the
        server closing the connection is SHUTDOWN's answer, which redis-py's default
        retries would take for a lost connection and try again, backing off for seconds
        against a server that is gone."""
        with (
            contextlib.suppress(redis.RedisError, OSError),
            redis.Redis(
                host=HOST, port=self.port, socket_timeout=5, retry=Retry(NoBackoff(), 0)
            ) as client,
        ):
            client.shutdown(nosave=True)
        self._reap()

    def kill(self) -> None:
        """A crash: SIGKILL (with appendfsync always, every acknowledged write is kept)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        self._reap()


Match = Callable[[bytes], bool]


class RedisProxy:
    """A TCP proxy to a Redis, for faults at a chosen command.

    - :meth:`lose_reply_of`: the next command matching is forwarded, and the
      connection is cut before its reply comes back (the client cannot tell whether
      it ran: the case a replayed script must survive); ``meanwhile``, if given, runs
      after the command has run and before the cut (another worker's write).
    - :meth:`refuse`: every command matching is dropped with its connection, unforwarded,
      until :meth:`allow`.
    - :meth:`down` / :meth:`up`: every connection is cut and new ones are refused.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._lose: list[Match] = []
        self._meanwhile: dict[int, Callable[[], Awaitable[None]]] = {}
        self._refuse: list[Match] = []
        self._down = False
        self._links: set[asyncio.StreamWriter] = set()
        self.lost = 0
        self.refused = 0

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    async def start(self) -> RedisProxy:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        self._cut_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def lose_reply_of(
        self, match: Match, meanwhile: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._lose.append(match)
        if meanwhile is not None:
            self._meanwhile[id(match)] = meanwhile

    def refuse(self, match: Match) -> None:
        self._refuse.append(match)

    def allow(self) -> None:
        self._refuse.clear()

    def down(self) -> None:
        self._down = True
        self._cut_all()

    def up(self) -> None:
        self._down = False

    def _cut_all(self) -> None:
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target_port)
        except (OSError, asyncio.CancelledError):
            writer.transport.abort()
            return
        self._links.update((writer, up_writer))
        cut = asyncio.Event()
        swallow = asyncio.Event()

        def abort() -> None:
            cut.set()
            writer.transport.abort()
            up_writer.transport.abort()

        async def client_to_redis() -> None:
            while data := await reader.read(65536):
                if any(match(data) for match in self._refuse):
                    self.refused += 1
                    abort()
                    return
                losing = next((m for m in self._lose if m(data)), None)
                if losing is not None:
                    swallow.set()
                up_writer.write(data)
                await up_writer.drain()
                if losing is not None:
                    self._lose.remove(losing)
                    self.lost += 1
                    await asyncio.sleep(0.05)  # Redis runs it; its reply never arrives
                    meanwhile = self._meanwhile.pop(id(losing), None)
                    if meanwhile is not None:
                        await meanwhile()
                    abort()
                    return
            abort()

        async def redis_to_client() -> None:
            while data := await up_reader.read(65536):
                if cut.is_set() or swallow.is_set():
                    return
                writer.write(data)
                await writer.drain()
            abort()

        try:
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                await asyncio.gather(client_to_redis(), redis_to_client())
        finally:
            # (one side may have failed while the other still runs: both end now, and
            # no stream is left for the garbage collector to find unclosed)
            abort()
            self._links.discard(writer)
            self._links.discard(up_writer)
