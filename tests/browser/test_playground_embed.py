"""The playground embedded by a host application that signs its users in: the host's page
hands the playground its user's JWT by postMessage (docs/embedding.md, "The token hook").

Debian chromium driven by Playwright. Parkway (real uvicorn, Redis) runs with
``auth=jwt`` against a JWKS on loopback and lists the host's origin in
``allowed_origins``. The host page is served from ``localhost`` and Parkway from
``127.0.0.1``: two sites, so the iframe is a cross-site one, and the playground has no
cookie of its own to use. A third origin, not listed, plays a page that tries to hand
the playground a token. The tests wait on DOM state and on what the host page recorded,
never on fixed sleeps.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from joserfc.jwk import RSAKey
from playwright.sync_api import Browser, FrameLocator, Page, expect
from pydantic import SecretStr

from tests.helpers.browser import VIEWPORT, wait_until
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.jwks import AUDIENCE, ISSUER, JwksServer, sign
from tests.helpers.support import CONNECT_EMBED, ServerThread, agent_doc, call, text

KEY = RSAKey.generate_key(2048, parameters={"kid": "embed-1"})
AGENT = agent_doc(
    [
        [text("Connecting you. "), call("request_connection", {"provider": "demo"})],
        [text("Connection: {{last_tool_results}}")],
    ],
    tools=[CONNECT_EMBED],
)

# The host page: it frames the playground and answers each token request with the next
# of its tokens, recording the requests; a frame of a third origin waits for "go" and
# then posts a token of its own to the playground.
HOST_PAGE = """<!doctype html><title>host</title>
<iframe id="pw" src="{playground}/" width="980" height="640"></iframe>
<iframe id="evil" src="{evil}/evil"></iframe>
<script>
const PLAYGROUND = {playground_json};
const tokens = {tokens_json};
window.requests = [];
window.evilSent = false;
window.addEventListener("message", (event) => {{
  if (event.data === "evil-sent") {{ window.evilSent = true; return; }}
  if (event.origin !== PLAYGROUND) return;
  const data = event.data;
  if (!data || data.type !== "parkway:token-request") return;
  window.requests.push(data.reason);
  const token = tokens.shift();
  if (token) event.source.postMessage({{ type: "parkway:token", token }}, PLAYGROUND);
}});
</script>"""
EVIL_PAGE = """<!doctype html><title>elsewhere</title><script>
window.addEventListener("message", (event) => {{
  if (event.data !== "go") return;
  parent.frames[0].postMessage({{ type: "parkway:token", token: {token_json} }}, "*");
  parent.postMessage("evil-sent", "*");
}});
</script>"""


class Pages:
    """Serves the host page at ``/`` and the third origin's page at ``/evil``."""

    def __init__(self) -> None:
        self.host_page = ""
        self.evil_page = ""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = outer.evil_page if self.path.startswith("/evil") else outer.host_page
                body = page.encode()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def embedded(redis_url: str) -> Iterator[tuple[ServerThread, Pages, str, str]]:
    """Parkway with jwt auth and the demo provider; the pages' server. Yields the
    server, the pages, the host's origin (``localhost``) and the third origin."""
    pages = Pages()
    host = f"http://localhost:{pages.port}"
    with JwksServer() as jwks:
        jwks.publish(KEY)
        server = ServerThread(
            redis_url,
            AGENT,
            auth="jwt",
            jwt_jwks_url=jwks.url,
            jwt_issuer=ISSUER,
            jwt_audience=AUDIENCE,
            allowed_origins=(host,),
            demo_oauth=True,
            token_key=SecretStr(TOKEN_KEY),
        ).start()
        try:
            yield server, pages, host, f"http://127.0.0.1:{pages.port}"
        finally:
            server.stop()
            pages.close()


def open_host(browser: Browser, pages: Pages, server: ServerThread, host: str, evil: str,
              tokens: list[str]) -> tuple[Page, FrameLocator]:  # fmt: skip
    """The host page in a fresh context, handing out ``tokens``; the playground frame."""
    pages.host_page = HOST_PAGE.format(
        playground=server.base_url,
        evil=evil,
        playground_json=json.dumps(server.base_url),
        tokens_json=json.dumps(tokens),
    )
    pages.evil_page = EVIL_PAGE.format(token_json=json.dumps(sign(KEY, sub="mallory")))
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(f"{host}/")
    frame = page.frame_locator("#pw")
    expect(frame.get_by_test_id("composer")).to_be_visible()
    return page, frame


