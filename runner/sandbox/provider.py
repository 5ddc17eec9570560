"""The sandbox provider interface: what runs a program, with which limits, and what came back.

A provider runs one short Python program per call in a fresh, stateless sandbox
(:class:`RunRequest` in, :class:`RunResult` out) and says which isolation it gives
(:meth:`SandboxProvider.check`). Nothing else lives here: approval, artifact ids, the
per-agent library's contents and spill storage belong to the runtime above.

Two implementations:

- :class:`~parkway.runner.sandbox.bwrap.BwrapProvider`: bubblewrap, every namespace
  unshared, an unprivileged uid, a size-capped tmpfs; the default;
- :class:`~parkway.runner.sandbox.local.UnconfinedProvider`: a plain subprocess with
  rlimits only, for an operator who explicitly asks for unsafe local mode. It is never
  a fallback: a provider whose isolation is unavailable answers ``unavailable``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = [
    "Broker",
    "BrokerError",
    "Isolation",
    "Limits",
    "RunRequest",
    "RunResult",
    "SandboxProvider",
    "SandboxUnavailable",
    "Status",
]

# ok: the program ran to the end (or called sys.exit(0)).
# error: the program raised, exited non-zero, or its result is not plain JSON.
# timeout: the host killed the sandbox at the wall clock.
# output_limit: stdout passed its hard cap, or the result passed its cap.
# killed: the program died of a signal (segfault, the CPU-time limit, a kill).
# unavailable: nothing ran: the provider cannot give the isolation it promises.
Status = Literal["ok", "error", "timeout", "output_limit", "killed", "unavailable"]


class SandboxUnavailable(Exception):
    """The provider cannot isolate programs here. The message says what the operator
    must do (install bubblewrap, allow user namespaces, use a readable interpreter)."""


class BrokerError(Exception):
    """Raised by a :data:`Broker` to refuse or fail a brokered tool call: the program's
    ``tools.call`` raises ``ToolCallError`` with this message."""


# (tool name, input) -> the tool's JSON output. The program waits for each answer.
Broker = Callable[[str, Any], Awaitable[Any]]

_MIB = 2**20


@dataclass(frozen=True)
class Limits:
    """The bounds of one run (defaults: sandbox.md §6.2).

    ``wall_s`` counts from the spawn to the end, brokered tool calls included.
    ``request_bytes`` bounds the UTF-8 JSON of code + args; a bigger request is not
    spawned and comes back as status ``error`` (pass big data as an input instead).
    ``result_bytes`` bounds the result's JSON; a bigger one is status ``output_limit``
    (it is not spilled). ``stdout_inline_bytes`` is what a result carries; past it the
    whole stream goes to a spill file, up to ``stdout_cap_bytes``, where the sandbox is
    killed (status ``output_limit``).

    Memory and processes: ``memory_bytes`` bounds each process's address space
    (``RLIMIT_AS``), ``processes`` the run's processes and threads together, and
    ``total_memory_bytes`` the memory of all the run's processes together. Where the
    host lets the run have a cgroup (v2, or v1 memory and pids) the total is its memory
    limit (swap off) and the process count its ``pids.max``; elsewhere the total holds by
    arithmetic: the run gets at most ``total_memory_bytes // memory_bytes`` processes
    (at least one, at most ``processes``), so processes x address space stays within
    the total (:meth:`split`).
    """

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_bytes: int = 512 * _MIB
    processes: int = 16
    total_memory_bytes: int = 512 * _MIB
    open_files: int = 64
    file_bytes: int = 16 * _MIB
    disk_bytes: int = 64 * _MIB
    stdout_inline_bytes: int = _MIB
    stdout_cap_bytes: int = 16 * _MIB
    stderr_bytes: int = 64 * 2**10
    result_bytes: int = _MIB
    request_bytes: int = 4 * _MIB
    max_tool_calls: int = 20

    def __post_init__(self) -> None:
        if not self.wall_s > 0:
            raise ValueError(f"Limits.wall_s must be positive, not {self.wall_s!r}")
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if spec.name == "wall_s":
                continue
            least = 0 if spec.name == "max_tool_calls" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"Limits.{spec.name} must be an integer >= {least}, not {value!r}")
        if self.stdout_inline_bytes > self.stdout_cap_bytes:
            raise ValueError("Limits.stdout_inline_bytes must not exceed stdout_cap_bytes")
        # The interpreter alone maps ~20 MiB; 3 fds are stdio, 3 more the bootstrap's pipes.
        if self.memory_bytes < 32 * _MIB:
            raise ValueError("Limits.memory_bytes must be at least 32 MiB (the interpreter's own)")
        if self.total_memory_bytes < 32 * _MIB:
            raise ValueError("Limits.total_memory_bytes must be at least 32 MiB")
        if self.open_files < 16:
            raise ValueError("Limits.open_files must be at least 16")

    def as_dict(self) -> dict[str, Any]:
        """The limits as JSON (for the approval widget and logs)."""
        return dataclasses.asdict(self)

    def split(self, *, cgroup: bool) -> tuple[int, int]:
        """The rlimits a run gets: (address space per process, processes and threads).

        Under a cgroup the kernel bounds the total, and each process gets
        ``memory_bytes`` (no more than the total). Without one, the process count is
        cut so that their product stays within ``total_memory_bytes``: with the
        defaults (512 MiB each, 512 MiB in all) that is one process, no fork and no
        thread; 128 MiB each allows four."""
        per_process = min(self.memory_bytes, self.total_memory_bytes)
        if cgroup:
            return per_process, self.processes
        return per_process, max(1, min(self.processes, self.total_memory_bytes // per_process))


@dataclass(frozen=True)
class Isolation:
    """What confines a provider's programs, as probed: shown with every approval."""

    provider: str  # "bwrap" | "unconfined"
    confined: bool
    layers: tuple[str, ...]
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "confined": self.confined,
            "layers": list(self.layers),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class RunRequest:
    """One program to run.

    ``inputs``: name -> a host file, mounted read-only; the program reads it with
    ``artifacts.get(name)``. Names are 1-128 characters of letters, digits, ``.``,
    ``_`` and ``-`` (not starting with a dot). ``library``: a host folder holding the
    package folder ``library/``; mounted read-only with the folder itself on
    ``sys.path``. The provider opens them as the server (they may, and should, be
    private to the server's user: bwrap copies them in from the descriptors); a path
    that cannot be opened, or is not a file (a folder for the library), is a
    :class:`ValueError` before anything runs. ``spill_dir``: a host folder of the
    caller's where stdout beyond the inline cap is written (without one, stdout past
    the inline cap is counted, not kept).
    """

    code: str
    args: Any = None
    inputs: Mapping[str, Path] = field(default_factory=dict)
    library: Path | None = None
    limits: Limits = field(default_factory=Limits)
    broker: Broker | None = None
    spill_dir: Path | None = None


