"""The small pages of the connect flow: the callback's result page and its error pages.

The result page loads nothing from anywhere (its script and style are inline, allowed
by a per-response CSP nonce), sends ``Referrer-Policy: no-referrer`` and
``Cache-Control: no-store`` (the URL held a code and a state), cannot be framed, and
posts one message to the opener with the exact playground origin recorded when the
flow started, never ``*``. The message is a hint only: ``{type, chatId, toolCallId,
outcome}`` with no code, state or token. Then the page closes itself (a popup severed
from its opener by a provider's COOP cannot be closed by the opener), and says "you can
close this window" if it cannot.
"""

from __future__ import annotations

import html
import json
import secrets
from typing import Any

from starlette.responses import HTMLResponse

from parkway.widgets_api.connect.providers import Provider
from parkway.widgets_api.connect.records import FlowRecord

__all__ = ["MESSAGE_TYPE", "connect_page", "result_page"]

MESSAGE_TYPE = "parkway:connect"
CLOSE_AFTER_MS = 1200

_STYLE = """
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;display:flex;
min-height:100vh;align-items:center;justify-content:center;background:#f6f7f9;color:#1d2330}
main{background:#fff;border:1px solid #e2e5ea;border-radius:12px;padding:2rem 2.25rem;
max-width:28rem;box-shadow:0 1px 3px rgba(0,0,0,.06)}
h1{font-size:1.25rem;margin:0 0 .5rem}p{margin:.25rem 0;color:#4a5260}
.ok h1{color:#17663a}.fail h1{color:#9b2c2c}small{color:#7a8190}
"""

_SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById("pw-result").textContent);
  if (data.message && data.target && window.opener) {
    try { window.opener.postMessage(data.message, data.target); } catch (e) {}
  }
  if (data.close) {
    setTimeout(function () {
      window.close();
      var hint = document.getElementById("pw-close");
      if (hint) { hint.hidden = false; }
    }, data.closeAfterMs);
  }
})();
"""


def connect_page(
    *,
    status: int,
    title: str,
    message: str,
    ok: bool,
    post: dict[str, Any] | None = None,
    target_origin: str | None = None,
    close: bool = False,
) -> HTMLResponse:
    """A connect-flow page. ``post`` is sent to ``target_origin`` only when both are
    given; every text is escaped (provider error descriptions are attacker-controlled)."""
    nonce = secrets.token_urlsafe(16)
    data = {
        "message": post if post is not None and target_origin else None,
        "target": target_origin if post is not None else None,
        "close": close,
        "closeAfterMs": CLOSE_AFTER_MS,
    }
    # JSON inside a data block: escape "<" so the text can never close the element.
    blob = json.dumps(data).replace("<", "\\u003c")
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<style nonce="{nonce}">{_STYLE}</style></head>
<body><main class="{"ok" if ok else "fail"}">
<h1>{html.escape(title)}</h1>
<p>{html.escape(message)}</p>
<p id="pw-close" hidden><small>You can close this window.</small></p>
</main>
<script type="application/json" id="pw-result">{blob}</script>
<script nonce="{nonce}">{_SCRIPT}</script>
</body></html>
"""
    return HTMLResponse(
        body,
        status_code=status,
        headers={
            "content-security-policy": (
                f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
                "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
            ),
            "referrer-policy": "no-referrer",
            "cache-control": "no-store",
            "x-frame-options": "DENY",
            "x-content-type-options": "nosniff",
        },
    )


def result_page(
    flow: FlowRecord,
    provider: Provider,
    summary: str,
    *,
    settled_now: bool,
    account: str | None = None,
    detail: str | None = None,
    description: str | None = None,
) -> HTMLResponse:
    """The callback's answer: what became of the connection and of the agent's request.

    ``summary`` is the call's outcome in one word (``connected``, a failure reason, or
    ``gone``); ``account`` is set when a connection was stored, ``settled_now`` when this
    callback settled the call; ``detail`` and ``description`` explain a failure."""
    name = provider.display_name
    stored = account is not None
    if summary == "connected":
        title = f"{name} connected"
        text = f"Connected as {account}. You can go back to the chat."
        if flow.retry:
            text = f"Connected as {account}. Ask the agent to continue."
    elif stored:
        title = f"{name} connected, but the request had ended"
        ended = {"gone": "no longer exists"}.get(summary, f"had already ended ({summary})")
        text = (
            f"Connected as {account} and saved. The agent's request {ended}, so "
            "nothing changed in the chat: ask the agent to try again."
        )
    elif settled_now and summary == "denied":
        title = f"{name} not connected"
        text = "You did not allow access. The agent has been told."
    elif settled_now or flow.retry:
        title = f"{name} not connected"
        text = f"The connection did not complete: {detail}."
        if description:
            text += f" The provider said: {description[:300]}"
    else:
        title = f"{name} not connected"
        text = f"The connection did not complete, and the request had already ended ({summary})."
    post = {
        "type": MESSAGE_TYPE,
        "chatId": flow.chat,
        "toolCallId": flow.call,
        "outcome": summary,
    }
    return connect_page(
        status=200 if summary == "connected" or stored else 400,
        title=title,
        message=text,
        ok=summary == "connected" or stored,
        post=post,
        target_origin=flow.origin,
        close=True,
    )
