"""The product as its users run it: the installed wheel, and ``make run`` from a clone.

Every other test imports Parkway from the checkout. These start it the two ways a person
does, and look at what that person sees:

- ``parkway serve`` from the wheel (built as pip builds it, installed non-editable into a
  new venv outside the repository; tests/helpers/user_install.py), started from an empty folder
  with no ``PYTHONPATH``: the page and every file it loads answer 200, the demo's first
  turn parks, an answer resumes it, and the playground does the same in a real browser;
- ``parkway serve --agent render_agent:agent``, an agent defined in Python in the folder it
  runs from (tests/helpers/render_agent.py, the README's client tool among its tools):
  the playground answers its client tools' cards, whatever their return types;
- ``make run`` in a fresh copy of the clone, the README's first command: the URL it
  prints serves the playground.

A green suite once hid a playground that answered 500 to every user (it read its files
through a folder name that only a checkout has); this is the test that would have failed.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin

import httpx
import pytest
from playwright.sync_api import Browser, expect

from parkway.transport.sse import sse_chunks
from tests.helpers.support import free_port, user_message
from tests.helpers.user_install import ROOT, UserInstall, clone_files, user_environment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_SERVING = re.compile(r"Parkway is serving .* at (http://\S+?)/? \(")
_REFERENCES = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"'#]+)["']""")
_IMPORTS = re.compile(r"""(?:\bfrom|\bimport)\s*\(?\s*["']([^"']+)["']""")
_CSS_URLS = re.compile(r"""url\(\s*["']?([^"')]+)["']?\s*\)""")


class Announced:
    """A server process whose standard output is read line by line in a thread, so a
    test can wait for the line a person would read (``Parkway is serving ... at URL``)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def url(self, within_s: float) -> str:
        """The URL of the startup line; fails, with what was printed, if the process
        ends or says nothing of the kind within ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "no startup line in time:\n" + "".join(self.seen)
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, "the process ended before serving:\n" + "".join(self.seen)
            self.seen.append(line)
            found = _SERVING.search(line)
            if found:
                return found.group(1)

    def stop(self) -> int:
        """Ctrl-C, as a person stops it (to the whole process group: ``make`` and the
        server it started); SIGKILL if it has not ended after 30 s."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        with contextlib.suppress(queue.Empty):
            while (line := self.lines.get_nowait()) is not None:
                self.seen.append(line)
        return self.proc.returncode


def _start(command: list[str], cwd: Path, **env: str) -> Announced:
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=user_environment(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, for Ctrl-C to it alone
    )
    return Announced(proc)


def _assets(client: httpx.Client, page_url: str) -> dict[str, int]:
    """Every file the page loads, followed from the HTML through the scripts' imports and
    the stylesheets' urls, with the status each answered."""
    statuses: dict[str, int] = {}
    pending = [page_url]
    while pending:
        url = pending.pop()
        if url in statuses or url.startswith("data:"):
            continue
        response = client.get(url)
        statuses[url] = response.status_code
        if response.status_code != 200:
            continue
        kind = response.headers.get("content-type", "")
        pattern = (
            _REFERENCES
            if "html" in kind
            else _IMPORTS
            if "javascript" in kind
            else _CSS_URLS
            if "css" in kind
            else None
        )
        if pattern is not None:
            pending.extend(urljoin(url, found) for found in pattern.findall(response.text))
    return statuses


def _assert_page_complete(url: str) -> None:
    with httpx.Client(timeout=30) as client:
        page = client.get(url + "/")
        assert page.status_code == 200, page.text
        assert 'data-testid="composer"' in page.text, page.text[:500]
        statuses = _assets(client, url + "/")
    broken = {asset: status for asset, status in statuses.items() if status != 200}
    assert not broken, broken
    scripts = [asset for asset in statuses if asset.endswith(".js")]
    assert len(scripts) >= 10, f"the page's modules were not followed: {sorted(statuses)}"


