"""A run's cgroup under cgroup v1, on a host whose memory and pids controllers are still
mounted as v1 hierarchies (a hybrid host, as many container hosts are) and writable.

In v1 each controller is a hierarchy of its own, so a run gets two cgroups of one name,
under the server's own cgroup in each: in the memory hierarchy ``memory.limit_in_bytes``
(the total) and, where swap is accounted, ``memory.memsw.limit_in_bytes`` (memory plus
swap, set to the same total: nothing is pushed to swap instead); in the pids hierarchy
``pids.max``. Without ``memory.memsw`` (a kernel booted without swap accounting) the
run's ``memory.swappiness`` is 0 and the layer says that swap is not counted.

v1 has no ``memory.oom.group``: the kernel's OOM killer kills one process of the run
(the largest) and lets the rest go on. Parkway ends the whole run instead, as v2 does:
it asks for the cgroup's OOM events (an eventfd registered through
``cgroup.event_control`` on ``memory.oom_control``) and, on the first, kills every
process of the sandbox, all but bwrap: bwrap reaps the sandbox's pid 1 and exits, as
when the wall clock ends a run. It has no ``cgroup.kill`` either: the run's processes
are listed from ``cgroup.procs`` and each is killed through a pidfd, once /proc says it
is still in the run's cgroup (so a pid reused in between is never hit).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from parkway.runner.sandbox._cgroup._run import CgroupEnd, new_name, number, sweep, write
from parkway.runner.sandbox._cgroup._v2 import EMPTY_POLL_S, EMPTY_WAIT_S
from parkway.runner.sandbox.provider import Limits

__all__ = ["V1Cgroups", "V1RunCgroup", "own_cgroups", "own_folders"]

logger = logging.getLogger(__name__)

_CONTROLLERS = ("memory", "pids")
_MEMSW = "memory.memsw.limit_in_bytes"


def own_folders(proc: Path = Path("/proc/self")) -> dict[str, Path]:
    """Controller -> the folder of this process's cgroup in that controller's v1
    hierarchy, for the memory and pids controllers that are mounted as v1."""
    try:
        lines = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:
        return {}
    found: dict[str, Path] = {}
    for line in lines:
        # /proc/self/cgroup: hierarchy id, its controllers (comma-separated), the path
        _, controllers, relative = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in _CONTROLLERS:
                folder = _mounted(mounts, controller, relative)
                if folder is not None:
                    found[controller] = folder
    return found


def _mounted(mounts: list[str], controller: str, relative: str) -> Path | None:
    """Where the cgroup ``relative`` of ``controller``'s v1 hierarchy is mounted."""
    for mount in mounts:
        fields = mount.split()
        # mountinfo: id parent dev root mountpoint options ... - fstype source options
        dash = fields.index("-") if "-" in fields else -1
        if dash < 0 or fields[dash + 1] != "cgroup" or len(fields) < dash + 4:
            continue
        if controller not in fields[dash + 3].split(","):
            continue
        root = fields[3].rstrip("/")
        if relative == root or relative.startswith(f"{root}/"):
            return Path(fields[4]) / relative[len(root) :].lstrip("/")
    return None


def own_cgroups() -> V1Cgroups | None:
    """The server's own v1 memory and pids cgroups, when this user may make children
    in both; else None."""
    folders = own_folders()
    memory, pids = folders.get("memory"), folders.get("pids")
    if memory is None or pids is None:
        return None
    if not (memory / "memory.limit_in_bytes").is_file() or not (pids / "cgroup.procs").is_file():
        return None
    if not all(os.access(folder, os.W_OK | os.X_OK) for folder in (memory, pids)):
        return None
    return V1Cgroups(memory, pids)


