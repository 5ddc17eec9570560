"""A shop MCP server (the official SDK's ``MCPServer``) with a tool for each behaviour the
tests look at, and a thread serving it over streamable HTTP on loopback.

Tools (annotations as the server claims them):

- ``lookup(sku)``: read-only (``readOnlyHint``); structured content ``{"sku", "stock"}``;
- ``cancel_order(order_id)``: destructive (``destructiveHint``); notes each execution;
- ``note(text)``: no annotations; notes each execution;
- ``fail_order()``: an ``isError`` result ("order 7 is already shipped");
- ``catalogue(lines)``: read-only, unstructured: ``lines`` text blocks of about 1 KiB each;
- ``add_tool(name)``: read-only; adds a tool ``name`` and says the list changed;
- ``ask_person(item)``: a 2026-07-28 ``InputRequiredResult`` (an elicitation form, its
  ``requestState`` ``opaque-<item>``); called again with the answer, it notes what it
  received and says where the item ships from (or what the person chose);
- ``ask_details(item)``: an ``InputRequiredResult`` with two forms at once: ``contact``
  (every kind of field an elicitation schema has, its message and one title holding
  HTML) and ``note`` (one optional text); called again, it says what it received;
- ``ask_again()``: asks for input on every call;
- ``ask_twice(item)``: two rounds of input (a warehouse, then a day), each with its
  own ``requestState``; notes each call's ``(round, inputResponses, requestState)`` in
  ``rounds``;
- ``ask_url()``: the ``URLElicitationRequiredError`` (-32042) of older servers, on its
  first call only (:meth:`McpServerThread.complete_link` then sends the completion);
- ``ask_model()``: an ``InputRequiredResult`` that asks for sampling;
- ``hold()``: read-only; answers once the test sets ``release`` (or after 30 s);
- ``ask_live(item)``: read-only; asks the client a form question in the middle of the
  call (``elicitation/create``, as servers of the ``initialize`` era do: a live wait)
  and says what it got; notes each result's action and content in ``live``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import (
    METHOD_NOT_FOUND,
    CallToolResult,
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel

from tests.helpers.support import free_port

__all__ = [
    "BIG_TEXT_BYTES",
    "SHOP_TOOLS",
    "McpServerThread",
    "ShopServer",
    "shop_entry",
    "stdio_entry",
]

SHOP_TOOLS = [
    "lookup",
    "cancel_order",
    "note",
    "fail_order",
    "catalogue",
    "add_tool",
    "ask_person",
    "ask_details",
    "ask_again",
    "ask_twice",
    "ask_url",
    "ask_model",
    "ask_live",
    "hold",
]
BIG_TEXT_BYTES = 1024
READ_ONLY = ToolAnnotations(read_only_hint=True)
# Server-supplied text is untrusted: a page that showed it as HTML would run this.
HOSTILE = '<img src=x onerror="window.__pwned=1">'
CONTACT_FORM = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Email " + HOSTILE,
                  "description": "Where the receipt goes"},
        "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 20,
                 "default": "Ada"},
        "quantity": {"type": "integer", "title": "Quantity", "minimum": 1, "maximum": 5,
                     "default": 1},
        "weight": {"type": "number", "title": "Weight (kg)", "minimum": 0.5},
        "gift": {"type": "boolean", "title": "Gift wrap", "default": False},
        "size": {"type": "string", "title": "Size", "enum": ["s", "m", "l"],
                 "enumNames": ["Small", "Medium", "Large"]},
        "colour": {"type": "string", "title": "Colour",
                   "oneOf": [{"const": "red", "title": "Red"}, {"const": "blue", "title": "Blue"}]},
        "extras": {"type": "array", "title": "Extras", "maxItems": 2,
                   "items": {"type": "string", "enum": ["bag", "card", "ribbon"]}},
        "day": {"type": "string", "format": "date", "title": "Delivery day"},
        "site": {"type": "string", "format": "uri", "title": "Website"},
    },
    "required": ["email", "quantity", "size"],
}  # fmt: skip


class Warehouse(BaseModel):
    """ask_live's form: one required choice."""

    warehouse: str


class Stock(BaseModel):
    sku: str
    stock: int


