"""The page served at ``/``: for now a short status page with the API's entry points."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

__all__ = ["index"]

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Parkway</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}
code{background:#f3f3f3;padding:0 .25rem}</style></head>
<body><h1>Parkway is running</h1>
<p>Human-in-the-loop tool calls for AI agents, over the AI SDK UI message stream.</p>
<ul>
<li><code>POST /api/sessions</code> &mdash; get a session</li>
<li><code>POST /api/chat</code> &mdash; the AI SDK chat endpoint (<code>useChat</code>)</li>
<li><code>GET /api/chats/{id}</code> &mdash; a chat with its parked calls</li>
<li><code>GET /healthz</code> &mdash; health</li>
</ul></body></html>
"""


async def index(request: Request) -> Response:
    return HTMLResponse(
        _PAGE,
        headers={
            "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'",
            "referrer-policy": "no-referrer",
        },
    )
