"""What happens when an MCP tool asks for input from a person: the seam for parking it.

A server may answer a ``tools/call`` not with its result but with a request for input:

- a 2026-07-28 server returns an ``InputRequiredResult`` (its ``inputRequests``, say an
  elicitation form, and an opaque ``requestState`` to send back with the answers on a
  retried call);
- an older server fails the call with ``URLElicitationRequiredError`` (JSON-RPC error
  -32042), naming URLs a person must visit (often an OAuth consent) before a retry.

Parkway calls tools in the SDK's manual input mode (``allow_input_required=True``), so
both reach :func:`answer_input_request` as one :class:`McpInputRequest`, and nothing
else in Parkway answers them. For now it ends the call with a definite tool error the
model reads (:data:`NEEDS_INPUT`). The planned next step replaces this one function: it
will park the call with a widget for each request (a form, a connect card for a URL)
and, once a person answers, send the answers back on the retried call with the server's
``requestState`` (kept with the parked call, so any worker can retry it after a restart).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from parkway.runner.agent import ToolContext
from parkway.runner.errors import ToolError

__all__ = ["NEEDS_INPUT", "McpInputRequest", "answer_input_request"]

NEEDS_INPUT = (
    "this MCP tool needs input from a person; Parkway does not answer MCP input requests yet"
)


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


async def answer_input_request(request: McpInputRequest, ctx: ToolContext) -> NoReturn:
    """Answer ``request`` (from the call ``ctx`` describes) or end the call. Parkway does
    not answer MCP input requests yet: the call ends with :data:`NEEDS_INPUT` as the
    model's tool error."""
    del ctx
    raise ToolError(f"{NEEDS_INPUT} (MCP server {request.server!r}, tool {request.tool!r})")
