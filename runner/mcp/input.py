"""What happens when an MCP tool asks for input from a person: the call parks.

A server may answer a ``tools/call`` not with its result but with a request for input:

- a 2026-07-28 server returns an ``InputRequiredResult`` (its ``inputRequests``, say an
  elicitation form, and an opaque ``requestState`` to send back with the answers on a
  retried call);
- an older server fails the call with ``URLElicitationRequiredError`` (JSON-RPC error
  -32042), naming URLs a person must visit (often an OAuth consent) before a retry.

Parkway calls tools in the SDK's manual input mode (``allow_input_required=True``), so
both reach :func:`answer_input_request` as one :class:`McpInputRequest`. It parks the
call (:class:`~parkway.runner.errors.ToolNeedsInput`): the widget (:func:`widget`) shows
each request (a form: ``mcp-form``; a URL: ``mcp-url``, naming the target's host), the
answer is ``{"responses": {<key>: {"action": "accept"|"decline"|"cancel", "content"?:
{...}}}}`` (content checked against the form's schema on accept), and the call's private
continuation keeps the server, tool, arguments, kind, request keys and ``requestState``
(stored with the parked call on the server only, so any worker retries it after a
restart). Once answered, :func:`retry_input` says how the call is made again: with
``inputResponses`` and the ``requestState`` (input-required), or as the original call
(URL elicitation, once the person says they finished). A decline or cancel of a form is
sent to the server, which decides; of a URL, the model reads it without a retry.
A retry that asks again (a new ``InputRequiredResult`` with new requests and a new
``requestState``, or -32042 again) parks the call again under its id for the next
round, up to :data:`~parkway.runner.agent.MAX_INPUT_ROUNDS` rounds per call; past that
the model reads a definite error.

An older (2025-11-25) server may also ask a form question with ``elicitation/create`` in
the middle of a call. That cannot park (the server holds the call open for the answer),
so it is a bounded live wait: :func:`live_asker` puts the question to the call's person
through :meth:`ToolContext.ask_live <parkway.runner.agent.ToolContext.ask_live>` and
gives the server the answer, or ``cancel`` when none came within the entry's
``live_input_s`` (routing: :mod:`parkway.runner.mcp._live`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn
from urllib.parse import urlsplit

from mcp_types import ElicitRequestFormParams, ElicitResult
from pydantic import ValidationError

from parkway.runner.agent import LiveQuestion, McpServer, ToolContext
from parkway.runner.errors import ToolError, ToolNeedsInput

__all__ = [
    "MAX_LIVE_QUESTIONS",
    "NEEDS_INPUT",
    "LiveAsk",
    "McpInputRequest",
    "McpRetry",
    "answer_input_request",
    "link_scope",
    "live_asker",
    "retry_input",
]

NEEDS_INPUT = "this MCP tool needs input from a person that Parkway cannot ask for"

_ACTIONS = {"declined": "decline", "cancelled": "cancel", "error": "cancel"}

log = logging.getLogger(__name__)

# How many questions one call may ask its person live (each waits up to live_input_s):
# the call's overall bound counts on it (runner/mcp/listing.py).
MAX_LIVE_QUESTIONS = 3

LiveAsk = Callable[[ElicitRequestFormParams], Awaitable[ElicitResult]]
"""How a running call asks its person a server's form question and gets the answer
(:func:`live_asker`)."""

LIVE_CANCELLED = ElicitResult(action="cancel")


@dataclass(frozen=True)
class McpInputRequest:
    """An MCP server's request for input during a call, as plain JSON.

    ``server`` is the server's name in the template, ``tool`` the tool's name on the
    server and ``name`` the name the model called; ``arguments`` the call's input.
    ``kind`` says where it came from: ``"input_required"`` (``requests`` is the result's
    ``inputRequests`` by key, ``request_state`` its ``requestState``) or
    ``"url_elicitation"`` (``requests`` is the error's data, ``{"elicitations": [...]}``;
    ``request_state`` is None).
    """

    server: str
    tool: str
    name: str
    arguments: Mapping[str, Any]
    kind: Literal["input_required", "url_elicitation"]
    requests: Mapping[str, Any]
    request_state: str | None = None
    # The server's link scope (:func:`link_scope`), for a URL elicitation: a completion
    # the server sends later is matched to the call by it and the elicitation's id.
    scope: str | None = None


def link_scope(connection_key: str) -> str:
    """A digest naming one server (its address and where its credentials come from)
    for the link index: elicitation ids are the server's, unique on that server only."""
    return hashlib.sha256(connection_key.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class McpRetry:
    """How an answered call is made again: ``input_responses`` (by request key, each an
    elicitation result) and ``request_state``, both None for a plain retry."""

    input_responses: dict[str, Any] | None = None
    request_state: str | None = None


def _by_key(request: McpInputRequest) -> dict[str, dict[str, Any]]:
    """Each request's elicitation parameters by key (URL elicitations keyed by their
    ``elicitationId``, or their position). Raises :class:`ToolError` for a request that
    is not an elicitation Parkway can show."""
    if request.kind == "url_elicitation":
        found = request.requests.get("elicitations")
        items = found if isinstance(found, list) else []
        out = {
            str(item.get("elicitationId") or i): {**item, "mode": "url"}
            for i, item in enumerate(items)
            if isinstance(item, Mapping)
        }
    else:
        out = {}
        for key, asked in request.requests.items():
            if not isinstance(asked, Mapping) or asked.get("method") != "elicitation/create":
                where = f"MCP server {request.server!r}, tool {request.tool!r}"
                raise ToolError(
                    f"{NEEDS_INPUT} ({where}: it asked for {key!r}, not a form or link)"
                )
            params = asked.get("params")
            out[str(key)] = dict(params) if isinstance(params, Mapping) else {}
    if not out:
        raise ToolError(f"{NEEDS_INPUT} (MCP server {request.server!r}, tool {request.tool!r})")
    return out


def widget(request: McpInputRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """The widget render of ``request`` (JSON the browser sees) and its answer schema."""
    shown: dict[str, Any] = {}
    answers: dict[str, Any] = {}
    refusal = {"type": "object", "properties": {"action": {"enum": ["decline", "cancel"]}},
               "required": ["action"], "additionalProperties": False}  # fmt: skip
    for key, params in _by_key(request).items():
        message = str(params.get("message") or "")
        if params.get("mode") == "url":
            url = str(params.get("url") or "")
            parts = urlsplit(url)
            if parts.scheme not in ("https", "http") or not parts.hostname:
                raise ToolError(f"MCP server {request.server!r} asked a person to open a link "
                                "that is not a web address")  # fmt: skip
            shown[key] = {"mode": "url", "message": message, "url": url, "host": parts.hostname}
            accept: dict[str, Any] = {
                "type": "object", "properties": {"action": {"const": "accept"}},
                "required": ["action"], "additionalProperties": False,
            }  # fmt: skip
        else:
            schema = params.get("requestedSchema")
            schema = dict(schema) if isinstance(schema, Mapping) else {"type": "object"}
            shown[key] = {"mode": "form", "message": message, "schema": schema}
            accept = {
                "type": "object",
                "properties": {"action": {"const": "accept"}, "content": schema},
                "required": ["action", "content"], "additionalProperties": False,
            }  # fmt: skip
        answers[key] = {"anyOf": [accept, refusal]}
    forms = {v["mode"] for v in shown.values()}
    render = {
        "kind": "mcp-url" if forms == {"url"} else "mcp-form",
        "server": request.server,
        "tool": request.tool,
        "requests": shown,
    }
    schema = {
        "type": "object",
        "properties": {
            "responses": {
                "type": "object", "properties": answers, "required": sorted(answers),
                "additionalProperties": False,
            },
        },
        "required": ["responses"],
        "additionalProperties": False,
    }  # fmt: skip
    return render, schema


async def answer_input_request(request: McpInputRequest, ctx: ToolContext) -> NoReturn:
    """Park the call ``ctx`` describes on ``request`` (see the module doc); a request
    Parkway cannot show a person (not an elicitation) ends the call with a
    :class:`ToolError`."""
    del ctx
    render, schema = widget(request)
    continuation = {
        "mcp": {
            "server": request.server,
            "tool": request.tool,
            "arguments": dict(request.arguments),
            "kind": request.kind,
            "keys": sorted(render["requests"]),
            "requestState": request.request_state,
        }
    }
    if request.scope is not None:
        continuation["mcp"]["scope"] = request.scope
    raise ToolNeedsInput(
        render=render,
        output_schema=schema,
        continuation=continuation,
        description=f"MCP server {request.server!r} asks for input for its tool {request.tool!r}",
    )


def retry_input(continuation: Mapping[str, Any], answer: Mapping[str, Any]) -> McpRetry:
    """How to call again the tool whose parked call kept ``continuation`` and was
    settled with ``answer``. Raises :class:`ToolError` (what the model reads) when the
    call is not made again: a URL a person declined or did not finish."""
    mcp = continuation.get("mcp")
    mcp = mcp if isinstance(mcp, Mapping) else {}
    keys = [str(k) for k in mcp.get("keys") or []]
    outcome = str(answer.get("outcome"))
    if outcome == "output":
        output = answer.get("output")
        found = output.get("responses") if isinstance(output, Mapping) else None
        responses = dict(found) if isinstance(found, Mapping) else {}
    else:
        action = _ACTIONS.get(outcome, "cancel")
        responses = {key: {"action": action} for key in keys}
    if mcp.get("kind") == "url_elicitation":
        refused = sorted({str(r.get("action")) for r in responses.values()} - {"accept"})
        if refused or not responses:
            chose = ", ".join(refused) or "no answer"
            raise ToolError(
                f"the person did not complete the MCP server's link ({chose}); "
                "the tool was not run again"
            )
        return McpRetry()
    return McpRetry(responses, mcp.get("requestState"))


def live_asker(ctx: ToolContext, server: McpServer, tool: str) -> LiveAsk | None:
    """How the call ``ctx`` describes asks its person ``server``'s form questions live,
    or None when it cannot (nobody watches the run, or the entry's ``live_input_s`` is
    0): the server is then answered ``cancel``."""
    if ctx.live_input is None or server.live_input_s <= 0:
        return None

    async def ask(params: ElicitRequestFormParams) -> ElicitResult:
        dumped = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        schema = dumped.get("requestedSchema")
        question = LiveQuestion(
            message=params.message,
            requested_schema=schema if isinstance(schema, dict) else {"type": "object"},
            asker={"server": server.name, "tool": tool},
            wait_s=server.live_input_s,
        )
        answer = await ctx.ask_live(question)
        try:
            return ElicitResult.model_validate(dict(answer))
        except ValidationError:
            log.warning("MCP server %s: a live answer was not an elicitation result", server.name)
            return LIVE_CANCELLED

    return ask
