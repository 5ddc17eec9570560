"""Nothing the suite starts outlives it, however the suite ends.

A test run stopped with SIGTERM (``make`` passes it on to pytest, which dies at once,
running no fixture's teardown) or with Ctrl-C (pytest-xdist's workers may be stopped
mid-test) used to leave processes behind: the embedded ``redis-server`` of each worker
(started in a session of its own, so that a terminal's Ctrl-C reaches Parkway first),
``parkway serve`` processes and their own Redis, Node peers.

Every pytest process (the controller and each xdist worker) starts one *guard*: a small
process of its own session that ignores Ctrl-C and reads, on a pipe only the pytest
process holds, the id of every child that process starts (:func:`install` wraps
``subprocess.Popen``, which ``asyncio``'s subprocesses and execnet's workers use too). When
the pipe closes, which the kernel does however the pytest process ends (a normal exit,
an exception, SIGTERM, SIGKILL), the guard ends what is still running of those children
and of every process below them: SIGTERM first (a Parkway server then stops its own
Redis; a ``redis-server`` writes its files and exits), SIGKILL for what is left after a
grace period. A process id is matched with its start time, so an id the kernel reused
for someone else's process is never signalled.

On a run that ends normally the guard finds nothing left: the fixtures stopped it all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

__all__ = ["install"]

# The guard: reads "pid starttime" lines until EOF, then ends the trees under them.
_GUARD = r"""
import os, signal, sys, time

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
GRACE = float(sys.argv[1])

def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), fields[19]  # state, ppid, starttime

watched = {}
for line in sys.stdin.buffer:
    pid, _, start = line.strip().partition(b" ")
    if pid.isdigit():
        watched[int(pid)] = start

def alive(pid, start):
    found = stat(pid)
    return found is not None and found[0] != b"Z" and found[2] == start

def tree():
    children, starts = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = stat(int(name))
            if found is not None and found[0] != b"Z":
                children.setdefault(found[1], []).append(int(name))
                starts[int(name)] = found[2]
    todo = [pid for pid, start in watched.items() if alive(pid, start)]
    found = {}
    while todo:
        pid = todo.pop()
        if pid not in found and pid != os.getpid():
            found[pid] = starts.get(pid, watched.get(pid))
            todo.extend(children.get(pid, ()))
    return found

def send(procs, sig):
    for pid, start in procs.items():
        if alive(pid, start):
            try:
                os.kill(pid, sig)
            except OSError:
                pass

procs = tree()
if procs:
    send(procs, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline and any(alive(p, s) for p, s in procs.items()):
        time.sleep(0.05)
    send(procs, signal.SIGKILL)
"""

# This process's guard, once started (a list: set once, never rebound)
_guard: list[subprocess.Popen[bytes]] = []


def _start_time(pid: int) -> bytes:
    """The process's start time in clock ticks since boot (field 22 of its stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19]
    except OSError:
        return b"0"


def _watch(pid: int) -> None:
    if not _guard:
        return
    guard = _guard[0]
    if guard.stdin is None or guard.poll() is not None:
        return
    try:
        guard.stdin.write(b"%d %s\n" % (pid, _start_time(pid)))
        guard.stdin.flush()
    except (BrokenPipeError, ValueError):  # the guard is gone, or the pipe closed
        return


def install(grace_s: float = 12.0) -> None:
    """Start this process's guard and report every child it starts from now on.

    ``grace_s``: how long the children have after SIGTERM before SIGKILL (a Parkway
    server's graceful shutdown waits up to 10 s for its streams). Linux only (``/proc``);
    elsewhere this does nothing."""
    if _guard or not os.path.isdir("/proc/self"):
        return
    # Started before the wrapper below: the guard does not watch itself.
    guard = subprocess.Popen(
        [sys.executable, "-S", "-c", _GUARD, str(grace_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C in the terminal must not end it first
        # The guard starts no children of its own; it must not keep this process's
        # descriptors (a test's pipes) open.
        close_fds=True,
    )
    _guard.append(guard)
    original = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _watch(self.pid)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
