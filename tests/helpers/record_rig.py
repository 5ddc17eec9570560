"""``parkway serve`` / ``parkway record`` as a user runs them, for the recording tests
(tests/transport/cassettes/test_record.py, test_model_tapes.py, test_aisdk_record.py,
test_playground_record.py): a child process with no ``PARKWAY_*`` setting of this one,
its output in files, its startup line read before the test goes on."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

from tests.helpers.support import ROOT, TEST_SECRET, free_port

__all__ = ["Recording"]

_SERVING = re.compile(r"^Parkway is serving .* at (http://\S+/) ")


class Recording:
    """``parkway ARGS…`` in ``folder`` (its working directory unless ``cwd`` says
    otherwise), on a free port; ``env`` adds variables, ``python`` interpreter flags.
    The test suite's own modules (``tests.helpers.tools``) stay importable, as a project's own
    would be."""

    def __init__(
        self,
        folder: Path,
        *args: str,
        env: dict[str, str] | None = None,
        python: tuple[str, ...] = (),
        cwd: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.out, self.err = folder / "stdout.txt", folder / "stderr.txt"
        environ = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
        path = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
        environ.update(
            PARKWAY_SECRET_KEY=TEST_SECRET,
            PARKWAY_AUTH="anonymous",  # with --redis-url: no local playground
            PYTHONPATH=path,
            **(env or {}),
        )
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *python, "-m", "parkway.transport.cli", *args,
                 "--port", str(self.port), "--log-level", "warning"],
                cwd=cwd or folder, env=environ, stdout=out, stderr=err,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (found := _SERVING.match(self.out.read_text())):
            assert self.proc.poll() is None, self.err.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)  # bounded polling for the startup line
        self.url = found.group(1)  # the URL it prints, as a user reads it

    @contextlib.contextmanager
    def client(self) -> Iterator[httpx2.Client]:
        """A client with a session of its own."""
        with httpx2.Client(base_url=self.base_url, timeout=30) as client:
            token = client.post("/api/sessions").json()["token"]
            client.headers["authorization"] = f"Bearer {token}"
            yield client

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send ``signum`` (SIGINT: Ctrl-C) and return the exit code."""
        self.proc.send_signal(signum)
        return self.proc.wait(30)

    def close(self) -> None:
        """Whatever happened: SIGTERM (the server stops its embedded Redis too), else
        SIGKILL."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()
