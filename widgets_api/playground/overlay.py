"""The playground build kit: the agent-template overlay served with the agent.

The overlay gives the assistant, while a user builds an agent, what must never ship
with the published agent: every registered platform op, every reserved
workflow as an embed (``request_connection``), the authoring skills, and elevated
sandbox permissions. It is built from the registries, so a new op or workflow appears in
the kit without touching this module. The runner never applies it; the playground
merges it (:func:`merge_overlay`, the rules in :mod:`parkway.runner.agent.merge`, pinned by
``tests/helpers/vectors/overlay_merge.json`` for the page's ``static/overlay.js``) into a
throwaway copy of the template for each run while its kit toggle is on, never on commit.
"""

from __future__ import annotations

from typing import Any

from parkway.runner.agent import (
    AUTHORING_SKILLS,
    LIST_SECTIONS,
    PLATFORM_OPS,
    RESERVED_WORKFLOWS,
    SANDBOX_PERMISSIONS,
    OverlayMerge,
    entry_identity,
    merge_overlay,
)

__all__ = [
    "LIST_SECTIONS",
    "OverlayMerge",
    "build_kit_overlay",
    "entry_identity",
    "merge_overlay",
]


def build_kit_overlay() -> dict[str, Any]:
    """The build kit's agent-template overlay, from the registries as they are now."""
    tools: list[dict[str, Any]] = [
        {"type": "platform", "op": name} for name in sorted(PLATFORM_OPS)
    ]
    tools += [
        {"@ag.embed": {"@ag.references": {"workflow": {"slug": slug}}}}
        for slug in sorted(RESERVED_WORKFLOWS)
    ]
    return {
        "tools": tools,
        "skills": [dict(skill) for skill in AUTHORING_SKILLS],
        "sandbox": {
            "permissions": {
                name: permission.elevated for name, permission in SANDBOX_PERMISSIONS.items()
            }
        },
    }
