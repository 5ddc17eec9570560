"""What ``execute_code`` runs with: the sandbox provider, its probe, the limits policy.

:class:`CodeMode` is made once per server (transport/app.py) and handed to the runner,
which gives it to the code ops through their :class:`~parkway.runner.agent.tools.ToolContext`.
It holds what sits *above* the provider (docs/code-mode.md): whether isolation is
available (probed once at start, shown by ``GET /api/sandbox`` and on every approval), the
limits of a run (the operator's defaults, the template's ``sandbox.permissions``, a
call's own requests, only downward unless the operator allows more), how many runs go
at once, and the run's workspace on the host (inputs and library written to private
files the provider hands the sandbox, read-only).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parkway.runner.sandbox import Isolation, Limits, SandboxProvider, SandboxUnavailable

__all__ = ["HARD_LIMITS", "CodeMode", "Workspace", "remove_stale_workspaces", "workspace"]

# The most a run may ever have, whoever asks (sandbox.md §6.2: the wall clock tops out at
# 60 s); with ``allow_raise`` a call may ask up to these.
HARD_LIMITS = Limits(wall_s=60.0, cpu_s=60, memory_bytes=2 * 2**30)
# A template's filesystem permission: "none" keeps only a small scratch space.
_NO_WORKSPACE_BYTES = 2**20


@dataclass
class CodeMode:
    """The code sandbox as the runtime sees it. ``provider`` None: code mode is off."""

    provider: SandboxProvider | None
    limits: Limits = field(default_factory=Limits)
    allow_raise: bool = False
    concurrency: int = 2
    _isolation: Isolation | None = field(default=None, init=False)
    _reason: str | None = field(default=None, init=False)
    _slots: asyncio.Semaphore | None = field(default=None, init=False)

    async def start(self) -> None:
        """Probe the provider once (a real sandbox run); remember why it cannot run."""
        if self.provider is None:
            self._reason = "code execution is turned off on this server (setting sandbox=off)"
            return
        await asyncio.to_thread(remove_stale_workspaces)
        try:
            self._isolation = await asyncio.to_thread(self.provider.check)
            self._reason = None
        except SandboxUnavailable as exc:
            self._isolation = None
            self._reason = str(exc)

    async def close(self) -> None:
        """Release what the probe set up on the host (the server's shutdown, after the
        last run): a private copy of the guest files must not outlive the server."""
        if self.provider is not None:
            await asyncio.to_thread(self.provider.close)

    @property
    def available(self) -> bool:
        return self._isolation is not None

    @property
    def isolation(self) -> Isolation | None:
        return self._isolation

    @property
    def reason(self) -> str | None:
        """Why code cannot run (the operator's fix), or None when it can."""
        return self._reason

    def status(self) -> dict[str, Any]:
        """What ``GET /api/sandbox`` (the playground) and each approval show."""
        isolation = self._isolation
        return {
            "provider": None if self.provider is None else self.provider.name,
            "available": isolation is not None,
            "confined": bool(isolation and isolation.confined),
            "isolation": None if isolation is None else isolation.as_dict(),
            "reason": self._reason,
            "limits": self.limits.as_dict(),
        }

    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        return self._slots

    def limits_for(
        self, sandbox: Mapping[str, Any] | None, requested: Mapping[str, Any] | None
    ) -> Limits:
        """The limits of one run: the operator's, then the template's permissions, then
        what the call asked for (only downward, unless the operator allows raising up
        to :data:`HARD_LIMITS`)."""
        limits = self.limits
        permissions = (sandbox or {}).get("permissions") or {}
        runtime = permissions.get("max_runtime_s")
        if isinstance(runtime, int | float) and not isinstance(runtime, bool) and runtime > 0:
            limits = dataclasses.replace(limits, wall_s=min(float(runtime), HARD_LIMITS.wall_s))
        if permissions.get("filesystem", "workspace") == "none":
            limits = dataclasses.replace(
                limits, disk_bytes=min(limits.disk_bytes, _NO_WORKSPACE_BYTES)
            )
        asked = requested or {}
        for name, key, scale in (
            ("wall_s", "timeout_s", 1.0),
            ("cpu_s", "cpu_s", 1),
            ("memory_bytes", "memory_mb", 2**20),
        ):
            value = asked.get(key)
            if value is None:
                continue
            wanted = type(getattr(limits, name))(value * scale)
            ceiling = getattr(HARD_LIMITS if self.allow_raise else limits, name)
            limits = dataclasses.replace(limits, **{name: min(wanted, ceiling)})
        return limits


class Workspace:
    """A run's files on the host: its inputs, its library and its stdout spill, in a
    fresh folder that is removed after the run.

    Private to the server's user: the folder is 0700 and every file 0600, created so
    (no moment where another local user could open one). The sandbox never reads them
    by path: the provider opens them and bwrap copies them in from the descriptors."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.chmod(0o700)
        self.inputs_dir = root / "inputs"
        self.spill_dir = root / "spill"
        self.library_root = root / "library-root"
        for folder in (self.inputs_dir, self.spill_dir, self.library_root):
            folder.mkdir(mode=0o700)

    def add_input(self, name: str, data: bytes) -> Path:
        path = self.inputs_dir / name
        _write_private(path, data)
        return path

    def library_package(self, modules: Mapping[str, str]) -> Path | None:
        """Write the package ``library`` (one module per saved function, and an
        ``__init__`` that imports a function by its name); None when there are none."""
        if not modules:
            return None
        package = self.library_root / "library"
        package.mkdir(mode=0o700)
        _write_private(package / "__init__.py", _LIBRARY_INIT.encode())
        for name, code in modules.items():
            _write_private(package / f"{name}.py", code.encode())
        return self.library_root


def _write_private(path: Path, data: bytes) -> None:
    """A new file only its owner can read, 0600 from its creation (``O_EXCL``: never
    an existing file or a link planted in its place)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as file:
        file.write(data)


_PREFIX = "parkway-code-"


@asynccontextmanager
async def workspace() -> AsyncIterator[Workspace]:
    """A fresh workspace for one run, removed afterwards (the file system work runs in a
    thread: inputs can be megabytes)."""
    root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=f"{_PREFIX}{os.getpid()}-"))
    try:
        yield await asyncio.to_thread(Workspace, root)
    finally:
        await asyncio.to_thread(shutil.rmtree, root, ignore_errors=True)


def remove_stale_workspaces() -> int:
    """Remove the workspaces of processes that are gone (a worker killed mid-run cannot
    clean up after itself); the number removed."""
    removed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        pid = folder.name[len(_PREFIX) :].partition("-")[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed


# The library package's __init__: `from library import summarize` imports the module
# `library.summarize` and hands out its function of the same name.
_LIBRARY_INIT = '''"""This agent's saved functions (save_function); `from library import name`."""
import importlib


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError:
        raise AttributeError(f"the library has no function {name!r}") from None
    value = getattr(module, name, module)
    globals()[name] = value  # the import bound the module here; the function wins
    return value
'''
