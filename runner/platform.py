"""The registry of platform ops: built-in server tools an agent template names by ``op``.

It starts empty; later features (``commit_config``, ``execute_code``) register here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PLATFORM_OPS", "PlatformOp", "register_platform_op"]


@dataclass(frozen=True)
class PlatformOp:
    """A built-in server tool. ``needs_approval`` is its default approval policy."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    func: Callable[..., Any]
    needs_approval: bool | str = False


PLATFORM_OPS: dict[str, PlatformOp] = {}


def register_platform_op(op: PlatformOp) -> None:
    """Add ``op`` to the registry (replacing one of the same name)."""
    PLATFORM_OPS[op.name] = op
