"""What both cgroup versions share: a run's cgroup as the provider sees it, what it
reports when it is removed, its name, and the sweep of the ones a crash left behind.

A run's cgroup is named ``parkway-run-<server pid>-<random>``: the pid says whose it
is, so a server that starts again can tell the cgroups of a server killed mid-run
(SIGKILL leaves no time to remove them) from those of a server still running beside it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from parkway.runner.sandbox.provider import Limits

__all__ = [
    "PREFIX",
    "CgroupEnd",
    "Cgroups",
    "RunCgroup",
    "new_name",
    "number",
    "sweep",
    "write",
]

PREFIX = "parkway-run-"
# A leftover younger than this is kept even when its server's pid is not running here:
# a server in another pid namespace that shares the parent folder may have made it a
# moment ago and not joined it yet (an empty cgroup is all a sweep ever removes).
_SWEEP_AGE_S = 60.0


@dataclass(frozen=True)
class CgroupEnd:
    """What a run's cgroup saw: its memory peak (bytes; None where the kernel does not
    say) and whether the kernel killed a process of the run for passing its total."""

    memory_peak_bytes: int | None
    out_of_memory: bool


class RunCgroup(Protocol):
    """One run's cgroup (in v1, one per hierarchy: memory and pids), made with the run's
    limits by :meth:`Cgroups.create`.

    ``procs_fds``: descriptors on its ``cgroup.procs`` files, which the launcher writes
    to before it execs bwrap (``_spawn``), so that every page and process of the run is
    counted from the first. ``watch`` is entered while the run goes (on the event loop):
    it does what the kernel does not do itself. ``remove``, once the launcher has ended,
    reads what the run used, kills what is left in it and removes it."""

    @property
    def procs_fds(self) -> tuple[int, ...]: ...

    def watch(self) -> AbstractContextManager[None]: ...

    async def remove(self) -> CgroupEnd: ...


class Cgroups(Protocol):
    """Where runs get their cgroups on this host: ``parents``, the folders their
    cgroups are made in; ``layer``, the isolation layer that says so (shown with every
    approval and by ``/healthz``)."""

    @property
    def parents(self) -> tuple[Path, ...]: ...

    @property
    def layer(self) -> str: ...

    def create(self, limits: Limits) -> RunCgroup:
        """A fresh cgroup holding ``limits``' totals (blocking: a few writes). Raises
        OSError when it cannot be made."""
        ...

    def sweep(self, now: float | None = None) -> int:
        """Remove the empty run cgroups left by a server that is gone; how many."""
        ...


def new_name() -> str:
    """The name of a new run's cgroup: this server's pid, then a random part."""
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"


def sweep(parents: Iterable[Path], now: float | None = None) -> int:
    """Remove from ``parents`` the run cgroups whose server is not running here, once
    they are a minute old; the number removed. Only an empty cgroup can be removed (the
    kernel refuses the others), and a run's processes die with its server (bwrap's
    ``--die-with-parent``), so what a crash leaves is empty."""
    now = time.time() if now is None else now
    removed = 0
    for parent in parents:
        for path in parent.glob(f"{PREFIX}*-*"):
            pid = path.name[len(PREFIX) :].partition("-")[0]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            try:
                if now - path.stat().st_mtime < _SWEEP_AGE_S:
                    continue
                path.rmdir()
            except OSError:
                continue
            removed += 1
    return removed


def write(path: Path, value: int | str) -> None:
    path.write_text(f"{value}\n")


def number(path: Path, field: str | None = None) -> int | None:
    """The number a cgroup file holds, or the one after ``field`` in a keyed file
    (``oom_kill 2``); None when the file or the field is missing."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        words = path.read_text().split()
        return int(words[words.index(field) + 1] if field is not None else words[0])
    return None
