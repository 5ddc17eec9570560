"""A run's own cgroup (runner/sandbox/_cgroup): the kernel holds the run's total memory
and its number of processes, whatever it forks; running out of memory ends the whole
run and says so; the cgroup holds the run from its launcher on and is gone after it;
and what a crashed server left is swept by the next.

Real bubblewrap, real cgroups: a delegated cgroup v2 where there is one, else the
server's own cgroups in writable v1 memory and pids hierarchies (a hybrid host, such as
the containers CI runs in). Skipped, loudly, where there is neither; a failure instead
under PARKWAY_REQUIRE_SANDBOX=1, unless PARKWAY_SANDBOX_CGROUP=off says the host has
none.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parkway.runner.sandbox import BwrapProvider, Limits, RunRequest
from parkway.runner.sandbox._cgroup import Cgroups, find
from parkway.runner.sandbox._cgroup._v1 import own_folders
from parkway.runner.sandbox._spawn import spawn
from tests.helpers.sandbox_rig import (
    REQUIRED,
    host_probe,
    program_processes,
    run,
    skip_without_bwrap,
    thread_count,
)

skip_without_bwrap()

MIB = 2**20
SETTING = os.environ.get("PARKWAY_SANDBOX_CGROUP", "auto")


@pytest.fixture(scope="module")
def cgroups() -> Cgroups:
    """Where runs get their cgroups here, or the test is skipped (failed under
    PARKWAY_REQUIRE_SANDBOX=1) with what was looked for."""
    found = find(SETTING)
    if found is None:
        why = (
            "runs get no cgroup here: no delegated cgroup v2 with memory and pids, and no "
            "writable v1 memory and pids hierarchies (sandbox_cgroup="
            f"{SETTING}; set PARKWAY_SANDBOX_CGROUP to a delegated folder)"
        )
        if REQUIRED and SETTING != "off":
            pytest.fail(f"PARKWAY_REQUIRE_SANDBOX=1 but {why}; PARKWAY_SANDBOX_CGROUP=off if so")
        pytest.skip(f"CGROUP TESTS SKIPPED: {why}")
    return found


@pytest.fixture(scope="module")
def cgrouped(cgroups: Cgroups) -> Iterator[BwrapProvider]:
    """A probed bwrap provider whose runs get cgroups."""
    provider = BwrapProvider(cgroup=SETTING)
    assert cgroups.layer in provider.check().layers
    yield provider
    provider.close()


def ours(cgroups: Cgroups) -> list[Path]:
    """The run cgroups this test process has now (other workers' runs share the parents)."""
    return [
        path for parent in cgroups.parents for path in parent.glob(f"parkway-run-{os.getpid()}-*")
    ]


def procs(folder: Path) -> set[int]:
    return {int(pid) for pid in (folder / "cgroup.procs").read_text().split()}


def is_bwrap(pid: int) -> bool:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"bwrap")


def look_inside(cgroups: Cgroups) -> dict[str, Any]:
    """The host's view of the one run going now: its cgroups' processes (and pids
    count), the program's processes and threads, and the cgroups bwrap is in."""
    folders = ours(cgroups)
    program = program_processes()
    members = set().union(*(procs(folder) for folder in folders))
    launchers = [pid for pid in members if is_bwrap(pid)]
    counted = [folder for folder in folders if (folder / "pids.current").exists()]
    seen: dict[str, Any] = {
        "folders": folders,
        "members": members,
        "program": set(program),
        "threads": thread_count(program),
        "launchers": launchers,
        "launcher_cgroups": Path(f"/proc/{launchers[0]}/cgroup").read_text() if launchers else "",
    }
    for folder in counted:
        seen["pids_current"] = int((folder / "pids.current").read_text())
        seen["pids_max"] = int((folder / "pids.max").read_text())
    return seen


# Children that each take memory below their own limit, together past the run's total,
# and a parent that waits for ever: only ending the whole run stops it before the wall.
OVER_THE_TOTAL = """
    import os
    each, kids = args
    go_r, go_w = os.pipe()
    for _ in range(kids):
        if os.fork() == 0:
            held = b"x" * each
            os.read(go_r, 1)
            os._exit(0)
    os.read(go_r, 1)
"""


