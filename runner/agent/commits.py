"""``commit_config``: the platform op by which an agent changes its own template.

Approval-gated by default (policy ``ask``): the human sees the change before it lands.
The input is a ``patch`` (a partial template, merged over the head revision with the
same rules as the build-kit overlay, :mod:`parkway.runner.agent.merge`) and optional
``remove_tools`` (tool identities such as ``name:get_weather``). The patch applies to the committed
head, never to the run's template, so a run's build-kit overlay never reaches a commit. A
successful commit publishes a ``committed-revision`` data part on the run's stream.

:data:`COMMIT_CONFIG` is the op; the runner package registers it when it is imported
(``runner/__init__.py``), like any op an application adds with ``register_platform_op``.
"""

from __future__ import annotations

from typing import Any

from parkway.runner.agent.merge import entry_identity, merge_overlay
from parkway.runner.agent.platform_ops import PlatformOp
from parkway.runner.agent.tools import ToolContext
from parkway.runner.errors import ParkwayError, ToolError

__all__ = ["COMMITTED_REVISION", "COMMIT_CONFIG", "apply_patch", "commit_config"]

COMMITTED_REVISION = "committed-revision"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "minLength": 1, "maxLength": 500},
        "patch": {"type": "object"},
        "remove_tools": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 200},
            "maxItems": 50,
        },
    },
    "required": ["summary"],
    "additionalProperties": False,
}


def apply_patch(template: dict[str, Any], tool_input: dict[str, Any]) -> dict[str, Any]:
    """The template ``commit_config`` would commit: ``patch`` merged over ``template``,
    then the tools named in ``remove_tools`` removed. Raises ``ValueError``."""
    merged = merge_overlay(template, tool_input.get("patch") or {}).template
    remove = set(tool_input.get("remove_tools") or ())
    if remove:
        tools = merged.get("tools") or []
        unknown = remove - {entry_identity(t) for t in tools}
        if unknown:
            raise ValueError(f"no tool with identity {', '.join(sorted(unknown))}")
        merged["tools"] = [t for t in tools if entry_identity(t) not in remove]
    return merged


async def commit_config(tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    if ctx.agents is None:
        raise ToolError("this server keeps no agent revisions")
    head = await ctx.agents.head()
    try:
        document = apply_patch(dict(head.template), tool_input)
        revision = await ctx.agents.commit(
            document,
            expected_version=head.version,
            by=f"agent:{ctx.principal}",
            summary=str(tool_input["summary"]),
        )
    except ValueError as exc:
        raise ToolError(f"the patch cannot be applied: {exc}") from None
    except ParkwayError as exc:  # an invalid template, or a concurrent commit
        raise ToolError(f"the commit was refused: {exc}") from None
    reference = {
        "agentId": revision.agent_id,
        "revisionId": revision.revision_id,
        "version": revision.version,
    }
    ctx.publish(COMMITTED_REVISION, reference)
    return {"committed": True, **reference}


COMMIT_CONFIG = PlatformOp(
    name="commit_config",
    description=(
        "Change this agent's own template. Give a one-line summary and a patch (a "
        "partial template merged over the current one; tools merge by identity), and "
        "optionally remove_tools (identities like 'name:my_tool'). The user approves "
        "the change before it is committed."
    ),
    input_schema=INPUT_SCHEMA,
    func=commit_config,
    needs_approval="ask",
)
