"""A run's cgroup under cgroup v2, where the host delegates a subtree to Parkway.

The run's cgroup holds ``memory.max`` (the total), ``memory.swap.max`` 0 (nothing is
pushed to swap instead), ``memory.oom.group`` 1 (running out ends the whole run, not one
process of it) and ``pids.max``. Its parent must enable the memory and pids controllers
for its children (``cgroup.subtree_control``) and be writable by the server's user; the
kernel allows a folder that holds processes to do so only at the root of the hierarchy,
so the server's own cgroup is one only there, and elsewhere an operator delegates one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from contextlib import AbstractContextManager
from pathlib import Path

from parkway.runner.sandbox._cgroup._run import CgroupEnd, new_name, number, sweep, write
from parkway.runner.sandbox.provider import Limits

__all__ = ["V2Cgroups", "V2RunCgroup", "own_cgroup", "unusable"]

_CONTROLLERS = ("memory", "pids")
# How long a finished run's cgroup may take to empty (the kernel tears the pid
# namespace down), polled at this pace.
EMPTY_WAIT_S = 10.0
EMPTY_POLL_S = 0.02


def own_cgroup(proc: Path = Path("/proc/self")) -> Path | None:
    """The folder of this process's cgroup v2, or None (no unified hierarchy mounted)."""
    try:
        lines = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    if relative is None:
        return None
    for mount in mounts:
        fields = mount.split()
        # mountinfo: id parent dev root mountpoint options ... - fstype source options
        dash = fields.index("-") if "-" in fields else -1
        if dash > 0 and fields[dash + 1] == "cgroup2" and fields[3] == "/":
            return Path(fields[4]) / relative.lstrip("/")
    return None


def unusable(folder: Path) -> str | None:
    """Why runs cannot get child cgroups of ``folder`` here, or None when they can."""
    try:
        enabled = (folder / "cgroup.subtree_control").read_text().split()
    except OSError as exc:
        return f"{folder} is not a cgroup v2 folder ({exc.strerror})"
    missing = [name for name in _CONTROLLERS if name not in enabled]
    if missing:
        return (
            f"{folder}/cgroup.subtree_control does not enable {' and '.join(missing)} "
            "(write +memory +pids to it)"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable by uid {os.geteuid()} (delegate it to that user)"
    return None


class V2Cgroups:
    """Runs get their cgroups as children of one delegated cgroup v2 folder."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self.parents = (parent,)

    @property
    def layer(self) -> str:
        return f"cgroup v2 per run under {self.parent} (total memory, processes)"

    def create(self, limits: Limits) -> V2RunCgroup:
        """pids.max counts bwrap's own process too."""
        path = self.parent / new_name()
        path.mkdir(mode=0o755)
        try:
            write(path / "memory.max", limits.total_memory_bytes)
            if (path / "memory.swap.max").exists():  # absent without swap accounting
                write(path / "memory.swap.max", 0)
            write(path / "memory.oom.group", 1)
            write(path / "pids.max", limits.processes + 1)
            procs_fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except BaseException:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return V2RunCgroup(path, procs_fd)

    def sweep(self, now: float | None = None) -> int:
        return sweep(self.parents, now)


class V2RunCgroup:
    """One run's cgroup v2: the kernel ends the whole run when it runs out of memory."""

    def __init__(self, path: Path, procs_fd: int) -> None:
        self.path = path
        self.procs_fds = (procs_fd,)

    def watch(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # memory.oom.group does it all

    def kill(self) -> None:
        """Kill every process in the cgroup (``cgroup.kill``, Linux 5.14+)."""
        with contextlib.suppress(OSError):
            write(self.path / "cgroup.kill", 1)

    async def remove(self) -> CgroupEnd:
        """Read what the run used, wait for the cgroup to empty, and remove it."""
        for fd in self.procs_fds:
            os.close(fd)
        oom_kills = number(self.path / "memory.events", "oom_kill") or 0
        end = CgroupEnd(number(self.path / "memory.peak"), oom_kills > 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EMPTY_WAIT_S
        try:
            while self._populated() and loop.time() < deadline:
                self.kill()
                await asyncio.sleep(EMPTY_POLL_S)
        finally:
            with contextlib.suppress(OSError):
                self.path.rmdir()
        return end

    def _populated(self) -> bool:
        return bool(number(self.path / "cgroup.events", "populated"))
