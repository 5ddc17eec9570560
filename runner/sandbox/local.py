"""Unsafe local mode: the guest bootstrap in a plain subprocess, with rlimits only.

Only for an operator who asks for it explicitly (a trusted single-user machine where
bubblewrap cannot run). The program runs as the server's own user: it can read what
the server can read (``/etc``, the home folder, the server's files through
``/proc/<pid>/``), reach the network, and signal the server. What it does get: the
rlimits, an empty environment, a fresh private work folder as its cwd (removed after
the run), and its own session, killed at the wall clock and at the end (a child that
calls ``setsid`` escapes that). On a root host ``RLIMIT_NPROC`` does not apply.

This provider is never a fallback for :class:`~parkway.runner.sandbox.bwrap.BwrapProvider`:
its :class:`~parkway.runner.sandbox.provider.Isolation` says ``confined=False``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from parkway.runner.sandbox import _host
from parkway.runner.sandbox._outcome import early_result
from parkway.runner.sandbox._session import Launch, request_size, run_program
from parkway.runner.sandbox.provider import Isolation, RunRequest, RunResult, SandboxUnavailable

__all__ = ["UnconfinedProvider"]

_LAYERS = (
    "rlimits (cpu, memory, processes, files)",
    "empty environment",
    "own session, killed at the end",
    "private work folder",
)
_DETAIL = (
    "UNSAFE local mode: no filesystem, network or process isolation; programs run as "
    "uid {uid} with the server's access"
)


class UnconfinedProvider:
    """Runs programs in a plain subprocess (see the module docstring)."""

    name = "unconfined"

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def check(self) -> Isolation:
        if shutil.which(self.python) is None:
            raise SandboxUnavailable(
                f"the interpreter {self.python} does not exist or is not executable"
            )
        return Isolation(self.name, False, _LAYERS, _DETAIL.format(uid=os.geteuid()))

    def close(self) -> None:
        """Nothing to release: the guest files run from the package's own folder."""

    async def run(self, request: RunRequest) -> RunResult:
        """Run one program unconfined. Raises ValueError only for a malformed request."""
        try:
            isolation = self.check()
        except SandboxUnavailable as exc:
            return early_result("unavailable", str(exc), Isolation(self.name, False, ()))
        size = request_size(request)
        if size > request.limits.request_bytes:
            message = (
                f"the program and its args are {size} bytes, over the "
                f"{request.limits.request_bytes}-byte cap: pass big data as an input"
            )
            return early_result("error", message, isolation)
        inputs, paths = _guest_paths(request)
        work = await asyncio.to_thread(tempfile.mkdtemp, prefix="parkway-unconfined-")
        try:
            launch = Launch(
                argv=[self.python, "-I", "-S", "-B", str(_host.GUEST_DIR / "bootstrap.py")],
                env={"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work},
                cwd=work,
                user=None,
                inputs=inputs,
                paths=paths,
                kill=_kill_group,
                kill_at_end=True,
            )
            return await run_program(launch, request, isolation)
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)


def _guest_paths(request: RunRequest) -> tuple[dict[str, str], list[str]]:
    """The inputs' paths and the sys.path folders, as the program sees them (the host's)."""
    inputs = {}
    for name, path in request.inputs.items():
        if not _host.valid_input_name(name):
            raise ValueError(f"input name {name!r}: use {_host.INPUT_NAME}")
        if not Path(path).is_file():
            raise ValueError(f"input {name!r}: {path} is not a file")
        inputs[name] = str(Path(path).resolve())
    paths = [str(_host.GUEST_DIR)]
    if request.library is not None:
        paths.append(str(Path(request.library).resolve()))
    return inputs, paths


def _kill_group(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)
