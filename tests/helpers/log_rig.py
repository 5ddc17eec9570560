"""A real ``parkway serve`` whose log is kept in files, and the steps of the demo
agent's tour that the log tests take through it (the OAuth consent, a call's id)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.connect_rig import TOKEN_KEY, Browser
from tests.helpers.support import ROOT, free_port


class Served:
    """``parkway serve --log-format json`` on the demo agent and an embedded Redis in
    ``folder``, its stdout and stderr in files. ``environ``: ``PARKWAY_*`` settings
    besides the token key."""

    def __init__(
        self, folder: Path, *, log_level: str = "info", environ: dict[str, str] | None = None
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.stdout = folder / "stdout.log"
        self.stderr = folder / "stderr.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
        env.update(PYTHONPATH=str(ROOT), PARKWAY_TOKEN_KEY=TOKEN_KEY, **(environ or {}))
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "parkway.transport.cli", "serve", "--port", str(self.port),
                 "--data-dir", "data", "--log-format", "json", "--log-level", log_level],
                cwd=folder, env=env, stdout=out, stderr=err,
            )  # fmt: skip

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.stderr.read_text()
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("parkway serve did not become healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def consent(browser: Browser, location: str) -> tuple[str, str]:
    """Allow on the demo provider's consent page: the callback URL and the form's id."""
    page = browser.get(location)
    assert page.status_code == 200, page.text
    form = re.search(r'name="consent" value="([^"]+)"', page.text)
    assert form, page.text
    answer = browser.http.post(
        location.split("?", maxsplit=1)[0],
        data={"consent": form.group(1), "account": "demo-user", "decision": "allow"},
    )
    assert answer.status_code == 303, answer.text
    return str(answer.headers["location"]), form.group(1)


def tool_call(chunks: list[dict[str, Any]], tool: str) -> str:
    """The id of the stream's call of ``tool``."""
    return next(
        str(c["toolCallId"])
        for c in chunks
        if c["type"] == "tool-input-available" and c["toolName"] == tool
    )