@pytest.fixture(scope="module")
def installed_server(
    user_install: UserInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """``parkway serve`` of the user's venv, run from an empty folder with the user's
    environment (no PYTHONPATH, no PARKWAY_* setting: the embedded Redis, the demo)."""
    folder = tmp_path_factory.mktemp("empty")
    server = _start(
        [str(user_install.script("parkway")), "serve", "--port", str(free_port())], folder
    )
    try:
        yield server.url(within_s=120)
    finally:
        code = server.stop()
        output = "".join(server.seen)
        assert code == 0, output
        assert "Traceback" not in output, output
    # What it left in the folder it ran in: its data folder, nothing else.
    assert [entry.name for entry in folder.iterdir()] == [".parkway"]


def test_the_installed_server_serves_the_page_and_every_file_it_loads(
    installed_server: str,
) -> None:
    _assert_page_complete(installed_server)


def _say(client: httpx.Client, chat_id: str, text: str) -> list[dict[str, Any]]:
    body = {"id": chat_id, "messages": [user_message(text)], "trigger": "submit-message"}
    response = client.post("/api/chat", json=body)
    assert response.status_code == 200, response.text
    return sse_chunks(response.text)


def test_the_installed_server_parks_the_demo_turn_and_an_answer_resumes_it(
    installed_server: str,
) -> None:
    """The README's round trip against the installed product: a turn parks on the demo's
    choice, the answer settles it and the resume continues the same assistant message."""
    with httpx.Client(base_url=installed_server, timeout=60) as client:
        session = client.post("/api/sessions")
        assert session.status_code == 201, session.text
        client.headers["authorization"] = f"Bearer {session.json()['token']}"
        client.cookies.clear()

        parked = _say(client, "installed-tour", "hello")
        assert parked[-1] == {"type": "finish", "finishReason": "tool-calls"}, parked[-3:]
        message_id = parked[0]["messageId"]
        chat = client.get("/api/chats/installed-tour").json()
        (call,) = [c for c in chat["calls"] if c["status"] == "pending"]
        assert call["toolName"] == "choose_option"

        settled = client.post(
            f"/api/chats/installed-tour/calls/{call['toolCallId']}",
            json={"outcome": "output", "output": {"choice": "Oslo"}},
        )
        assert settled.status_code == 200, settled.text
        resumed = client.post("/api/chats/installed-tour/resume")
        assert resumed.status_code == 200, resumed.text
        chunks = sse_chunks(resumed.text)
    assert chunks[0] == {"type": "start", "messageId": message_id}
    outputs = [c for c in chunks if c["type"] == "tool-output-available"]
    assert outputs[0]["toolCallId"] == call["toolCallId"]
    assert outputs[0]["output"] == {"choice": "Oslo"}
    said = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert "Oslo" in said, said


def test_the_installed_playground_runs_the_demo_in_a_browser(
    installed_server: str, browser: Browser
) -> None:
    """What a person sees: the page loads clean (no script error, no CSP violation), the
    demo streams, the choice card answers and the same message continues."""
    from tests.helpers.browser import Tab  # Playwright's helpers only where a browser runs

    tab = Tab.new_context(browser, installed_server).open()
    tab.send("Plan my weather report")
    choice = tab.widget("choice")
    tab.expect_state(choice, "pending")
    choice.get_by_role("button", name="Oslo").click()
    tab.expect_state(choice, "answered")
    tab.expect_said("You picked Oslo")
    expect(tab.page.locator('[data-tool="get_weather"]').first).to_have_attribute(
        "data-state", "output-available"
    )
    tab.assert_clean()


@pytest.fixture(scope="module")
def installed_python_agent(
    user_install: UserInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """``parkway serve --agent render_agent:agent`` of the user's venv, from a folder
    holding only that module, as a user serves the agent they wrote."""
    folder = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "tests" / "helpers" / "render_agent.py", folder / "render_agent.py")
    server = _start(
        [str(user_install.script("parkway")), "serve", "--agent", "render_agent:agent",
         "--port", str(free_port())],
        folder,
    )  # fmt: skip
    try:
        yield server.url(within_s=120)
    finally:
        code = server.stop()
        output = "".join(server.seen)
        assert code == 0, output
        assert "Traceback" not in output, output


def test_the_installed_playground_answers_a_python_agents_client_tools(
    installed_python_agent: str, browser: Browser
) -> None:
    """The README's ``choose_project(options) -> str`` with ``render="choice"``, a choice
    returning a model and the JSON editor of a tool returning a model, served by the
    wheel: each card is answered in the page, the server takes the answer (no 422) and
    the run goes on."""
    from tests.helpers.browser import Tab  # Playwright's helpers only where a browser runs
    from tests.helpers.render_cases import CASES, answer_each

    tab = Tab.new_context(browser, installed_python_agent).open()
    wanted = {"choose_project", "choose_model", "ask_ticket"}
    answer_each(tab, [case for case in CASES if case.tool in wanted])


def test_make_run_from_a_fresh_clone_serves_the_playground_at_the_url_it_prints(
    tmp_path: Path,
) -> None:
    """The README's first command, in a copy of what a clone has (no venv yet): it
    creates its venv, starts the embedded Redis and the demo, prints the URL, and that URL
    serves the playground with every file it loads."""
    clone = clone_files(tmp_path / "parkway")
    assert not (clone / ".venv").exists()
    server = _start(["make", "run", f"PORT={free_port()}"], clone)
    try:
        url = server.url(within_s=480)  # a new venv: pip installs Parkway's dependencies
        _assert_page_complete(url)
    finally:
        server.stop()
    output = "".join(server.seen)
    assert "Traceback" not in output, output
