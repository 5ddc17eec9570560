"""The sandbox's limits under attack (sandbox.md §7: fork and thread bombs, memory, CPU,
sleeping, orphans, output and disk floods, crashes, stdin, odd output and results).
Each attack is bounded, and each test asserts what the host sees (its processes, the
sandbox's memory and disk as /proc shows them), not what the guest says of itself.

Skipped, loudly, without bubblewrap; a failure instead under PARKWAY_REQUIRE_SANDBOX=1.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from parkway.runner.sandbox import BwrapProvider, Limits
from tests.helpers.sandbox_rig import (
    host_probe,
    peak_memory_bytes,
    program_processes,
    python_in_sandbox,
    run,
    sandboxed_processes,
    shared_folder,
    skip_without_bwrap,
    thread_count,
    uid_processes,
)
from tests.helpers.support import eventually

skip_without_bwrap()


# -- 1, 2: processes and threads ----------------------------------------------------


async def test_a_fork_bomb_stops_at_the_process_cap_and_leaves_nothing(
    provider: BwrapProvider, leftovers: None
) -> None:
    """Sixty forks that sleep: the host never sees more sandboxed processes than the
    cap, and none survive the run (RLIMIT_NPROC holds because bwrap is not launched as
    root; the pid namespace takes the sleepers down)."""
    seen: list[int] = []
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
        tools.call("count")
        forked
    """
    limits = Limits(wall_s=4.0, processes=8, total_memory_bytes=8 * 512 * 2**20)
    done = await run(provider, code, limits=limits, broker=host_probe(seen, program_processes))
    assert done.status == "ok", done
    assert len(seen[0]) <= 8, f"{len(seen[0])} sandboxed processes for a cap of 8"
    assert 0 < done.result < 8
    assert not sandboxed_processes()


async def test_a_thread_bomb_stops_at_the_same_cap(
    provider: BwrapProvider, leftovers: None
) -> None:
    """Threads count as processes: sixty sleeping threads stop at the cap, as the host
    counts them."""
    seen: list[int] = []
    code = """
        import threading, time
        started = 0
        for _ in range(60):
            try:
                threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            except RuntimeError:
                break
            started += 1
        tools.call("count")
        started
    """
    limits = Limits(wall_s=4.0, processes=8, total_memory_bytes=8 * 512 * 2**20)
    measure = lambda: thread_count(program_processes())  # noqa: E731
    done = await run(provider, code, limits=limits, broker=host_probe(seen, measure))
    assert done.status == "ok", done
    assert seen[0] <= 8, f"{seen[0]} sandboxed threads for a cap of 8"
    assert 0 < done.result < 8


async def test_each_run_has_its_own_process_budget(provider: BwrapProvider) -> None:
    """The cap counts per run (per user namespace), not per uid: two runs that hold
    their children at the same moment (their brokers meet at a barrier) each get all
    five, so one run cannot starve another."""
    barrier = asyncio.Barrier(2)

    async def meet(name: str, tool_input: Any) -> Any:
        async with asyncio.timeout(5):
            await barrier.wait()
        return None

    code = """
        import os, time
        forked = 0
        for _ in range(5):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            forked += 1
        tools.call("meet")
        forked
    """
    limits = Limits(wall_s=8.0, processes=8, total_memory_bytes=8 * 512 * 2**20)
    both = await asyncio.gather(*(run(provider, code, limits=limits, broker=meet) for _ in "ab"))
    assert [done.result for done in both] == [5, 5], both


# -- 3, 4, 5, 6: memory, CPU, sleeping, orphans ------------------------------------


async def test_a_memory_bomb_gets_memory_error_within_the_cap(
    provider: BwrapProvider, leftovers: None
) -> None:
    """64 x 64 MiB against a 128 MiB cap: MemoryError inside; the host sees the
    sandbox's address space never pass the cap, and the server's memory unchanged."""
    peaks: list[int] = []
    rss_before = _rss_bytes()
    code = """
        import mmap
        chunks = []
        try:
            for _ in range(64):
                chunks.append(bytearray(64 * 2**20))
        except MemoryError:
            pass
        try:
            mmap.mmap(-1, 2**30)
        except (MemoryError, OSError):
            pass
        tools.call("measure")
        chunks.append(bytearray(2**30))
    """
    limits = Limits(wall_s=4.0, memory_bytes=128 * 2**20)
    measure = lambda: peak_memory_bytes(sandboxed_processes())  # noqa: E731
    done = await run(provider, code, limits=limits, broker=host_probe(peaks, measure))
    assert done.status == "error" and done.message == "MemoryError", done
    assert b"MemoryError" in done.stderr
    assert 0 < peaks[0] <= 128 * 2**20
    assert _rss_bytes() - rss_before < 64 * 2**20


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
async def test_a_cpu_loop_is_killed_at_the_wall_clock(
    provider: BwrapProvider, leftovers: None
) -> None:
    """A busy loop under a generous CPU limit ends at the 2 s wall clock, not later."""
    limits = Limits(wall_s=2.0, cpu_s=30)
    done = await run(provider, "while True:\n    pass\n", limits=limits)
    assert done.status == "timeout", done
    assert done.message == "killed after 2 s wall clock"
    assert 2000 <= done.wall_ms < 3500
    assert not sandboxed_processes()


