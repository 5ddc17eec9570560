"""The sandbox has no side doors (issue 29): no descriptor reaches the program but its
standard streams and the run's own pipes, however the server was started and whichever
event loop spawns it; a run's processes together stay within a total memory, and their
number within a total, whatever they fork; and the run's inputs and library are never
readable by another local user on the host while the run is going.

Real bubblewrap, real processes, real uids; the host measures what it sees in /proc.
Skipped, loudly, without bubblewrap; a failure instead under PARKWAY_REQUIRE_SANDBOX=1.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import stat
import subprocess
import textwrap
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from parkway.runner.codemode.runtime import workspace
from parkway.runner.sandbox import BwrapProvider, Limits, RunRequest, RunResult
from tests.helpers.sandbox_rig import (
    host_probe,
    program_processes,
    rss_bytes,
    run,
    skip_without_bwrap,
)
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    agent_doc,
    call,
    sse_chunks,
    text,
)

skip_without_bwrap()

MIB = 2**20
CODE_TOOL = {"type": "platform", "op": "execute_code"}

# What the program reports of its descriptors: each open one's number, its file's
# (device, inode) and what /proc says it is; and what reading the door gave.
DESCRIPTORS = """
    import errno, os
    door = {door}
    seen = {{}}
    for name in os.listdir("/proc/self/fd"):
        try:
            info = os.fstat(int(name))
            seen[name] = [info.st_dev, info.st_ino, os.readlink(f"/proc/self/fd/{{name}}")]
        except OSError:
            pass  # the listing's own descriptor, closed by now
    try:
        read = os.read(door, 100).decode(errors="replace")
    except OSError as exc:
        read = errno.errorcode[exc.errno]
    result({{"fds": seen, "read": read}})
"""


@contextlib.contextmanager
def doors(folder: Path) -> Iterator[tuple[int, int, list[tuple[int, int]], str]]:
    """Two descriptors a host process holds open and inheritable: one on a 0600 file
    holding a secret, at a high number of its own (the door the program tries), and a
    pipe's write end. Yields (the door's number, the pipe's write end, both files'
    (device, inode), the secret)."""
    secret = f"door-secret-{secrets.token_hex(8)}"
    path = folder / "private.txt"
    path.write_text(secret)
    path.chmod(0o600)
    opened = os.open(path, os.O_RDONLY)
    door = fcntl.fcntl(opened, fcntl.F_DUPFD, 200)  # inheritable, unlike os.open's
    os.close(opened)
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    identities = [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (door, write_end)]
    try:
        yield door, write_end, identities, secret
    finally:
        for fd in (door, read_end, write_end):
            os.close(fd)


def assert_only_stdio_and_pipes(
    report: dict[str, Any], identities: list[tuple[int, int]], secret: str, pipes: int
) -> None:
    fds = report["fds"]
    assert report["read"] == "EBADF", report  # the door is closed, not merely unreadable
    assert secret not in json.dumps(report)
    assert not [fd for fd, (dev, ino, _) in fds.items() if (dev, ino) in identities], fds
    extra = {fd: link for fd, (_, _, link) in fds.items() if int(fd) > 2}
    assert all(link.startswith("pipe:") for link in extra.values()), extra
    assert len(extra) == pipes, f"expected the run's {pipes} pipes past stdio: {fds}"
    assert {"0", "1", "2"} <= set(fds)


# -- 1: descriptors -----------------------------------------------------------------


def _on_loop(loop: str, job: Callable[[], Coroutine[Any, Any, RunResult]]) -> RunResult:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run(job())  # type: ignore[no-any-return]
    return asyncio.run(job())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_no_inherited_descriptor_reaches_the_program(
    provider: BwrapProvider, tmp_path: Path, loop: str
) -> None:
    """A server holding an inheritable descriptor on a private file, and a pipe's write
    end, spawns a sandbox: the program finds neither (reading the file's number is
    EBADF), only stdin, stdout, stderr and the run's pipes (the result's, and the two
    of the tool broker), on asyncio's loop and on uvloop's, whose libuv spawn would
    otherwise hand over every inheritable descriptor of the server."""

    async def broker(name: str, tool_input: Any) -> Any:
        return None

    with doors(tmp_path) as (door, _, identities, secret):
        code = textwrap.dedent(DESCRIPTORS.format(door=door))
        done = _on_loop(loop, lambda: run(provider, code, broker=broker))
    assert done.status == "ok", done
    assert_only_stdio_and_pipes(done.result, identities, secret, pipes=3)


@pytest.mark.slow
async def test_a_server_started_with_an_extra_descriptor_does_not_pass_it_to_code(
    redis_url: str, tmp_path: Path
) -> None:
    """``parkway serve`` started, as by a shell or a supervisor, with a descriptor open on
    a 0600 file and a pipe's write end: approved code running in its sandbox lists its
    descriptors and tries to read the file's: the server kept them, the program got
    neither."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    with doors(tmp_path) as (door, pipe, identities, secret):
        program = textwrap.dedent(DESCRIPTORS.format(door=door))
        agent = tmp_path / "agent.json"
        agent.write_text(
            json.dumps(
                agent_doc(
                    [[call("execute_code", {"code": program})], [text("{{last_tool_results}}")]],
                    tools=[CODE_TOOL],
                )
            )
        )
        server = ParkwayProcess(redis_url, agent, pass_fds=[door, pipe]).start()
        api = await Api(server.base_url).login()
        try:
            assert server.proc is not None
            held = {os.readlink(f"/proc/{server.proc.pid}/fd/{fd}") for fd in (door, pipe)}
            assert str(tmp_path / "private.txt") in held  # the server does hold the door
            chunks = await api.say("doors", "go", "u1")
            [part] = [c for c in chunks if c["type"] == "tool-input-available"]
            settled = await api.settle("doors", part["toolCallId"], {"outcome": "approved"})
            assert settled.status_code == 200, settled.text
            resumed = await api.resume("doors")
        finally:
            await api.aclose()
            server.stop()
    assert resumed.status_code == 200, resumed.text
    said = "".join(c.get("delta", "") for c in sse_chunks(resumed.text))
    [outcome] = json.loads(said)
    ran = outcome["result"]
    assert ran["status"] == "ok", ran
    assert_only_stdio_and_pipes(ran["result"], identities, secret, pipes=3)


