"""The pipes of a sandboxed run are closed once each, on asyncio's loop and on uvloop
(runner/sandbox/_session.py).

A descriptor closed twice is not harmless in a threaded host: between the two closes
another thread can be handed the same number, and the second close takes it away.
That is how a code run's workspace ``rmtree`` (in a thread) failed with EBADF under
uvloop, whose pipe transports close a pipe through libuv and then close its file
object too. The probe here stands in for that other thread: it opens fresh
descriptors the moment a pipe's file object lets its number go, and checks that
nothing closes them afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from parkway.runner.sandbox import _session


def _loops() -> list[Callable[[], asyncio.AbstractEventLoop]]:
    loops: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]
    with contextlib.suppress(ImportError):
        import uvloop

        loops.append(uvloop.new_event_loop)
    return loops


class _Probe:
    """Wraps ``os.fdopen``: every file object it makes records whether its descriptor
    was still open when it came to close it, and takes the freed number at once."""

    def __init__(self) -> None:
        self.real_fdopen = os.fdopen
        self.closed_under_file: list[int] = []  # closed by someone else first
        self.taken: list[int] = []  # opened in the window a file object's close leaves

    def fdopen(self, fd: int, mode: str = "r", buffering: int = -1, **kw: Any) -> io.FileIO:
        probe = self

        class ProbeFile(io.FileIO):
            def close(self) -> None:
                if not self.closed and self.closefd:
                    try:
                        os.fstat(self.fileno())
                    except OSError:
                        probe.closed_under_file.append(self.fileno())
                    super().close()
                    probe.taken.extend(os.pipe())
                else:
                    super().close()

        assert buffering == 0, "the pipes are unbuffered"
        return ProbeFile(fd, mode.replace("b", ""), closefd=kw.get("closefd", True))

    def closed_after_file(self) -> list[int]:
        """The descriptors taken in a close's window that something closed since."""
        gone = []
        for fd in self.taken:
            try:
                os.fstat(fd)
            except OSError:
                gone.append(fd)
        return gone

    def release(self) -> None:
        for fd in self.taken:
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Probe]:
    probe = _Probe()
    monkeypatch.setattr(os, "fdopen", probe.fdopen)
    yield probe
    monkeypatch.undo()
    probe.release()


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize("new_loop", _loops(), ids=lambda f: f.__module__.split(".")[0])
@pytest.mark.parametrize("ending", ["eof", "closed-early"])
def test_each_pipe_is_closed_once(
    new_loop: Callable[[], asyncio.AbstractEventLoop], ending: str, probe: _Probe
) -> None:
    """A read pipe that reaches its end, one closed while its writer lives, and a write
    pipe: each descriptor is closed exactly once, and none is left open."""

    async def one_run() -> None:
        plumbing = _session._Plumbing()
        out_r, out_w = plumbing.pipe()
        answers_w, answers_r = plumbing.pipe(child_reads=True)
        stream = await plumbing.reader(out_r)
        writer = await plumbing.writer(answers_w)
        writer.write(b"answer\n")
        assert os.read(answers_r, 16) == b"answer\n"
        if ending == "eof":
            os.write(out_w, b"output")
            for fd in plumbing.child_fds:
                os.close(fd)
            plumbing.child_fds.clear()
            assert await stream.read() == b"output"
        session: Any = SimpleNamespace(close_spill=lambda: None)
        await plumbing.close(session)
        for _ in range(5):  # let the transports finish closing
            await asyncio.sleep(0)

    new_loop().close()  # libuv keeps a pipe for the process from its first loop on
    before = _open_fds()
    loop = new_loop()
    try:
        loop.run_until_complete(one_run())
    finally:
        loop.close()
    assert probe.closed_under_file == []
    assert probe.closed_after_file() == []
    assert _open_fds() - set(probe.taken) - before == set()