@pytest.mark.slow
async def test_a_cpu_loop_is_killed_at_the_cpu_limit(
    provider: BwrapProvider, leftovers: None
) -> None:
    """RLIMIT_CPU (soft = hard) kills a busy loop after 1 s of CPU, before the wall
    clock; the result says killed, naming the CPU limit."""
    limits = Limits(wall_s=4.0, cpu_s=1)
    done = await run(provider, "while True:\n    pass\n", limits=limits)
    assert done.status == "killed", done
    assert "CPU" in done.message
    assert done.wall_ms < 3500


@pytest.mark.slow
async def test_sleeping_forever_is_killed_at_the_wall_clock(
    provider: BwrapProvider, leftovers: None
) -> None:
    """No CPU used, so only the host's wall clock can end it; nothing survives."""
    done = await run(provider, "import time\ntime.sleep(3600)\n", limits=Limits(wall_s=2.0))
    assert done.status == "timeout", done
    assert 2000 <= done.wall_ms < 3500
    assert not sandboxed_processes()


async def test_an_orphan_that_calls_setsid_does_not_outlive_the_run(
    provider: BwrapProvider, leftovers: None
) -> None:
    """A double-forked, setsid'd busy loop is alive while the run is (the host sees
    it), and gone once the run has returned: the pid namespace ends with the run."""
    seen: list[list[int]] = []
    code = """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                end = time.time() + 20
                while time.time() < end:
                    pass
            os._exit(0)
        time.sleep(0.3)
        tools.call("count")
    """
    done = await run(provider, code, broker=host_probe(seen, sandboxed_processes))
    assert done.status == "ok", done
    assert len(seen[0]) >= 2, "the orphan was not running during the run"
    assert not sandboxed_processes()
    assert not set(seen[0]) & uid_processes()


# -- 12, 14: output and disk --------------------------------------------------------


async def test_huge_stdout_is_capped_spilled_and_killed(provider: BwrapProvider) -> None:
    """1 MiB of stdout against a 64 KiB inline cap and a 256 KiB hard cap: 64 KiB
    inline, exactly 256 KiB spilled (the stream's start), status output_limit."""
    code = """
        import sys
        for i in range(1 << 17):
            sys.stdout.buffer.write(b"%07d\\n" % i)
    """
    limits = Limits(stdout_inline_bytes=64 * 2**10, stdout_cap_bytes=256 * 2**10)
    expected = b"".join(b"%07d\n" % i for i in range(1 << 17))
    with shared_folder() as spill:
        done = await run(provider, code, limits=limits, spill_dir=spill)
        assert done.status == "output_limit", done
        assert done.stdout == expected[: 64 * 2**10]
        assert done.stdout_total == 256 * 2**10
        assert done.stdout_spill is not None and done.stdout_spill.parent == spill
        assert done.stdout_spill.read_bytes() == expected[: 256 * 2**10]