# -- 3: the run's files on the host --------------------------------------------------


def _as_other_user(uid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def test_the_run_inputs_and_library_are_private_on_the_host(
    provider: BwrapProvider,
) -> None:
    """While a run is going (it waits in a tool call until the host has looked), its
    workspace is a 0700 folder of 0600 files; another local user, and the sandbox uid
    itself, can neither list it nor read an input or a library module; yet the program
    read both (bwrap copied them in from descriptors the server opened)."""
    token = secrets.token_hex(8)
    looked: list[dict[str, Any]] = []

    def look(space: Any, files: list[Path]) -> dict[str, Any]:
        modes = {str(p.relative_to(space.root)): stat.S_IMODE(p.stat().st_mode) for p in files}
        folders = [space.root, space.inputs_dir, space.library_root / "library"]
        seen: dict[str, Any] = {"modes": modes, "folders": [oct(f.stat().st_mode) for f in folders]}
        if os.geteuid() == 0 and shutil.which("setpriv"):
            for uid in (65533, provider.sandbox_uid):
                for path in (*files, space.root):
                    tried = _as_other_user(uid, ["cat" if path.is_file() else "ls", str(path)])
                    seen[f"{uid}:{path.name}"] = (tried.returncode, tried.stdout)
        return seen

    async with workspace() as space:
        data = space.add_input("data.txt", f"input {token}".encode())
        library = space.library_package({"secret_fn": f"def secret_fn():\n    return '{token}'\n"})
        files = [data, *(space.library_root / "library").iterdir()]

        async def broker(name: str, tool_input: Any) -> Any:
            looked.append(await asyncio.to_thread(look, space, files))
            return None

        code = """
            from library import secret_fn
            tools.call("look")
            [artifacts.text("data.txt"), secret_fn()]
        """
        done = await run(provider, code, inputs={"data.txt": data}, library=library, broker=broker)
    assert done.status == "ok", done
    assert done.result == [f"input {token}", token]
    [seen] = looked
    assert set(seen["modes"].values()) == {0o600}, seen["modes"]
    assert all(mode.endswith("700") for mode in seen["folders"]), seen["folders"]
    attempts = {key: value for key, value in seen.items() if ":" in key}
    if os.geteuid() == 0 and shutil.which("setpriv"):
        assert len(attempts) == 2 * (len(files) + 1)
    for key, (status, out) in attempts.items():
        assert status != 0 and token not in out, f"{key} read the run's files"


# -- 2: the run's total memory and processes -----------------------------------------

# The red team's program: fork eight children that each allocate and touch 300 MiB (a
# child refused that much takes what it can, 16 MiB at a time); each says how much it
# holds and waits until the host has measured.
FORK_AND_ALLOCATE = """
    import os
    each, kids = args
    children, refused = [], 0
    for _ in range(kids):
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            refused += 1
            for fd in (ready_r, ready_w, go_r, go_w):
                os.close(fd)
            continue
        if pid == 0:
            held, got = [], 0
            try:
                held.append(b"x" * each)
                got = each
            except MemoryError:
                try:
                    while True:
                        held.append(b"x" * (16 << 20))
                        got += 16 << 20
                except MemoryError:
                    pass
            os.write(ready_w, b"%d\\n" % got)
            os.read(go_r, 1)
            os._exit(0)
        children.append((pid, ready_r, go_w))
    got = [int(os.read(ready_r, 64)) for _, ready_r, _ in children]
    tools.call("measure")
    for pid, _, go_w in children:
        os.write(go_w, b"g")
        os.waitpid(pid, 0)
    {"children": len(children), "refused": refused, "got": got}
"""


def _measure() -> dict[str, int]:
    pids = program_processes()
    return {"processes": len(pids), "rss": rss_bytes(pids), "peaks": rss_bytes(pids, "VmHWM")}


@pytest.fixture(scope="module")
def rlimited() -> Iterator[BwrapProvider]:
    """A provider whose runs get no cgroup (sandbox_cgroup=off): the rlimit bound, on
    every host (test_cgroup.py has the cgroup's)."""
    provider = BwrapProvider(cgroup="off")
    provider.check()
    yield provider
    provider.close()


@pytest.mark.parametrize("per_process_mb", [512, 128])
async def test_fork_and_allocate_stays_within_the_run_total_without_a_cgroup(
    rlimited: BwrapProvider, per_process_mb: int
) -> None:
    """Without a cgroup the total holds by arithmetic: a run gets at most total ÷
    address space processes. With the defaults (512 MiB each, 512 MiB in all) the
    program cannot fork at all; at 128 MiB each it gets three children, each refused
    its 300 MiB and filling what it may. Measured by the host while every child holds
    its memory: the run's processes and their resident memory (and the sum of each
    one's peak) stay within the run's 512 MiB, and the run ends ok, not hung."""
    limits = Limits(wall_s=60.0, cpu_s=60, memory_bytes=per_process_mb * MIB)
    allowed = limits.total_memory_bytes // limits.memory_bytes
    seen: list[dict[str, int]] = []
    done = await run(
        rlimited, FORK_AND_ALLOCATE, args=[300 * MIB, 8], limits=limits,
        broker=host_probe(seen, _measure),
    )  # fmt: skip
    assert done.status == "ok", done
    assert done.result["children"] == allowed - 1
    assert done.result["refused"] == 8 - (allowed - 1)
    assert all(got < 300 * MIB for got in done.result["got"])
    [measured] = seen
    assert measured["processes"] == allowed
    assert measured["rss"] <= limits.total_memory_bytes, measured
    assert measured["peaks"] <= limits.total_memory_bytes, measured
    print(f"\nfork-and-allocate, {per_process_mb} MiB each: {measured}, {done.result}")


async def test_the_red_team_program_unguarded_ends_with_a_clear_outcome(
    rlimited: BwrapProvider, provider: BwrapProvider
) -> None:
    """The same attack without any error handling, under the default limits: it ends
    with a definite status and the reason, never a hang: without a cgroup the refused
    fork; with one (where the host gives runs one), the run's total memory."""
    code = """
        import os
        for _ in range(8):
            if os.fork() == 0:
                data = b"x" * (300 << 20)
                os._exit(0)
        for _ in range(8):
            os.wait()
    """
    limits = Limits(wall_s=60.0, cpu_s=60)
    done = await run(rlimited, code, limits=limits)
    assert done.status == "error", done
    assert "BlockingIOError" in done.message, done
    if any(layer.startswith("cgroup v") for layer in provider.check().layers):
        done = await run(provider, code, limits=limits)
        assert done.status in ("ok", "killed"), done
        assert done.status == "ok" or "out of memory" in done.message, done
        assert done.memory_peak_bytes is not None
        assert done.memory_peak_bytes <= Limits().total_memory_bytes


def test_the_rlimit_split_never_passes_the_total() -> None:
    """Whatever the per-process memory, processes and total, the rlimits a run gets
    without a cgroup multiply to no more than the total, and never exceed what was
    asked; under a cgroup the process count is kept."""
    for memory in (32, 100, 128, 512, 2048):
        for processes in (1, 2, 5, 16, 64):
            for total in (32, 300, 512, 4096):
                limits = Limits(
                    memory_bytes=memory * MIB, processes=processes, total_memory_bytes=total * MIB
                )
                per_process, count = limits.split(cgroup=False)
                assert per_process * count <= limits.total_memory_bytes
                assert per_process <= limits.memory_bytes and 1 <= count <= processes
                assert limits.split(cgroup=True) == (per_process, processes)
    assert Limits().split(cgroup=False) == (512 * MIB, 1)
    assert Limits(memory_bytes=128 * MIB).split(cgroup=False) == (128 * MIB, 4)


def test_a_refused_descriptor_never_leaks_into_the_host(provider: BwrapProvider) -> None:
    """A request that fails its checks after some files were opened (the second input is
    missing) closes the descriptors it had opened."""
    before = len(os.listdir("/proc/self/fd"))
    with contextlib.suppress(ValueError):
        provider._launch(
            RunRequest(code="", inputs={"a": Path("/proc/self/status"), "b": Path("/nope")})
        )
    assert len(os.listdir("/proc/self/fd")) == before