class V1Cgroups:
    """Runs get a cgroup in the memory hierarchy and one in the pids hierarchy, as
    children of the server's own."""

    def __init__(self, memory: Path, pids: Path) -> None:
        self.memory = memory
        self.pids = pids
        # Both controllers may share one hierarchy (mounted together): one folder then.
        self.parents = (memory,) if pids == memory else (memory, pids)

    @property
    def layer(self) -> str:
        under = " and ".join(str(parent) for parent in self.parents)
        if (self.memory / _MEMSW).exists():
            return f"cgroup v1 per run under {under} (total memory and swap, processes)"
        return f"cgroup v1 per run under {under} (total memory, processes; swap not counted)"

    def create(self, limits: Limits) -> V1RunCgroup:
        """pids.max counts bwrap's own process too."""
        name = new_name()
        made: list[Path] = []
        fds: list[int] = []
        try:
            for parent in self.parents:
                (parent / name).mkdir(mode=0o755)
                made.append(parent / name)
            memory, pids = self.memory / name, self.pids / name
            write(memory / "memory.limit_in_bytes", limits.total_memory_bytes)
            if (memory / _MEMSW).exists():  # memory + swap: no more than memory alone
                write(memory / _MEMSW, limits.total_memory_bytes)
            else:
                with contextlib.suppress(OSError):
                    write(memory / "memory.swappiness", 0)
            write(pids / "pids.max", limits.processes + 1)
            for folder in made:
                fds.append(os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            events = _oom_events(memory)
        except BaseException:
            for fd in fds:
                os.close(fd)
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        return V1RunCgroup(memory, tuple(made), tuple(fds), events)

    def sweep(self, now: float | None = None) -> int:
        return sweep(self.parents, now)


def _oom_events(memory: Path) -> int | None:
    """An eventfd the kernel signals when ``memory`` runs out (None where this kernel
    cannot: no eventfd, or no ``cgroup.event_control``)."""
    try:
        event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    except (AttributeError, OSError):
        return None
    try:
        control = os.open(memory / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
        try:
            # The kernel keeps the eventfd, not this descriptor: it may be closed now.
            write(memory / "cgroup.event_control", f"{event} {control}")
        finally:
            os.close(control)
    except OSError as exc:
        logger.warning(
            "no OOM events for %s (%s): a run out of memory loses a process", memory, exc
        )
        os.close(event)
        return None
    return event


class V1RunCgroup:
    """One run's cgroups v1 (memory, pids): Parkway ends the whole run when it runs out
    of memory (see the module docstring)."""

    def __init__(
        self, memory: Path, folders: tuple[Path, ...], procs_fds: tuple[int, ...], event: int | None
    ) -> None:
        self.memory = memory
        self.folders = folders
        self.procs_fds = procs_fds
        self._event = event
        self._out_of_memory = False

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """While the run goes, its first OOM event kills all of it."""
        if self._event is None:
            yield
            return
        loop = asyncio.get_running_loop()
        loop.add_reader(self._event, self._on_oom)
        try:
            yield
        finally:
            loop.remove_reader(self._event)

    def _on_oom(self) -> None:
        assert self._event is not None
        with contextlib.suppress(OSError):  # BlockingIOError: read already
            os.eventfd_read(self._event)
        self._out_of_memory = True
        self.kill(spare=_pid_namespace(os.getpid()))

    def kill(self, spare: str | None = None) -> None:
        """Kill every process in the run's cgroups, but those in the pid namespace
        ``spare`` (the server's own: the launcher's)."""
        for pid in sorted({pid for folder in self.folders for pid in _procs(folder)}):
            _kill_member(pid, self.memory.name, spare)

    async def remove(self) -> CgroupEnd:
        """Read what the run used, wait for the cgroups to empty, and remove them."""
        for fd in self.procs_fds:
            os.close(fd)
        oom_kills = number(self.memory / "memory.oom_control", "oom_kill") or 0
        end = CgroupEnd(
            number(self.memory / "memory.max_usage_in_bytes"),
            self._out_of_memory or oom_kills > 0,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EMPTY_WAIT_S
        try:
            while any(_procs(folder) for folder in self.folders) and loop.time() < deadline:
                self.kill()
                await asyncio.sleep(EMPTY_POLL_S)
        finally:
            if self._event is not None:
                os.close(self._event)  # unregisters it
                self._event = None
            for folder in self.folders:
                with contextlib.suppress(OSError):
                    folder.rmdir()
        return end


def _procs(folder: Path) -> list[int]:
    try:
        return [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_member(pid: int, name: str, spare: str | None) -> None:
    """SIGKILL ``pid`` if it is in the run's cgroup ``name`` (and not in the pid
    namespace ``spare``). The pidfd holds on to the process the pid named when it was
    opened; /proc, read after, says whether that process is the run's (if the pid was
    reused since, the kill goes nowhere)."""
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return  # gone already
        # before Linux 5.3: no pidfd, so a pid reused between the check and the kill
        # could be hit (only if the run's process ended just then)
    try:
        if _member(pid, name) and (spare is None or _pid_namespace(pid) != spare):
            if pidfd is None:
                os.kill(pid, signal.SIGKILL)
            else:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass  # it ended meanwhile
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _member(pid: int, name: str) -> bool:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    return any(line.rsplit("/", 1)[-1] == name for line in lines)
