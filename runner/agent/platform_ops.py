"""The registry of platform ops: built-in server tools an agent template names by ``op``.

Built in: ``commit_config`` (runner/agent/commits.py), ``execute_code``, ``save_function`` and
``list_functions`` (runner/codemode/), registered by ``runner/__init__.py``:
the op's code uses the tool context and the agent store, which load templates, so this
registry (read by :mod:`parkway.runner.agent.template`) cannot import it. Also the registries the
playground's build kit is made from: the sandbox permissions and the authoring skills.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AUTHORING_SKILLS",
    "PLATFORM_OPS",
    "SANDBOX_PERMISSIONS",
    "PlatformOp",
    "SandboxPermission",
    "register_platform_op",
]


@dataclass(frozen=True)
class PlatformOp:
    """A built-in server tool. ``needs_approval`` is its default approval policy."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    func: Callable[..., Any]
    needs_approval: bool | str = False
    timeout_s: float = 30.0
    # Whether the human may edit the input while approving (the edited input is what runs).
    allow_edits: bool = False
    # What a parked call of the op carries from its template for its widget (the
    # template document -> the call's ``render``), e.g. execute_code's sandbox section.
    render: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    # Whether, where the runner separates approvals (RunnerConfig.separate_approvals: any
    # server but a local playground), someone other than the requester approves it
    # unless its template entry says ``"self_approval": true``: ops that run code.
    others_approve: bool = False


PLATFORM_OPS: dict[str, PlatformOp] = {}


def register_platform_op(op: PlatformOp) -> None:
    """Add ``op`` to the registry (replacing one of the same name)."""
    PLATFORM_OPS[op.name] = op


@dataclass(frozen=True)
class SandboxPermission:
    """One permission of the code sandbox: its default, and its value in the build kit."""

    name: str
    description: str
    default: Any
    elevated: Any


# Only what a template can actually change (runner/codemode/runtime.py reads these two):
# the sandbox has no network at all, so there is no network permission to raise.
SANDBOX_PERMISSIONS: dict[str, SandboxPermission] = {
    p.name: p
    for p in (
        SandboxPermission(
            "filesystem", "scratch space: workspace, or none (1 MiB)", "workspace", "workspace"
        ),
        SandboxPermission("max_runtime_s", "seconds a piece of code may run", 10, 60),
    )
}

# Skills the build kit gives the assistant while a user builds an agent.
AUTHORING_SKILLS: tuple[Mapping[str, Any], ...] = (
    {
        "name": "agent-authoring",
        "description": "Edit this agent's own template with commit_config.",
        "instructions": (
            "To change the agent, call commit_config with a short summary and a patch: a "
            "partial template merged over the current one (objects merge, lists of tools "
            "merge by identity). Remove a tool with remove_tools. The user approves each "
            "change."
        ),
    },
)
