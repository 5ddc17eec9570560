"""`make test` stopped half-way leaves nothing running (tests/helpers/reaper.py).

A person stops a long test run with Ctrl-C, and CI or a supervisor stops it with SIGTERM
(`make` passes it on to pytest). Either way, the embedded ``redis-server`` of every
pytest-xdist worker and the ``parkway serve`` processes that tests started (with their
own embedded Redis) must end with it, instead of living on and filling the machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.helpers.support import ROOT, eventually, free_port

pytestmark = pytest.mark.slow

# A test module for the inner run: each of its two tests takes the worker's Redis,
# starts a Parkway server on an embedded Redis of its own, says so, and waits.
INNER = """
import os, subprocess, sys, time
from pathlib import Path

import httpx


def hold(redis_url, tmp_path, name):
    port = os.environ[f"INNER_PORT_{name}"]
    server = subprocess.Popen(
        [sys.executable, "-m", "parkway.transport.cli", "serve", "--port", port,
         "--data-dir", str(tmp_path / "data"), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    while True:
        assert server.poll() is None, "parkway serve exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    Path(os.environ["INNER_MARKS"], name).write_text(redis_url)
    time.sleep(600)


def test_one(redis_url, tmp_path):
    hold(redis_url, tmp_path, "one")


def test_two(redis_url, tmp_path):
    hold(redis_url, tmp_path, "two")
"""


def _marked(tag: str, folder: Path) -> dict[int, str]:
    """Processes whose environment carries ``tag`` (everything the inner run started
    inherits it) or whose command line names ``folder`` (``redis-server`` writes its
    title over its environment), by pid, with their command line."""
    found: dict[int, str] = {}
    needle = f"INNER_RUN={tag}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        named = str(folder).encode() in cmdline
        if (named or needle in environ.split(b"\0")) and state != b"Z":
            found[int(name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stop", ["sigterm", "ctrl-c"])
async def test_a_stopped_test_run_leaves_no_redis_or_server_behind(
    stop: str, tmp_path: Path
) -> None:
    """An inner pytest run on two xdist workers, each test holding a worker's embedded
    Redis and a ``parkway serve`` with an embedded Redis of its own, is stopped the way
    `make` stops it (SIGTERM to pytest) or the way a terminal does (SIGINT to the whole
    process group); then no process of that run is left."""
    tag = uuid.uuid4().hex
    # The inner run's folders hold unix sockets: their paths must stay short.
    short = Path(tempfile.mkdtemp(prefix="pw-stop-"))
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "PARKWAY_TEST_REDIS_URL"))
    }
    env |= {
        "INNER_RUN": tag,
        "INNER_MARKS": str(marks),
        "INNER_PORT_one": str(free_port()),
        "INNER_PORT_two": str(free_port()),
        "PYTHONPATH": str(ROOT),
    }
    log_file = (tmp_path / "inner.log").open("wb")
    inner = subprocess.Popen(
        [
            sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
            "--rootdir", str(ROOT), "-p", "tests.conftest", "-p", "no:cacheprovider",
            "-n", "2", "-q", "--timeout", "900", "--basetemp", str(short / "t"),
            str(tmp_path / "test_inner.py"),
        ],
        env=env,
        cwd=tmp_path,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )  # fmt: skip

    def holding() -> bool:
        log = (tmp_path / "inner.log").read_text(errors="replace")
        assert inner.poll() is None, f"the inner run ended early:\n{log}"
        return len(list(marks.iterdir())) == 2

    try:
        await eventually(holding, within_s=400, every_s=0.2, what="both tests hold")
        running = _marked(tag, short).values()
        redis_servers = [line for line in running if "redis-server" in line]
        # two workers' Redis and the two servers' own
        assert len(redis_servers) == 4, running
        if stop == "sigterm":
            inner.send_signal(signal.SIGTERM)
        else:
            os.killpg(inner.pid, signal.SIGINT)
        inner.wait(120)
        await eventually(
            lambda: not _marked(tag, short), within_s=60, every_s=0.2, what="nothing left"
        )
    finally:
        left = _marked(tag, short)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if inner.poll() is None:
            inner.kill()
            inner.wait()
        log_file.close()
        shutil.rmtree(short, ignore_errors=True)