async def test_children_that_together_pass_the_total_end_the_whole_run_out_of_memory(
    cgrouped: BwrapProvider, cgroups: Cgroups, leftovers: None
) -> None:
    """Four children of 200 MiB each, under a 256 MiB address space each, are 800 MiB
    against the run's 512 MiB: the kernel stops the run at its total and the whole run
    ends at once (the parent, waiting for ever, would otherwise end at the 60 s wall),
    as status killed, "out of memory"; its peak is the total, and its cgroups are gone."""
    limits = Limits(wall_s=60.0, cpu_s=60, memory_bytes=256 * MIB, total_memory_bytes=512 * MIB)
    done = await run(cgrouped, OVER_THE_TOTAL, args=[200 * MIB, 4], limits=limits)
    assert done.status == "killed", done
    assert done.message == "out of memory: the run passed its total of 512 MiB; killed"
    assert done.wall_ms < 30_000, done
    assert done.memory_peak_bytes is not None
    assert 400 * MIB < done.memory_peak_bytes <= limits.total_memory_bytes, done
    assert ours(cgroups) == []


async def test_a_run_is_in_its_own_cgroup_from_the_launcher_on_and_it_is_removed_after(
    cgrouped: BwrapProvider, cgroups: Cgroups
) -> None:
    """While a run waits in a tool call the host finds its cgroups (one per v1
    hierarchy, or one v2), holding exactly bwrap and the program: bwrap, which cannot
    move itself, was placed before it ran anything. The run ends ok with its memory
    peak, and its cgroups are removed."""
    seen: list[dict[str, Any]] = []
    broker = host_probe(seen, lambda: look_inside(cgroups))
    done = await run(cgrouped, 'tools.call("look")\n"fine"', broker=broker)
    assert done.status == "ok" and done.result == "fine", done
    [inside] = seen
    assert len(inside["folders"]) == len(cgroups.parents), inside
    assert inside["program"] and len(inside["launchers"]) == 1, inside
    assert inside["members"] == inside["program"] | set(inside["launchers"]), inside
    names = {folder.name for folder in inside["folders"]}
    [name] = names
    lines = inside["launcher_cgroups"].splitlines()
    assert sum(line.endswith(f"/{name}") for line in lines) == len(cgroups.parents), lines
    assert done.memory_peak_bytes is not None
    assert 0 < done.memory_peak_bytes <= Limits().total_memory_bytes
    assert ours(cgroups) == []


async def test_a_fork_bomb_is_held_within_the_runs_pids_limit(
    cgrouped: BwrapProvider, cgroups: Cgroups, leftovers: None
) -> None:
    """Sixty forks that sleep stop below the cap; at their height the run's pids cgroup
    counts every one of the run's threads (and bwrap), within its pids.max, and none
    outlives the run."""
    seen: list[dict[str, Any]] = []
    code = """
        import os, time
        forked = 0
        for _ in range(60):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            forked += 1
        tools.call("look")
        forked
    """
    limits = Limits(wall_s=10.0, processes=8, total_memory_bytes=8 * 512 * MIB)
    done = await run(
        cgrouped, code, limits=limits, broker=host_probe(seen, lambda: look_inside(cgroups))
    )
    assert done.status == "ok", done
    assert 0 < done.result < limits.processes
    [inside] = seen
    assert inside["pids_max"] == limits.processes + 1  # and bwrap
    assert inside["pids_current"] == inside["threads"] + 1 <= inside["pids_max"], inside
    assert inside["members"] == inside["program"] | set(inside["launchers"]), inside
    assert ours(cgroups) == []


FORK_UNTIL_REFUSED = """
import os, sys
forked = 0
wait_r, wait_w = os.pipe()
for _ in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.read(wait_r, 1)
        os._exit(0)
    forked += 1
print(forked, flush=True)
os.read(0, 1)
"""


async def test_the_pids_limit_alone_stops_a_fork_bomb(cgroups: Cgroups) -> None:
    """With no rlimit in the way (a process of the host's own user, not the sandbox's
    capped uid), spawned into a run's cgroup as the launcher is: its forks stop at
    pids.max, which says it refused them; removing the cgroup ends them all first."""
    limits = Limits(processes=6)
    cgroup = await asyncio.to_thread(cgroups.create, limits)
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        child = spawn(
            [sys.executable, "-I", "-S", "-c", FORK_UNTIL_REFUSED],
            stdin=stdin_r, stdout=out_w, stderr=2, pass_fds=[], env={}, cwd="/", user=None,
            cgroup_procs=cgroup.procs_fds,
        )  # fmt: skip
        os.close(out_w)
        with os.fdopen(out_r) as out:
            forked = int(await asyncio.to_thread(out.readline))
        [counted] = [path for path in ours(cgroups) if (path / "pids.events").exists()]
        words = (counted / "pids.events").read_text().split()
        refused = int(words[words.index("max") + 1])
        current = int((counted / "pids.current").read_text())
    finally:
        end = await cgroup.remove()  # kills what is left: all of them
        for fd in (stdin_r, stdin_w):
            os.close(fd)
    assert forked == limits.processes  # pids.max = processes + 1, the parent included
    assert current == limits.processes + 1
    assert refused > 0
    assert await child.wait() == -signal.SIGKILL
    assert not end.out_of_memory
    assert ours(cgroups) == []


