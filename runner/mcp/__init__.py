"""MCP servers' tools in an agent, through the official ``mcp`` SDK (docs/mcp.md).

- :mod:`~parkway.runner.mcp.tools`: :class:`McpTools`, the worker's MCP servers: the tools
  a run offers (:class:`McpOffer`) and calling them;
- :mod:`~parkway.runner.mcp.connection`: one server's session on this worker, its tool
  list and its calls (behind it, private: ``_session``, the SDK session held in a task of
  its own; ``_live``, an older server's questions during a call routed to its person);
- :mod:`~parkway.runner.mcp.listing`: a server's tools as the model is offered them, with
  their approval policies;
- :mod:`~parkway.runner.mcp.input`: a server's request for input from a person (the seam
  where such a call will park);
- :mod:`~parkway.runner.mcp.oauth`: servers that need OAuth: their challenge checked, the
  call parked on a connect card, the user's token on that server's session only.

The template's ``mcps`` section itself is the agent layer's
(:mod:`parkway.runner.agent.mcps`). This package imports the agent layer, never the engine.
"""

from __future__ import annotations

import importlib
import typing

from parkway.runner.mcp.oauth import SIGN_IN_TOOL, check_challenge
from parkway.runner.mcp.tools import McpOffer, McpTools, tool_output

if typing.TYPE_CHECKING:
    from parkway.runner.mcp.connection import McpConnection, McpListing, McpStatus
    from parkway.runner.mcp.input import NEEDS_INPUT, McpInputRequest, answer_input_request
    from parkway.runner.mcp.listing import McpToolset, annotations_of, policy_of

# The names whose modules import the ``mcp`` SDK, the largest import of all: loaded when
# first asked for (:mod:`.tools` says why), so importing this package does not load it.
_LAZY = {
    "McpConnection": "connection",
    "McpListing": "connection",
    "McpStatus": "connection",
    "NEEDS_INPUT": "input",
    "McpInputRequest": "input",
    "answer_input_request": "input",
    "McpToolset": "listing",
    "annotations_of": "listing",
    "policy_of": "listing",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # bound once: later reads do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "NEEDS_INPUT",
    "SIGN_IN_TOOL",
    "McpConnection",
    "McpInputRequest",
    "McpListing",
    "McpOffer",
    "McpStatus",
    "McpTools",
    "McpToolset",
    "annotations_of",
    "answer_input_request",
    "check_challenge",
    "policy_of",
    "tool_output",
]