class ShopServer:
    """The shop's MCP server; ``executions`` lists the side-effecting calls it ran, as
    ``(tool, arguments)``, and ``calls_file`` (when set) gets a line for each too (a
    stdio server is another process)."""

    def __init__(
        self, name: str = "shop", calls_file: Path | None = None, *, legacy: bool = False
    ) -> None:
        self.executions: list[tuple[str, dict[str, Any]]] = []
        self.calls_file = calls_file
        self.release = threading.Event()
        # ask_person: the items it asked about, and each answered call's (item,
        # inputResponses, requestState) as the server received them; ask_url's calls
        self.asked: list[str] = []
        self.answers: list[tuple[str, dict[str, Any], str | None]] = []
        self.url_calls = 0
        # ask_live: each live answer's (action, content) as the server received it
        self.live: list[tuple[str, dict[str, Any] | None]] = []
        self.rounds: list[tuple[int, dict[str, Any], str | None]] = []
        # ask_url's session (and the server's loop): a completion is sent on it
        self.url_session: tuple[Any, asyncio.AbstractEventLoop] | None = None
        # the methods it was asked, in order (initialize, tools/list, ...)
        self.methods: list[str] = []
        # log_level: the SDK configures the root logger only when nothing has yet
        self.app: MCPServer[Any] = MCPServer(
            name, log_level="WARNING", middleware=[_Era(self.methods, legacy=legacy)]
        )
        app = self.app

        @app.tool(annotations=READ_ONLY)
        def lookup(sku: str) -> Stock:
            """How many of an article are in stock."""
            return Stock(sku=sku, stock=len(sku))

        @app.tool(annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False))
        def cancel_order(order_id: str) -> str:
            """Cancel an order."""
            self._ran("cancel_order", {"order_id": order_id})
            return f"order {order_id} cancelled"

        @app.tool()
        def note(text: str) -> str:
            """Write a note."""
            self._ran("note", {"text": text})
            return "noted"

        @app.tool()
        def fail_order() -> str:
            """Always fails."""
            raise ToolError("order 7 is already shipped")

        @app.tool(annotations=READ_ONLY, structured_output=False)
        def catalogue(lines: int) -> list[TextContent]:
            """The catalogue, one block per line."""
            return [
                TextContent(type="text", text=f"{i:05d} " + "x" * (BIG_TEXT_BYTES - 6))
                for i in range(lines)
            ]

        @app.tool(annotations=READ_ONLY)
        async def add_tool(name: str, ctx: Context) -> str:
            """Add a tool to the server."""
            app.add_tool(_restock, name=name, annotations=READ_ONLY)
            await ctx.notify_tools_changed()
            return f"added {name}"

        @app.tool(annotations=READ_ONLY)
        def ask_person(item: str, ctx: Context) -> CallToolResult | InputRequiredResult:
            """Needs a person's answer first (a warehouse), then ships ``item``."""
            responses = ctx.input_responses
            if not responses:
                self.asked.append(item)
                form = ElicitRequestFormParams(
                    message="Which warehouse?",
                    requested_schema={
                        "type": "object",
                        "properties": {"w": {"type": "string"}},
                        "required": ["w"],
                    },
                )
                return InputRequiredResult(
                    input_requests={"where": ElicitRequest(params=form)},
                    request_state=f"opaque-{item}",
                )
            answers = {
                k: v.model_dump(mode="json", exclude_none=True) for k, v in responses.items()
            }
            self.answers.append((item, answers, ctx.request_state))
            where = answers.get("where", {})
            if where.get("action") != "accept":
                text = f"not shipped: the person chose {where.get('action')}"
            else:
                text = f"{item} ships from {where['content']['w']}"
            return CallToolResult(content=[TextContent(type="text", text=text)])

        @app.tool(annotations=READ_ONLY)
        def ask_details(item: str, ctx: Context) -> CallToolResult | InputRequiredResult:
            """Needs a person's contact details (and an optional note) for ``item``."""
            responses = ctx.input_responses
            if not responses:
                contact = ElicitRequestFormParams(
                    message=f"Where should the {item} go? <b>{HOSTILE}</b>",
                    requested_schema=CONTACT_FORM,
                )
                note = ElicitRequestFormParams(
                    message="Anything else?",
                    requested_schema={
                        "type": "object",
                        "properties": {"comment": {"type": "string", "title": "Comment"}},
                    },
                )
                return InputRequiredResult(
                    input_requests={
                        "contact": ElicitRequest(params=contact),
                        "note": ElicitRequest(params=note),
                    },
                    request_state=f"details-{item}",
                )
            answers = {
                k: v.model_dump(mode="json", exclude_none=True) for k, v in responses.items()
            }
            self.answers.append((item, answers, ctx.request_state))
            contact = answers.get("contact", {})
            if contact.get("action") != "accept":
                text = f"no details: the person chose {contact.get('action')}"
            else:
                content = contact["content"]
                text = f"{content['quantity']} {item} for {content['email']}"
            return CallToolResult(content=[TextContent(type="text", text=text)])

        @app.tool(annotations=READ_ONLY)
        def ask_again(ctx: Context) -> CallToolResult | InputRequiredResult:
            """Asks for a person's answer on every call."""
            self.answers.append(("again", dict(ctx.input_responses or {}), ctx.request_state))
            form = ElicitRequestFormParams(
                message="Again?", requested_schema={"type": "object", "properties": {}}
            )
            return InputRequiredResult(
                input_requests={"again": ElicitRequest(params=form)}, request_state="again"
            )

        @app.tool(annotations=READ_ONLY)
        def ask_twice(item: str, ctx: Context) -> CallToolResult | InputRequiredResult:
            """Needs two answers (a warehouse, then a day), then ships ``item``."""
            answers = {
                k: v.model_dump(mode="json", exclude_none=True)
                for k, v in (ctx.input_responses or {}).items()
            }
            state = ctx.request_state
            self.rounds.append((len(self.rounds) + 1, answers, state))
            if state is None:
                asked = ("where", "Which warehouse?", "w", f"round1-{item}")
            elif state == f"round1-{item}" and answers.get("where", {}).get("action") == "accept":
                w = answers["where"]["content"]["w"]
                asked = ("when", f"Which day from {w}?", "d", f"round2-{item}-{w}")
            elif state.startswith(f"round2-{item}-") and "when" in answers:
                w = state.removeprefix(f"round2-{item}-")
                when = answers["when"]
                text = (
                    f"{item} ships from {w} on {when['content']['d']}"
                    if when.get("action") == "accept"
                    else f"not shipped: the person chose {when.get('action')}"
                )
                return CallToolResult(content=[TextContent(type="text", text=text)])
            else:
                return CallToolResult(
                    content=[TextContent(type="text", text="not shipped")], is_error=True
                )
            key, message, field, next_state = asked
            form = ElicitRequestFormParams(
                message=message,
                requested_schema={
                    "type": "object",
                    "properties": {field: {"type": "string"}},
                    "required": [field],
                },
            )
            return InputRequiredResult(
                input_requests={key: ElicitRequest(params=form)}, request_state=next_state
            )

        @app.tool(annotations=READ_ONLY)
        async def ask_url(ctx: Context) -> str:
            """Needs a person to visit a page first (once)."""
            self.url_calls += 1
            self.url_session = (ctx.session, asyncio.get_running_loop())
            if self.url_calls > 1:
                return "authorised"
            raise UrlElicitationRequiredError(
                [
                    ElicitRequestURLParams(
                        message="Authorise the shop",
                        url="https://shop.example/authorise",
                        elicitation_id="e-1",
                    )
                ]
            )

        @app.tool(annotations=READ_ONLY)
        def ask_model() -> CallToolResult | InputRequiredResult:
            """Asks the client's model a question."""
            params = CreateMessageRequestParams(
                messages=[
                    SamplingMessage(role="user", content=TextContent(type="text", text="hi"))
                ],
                max_tokens=10,
            )
            return InputRequiredResult(input_requests={"s": CreateMessageRequest(params=params)})

        @app.tool(annotations=READ_ONLY)
        async def ask_live(item: str, ctx: Context) -> str:
            """Asks where to ship the item, during the call."""
            result = await ctx.elicit(f"Where should the {item} ship from?", Warehouse)
            content = result.data.model_dump() if result.action == "accept" else None
            self.live.append((result.action, content))
            if result.action != "accept":
                return f"no warehouse ({result.action})"
            return f"{item} ships from {result.data.warehouse}"

        @app.tool(annotations=READ_ONLY)
        async def hold() -> str:
            """Answers once released."""
            await anyio.to_thread.run_sync(self.release.wait, 30)
            return "released"

    def _ran(self, tool: str, arguments: dict[str, Any]) -> None:
        self.executions.append((tool, arguments))
        if self.calls_file is not None:
            # a stdio server's env (SHOP_MOOD), as the client set it, is noted too
            mood = os.environ.get("SHOP_MOOD")
            with self.calls_file.open("a") as out:
                out.write(f"{tool} {sorted(arguments.items())}")
                out.write(f" mood={mood}\n" if mood else "\n")