CRASHING_SERVER = """
import os, sys
from parkway.runner.sandbox import Limits
from parkway.runner.sandbox._cgroup import find
cgroup = find(sys.argv[1]).create(Limits())
for fd in cgroup.procs_fds:
    os.write(fd, b"0")
print("in", flush=True)
sys.stdin.read()
"""


def test_the_cgroups_a_crashed_server_left_are_swept_at_the_next_start(
    cgroups: Cgroups,
) -> None:
    """A server killed with SIGKILL in the middle of a run leaves the run's cgroups
    behind: the next provider to start removes them, but keeps a live server's (this
    one's) and one made a moment ago (it may belong to a server in another pid
    namespace that has not joined it yet)."""
    crashed = subprocess.Popen(
        [sys.executable, "-c", CRASHING_SERVER, SETTING],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert crashed.stdout is not None and crashed.stdout.readline() == "in\n"
    left = [p for parent in cgroups.parents for p in parent.glob(f"parkway-run-{crashed.pid}-*")]
    crashed.kill()
    crashed.communicate(timeout=30)
    mine = [parent / f"parkway-run-{os.getpid()}-alive" for parent in cgroups.parents]
    young = [parent / f"parkway-run-{crashed.pid}-young" for parent in cgroups.parents]
    try:
        for folder in mine + young:
            folder.mkdir()
        an_hour_ago = time.time() - 3600
        for folder in left + mine:
            os.utime(folder, (an_hour_ago, an_hour_ago))
        assert len(left) == len(cgroups.parents) and all(folder.is_dir() for folder in left)
        BwrapProvider(cgroup=SETTING).check()
        assert not any(folder.exists() for folder in left)
        assert all(folder.is_dir() for folder in mine + young)
    finally:
        for folder in mine + young:
            folder.rmdir()


def test_the_isolation_names_the_memory_bound_in_force(
    cgrouped: BwrapProvider, cgroups: Cgroups
) -> None:
    """The probe's layers (shown on every approval) say which bound holds the total: a
    cgroup of the version found, or, with sandbox_cgroup=off, the rlimits."""
    v2 = (cgroups.parents[0] / "cgroup.controllers").exists()  # a file v1 has not
    kind = "cgroup v2 per run" if v2 else "cgroup v1 per run"
    assert any(layer.startswith(kind) for layer in cgrouped.check().layers)
    without = BwrapProvider(cgroup="off")
    try:
        layers = without.check().layers
    finally:
        without.close()
    assert "total memory bounded by rlimits (processes x address space)" in layers
    assert not any("cgroup v" in layer for layer in layers)


def test_a_cgroup_folder_that_cannot_be_used_makes_the_sandbox_unavailable(
    tmp_path: Path,
) -> None:
    """An operator's sandbox_cgroup that is not a delegated cgroup v2 folder with memory
    and pids is refused with the reason, not silently replaced by the rlimit bound."""
    broken = BwrapProvider(cgroup=str(tmp_path))
    with pytest.raises(Exception, match="not a cgroup v2 folder") as raised:
        broken.check()
    assert type(raised.value).__name__ == "SandboxUnavailable"
    done = asyncio.run(broken.run(RunRequest(code="1")))
    assert done.status == "unavailable" and "cannot be used" in done.message


def test_v1_folders_are_read_from_proc_whatever_the_mount(tmp_path: Path) -> None:
    """The v1 memory and pids folders of a process come from /proc/<pid>/cgroup and
    mountinfo: a hierarchy mounted at its root, one whose mount root is the process's
    own cgroup (a container's view), and controllers mounted together."""
    (tmp_path / "cgroup").write_text(
        "8:pids:/job/7\n4:memory:/job/7/worker\n1:cpu,cpuacct:/\n0::/\n"
    )
    (tmp_path / "mountinfo").write_text(
        textwrap.dedent("""\
            31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
            35 31 0:32 /job/7 /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
            39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
            41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
        """)
    )
    assert own_folders(tmp_path) == {
        "memory": Path("/sys/fs/cgroup/memory/worker"),
        "pids": Path("/sys/fs/cgroup/pids/job/7"),
    }
    (tmp_path / "cgroup").write_text("4:memory,pids:/run\n0::/\n")
    (tmp_path / "mountinfo").write_text("35 31 0:32 / /cg/mp rw - cgroup cgroup rw,pids,memory\n")
    assert own_folders(tmp_path) == {"memory": Path("/cg/mp/run"), "pids": Path("/cg/mp/run")}
    for folder in own_folders().values():  # and this process's own, where there are any
        assert os.getpid() in procs(folder), folder