def bearer(subject: str) -> dict[str, str]:
    return {"authorization": f"Bearer {sign(KEY, sub=subject)}"}


def test_the_host_hands_its_token_by_postmessage_and_a_fresh_one_after_a_401(
    browser: Browser, redis_url: str
) -> None:
    """Framed by the host (a listed origin, on another site), the playground asks the
    host for a token, sends it as a bearer token, and when the API answers 401 (the
    host's first token had expired) asks once for a fresh one and retries: the chat
    turn works, as the host's user. A token posted by a frame of an origin that is not
    listed is ignored: the chat stays the host user's. The page keeps the token in
    memory only."""
    with embedded(redis_url) as (server, pages, host, evil):
        page_answer = httpx.get(f"{server.base_url}/")
        csp = page_answer.headers["content-security-policy"]
        assert f"frame-ancestors {host}" in csp and "x-frame-options" not in page_answer.headers
        assert f'content="{host}"' in page_answer.text

        expired = sign(KEY, sub="alice", exp=int(time.time()) - 3600)
        page, frame = open_host(browser, pages, server, host, evil, [expired, sign(KEY)])
        root = frame.locator("html")
        expect(root).to_have_attribute("data-host-tokens", "2")
        assert page.evaluate("window.requests") == ["start", "unauthorized"]

        # a third origin's frame hands the playground a token of its own
        page.evaluate("document.getElementById('evil').contentWindow.postMessage('go', '*')")
        wait_until(page, lambda: page.evaluate("window.evilSent"))

        composer = frame.get_by_test_id("composer")
        composer.fill("connect me")
        composer.press("Enter")
        widget = frame.locator('[data-testid^="widget-"][data-kind="connect"]')
        expect(widget).to_have_attribute("data-state", "pending")
        expect(frame.get_by_test_id("messages")).to_contain_text("Connecting you.")
        chat_id = frame.get_by_test_id("chat-id").inner_text().strip()
        assert chat_id
        expect(root).to_have_attribute("data-host-tokens", "2")  # the third origin's: ignored
        with httpx.Client(base_url=server.base_url, timeout=15) as http:
            assert http.get(f"/api/chats/{chat_id}", headers=bearer("alice")).status_code == 200
            assert http.get(f"/api/chats/{chat_id}", headers=bearer("mallory")).status_code == 404
        assert page.evaluate("window.requests") == ["start", "unauthorized"]

        # in memory only: nothing in the playground's storage holds a token (a cross-site
        # frame may be denied storage altogether; then nothing is there either)
        playground = next(f for f in page.frames if f.url.startswith(server.base_url))
        stored = playground.evaluate(
            """() => {
              const read = (what) => { try { return JSON.stringify(what()); } catch { return "denied"; } };
              return [read(() => Object.entries(localStorage)),
                      read(() => Object.entries(sessionStorage)),
                      read(() => document.cookie)].join(" ");
            }"""
        )
        assert "eyJ" not in stored


def test_the_connect_popup_of_an_embedded_playground_starts_with_a_ticket(
    browser: Browser, redis_url: str
) -> None:
    """The popup cannot carry the page's bearer token: Connect opens it at once, the
    page asks for a ticket with its token, and the popup goes to the start link. The
    user consents at the provider, the callback (where the popup has no identity) is
    bound by the flow's cookie, the call settles as connected for the host's user, and
    the chat goes on."""
    with embedded(redis_url) as (server, pages, host, evil):
        page, frame = open_host(browser, pages, server, host, evil, [sign(KEY)])
        composer = frame.get_by_test_id("composer")
        composer.fill("connect me")
        composer.press("Enter")
        widget = frame.locator('[data-testid^="widget-"][data-kind="connect"]')
        expect(widget).to_have_attribute("data-state", "pending")
        with page.context.expect_page() as opened:
            widget.locator('[data-action="connect"]').first.click()
        popup = opened.value
        popup.locator("#allow").click()
        expect(widget).to_have_attribute("data-state", "connected")
        messages = frame.get_by_test_id("messages")
        expect(messages).to_contain_text('"connected":true')
        chat_id = frame.get_by_test_id("chat-id").inner_text().strip()
        with httpx.Client(base_url=server.base_url, timeout=15) as http:
            [connection] = http.get("/api/connections", headers=bearer("alice")).json()[
                "connections"
            ]
            state = http.get(f"/api/chats/{chat_id}", headers=bearer("alice")).json()
        [recorded] = [c["outcome"] for c in state["calls"]]
        assert recorded["output"]["connection_id"] == connection["id"]
        assert page.evaluate("window.requests") == ["start"]