class _Era:
    """Server middleware noting each request's method; ``legacy``: a server of the
    ``initialize`` era (2025-11-25 and before), which has no ``server/discover`` and
    answers it "Method not found", as such a server does. (The SDK serves both eras and
    has no setting to limit them; its documented seams are this middleware and the
    ``server/discover`` handler.)"""

    def __init__(self, methods: list[str], *, legacy: bool) -> None:
        self.methods = methods
        self.legacy = legacy

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if ctx.request_id is not None:
            self.methods.append(ctx.method)
            if self.legacy and ctx.method == "server/discover":
                raise MCPError(code=METHOD_NOT_FOUND, message="Method not found")
        return await call_next(ctx)


def _restock(sku: str) -> str:
    """Restock an article."""
    return f"restocked {sku}"


class McpServerThread:
    """A :class:`ShopServer` over streamable HTTP, served by uvicorn in a thread on a
    free loopback port (or ``port``: a restarted server keeps its address); ``legacy``:
    a server of the ``initialize`` era (protocol 2025-11-25)."""

    def __init__(
        self, shop: ShopServer | None = None, *, port: int | None = None, legacy: bool = False
    ) -> None:
        self.shop = shop or ShopServer(legacy=legacy)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        # the Authorization header of each request, as the server received it
        self.authorizations: list[str | None] = []
        config = uvicorn.Config(
            self._noting(self.shop.app.streamable_http_app()),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def _noting(self, app: Any) -> Any:
        async def noting(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope["headers"])
                found = headers.get(b"authorization")
                self.authorizations.append(None if found is None else found.decode())
            await app(scope, receive, send)

        return noting

    async def complete_link(self, elicitation_id: str) -> None:
        """Send ``notifications/elicitation/complete`` for ``elicitation_id`` on the
        session that called ``ask_url`` (as a server does once the page was visited)."""
        assert self.shop.url_session is not None, "ask_url was not called"
        session, loop = self.shop.url_session
        sent = asyncio.run_coroutine_threadsafe(session.send_elicit_complete(elicitation_id), loop)
        await asyncio.wrap_future(sent)

    def start(self) -> McpServerThread:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("MCP test server did not start")
            time.sleep(0.01)
        return self

    def stop(self, *, abruptly: bool = False) -> None:
        """Stop; ``abruptly``: as a server that goes away does, cutting open streams (a
        client's listen stream) instead of waiting for them to end."""
        self.server.should_exit = True
        self.server.force_exit = abruptly
        self.thread.join(15)

    def __enter__(self) -> McpServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def shop_entry(url: str, name: str = "shop", **extra: Any) -> dict[str, Any]:
    """An ``mcps`` entry for a shop served at ``url``."""
    return {"name": name, "url": url, **extra}


def stdio_entry(
    name: str = "local", calls_file: Path | None = None, **extra: Any
) -> dict[str, Any]:
    """An ``mcps`` entry that runs the shop over stdio (this interpreter, this module)."""
    entry: dict[str, Any] = {
        "name": name,
        "command": [sys.executable, "-m", "tests.helpers.mcp.stdio_shop"],
        "env": {"PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        **extra,
    }
    if calls_file is not None:
        entry["env"]["SHOP_CALLS_FILE"] = str(calls_file)
    return entry


def run_stdio() -> None:
    calls = os.environ.get("SHOP_CALLS_FILE")
    ShopServer("shop", Path(calls) if calls else None).app.run("stdio")