async def test_a_disk_fill_stops_at_the_tmpfs_size(provider: BwrapProvider) -> None:
    """Twenty 2 MiB files into an 8 MiB tmpfs, one 3 MiB file past the 2 MiB per-file
    cap, and writes to / and /dev/shm: the host, looking into the live sandbox through
    /proc/<pid>/root, finds at most 8 MiB, all of it under /work."""
    seen: list[dict[str, int]] = []

    def measure() -> dict[str, int]:
        root = Path(f"/proc/{python_in_sandbox()}/root")
        stats = os.statvfs(root / "work")
        files = [p for p in (root / "work").rglob("*") if p.is_file()]
        return {
            "size": stats.f_blocks * stats.f_frsize,
            "used": sum(p.stat().st_size for p in files),
            "outside": len(list((root / "dev" / "shm").iterdir())) + (root / "fill").exists(),
        }

    code = """
        import errno, os
        written, too_big, refused = 0, None, 0
        for i in range(20):
            try:
                with open(f"/work/fill-{i}", "wb") as f:
                    f.write(b"x" * 2**21)
                written += 2**21
            except OSError:
                break
        try:
            with open("/work/big", "wb") as f:
                f.write(b"y" * 3 * 2**20)
        except OSError as exc:
            too_big = errno.errorcode[exc.errno]
        for path in ("/dev/shm/fill", "/fill"):
            try:
                open(path, "wb").write(b"z")
            except OSError:
                refused += 1
        tools.call("measure")
        [written, too_big, refused]
    """
    limits = Limits(disk_bytes=8 * 2**20, file_bytes=2 * 2**20)
    done = await run(provider, code, limits=limits, broker=host_probe(seen, measure))
    assert done.status == "ok", done
    assert seen[0]["size"] == 8 * 2**20
    assert seen[0]["used"] <= 8 * 2**20
    assert seen[0]["outside"] == 0
    written, too_big, refused = done.result
    assert written <= 8 * 2**20 and refused == 2
    assert too_big in ("EFBIG", "ENOSPC")


async def test_a_segfault_and_a_stack_overflow_are_killed(provider: BwrapProvider) -> None:
    """A C-level crash is status killed (SIGSEGV), and the next run is fine."""
    crash = await run(provider, "import ctypes\nctypes.string_at(0)\n")
    assert crash.status == "killed" and "SIGSEGV" in crash.message, crash
    code = """
        import sys
        deep = []
        for _ in range(1_000_000):
            deep = [deep]
        sys.setrecursionlimit(10**8)
        repr(deep)  # C recursion, unchecked under this limit
    """
    overflow = await run(provider, code)
    assert overflow.status == "killed" and "SIGSEGV" in overflow.message, overflow
    after = await run(provider, "1 + 1")
    assert (after.status, after.result) == ("ok", 2)


async def test_input_gets_eof_at_once(provider: BwrapProvider) -> None:
    """stdin is at its end when the program starts: input() raises, nothing hangs."""
    code = """
        try:
            input("> ")
        except EOFError:
            result("eof")
    """
    done = await run(provider, code, limits=Limits(wall_s=3.0))
    assert (done.status, done.result) == ("ok", "eof"), done
    assert done.wall_ms < 2000


async def test_binary_stdout_passes_through_intact(provider: BwrapProvider) -> None:
    """Invalid UTF-8 and NUL bytes on stdout reach the host byte for byte."""
    code = 'import sys\nsys.stdout.buffer.write(b"\\xff\\xfe\\x00\\x80raw\\n")\n'
    done = await run(provider, code)
    assert done.status == "ok", done
    assert done.stdout == b"\xff\xfe\x00\x80raw\n"


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        ('result("x" * 100_000)', "output_limit", "over the 65536-byte cap"),
        ("v = []\nfor _ in range(100_000):\n    v = [v]\nresult(v)", "error", "nested too deeply"),
        ("float('nan')", "error", "not plain JSON"),
    ],
)
async def test_huge_deep_and_non_json_results_are_refused(
    provider: BwrapProvider, code: str, status: str, message: str
) -> None:
    """Results past the cap, nested past what JSON can carry, or not JSON at all are
    refused with a reason; the host parser never sees them."""
    done = await run(provider, code, limits=Limits(result_bytes=64 * 2**10))
    assert done.status == status and message in done.message, done
    assert not done.has_result


async def test_forged_result_records_do_not_break_the_host(provider: BwrapProvider) -> None:
    """The program writes its own records onto the result pipe: a deeply nested JSON
    value after a valid header, or plain garbage. The host reports an error."""
    forge = """
        import os
        # without a broker the only pipe past stderr is the result's
        for fd in range(3, 64):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                    break
            except OSError:
                pass
        os.write(fd, args.encode())
        os._exit(0)
    """
    deep = '{"status": "ok", "message": "", "has_result": true}\n' + "[" * 200_000
    nested = await run(provider, forge, args=deep + "]" * 200_000)
    assert nested.status == "error" and "could not be read" in nested.message, nested
    garbage = await run(provider, forge, args="\n" + "{" * 1000)
    assert garbage.status == "error" and "malformed" in garbage.message, garbage


async def test_cancelling_a_run_kills_the_sandbox(provider: BwrapProvider, leftovers: None) -> None:
    """A caller that gives up (its task is cancelled) leaves no sandbox running."""
    task = asyncio.create_task(run(provider, "import time\ntime.sleep(60)\n"))
    await eventually(sandboxed_processes, within_s=5, what="the sandbox to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not sandboxed_processes(), within_s=5, what="the sandbox to end")
