"""The host side of one sandboxed run, shared by every local provider.

A provider says how to launch (:class:`Launch`: the argv, who runs it, how to kill
it); :func:`run_program` does the rest: it hands the request to the guest bootstrap
(``guest/bootstrap.py``) on stdin, reads stdout, stderr and the result from pipes with
byte caps (never unbounded), spills stdout past the inline cap, answers brokered tool
calls, kills the sandbox at the wall clock or the stdout hard cap, and classifies how
the run ended.

The host trusts nothing the guest writes: every stream is read through a pipe with a
cap, the result is parsed defensively, and the only file written on the host is the
stdout spill, created afresh (``O_EXCL``) in the caller's folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parkway.runner.sandbox._outcome import (
    STARTED,
    Capture,
    Collected,
    classify,
    early_result,
    size_text,
)
from parkway.runner.sandbox._spawn import Child, spawn
from parkway.runner.sandbox._tools import ToolServer
from parkway.runner.sandbox.provider import Isolation, RunRequest, RunResult, Status

__all__ = ["Launch", "guest_request", "request_size", "run_program"]

logger = logging.getLogger(__name__)

_CHUNK = 65536
# The result pipe carries the started mark and a header line before the result's JSON.
_HEADER_BYTES = len(STARTED) + 4096
# How long to wait for a killed launcher to be reaped.
_KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class Launch:
    """How a provider starts one run and ends it early."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    # Drop to this uid (and gid) before exec; None: run as the host's own user.
    user: int | None
    # name -> the input's path as the guest sees it; folders the guest adds to sys.path.
    inputs: Mapping[str, str]
    paths: Sequence[str]
    # Kills every process of the run, given the launcher's pid.
    kill: Callable[[int], None]
    # Whether a signal death shows as exit status 128 + signal (bwrap reports so).
    signal_as_128: bool = False
    # Kill again once the launcher has exited (what it left in its process group).
    kill_at_end: bool = False
    pipe_grace_s: float = 0.5
    # More descriptors the launcher reads (bwrap's --ro-bind-data inputs): passed to it
    # under their own numbers, and closed on the host once it has started (or failed
    # to): the run owns them.
    fds: Sequence[int] = ()
    # The run's cgroups (their cgroup.procs, opened): the launcher joins them before exec.
    cgroup_procs: Sequence[int] = ()


