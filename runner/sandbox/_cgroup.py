"""A run's own cgroup (v2), where the host delegates a subtree to Parkway.

In a cgroup the kernel bounds what rlimits cannot: the memory of all the run's
processes together (``memory.max``, with ``memory.swap.max`` 0 so nothing is pushed to
swap instead, and ``memory.oom.group`` 1 so running out ends the whole run, not one
process of it), and its processes and threads (``pids.max``). The launcher joins the
cgroup before it execs bwrap (``_spawn``), so every page and process of the run is
counted there; the cgroup is removed when the run is over.

Where the cgroup comes from (the ``sandbox_cgroup`` setting):

- ``auto``: the server's own cgroup, when it lets this user make children with the
  memory and pids controllers (its ``cgroup.subtree_control`` lists both and the folder
  is writable). The kernel allows that only at the root of the hierarchy, so elsewhere
  ``auto`` means no cgroup and the rlimit bound (:meth:`Limits.split`);
- ``off``: never;
- a path: a folder the operator delegated (see docs/operations.md); when it is not
  usable the sandbox is unavailable with the reason, never silently without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from parkway.runner.sandbox.provider import Limits

__all__ = ["CgroupEnd", "RunCgroup", "delegated", "own_cgroup", "unusable"]

_CONTROLLERS = ("memory", "pids")
_PREFIX = "parkway-run-"
# How long a finished run's cgroup may take to empty (the kernel tears the pid
# namespace down), polled at this pace.
_EMPTY_WAIT_S = 10.0
_EMPTY_POLL_S = 0.02


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


def delegated(setting: str) -> Path | None:
    """The folder runs get their cgroups in, per the ``sandbox_cgroup`` setting; None
    for the rlimit bound. Raises ValueError when an operator's folder is not usable."""
    if setting == "off":
        return None
    if setting == "auto":
        own = own_cgroup()
        return own if own is not None and unusable(own) is None else None
    folder = Path(setting)
    why = unusable(folder)
    if why is not None:
        raise ValueError(f"the sandbox cgroup {setting} cannot be used: {why}")
    return folder


@dataclass(frozen=True)
class CgroupEnd:
    """What a run's cgroup saw: its memory peak (bytes; None before Linux 5.19) and
    whether the kernel killed the run for passing ``memory.max``."""

    memory_peak_bytes: int | None
    out_of_memory: bool


class RunCgroup:
    """One run's cgroup: made with its limits, joined by the launcher, then removed."""

    def __init__(self, path: Path, procs_fd: int) -> None:
        self.path = path
        self.procs_fd = procs_fd

    @classmethod
    def create(cls, parent: Path, limits: Limits) -> RunCgroup:
        """A fresh child of ``parent`` holding ``limits``' totals (blocking: a few
        writes). pids.max counts bwrap's own process too. Raises OSError."""
        path = parent / f"{_PREFIX}{secrets.token_hex(8)}"
        path.mkdir(mode=0o755)
        try:
            _write(path / "memory.max", limits.total_memory_bytes)
            if (path / "memory.swap.max").exists():  # absent without swap accounting
                _write(path / "memory.swap.max", 0)
            _write(path / "memory.oom.group", 1)
            _write(path / "pids.max", limits.processes + 1)
            procs_fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except BaseException:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return cls(path, procs_fd)

    def kill(self) -> None:
        """Kill every process in the cgroup (``cgroup.kill``, Linux 5.14+)."""
        with contextlib.suppress(OSError):
            _write(self.path / "cgroup.kill", 1)

    async def remove(self) -> CgroupEnd:
        """Read what the run used, wait for the cgroup to empty, and remove it."""
        os.close(self.procs_fd)
        end = CgroupEnd(_number(self.path / "memory.peak"), self._oom_kills() > 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _EMPTY_WAIT_S
        while self._populated() and loop.time() < deadline:
            self.kill()
            await asyncio.sleep(_EMPTY_POLL_S)
        with contextlib.suppress(OSError):
            self.path.rmdir()
        return end

    def _populated(self) -> bool:
        try:
            events = (self.path / "cgroup.events").read_text().split()
        except OSError:
            return False
        return "populated" in events and events[events.index("populated") + 1] != "0"

    def _oom_kills(self) -> int:
        try:
            fields = (self.path / "memory.events").read_text().split()
        except OSError:
            return 0
        return int(fields[fields.index("oom_kill") + 1]) if "oom_kill" in fields else 0


def _write(path: Path, value: int) -> None:
    path.write_text(f"{value}\n")


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
