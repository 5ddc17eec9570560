"""Which cgroups runs get on this host, per the ``sandbox_cgroup`` setting (the package's
docstring says in which order they are tried)."""

from __future__ import annotations

from pathlib import Path

from parkway.runner.sandbox._cgroup._run import Cgroups
from parkway.runner.sandbox._cgroup._v1 import own_cgroups
from parkway.runner.sandbox._cgroup._v2 import V2Cgroups, own_cgroup, unusable

__all__ = ["find"]


def find(setting: str) -> Cgroups | None:
    """Where runs get their cgroups, per the ``sandbox_cgroup`` setting; None for the
    rlimit bound. Raises ValueError when an operator's folder is not usable."""
    if setting == "off":
        return None
    if setting == "auto":
        own = own_cgroup()
        if own is not None and unusable(own) is None:
            return V2Cgroups(own)
        return own_cgroups()
    folder = Path(setting)
    why = unusable(folder)
    if why is not None:
        raise ValueError(f"the sandbox cgroup {setting} cannot be used: {why}")
    return V2Cgroups(folder)
