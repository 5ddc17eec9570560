"""The sandbox tests' rig: a probed bwrap provider (skipped, or failed under
PARKWAY_REQUIRE_SANDBOX=1, when unavailable), folders the sandbox uid can read, and
what the host sees of the sandbox's processes through /proc."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from parkway.runner.sandbox import (
    Broker,
    BwrapProvider,
    Limits,
    RunRequest,
    RunResult,
    SandboxProvider,
    SandboxUnavailable,
)

SANDBOX_UID = 65534
REQUIRED = os.environ.get("PARKWAY_REQUIRE_SANDBOX") == "1"
# Small limits for the attacks: each stays bounded even when the sandbox fails. The
# total lets all twelve processes have their 256 MiB (the total's own tests set theirs).
SMALL = Limits(
    wall_s=4.0,
    cpu_s=3,
    memory_bytes=256 * 2**20,
    processes=12,
    total_memory_bytes=12 * 256 * 2**20,
    disk_bytes=8 * 2**20,
)


def host_probe(samples: list[Any], measure: Callable[[], Any]) -> Broker:
    """A broker that measures the host's view (``measure()``) whenever the program calls
    a tool: a way to look at a sandbox while it is alive, at a point the program picks."""

    async def broker(name: str, tool_input: Any) -> Any:
        samples.append(measure())
        return None

    return broker


@contextlib.contextmanager
def no_leftovers() -> Iterator[None]:
    """Fails when the block leaves a process of the sandbox uid behind."""
    before = uid_processes()
    yield
    left = uid_processes() - before
    assert not left, f"sandbox processes outlived the run: {sorted(left)}"


def confined_provider() -> BwrapProvider:
    """A probed bwrap provider, or the test is skipped (failed under
    PARKWAY_REQUIRE_SANDBOX=1) with the operator's fix as the reason."""
    provider = BwrapProvider()
    try:
        provider.check()
    except SandboxUnavailable as exc:
        if REQUIRED:
            pytest.fail(f"PARKWAY_REQUIRE_SANDBOX=1 but the sandbox is unavailable: {exc}")
        pytest.skip(f"SANDBOX TESTS SKIPPED, the bwrap sandbox is unavailable here: {exc}")
    return provider


def skip_without_bwrap() -> None:
    """At module level: skip the whole module, loudly, when bubblewrap is missing."""
    if shutil.which("bwrap") is None and not REQUIRED:
        pytest.skip(
            "SANDBOX TESTS SKIPPED: bubblewrap is not installed (apt-get install bubblewrap; "
            "PARKWAY_REQUIRE_SANDBOX=1 makes this a failure)",
            allow_module_level=True,
        )


async def run(
    provider: SandboxProvider,
    code: str,
    *,
    args: Any = None,
    limits: Limits = SMALL,
    broker: Broker | None = None,
    **request: Any,
) -> RunResult:
    return await provider.run(
        RunRequest(code=textwrap.dedent(code), args=args, limits=limits, broker=broker, **request)
    )


@contextlib.contextmanager
def shared_folder(mode: int = 0o755) -> Iterator[Path]:
    """A host folder under /tmp that the sandbox uid may search (pytest's tmp_path is in
    a 0700 folder), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="parkway-sandbox-test-"))
    folder.chmod(mode)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write(path: Path, data: str | bytes, mode: int = 0o644) -> Path:
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    path.chmod(mode)
    return path


def _status(pid: int) -> dict[str, str]:
    fields = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def uid_processes(uid: int = SANDBOX_UID) -> set[int]:
    """The host's processes whose real uid is ``uid``."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            uids = _status(int(name)).get("Uid", "").split()
            if uids and int(uids[0]) == uid:
                found.add(int(name))
    return found


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def sandboxed_processes() -> list[int]:
    """The host pids of the sandbox uid's processes in a pid namespace other than ours:
    the processes inside sandboxes (bwrap's launcher itself is in ours)."""
    ours = _pid_namespace(os.getpid())
    return sorted(
        pid for pid in uid_processes() if (ns := _pid_namespace(pid)) is not None and ns != ours
    )


def _is_bwrap(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"bwrap")
    except OSError:
        return False


def _descends_from_us(pid: int) -> bool:
    """Whether ``pid``'s parents lead to this test process (and not to another
    worker's sandbox of the same uid on a shared machine)."""
    me, seen = os.getpid(), 0
    while pid > 1 and seen < 64:
        if pid == me:
            return True
        pid, seen = int(_status(pid).get("PPid", "0")), seen + 1
    return False


def program_processes() -> list[int]:
    """The program's processes: the sandboxed ones of this test process's own runs,
    but bwrap's (another test run's sandboxes on the machine are not counted)."""
    return [pid for pid in sandboxed_processes() if not _is_bwrap(pid) and _descends_from_us(pid)]


def rss_bytes(pids: list[int], field: str = "VmRSS") -> int:
    """The sum of ``pids``' resident memory (or of another /proc status size, such as
    VmHWM, each process's peak)."""
    return sum(int(_status(pid).get(field, "0 kB").split()[0]) * 1024 for pid in pids)


def thread_count(pids: list[int]) -> int:
    return sum(int(_status(pid).get("Threads", "0")) for pid in pids)


def peak_memory_bytes(pids: list[int]) -> int:
    """The largest address space any of ``pids`` has had (VmPeak)."""
    peaks = [int(_status(pid).get("VmPeak", "0 kB").split()[0]) * 1024 for pid in pids]
    return max(peaks, default=0)


def python_in_sandbox() -> int:
    """The host pid of the one sandboxed bootstrap running now: the interpreter whose
    parent is bwrap (the sandbox's pid 1); the program's own forks are its children."""
    for pid in sandboxed_processes():
        if not _is_bwrap(pid) and _is_bwrap(int(_status(pid).get("PPid", "0"))):
            return pid
    raise AssertionError("no sandboxed interpreter is running")