class _Session:
    """One run's readers: they fill in :class:`Collected` and kill the run at a cap."""

    def __init__(self, launch: Launch, request: RunRequest) -> None:
        self.launch = launch
        self.limits = request.limits
        self.spill_dir = request.spill_dir
        self.spill_fd: int | None = None
        self.spill_thread: ThreadPoolExecutor | None = None
        self.pid = 0
        self.collected = Collected(request.limits, signal_as_128=launch.signal_as_128)
        self.collected.stderr = Capture(request.limits.stderr_bytes)

    def kill(self, status: Status, message: str) -> None:
        if self.collected.killed_for is None:
            self.collected.killed_for = (status, message)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self.launch.kill(self.pid)

    async def read_stdout(self, reader: asyncio.StreamReader) -> None:
        got = self.collected
        inline_cap, cap = self.limits.stdout_inline_bytes, self.limits.stdout_cap_bytes
        pending: list[bytes] = []
        while chunk := await reader.read(_CHUNK):
            over = got.stdout_total + len(chunk) > cap
            chunk = chunk[: cap - got.stdout_total]
            got.stdout_total += len(chunk)
            if len(got.stdout) < inline_cap:
                got.stdout += chunk[: inline_cap - len(got.stdout)]
            if self.spill_dir is not None:
                pending.append(chunk)
                if got.stdout_total > inline_cap:
                    await self._spill(b"".join(pending))
                    pending.clear()
            if over:
                self.kill("output_limit", f"stdout passed its cap of {size_text(cap)}; killed")
                return

    async def _spill(self, data: bytes) -> None:
        """Append to the spill file (made on first use). A host that cannot write it
        keeps what it has and counts the rest: the run goes on. The file's operations
        run in order on one thread of the run's own, so closing it (:meth:`close_spill`)
        comes after any write still under way when the reader was cancelled."""
        loop = asyncio.get_running_loop()
        try:
            if self.spill_fd is None:
                assert self.spill_dir is not None
                self.spill_thread = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spill")
                fd, name = await loop.run_in_executor(
                    self.spill_thread, _new_spill_file, self.spill_dir
                )
                self.spill_fd, self.collected.spill_path = fd, Path(name)
            await loop.run_in_executor(self.spill_thread, _write_all, self.spill_fd, data)
        except OSError:
            logger.exception("cannot spill the sandbox's stdout into %s", self.spill_dir)
            self.spill_dir = None

    def close_spill(self) -> None:
        if self.spill_thread is not None:
            if self.spill_fd is not None:
                self.spill_thread.submit(os.close, self.spill_fd)
            self.spill_thread.shutdown(wait=False)

    async def read_stderr(self, reader: asyncio.StreamReader) -> None:
        assert self.collected.stderr is not None
        while chunk := await reader.read(_CHUNK):
            self.collected.stderr.add(chunk)

    async def read_result(self, reader: asyncio.StreamReader) -> None:
        cap = _HEADER_BYTES + self.limits.result_bytes
        raw = self.collected.result
        while chunk := await reader.read(_CHUNK):
            raw += chunk
            if len(raw) > cap:
                del raw[cap:]
                self.kill("output_limit", f"the result passed its cap of {size_text(cap)}")
                return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def guest_request(request: RunRequest, launch: Launch, fds: Mapping[str, int | None]) -> bytes:
    """What the bootstrap reads on stdin. Raises ValueError when ``args`` is not plain
    JSON."""
    limits = request.limits
    memory_bytes, processes = limits.split(cgroup=bool(launch.cgroup_procs))
    try:
        return json.dumps(
            {
                "code": request.code,
                "args": request.args,
                "limits": {
                    "cpu_s": limits.cpu_s,
                    "memory_bytes": memory_bytes,
                    "processes": processes,
                    "open_files": limits.open_files,
                    "file_bytes": limits.file_bytes,
                    "result_bytes": limits.result_bytes,
                },
                "fds": dict(fds),
                "inputs": dict(launch.inputs),
                "paths": list(launch.paths),
            },
            allow_nan=False,
            separators=(",", ":"),
        ).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"RunRequest.args must be plain JSON: {exc}") from None


def request_size(request: RunRequest) -> int:
    """The UTF-8 JSON size of code + args (what ``Limits.request_bytes`` bounds). Raises
    ValueError for a request no sandbox should see (args not JSON, no spill folder)."""
    if request.spill_dir is not None and not Path(request.spill_dir).is_dir():
        raise ValueError(f"RunRequest.spill_dir {request.spill_dir} is not a folder")
    try:
        args = json.dumps(request.args, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"RunRequest.args must be plain JSON: {exc}") from None
    return len(request.code.encode("utf-8", "surrogatepass")) + len(args)


async def run_program(launch: Launch, request: RunRequest, isolation: Isolation) -> RunResult:
    """Run ``request`` as ``launch`` says; see the module's docstring."""
    session = _Session(launch, request)
    plumbing = _Plumbing()
    try:
        return await plumbing.run(session, request, isolation)
    finally:
        await plumbing.close(session)


