"""The demo provider's own pages: the consent form and the refusal page.

Every page refuses framing (clickjacking, RFC 9700 §4.16), leaks nothing through Referer
or caches (§4.2) and loads nothing external; every text in it is escaped.
"""

from __future__ import annotations

import base64
import hashlib
import html
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.responses import HTMLResponse, Response

__all__ = ["Consent", "Refusal", "consent_page"]


@dataclass(frozen=True)
class Refusal:
    """An error shown on the provider's own page, never sent to an unverified URI."""

    error: str
    description: str

    def page(self) -> Response:
        body = (
            "<main><h1>Demo OAuth provider: request refused</h1>"
            f"<p><code>{html.escape(self.error)}</code> {html.escape(self.description)}</p></main>"
        )
        return _page("Request refused", body, status=400)


@dataclass(frozen=True)
class Consent:
    """A validated authorization request waiting for the user's decision."""

    consent_id: str
    client_id: str
    scope: str
    redirect_uri: str


# What each scope lets the client do, in the user's words. Sign-in scopes are shown
# apart: the connect card lists the scopes the agent asked for, and so does this page.
_SCOPE_WORDS = {
    "openid": "confirm who you are",
    "profile": "see your account name",
    "email": "see your email address",
    "offline_access": "stay connected while you are away",
    "repo": "read and write your repositories",
    "read:org": "read your organisations",
}
_SIGN_IN_SCOPES = ("openid", "profile")

# The pages' only style, allowed by its hash in the CSP (no inline style otherwise).
_STYLE = (
    "body{margin:0;min-height:100vh;display:grid;place-items:center;background:#f6f7f9;"
    "color:#1b1f24;font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}"
    "main{box-sizing:border-box;width:min(26rem,100% - 2rem);margin:1rem;padding:1.25rem 1.4rem;"
    "background:#fff;border:1px solid #cfd4dc;border-radius:10px;"
    "box-shadow:0 1px 2px rgba(16,24,40,.05)}"
    ".brand{margin:0 0 .25rem;font-size:12px;text-transform:uppercase;letter-spacing:.06em;"
    "color:#5d6673}"
    "h1{margin:0 0 .75rem;font-size:18px;font-weight:650}"
    "ul{margin:.25rem 0 .75rem;padding-left:1.1rem}li{margin:.15rem 0}"
    "code{font:12.5px ui-monospace,Menlo,Consolas,monospace;background:#f6f7f9;"
    "border:1px solid #e2e5ea;border-radius:4px;padding:0 .3rem}"
    "p{margin:.25rem 0 .75rem}.note,.fine{color:#5d6673;font-size:13px}"
    ".fine{margin:1rem 0 0;color:#8a93a0}"
    "label{display:grid;gap:.25rem;font-size:13px;color:#5d6673}"
    "input{font:inherit;color:#1b1f24;padding:.45rem .55rem;border:1px solid #cfd4dc;"
    "border-radius:6px}"
    ".actions{display:flex;gap:.5rem;margin-top:1rem}"
    "button{font:inherit;font-size:14px;padding:.4rem .95rem;border-radius:7px;cursor:pointer;"
    "border:1px solid #cfd4dc;background:#fff;color:#1b1f24}"
    "#allow{background:#2457d6;border-color:#2457d6;color:#fff}"
)
_STYLE_DIGEST = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
_STYLE_SOURCE = f"'sha256-{_STYLE_DIGEST}'"


def _scope_item(scope: str) -> str:
    words = _SCOPE_WORDS.get(scope)
    said = f" &mdash; {html.escape(words)}" if words else ""
    return f'<li data-scope="{html.escape(scope)}"><code>{html.escape(scope)}</code>{said}</li>'


def consent_page(consent: Consent, *, mount: str) -> Response:
    """The form that asks the user to allow or deny ``consent``; it posts back to
    ``{mount}/authorize``. The scopes the client asked for are listed as the connect
    card lists them; the sign-in scopes every connection includes are named below."""
    scopes = consent.scope.split()
    asked = [s for s in scopes if s not in _SIGN_IN_SCOPES]
    sign_in = [s for s in scopes if s in _SIGN_IN_SCOPES]
    listed = (
        "<p>It asks to:</p><ul>" + "".join(_scope_item(s) for s in asked) + "</ul>"
        if asked
        else "<p>It asks for nothing beyond signing you in.</p>"
    )
    also = (
        '<p class="note" data-sign-in="{}">Signing in also lets it {} ({}).</p>'.format(
            html.escape(" ".join(sign_in)),
            html.escape(" and ".join(_SCOPE_WORDS[s] for s in sign_in)),
            ", ".join(f"<code>{html.escape(s)}</code>" for s in sign_in),
        )
        if sign_in
        else ""
    )
    body = (
        '<main><p class="brand">Demo account</p>'
        f"<h1>Allow {html.escape(consent.client_id)} to use your demo account?</h1>"
        f"{listed}{also}"
        f'<form method="post" action="{html.escape(mount)}/authorize">'
        f'<input type="hidden" name="consent" value="{html.escape(consent.consent_id)}">'
        '<label>Account name <input name="account" value="demo-user" required '
        'pattern="[A-Za-z0-9_.\\-]{1,40}" maxlength="40" autocomplete="off"></label>'
        '<div class="actions">'
        '<button type="submit" name="decision" value="allow" id="allow">Allow</button>'
        '<button type="submit" name="decision" value="deny" id="deny" formnovalidate>'
        "Deny</button></div></form>"
        '<p class="fine">Parkway\'s built-in demo provider: no real account is involved.</p>'
        "</main>"
    )
    target = urlsplit(consent.redirect_uri)
    return _page(
        "Demo account: allow access?", body, form_target=f" {target.scheme}://{target.netloc}"
    )


def _page(title: str, body: str, *, status: int = 200, form_target: str = "") -> Response:
    # Clickjacking (RFC 9700 §4.16), leaks through Referer and caches (§4.2), and nothing
    # external. form-action names the client's origin too: browsers check the redirect
    # that answers the form post against it.
    csp = (
        f"default-src 'none'; style-src {_STYLE_SOURCE}; base-uri 'none'; "
        "frame-ancestors 'none'; form-action 'self'"
    )
    headers = {
        "Content-Security-Policy": csp + form_target,
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    doc = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )
    return HTMLResponse(doc, status_code=status, headers=headers)
