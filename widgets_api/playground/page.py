"""The reference playground page at ``/``, its static files at ``/static/{name}`` and its
icon at ``/favicon.svg`` (also ``/favicon.ico``, which browsers ask for by themselves).

The page is plain HTML, CSS and JavaScript from ``widgets_api/playground/static/`` (no build step,
no external resources). It speaks the AI SDK UI message stream like any ``useChat``
front end and renders a widget for each parked call. Its URLs are relative to the app's
root (the scripts find the root from their own URL, ``playground-base.js``), so it works
as well when a host application mounts the app under a prefix (``/pw/``; no ``<base>``
tag, which the CSP's ``base-uri 'none'`` forbids).

Security headers, and the threat each one answers:

- ``Content-Security-Policy: default-src 'self'`` with no inline script or style: an
  injected string in a tool's input or output (which the page shows) cannot run code,
  and the page loads nothing from other origins. ``frame-ancestors 'none'``: no other
  site can frame the page to click its Approve button for the user (clickjacking).
  Only the origins a deployment trusts as its host applications (``allowed_origins``,
  which may already send state-changing requests) may frame it, to embed the
  playground and hand it their user's token (docs/embedding.md); the page then names
  them in ``frame-ancestors`` and sends no ``X-Frame-Options`` (which has no list).
- ``Referrer-Policy: no-referrer``: chat ids in the URL never leak to the connect
  popup's provider or anywhere else.
- No ``Cross-Origin-Opener-Policy``: the connect widget keeps a handle on its OAuth
  popup and receives the callback page's ``postMessage``; COOP would sever that link.
  (The widget still works without it, by polling the server.)
- ``X-Content-Type-Options: nosniff`` with exact content types for the fixed list of
  static files; any other name is a 404, so no path ever reaches the file system.
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable, Sequence
from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_AUTH_MODES", "STATIC_FILES", "page_routes"]

#: How the server knows its users, as the page is told it (its ``parkway-auth`` meta tag):
#: ``session`` (it issues anonymous sessions, ``POST /api/sessions``), ``jwt`` (a signed-in
#: user's token, which an embedding host hands the page), ``header`` (an authenticating
#: proxy's header) or ``host`` (the host application's own authenticator). Only with
#: ``session`` does the page ask for a session; otherwise a 401 means "not signed in",
#: which it says, with what to do, instead of asking for a session that does not exist.
PAGE_AUTH_MODES = ("session", "jwt", "header", "host")

_POLICY = [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
]
CONTENT_SECURITY_POLICY = "; ".join([*_POLICY, "frame-ancestors 'none'"])

#: The only names ``/static/{name}`` serves, with their content types. ``overlay.js``
#: is the build-kit overlay merge shared with the server's tests; the other
#: scripts are the page's ES modules (``playground.js`` is the entry point and lists
#: what each of the others is for). A module missing here is a 404, and the page fails.
_JS = "text/javascript; charset=utf-8"
STATIC_FILES: dict[str, str] = {
    "playground.html": "text/html; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
    "playground.js": _JS,
    "playground-base.js": _JS,
    "host-token.js": _JS,
    "canonical.js": _JS,
    "ui-stream.js": _JS,
    "chat.js": _JS,
    "call-outcome.js": _JS,
    "composer.js": _JS,
    "widgets.js": _JS,
    "widget.js": _JS,
    "approval-widgets.js": _JS,
    "client-widgets.js": _JS,
    "mcp-form.js": _JS,
    "mcp-widgets.js": _JS,
    "live-question.js": _JS,
    "connect-widget.js": _JS,
    "connect-flow.js": _JS,
    "view.js": _JS,
    "agent-panel.js": _JS,
    "agent-panel-lists.js": _JS,
    "code-view.js": _JS,
    "code-widgets.js": _JS,
    "code-panel.js": _JS,
    "commit-diff.js": _JS,
    "approvals-view.js": _JS,
    "queued-call.js": _JS,
    "message-extras.js": _JS,
    "overlay.js": _JS,
}

#: The page's icon: Parkway's "P" on the accent blue, small enough to keep inline. Our
#: own, so a first visit logs no 404 for it.
_FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    b'<rect width="32" height="32" rx="7" fill="#2457d6"/>'
    b'<path d="M12 25V7h6a5.5 5.5 0 0 1 0 11h-6" fill="none" stroke="#fff" '
    b'stroke-width="3.5" stroke-linejoin="round"/></svg>'
)

_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # The page is small and changes with the server; always revalidate.
    "cache-control": "no-cache",
}


@cache
def _read(name: str) -> bytes | None:
    """The bytes of an allow-listed static file (cached: the files ship with the
    package and do not change while the server runs)."""
    # By the installed name: a bare "widgets_api" resolves only inside a checkout.
    item = resources.files("parkway.widgets_api.playground").joinpath("static", name)
    if not item.is_file():
        return None
    return item.read_bytes()


def _not_found() -> Response:
    body = {"error": {"code": "not_found", "message": "no such file"}}
    return JSONResponse(body, status_code=404, headers={"x-content-type-options": "nosniff"})


# Where the page learns which parents may hand it a token (host-token.js reads it).
_EMBED_META = b'<meta name="parkway-embed-origins" content="">'
# ... and how the server knows its users (playground-base.js reads it).
_AUTH_META = b'<meta name="parkway-auth" content="session">'


def _page(embed_origins: Sequence[str], auth: str) -> tuple[bytes, dict[str, str]] | None:
    """The page's bytes and headers: framable by ``embed_origins`` only, which the page
    also names in a meta tag, the parents it takes a token from; and ``auth``, how the
    server knows its users, in another."""
    content = _read("playground.html")
    if content is None:
        return None
    if auth != "session":  # one of PAGE_AUTH_MODES: nothing to escape
        told = f'<meta name="parkway-auth" content="{auth}">'
        content = content.replace(_AUTH_META, told.encode())
    if not embed_origins:
        return content, _HEADERS
    listed = " ".join(embed_origins)
    meta = f'<meta name="parkway-embed-origins" content="{html.escape(listed)}">'
    headers = {k: v for k, v in _HEADERS.items() if k != "x-frame-options"}
    headers["content-security-policy"] = "; ".join([*_POLICY, f"frame-ancestors {listed}"])
    return content.replace(_EMBED_META, meta.encode()), headers


def _playground(
    embed_origins: Sequence[str], auth: str
) -> Callable[[Request], Awaitable[Response]]:
    async def playground(request: Request) -> Response:
        """``GET /``: the playground page."""
        page = _page(embed_origins, auth)
        if page is None:  # a broken install; say so rather than serve nothing
            return _not_found()
        content, headers = page
        return Response(content, media_type=STATIC_FILES["playground.html"], headers=headers)

    return playground


async def static_file(request: Request) -> Response:
    """``GET /static/{name}``: one of :data:`STATIC_FILES`, else 404."""
    name = request.path_params["name"]
    media_type = STATIC_FILES.get(name)
    content = _read(name) if media_type is not None else None
    if media_type is None or content is None:
        return _not_found()
    return Response(content, media_type=media_type, headers=_HEADERS)


async def favicon(request: Request) -> Response:
    """``GET /favicon.svg`` (and ``/favicon.ico``): the page's icon, as SVG."""
    return Response(_FAVICON, media_type="image/svg+xml", headers=_HEADERS)


def page_routes(embed_origins: Sequence[str] = (), *, auth: str = "session") -> list[BaseRoute]:
    """The page's routes: ``GET /``, ``GET /static/{name}`` and the icon. The origins in
    ``embed_origins`` may frame the page and hand it their user's token; ``auth`` (one of
    :data:`PAGE_AUTH_MODES`) tells the page how the server knows its users."""
    if auth not in PAGE_AUTH_MODES:
        raise ValueError(f"auth must be one of {', '.join(PAGE_AUTH_MODES)}, not {auth!r}")
    return [
        Route("/", _playground(tuple(embed_origins), auth), methods=["GET"]),
        Route("/static/{name}", static_file, methods=["GET"]),
        Route("/favicon.svg", favicon, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
    ]