@dataclass(frozen=True)
class RunResult:
    """What one run gave. ``stdout`` is at most ``stdout_inline_bytes``; ``stdout_total``
    counts all the program wrote, up to the hard cap; ``stdout_spill`` (in the request's
    ``spill_dir``) holds all of it when it went past the inline cap. ``result`` is the
    value of ``result(...)`` or of the program's last expression (``has_result`` tells a
    ``None`` result from none). ``message`` is a one-line reason for a non-ok status.
    ``tool_calls`` counts the calls handed to the broker. ``memory_peak_bytes`` is the
    run's cgroup's memory peak, where it had one (None otherwise)."""

    status: Status
    exit_code: int | None
    wall_ms: float
    stdout: bytes
    stdout_total: int
    stdout_spill: Path | None
    stderr: bytes
    result: Any
    has_result: bool
    message: str
    isolation: Isolation
    tool_calls: int = 0
    memory_peak_bytes: int | None = None


class SandboxProvider(Protocol):
    """A way to run programs in isolation.

    ``check`` probes once (a real sandbox run; blocking, so call it at start-up or
    through ``asyncio.to_thread``) and caches the :class:`Isolation`; it raises
    :class:`SandboxUnavailable` with the operator's fix. ``run`` never raises for what
    the program does; when isolation is unavailable it returns status ``unavailable``
    and never runs the program some weaker way. ``close`` releases what ``check`` set up
    on the host (a private copy of the guest files); the server calls it as it stops.
    """

    name: str

    def check(self) -> Isolation: ...

    async def run(self, request: RunRequest) -> RunResult: ...

    def close(self) -> None: ...
