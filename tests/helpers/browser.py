"""Real-browser harness: Playwright's sync API driving Debian's chromium against a real
Parkway (uvicorn in a thread, real Redis).

Never downloads a browser. When ``/usr/bin/chromium`` is missing the browser tests are
skipped with a loud reason, or fail when ``PARKWAY_REQUIRE_BROWSER=1`` (CI sets it).

Sync Playwright marks its own event loop as running between calls, so it cannot share
the thread's loop with pytest-asyncio: a browser lives inside one test (see
:func:`chromium`), and a fixture that yields it must depend on ``redis`` so that it
closes before the ``redis`` fixture's async teardown runs.

Building blocks for a test: :func:`chromium` (the browser), :class:`Tab` (one
playground tab with DOM-waiting helpers), :class:`ServerView` (the server's view of the
chat, with the tab's session), :func:`console_errors` (what a page logs as an error, and
its error answers), :class:`OtherOrigin` (a page on another loopback origin,
for postMessage checks), :func:`provider_rig` and :func:`sign_in_at_provider` (a real
OpenID provider on loopback, and the user at its pages), :func:`screenshot` (docs
images, only with ``PARKWAY_SCREENSHOTS=1``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Locator,
    Page,
    Response,
    expect,
    sync_playwright,
)

from tests.helpers.support import ROOT, free_port

__all__ = [
    "CHROMIUM",
    "VIEWPORT",
    "OtherOrigin",
    "ServerView",
    "Tab",
    "chromium",
    "console_errors",
    "provider_rig",
    "require_chromium",
    "screenshot",
    "sign_in_at_provider",
    "wait_until",
]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
VIEWPORT = {"width": 1000, "height": 700}
IMAGES = ROOT / "docs" / "img"
# DOM waits: generous for a loaded CI machine; a passing run waits far less.
expect.set_options(timeout=15_000)


def require_chromium() -> None:
    """Skip loudly without Debian's chromium, or fail under PARKWAY_REQUIRE_BROWSER=1."""
    if CHROMIUM.exists():
        return
    message = (
        f"BROWSER TESTS DID NOT RUN: {CHROMIUM} is missing "
        "(apt-get install chromium; these tests never download a browser)"
    )
    if os.environ.get("PARKWAY_REQUIRE_BROWSER") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Debian chromium for the length of one test."""
    require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS), headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Page, name: str) -> None:
    """Save ``docs/img/<name>.png`` when PARKWAY_SCREENSHOTS=1, so that ordinary runs
    leave the committed images alone."""
    if os.environ.get("PARKWAY_SCREENSHOTS") != "1":
        return
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / f"{name}.png"))


def console_errors(page: Page) -> list[str]:
    """Every console error and every error answer (4xx, 5xx) the page sees from now on."""
    seen: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            seen.append(f"console: {message.text} ({message.location.get('url', '')})")

    def on_response(response: Response) -> None:
        if response.status >= 400:
            seen.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    page.on("console", on_console)
    page.on("response", on_response)
    return seen


def wait_until(page: Page, condition: Callable[[], Any], timeout_s: float = 15) -> Any:
    """Wait for a condition outside the DOM (a Python-side event), letting the page's
    event loop run meanwhile; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("the condition never became true")
        page.wait_for_timeout(25)