class _Plumbing:
    """The file descriptors, transports and tasks of one run, and their cleanup."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.parent_fds: list[int] = []  # ours to close, whatever happens
        self.child_fds: list[int] = []  # the child's ends: closed once it has them
        self.transports: list[asyncio.BaseTransport] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.proc: Child | None = None

    def pipe(self, *, child_reads: bool = False) -> tuple[int, int]:
        """(ours, the child's): a pipe the child writes to, or reads from."""
        read_end, write_end = os.pipe()
        ours, theirs = (write_end, read_end) if child_reads else (read_end, write_end)
        self.parent_fds.append(ours)
        self.child_fds.append(theirs)
        return ours, theirs

    async def reader(self, fd: int, limit: int = _CHUNK) -> asyncio.StreamReader:
        stream = asyncio.StreamReader(limit=limit)
        self.parent_fds.remove(fd)
        transport, _ = await self.loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), _pipe_file(fd, "rb")
        )
        self.transports.append(transport)
        return stream

    async def writer(self, fd: int) -> asyncio.WriteTransport:
        self.parent_fds.remove(fd)
        transport, _ = await self.loop.connect_write_pipe(asyncio.Protocol, _pipe_file(fd, "wb"))
        self.transports.append(transport)
        return transport

    def start(self, job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(job)
        self.tasks.append(task)
        return task

    async def run(self, session: _Session, request: RunRequest, isolation: Isolation) -> RunResult:
        launch, limits = session.launch, session.limits
        self.child_fds.extend(launch.fds)
        out_r, out_w = self.pipe()
        err_r, err_w = self.pipe()
        result_r, result_w = self.pipe()
        fds: dict[str, int | None] = {"result": result_w, "tool_requests": None}
        fds["tool_answers"] = None
        if request.broker is not None:
            requests_r, fds["tool_requests"] = self.pipe()
            answers_w, fds["tool_answers"] = self.pipe(child_reads=True)
        stdin = _memfd(guest_request(request, launch, fds))
        self.child_fds.append(stdin)
        started = self.loop.time()
        try:
            self.proc = proc = spawn(
                launch.argv,
                stdin=stdin,
                stdout=out_w,
                stderr=err_w,
                pass_fds=[*(fd for fd in fds.values() if fd is not None), *launch.fds],
                env=launch.env,
                cwd=launch.cwd,
                user=launch.user,
                cgroup_procs=launch.cgroup_procs,
            )
        except OSError as exc:
            return early_result("unavailable", f"the sandbox could not start: {exc}", isolation)
        session.pid = proc.pid
        for fd in self.child_fds:
            os.close(fd)
        self.child_fds.clear()
        readers = [
            self.start(session.read_stdout(await self.reader(out_r))),
            self.start(session.read_stderr(await self.reader(err_r))),
            self.start(session.read_result(await self.reader(result_r))),
        ]
        if request.broker is not None:
            tools = ToolServer(limits, request.broker, session.kill)
            requests = await self.reader(requests_r, limit=limits.request_bytes + 2)
            self.start(tools.serve(requests, await self.writer(answers_w)))
        try:
            remaining = max(0.0, started + limits.wall_s - self.loop.time())
            await asyncio.wait_for(proc.wait(), timeout=remaining)
        except TimeoutError:
            session.kill("timeout", f"killed after {limits.wall_s:g} s wall clock")
            await asyncio.wait_for(proc.wait(), timeout=_KILL_WAIT_S)
        wall_ms = (self.loop.time() - started) * 1000
        if launch.kill_at_end:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                launch.kill(proc.pid)
        # The launcher is gone; give the streams their last bytes (with a pid namespace
        # every writer is dead by now, so they end at once).
        await asyncio.wait(readers, timeout=launch.pipe_grace_s)
        if request.broker is not None:
            session.collected.tool_calls = tools.calls
        return classify(session.collected, proc.returncode, wall_ms, isolation)

    async def close(self, session: _Session) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.proc is not None and self.proc.returncode is None:
            session.kill("killed", "the run was cancelled")
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=_KILL_WAIT_S)
            except (TimeoutError, asyncio.CancelledError):
                self.proc.reap_later()
        for transport in self.transports:
            transport.close()
        for fd in (*self.parent_fds, *self.child_fds):
            os.close(fd)
        session.close_spill()


def _pipe_file(fd: int, mode: str) -> Any:
    """The file object a pipe transport is made from; its transport closes the pipe.

    asyncio's own loop closes the pipe by closing this file object. uvloop hands the
    descriptor to libuv, which closes it, and then closes the file object as well
    (MagicStack/uvloop#763): the second close hits whatever another thread opened under
    that number in between (a workspace's ``rmtree`` lost its directory this way). On
    any loop but asyncio's the file object leaves the descriptor to the transport.
    """
    owns_fd = isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop)
    return os.fdopen(fd, mode, buffering=0, closefd=owns_fd)


def _new_spill_file(folder: Path) -> tuple[int, str]:
    return tempfile.mkstemp(prefix="stdout-", suffix=".out", dir=folder)


def _memfd(data: bytes) -> int:
    """An in-memory file holding ``data``, read from the start: the child's stdin (a
    file, not a pipe, so nothing has to feed it while the child starts)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("parkway-sandbox-request", os.MFD_CLOEXEC)
    else:  # not Linux: an unlinked temporary file does the same
        fd = os.dup(tempfile.TemporaryFile().fileno())  # noqa: SIM115 (the fd outlives it)
    try:
        _write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
