"""The demo provider's own pages: the consent form and the refusal page.

Every page refuses framing (clickjacking, RFC 9700 §4.16), leaks nothing through Referer
or caches (§4.2) and loads nothing external; every text in it is escaped.
"""

from __future__ import annotations

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
            "<h1>Demo OAuth provider: request refused</h1>"
            f"<p><code>{html.escape(self.error)}</code> {html.escape(self.description)}</p>"
        )
        return _page("Request refused", body, status=400)


@dataclass(frozen=True)
class Consent:
    """A validated authorization request waiting for the user's decision."""

    consent_id: str
    client_id: str
    scope: str
    redirect_uri: str


def consent_page(consent: Consent, *, mount: str) -> Response:
    """The form that asks the user to allow or deny ``consent``; it posts back to
    ``{mount}/authorize``."""
    scopes = ", ".join(consent.scope.split())
    body = (
        f"<h1>Demo OAuth provider — {html.escape(consent.client_id)} asks for: "
        f"{html.escape(scopes)}</h1>"
        f'<form method="post" action="{html.escape(mount)}/authorize">'
        f'<input type="hidden" name="consent" value="{html.escape(consent.consent_id)}">'
        '<p><label>Account name <input name="account" value="demo-user" required '
        'pattern="[A-Za-z0-9_.\\-]{1,40}" maxlength="40" autocomplete="off"></label></p>'
        '<button type="submit" name="decision" value="allow" id="allow">Allow</button> '
        '<button type="submit" name="decision" value="deny" id="deny" formnovalidate>'
        "Deny</button></form>"
    )
    target = urlsplit(consent.redirect_uri)
    return _page("Demo OAuth provider", body, form_target=f" {target.scheme}://{target.netloc}")


def _page(title: str, body: str, *, status: int = 200, form_target: str = "") -> Response:
    # Clickjacking (RFC 9700 §4.16), leaks through Referer and caches (§4.2), and nothing
    # external. form-action names the client's origin too: browsers check the redirect
    # that answers the form post against it.
    csp = "default-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    headers = {
        "Content-Security-Policy": csp + form_target,
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    doc = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )
    return HTMLResponse(doc, status_code=status, headers=headers)
