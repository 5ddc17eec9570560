"""From a server's tool list to the tools the model is offered.

Each listed tool that the entry's ``include`` / ``exclude`` let through becomes a
:class:`~parkway.runner.agent.ToolSpec` of kind ``"mcp"``: its name is
``<server>__<tool>`` (:func:`parkway.runner.agent.mcps.exposed_name`), its description and
input schema the server's (a schema that is not a JSON Schema object is left out, with
the tool, and logged), and its approval policy (:func:`policy_of`):

- the entry's ``tools.<tool>.policy``, else the entry's ``policy``;
- else the tool's annotations: ``readOnlyHint: true`` (and not ``destructiveHint:
  true``) runs without asking; anything else, a tool without annotations included, asks.

Annotations are the server's own claims, not facts Parkway can check: a server that says
a tool only reads may be wrong or lying. The default only spares a person from approving
what the operator chose to trust; an operator who does not trust a server sets
``"policy": "ask"`` on its entry. The approval card shows the annotations as the
server's hints, never as verified properties.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from parkway.runner.agent import McpPolicy, McpServer, ToolContext, ToolSpec, exposed_name
from parkway.runner.canonical import canonical_json
from parkway.runner.mcp.connection import McpListing
from parkway.runner.mcp.input import MAX_LIVE_QUESTIONS

__all__ = ["McpCaller", "McpToolset", "annotations_of", "policy_of", "toolset"]

log = logging.getLogger(__name__)

# A server's description is the model's and the approval card's to read, but a server
# is not trusted with their size.
_DESCRIPTION_MAX = 4000
# The wire names of the annotations shown on an approval card, by the SDK's field names.
_HINTS = {
    "read_only_hint": "readOnlyHint",
    "destructive_hint": "destructiveHint",
    "idempotent_hint": "idempotentHint",
    "open_world_hint": "openWorldHint",
}

# Calls one tool of one server: (the server's entry, the tool's name on the server, its
# offered name, the input, the call's ToolContext) -> the tool's result as plain JSON
# (runner/mcp/tools.py).
McpCaller = Callable[[McpServer, str, str, Mapping[str, Any], ToolContext], Awaitable[Any]]


def annotations_of(tool: types.Tool) -> dict[str, Any]:
    """The tool's annotations that a server set, by their wire names."""
    found: dict[str, Any] = {}
    annotations = tool.annotations
    if annotations is not None:
        for attr, wire in _HINTS.items():
            value = getattr(annotations, attr, None)
            if isinstance(value, bool):
                found[wire] = value
    return found


def policy_of(server: McpServer, tool: types.Tool) -> McpPolicy:
    """The tool's approval policy (see the module doc)."""
    chosen = server.policy_of(tool.name)
    if chosen is not None:
        return chosen
    hints = annotations_of(tool)
    if hints.get("readOnlyHint") is True and hints.get("destructiveHint") is not True:
        return "allow"
    return "ask"


@dataclass(frozen=True)
class McpToolset:
    """The tools one server offers under one template entry: specs by offered name, the
    server's own name of each, and the listing they were made from."""

    listing: McpListing
    specs: Mapping[str, ToolSpec]
    names: Mapping[str, str] = field(default_factory=dict)


def _schema(tool: types.Tool) -> dict[str, Any] | None:
    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    try:
        canonical_json(schema)
        Draft202012Validator.check_schema(schema)
    except (SchemaError, Exception):
        return None
    return schema


def toolset(server: McpServer, listing: McpListing, call: McpCaller) -> McpToolset:
    """The specs of the tools ``server``'s entry offers from ``listing``; ``call`` runs
    one."""
    specs: dict[str, ToolSpec] = {}
    names: dict[str, str] = {}
    for tool in listing.tools:
        if not server.offers(tool.name):
            continue
        name = exposed_name(server.name, tool.name)
        schema = _schema(tool)
        if schema is None:
            log.warning(
                "MCP server %s: tool %r is left out: its input schema is not a valid JSON "
                "Schema object",
                server.name, tool.name[:64],
            )  # fmt: skip
            continue
        if name in specs:
            log.warning(
                "MCP server %s: tools %r and %r are both offered as %r; %r is left out",
                server.name, names[name][:64], tool.name[:64], name, tool.name[:64],
            )  # fmt: skip
            continue
        policy = policy_of(server, tool)
        hints = annotations_of(tool)
        title = tool.title or (tool.annotations.title if tool.annotations else None)
        card: dict[str, Any] = {"server": server.name, "tool": tool.name, "annotations": hints}
        if title:
            card["title"] = title[:200]
        specs[name] = ToolSpec(
            name=name,
            kind="mcp",
            description=(tool.description or title or "")[:_DESCRIPTION_MAX],
            input_schema=schema,
            needs_approval=policy == "ask",
            approval_policy=policy,
            # the approval card names the server, the tool and its hints (widgets_api/
            # descriptors.py); the parked call keeps them with its record
            render={"mcp": card},
            # the session's own bounds come first (connecting, then the call's timeout,
            # which stops while its person is asked live); this one only backs them up
            timeout_s=(
                server.connect_timeout_s
                + server.timeout_s
                + 5
                + MAX_LIVE_QUESTIONS * (server.live_input_s + 5)
            ),
            source=server.where,
            func=_runner(call, server, tool.name, name),
        )
        names[name] = tool.name
    return McpToolset(listing, specs, names)


def _runner(
    call: McpCaller, server: McpServer, tool: str, name: str
) -> Callable[[Any, ToolContext], Awaitable[Any]]:
    async def run(tool_input: Any, ctx: ToolContext) -> Any:
        return await call(server, tool, name, tool_input, ctx)

    return run