class Tab:
    """One playground tab. Its page records uncaught script errors and CSP violations,
    which :meth:`assert_clean` turns into a failure."""

    def __init__(self, context: BrowserContext, base_url: str) -> None:
        self.context = context
        self.base_url = base_url
        self.page = context.new_page()
        self.problems: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", self._console)

    @classmethod
    def new_context(cls, browser: Browser, base_url: str, *, build_kit: bool = False) -> Tab:
        """A tab in a fresh browser context (its own cookies: its own principal).
        ``build_kit``: its tabs start with the playground build kit on, as if the user
        had turned it on (it starts off for any agent but the built-in demo), for a test
        whose agent uses the kit's tools (commit_config, execute_code)."""
        context = browser.new_context(viewport=VIEWPORT)
        if build_kit:  # the tab's own choice, where agent-panel.js keeps it; kept if made
            context.add_init_script(
                "if (sessionStorage.getItem('parkway.playground.buildKit') === null)"
                " sessionStorage.setItem('parkway.playground.buildKit', 'on');"
            )
        return cls(context, base_url)

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text or "Refused to" in message.text:
            self.problems.append(f"console: {message.text}")

    def assert_clean(self) -> None:
        assert not self.problems, self.problems

    # -- navigation ----------------------------------------------------------------------

    def open(self, chat_id: str | None = None) -> Tab:
        url = self.base_url + "/" + (f"?chat={chat_id}" if chat_id else "")
        self.page.goto(url)
        expect(self.page.get_by_test_id("composer")).to_be_visible()
        return self

    @property
    def chat_id(self) -> str:
        values = parse_qs(urlparse(self.page.url).query).get("chat")
        assert values, f"no chat id in {self.page.url}"
        return values[0]

    def send(self, text: str) -> None:
        composer = self.page.get_by_test_id("composer")
        composer.fill(text)
        composer.press("Enter")

    # -- what the page shows -------------------------------------------------------------

    @property
    def messages(self) -> Locator:
        return self.page.get_by_test_id("messages")

    def expect_said(self, text: str) -> None:
        expect(self.messages).to_contain_text(text)

    def expect_ready(self) -> None:
        expect(self.page.get_by_test_id("chat-status")).to_have_attribute("data-status", "ready")

    def expect_waiting(self) -> None:
        """Idle, with a card waiting for the user: the pill says "Waiting for you"."""
        status = self.page.get_by_test_id("chat-status")
        expect(status).to_have_attribute("data-status", "waiting")
        expect(status).to_have_text("Waiting for you")

    def widget(self, kind: str, nth: int = -1) -> Locator:
        """The ``nth`` widget of a kind (``approval``, ``choice``, ``connect``,
        ``client``, ``unsupported``), waiting until it exists. The locator is pinned to
        that widget's call, so later widgets of the same kind do not shift it."""
        widgets = self.page.locator(f'[data-testid^="widget-"][data-kind="{kind}"]')
        found = widgets.nth(nth) if nth >= 0 else widgets.last
        expect(found).to_be_attached()
        return self.widget_of(self.call_id(found))

    def widget_of(self, call_id: str) -> Locator:
        return self.page.get_by_test_id(f"widget-{call_id}")

    @staticmethod
    def call_id(widget: Locator) -> str:
        testid = widget.get_attribute("data-testid")
        assert testid is not None and testid.startswith("widget-")
        return testid[len("widget-") :]

    @staticmethod
    def expect_state(widget: Locator, state: str, timeout_ms: int | None = None) -> None:
        if timeout_ms is None:
            expect(widget).to_have_attribute("data-state", state)
        else:
            expect(widget).to_have_attribute("data-state", state, timeout=timeout_ms)

    @staticmethod
    def act(widget: Locator, action: str) -> None:
        """Click the widget's button (or link) with ``data-action=<action>``."""
        widget.locator(f'[data-action="{action}"]').first.click()

    def session_token(self) -> str:
        cookie = next(c for c in self.context.cookies() if c["name"].startswith("parkway_session"))
        return cookie["value"]


class ServerView:
    """The server's side of a tab's chat, read with the tab's own session."""

    def __init__(self, tab: Tab) -> None:
        self.http = httpx.Client(
            base_url=tab.base_url,
            headers={"authorization": f"Bearer {tab.session_token()}"},
            timeout=15,
        )

    def __enter__(self) -> ServerView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def chat(self, chat_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/chats/{chat_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def call(self, chat_id: str, call_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/chats/{chat_id}/calls/{call_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


class _BlankPage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title><p>another origin</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class OtherOrigin:
    """A tiny page server on another loopback port: another origin than the API's."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), _BlankPage)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> OtherOrigin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@contextlib.contextmanager
def provider_rig(redis_url: str, *, coop: bool = False) -> Iterator[Any]:
    """Parkway with OAuth providers against a real OpenID provider on loopback
    (tests/helpers/connect_rig.py); its agent asks to connect the provider named last in the
    user's message ("connect me to acme"). ``coop``: the provider's pages send
    ``Cross-Origin-Opener-Policy: same-origin``, severing the popup from the page."""
    if shutil.which("node") is None:
        pytest.skip("the `node` executable is not on PATH (the OpenID provider needs it)")
    from tests.helpers.connect_rig import start_rig
    from tests.helpers.oidc_peer import oidc_peer

    def peer(clients: Any) -> Any:
        return oidc_peer(clients, coop=coop)

    yield from start_rig(redis_url, peer)


def sign_in_at_provider(popup: Page, *, decision: str = "allow") -> None:
    """Play the user in the provider's real login and consent pages; ``decision``
    presses Allow or Deny on the consent page."""
    popup.locator('#login input[name="login"]').fill("alice")
    popup.locator('#login input[name="password"]').fill("correct horse")
    popup.locator("#submit-login").click()
    popup.locator("#allow" if decision == "allow" else "#deny").click()
