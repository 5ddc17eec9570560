"""Starting a run's launcher with exactly the descriptors it is given, and waiting for it.

Why not ``asyncio.create_subprocess_exec``: what the child inherits then depends on the
event loop. asyncio's own loop spawns through :class:`subprocess.Popen`, which closes
every descriptor but the ones passed; uvloop (which uvicorn picks where it is installed)
spawns through libuv, which leaves every inheritable descriptor open in the child: a
descriptor the server itself inherited (from a shell, a supervisor, a socket activator)
and libuv's own copies of the child's standard streams all reached the sandboxed program,
which could read a file it has no right to open. So the spawn is always
:class:`subprocess.Popen` with ``close_fds=True`` and an explicit ``pass_fds``: between
fork and exec the child closes every descriptor from 3 up but those, whatever the loop,
and bwrap, which passes on what it inherits, hands the program only those.

The wait does not block the loop: a pidfd (Linux 5.3+) becomes readable when the
process ends; elsewhere a thread waits.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Child", "spawn"]


class Child:
    """A started launcher: its pid, and an awaitable wait that reaps it."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        """The exit status once the process has ended (negative: the signal)."""
        if self._popen.poll() is not None:
            return self._popen.returncode
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
            return await asyncio.to_thread(self._popen.wait)
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not ended.done():
                ended.set_result(None)

        loop.add_reader(pidfd, readable)
        try:
            await ended
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        return self._popen.wait()

    def reap_later(self) -> None:
        """Reap the process in a background thread (it was killed, but has not ended
        within the caller's patience): no zombie, no unreaped :class:`~subprocess.Popen`."""
        if self._popen.poll() is None:
            threading.Thread(target=self._popen.wait, daemon=True).start()


def spawn(
    argv: Sequence[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    pass_fds: Sequence[int],
    env: Mapping[str, str],
    cwd: str,
    user: int | None,
    cgroup_procs: Sequence[int] = (),
) -> Child:
    """Start ``argv`` in a new session with only 0-2 and ``pass_fds`` open.

    ``user``: drop to this uid and gid, with no supplementary groups, before exec.
    ``cgroup_procs``: descriptors on the ``cgroup.procs`` of the run's cgroups (one in
    v2, one per hierarchy in v1); the child moves itself into each before it drops
    privileges and execs, so everything the launcher starts is counted there from its
    first page. Raises OSError when it cannot start (or cannot join them).
    """
    extra: dict[str, Any] = {}
    if cgroup_procs:
        extra["preexec_fn"] = functools.partial(_enter_then_drop, tuple(cgroup_procs), user)
    elif user is not None:
        extra.update(user=user, group=user, extra_groups=[])
    try:
        popen = subprocess.Popen(  # noqa: S603 (the provider's own argv: bwrap or an interpreter)
            list(argv),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=tuple(pass_fds),
            close_fds=True,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            **extra,
        )
    except subprocess.SubprocessError as exc:  # what a failed preexec_fn raises
        raise OSError(
            f"the launcher could not join its cgroup or drop privileges ({exc})"
        ) from None
    return Child(popen)


def _enter_then_drop(cgroup_procs: tuple[int, ...], user: int | None) -> None:
    """In the child, before exec: join the run's cgroups (``0`` names the writer), then
    no supplementary groups, the gid, the uid (in the order that keeps the right to make
    each call). It runs between fork and exec, so it only makes system calls."""
    for procs in cgroup_procs:
        os.write(procs, b"0")
    if user is not None:
        os.setgroups([])
        os.setgid(user)
        os.setuid(user)
