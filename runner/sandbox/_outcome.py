"""How a run ended: what the host collected from the guest, turned into a
:class:`~parkway.runner.sandbox.provider.RunResult`.

The guest's side of the protocol is ``guest/bootstrap.py``; it cannot import this
module, so its constants are copies (a test checks they agree). The result pipe
carries ``S`` as soon as the bootstrap has read its request, then one JSON header line
``{status, message, has_result}`` and the result's JSON. Everything on it is parsed as
untrusted: the program may write there itself.
"""

from __future__ import annotations

import contextlib
import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parkway.runner.sandbox.provider import Isolation, Limits, RunResult, Status

__all__ = [
    "EXIT_BOOTSTRAP_FAILURE",
    "EXIT_PROGRAM_ERROR",
    "STARTED",
    "Capture",
    "Collected",
    "classify",
    "early_result",
    "size_text",
]

EXIT_PROGRAM_ERROR = 10
EXIT_BOOTSTRAP_FAILURE = 13
STARTED = b"S"
_MESSAGE_CHARS = 400


def size_text(n: int) -> str:
    if n % 2**20 == 0:
        return f"{n // 2**20} MiB"
    if n % 2**10 == 0:
        return f"{n // 2**10} KiB"
    return f"{n} bytes"


class Capture:
    """A stream's first bytes and last bytes within ``cap``, and how much there was
    (stderr: the start says what began, the end holds the traceback)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.tail_cap = cap // 4
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - self.tail_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.tail_cap:
            del self.tail[: len(self.tail) - self.tail_cap]

    def value(self) -> bytes:
        kept = len(self.head) + len(self.tail)
        if kept == self.total:
            return bytes(self.head + self.tail)
        marker = f"\n[... {self.total - kept} bytes left out ...]\n".encode()
        head = self.head[: max(0, self.cap - len(marker) - len(self.tail))]
        return bytes(head + marker + self.tail)[: self.cap]


@dataclass
class Collected:
    """What the host read of one run, as its readers fill it in."""

    limits: Limits
    # Whether a signal death shows as exit status 128 + signal (bwrap reports so).
    signal_as_128: bool = False
    # Set when the host killed the run: the status and message it ends with.
    killed_for: tuple[Status, str] | None = None
    stdout: bytearray = field(default_factory=bytearray)  # the inline part
    stdout_total: int = 0
    spill_path: Path | None = None
    result: bytearray = field(default_factory=bytearray)  # the raw result pipe
    stderr: Capture | None = None
    tool_calls: int = 0


def early_result(
    status: Status, message: str, isolation: Isolation, *, wall_ms: float = 0.0
) -> RunResult:
    """A result for a run that never started."""
    return RunResult(
        status=status,
        exit_code=None,
        wall_ms=wall_ms,
        stdout=b"",
        stdout_total=0,
        stdout_spill=None,
        stderr=b"",
        result=None,
        has_result=False,
        message=message,
        isolation=isolation,
    )


def classify(
    collected: Collected, code: int | None, wall_ms: float, isolation: Isolation
) -> RunResult:
    """The result of a run that ended with exit status ``code``."""
    stderr = b"" if collected.stderr is None else collected.stderr.value()
    raw = bytes(collected.result)
    started = raw.startswith(STARTED)
    status: Status
    result: Any = None
    has_result = False
    header: dict[str, Any] | None = None
    if started and b"\n" in raw:
        head, _, body = raw[len(STARTED) :].partition(b"\n")
        with contextlib.suppress(ValueError, RecursionError):
            parsed = json.loads(head)
            header = parsed if isinstance(parsed, dict) else None
    signalled = _signal_of(code, collected.signal_as_128)
    if collected.killed_for is not None:
        status, message = collected.killed_for
    elif not started:
        status = "unavailable"
        message = "the sandbox did not start: " + (_last_line(stderr) or f"exit status {code}")
    elif header is not None:
        status, message = "error", str(header.get("message") or "")[:_MESSAGE_CHARS]
        if header.get("status") in ("ok", "error", "output_limit"):
            status = header["status"]
        if status == "ok" and header.get("has_result") is True:
            try:
                result, has_result = json.loads(body), True
            except (ValueError, RecursionError) as exc:
                status, message = "error", f"the result could not be read: {exc}"
    elif signalled is not None:
        status, message = "killed", _signal_message(signalled, collected.limits)
    elif len(raw) > len(STARTED):
        status, message = "error", "the program wrote a malformed result record"
    elif code == EXIT_BOOTSTRAP_FAILURE:
        status, message = "error", "the sandbox bootstrap failed: " + _last_line(stderr)
    elif code == 0:
        status, message = "ok", ""
    else:
        status, message = "error", f"the program exited with status {code}"
    return RunResult(
        status=status,
        exit_code=code,
        wall_ms=wall_ms,
        stdout=bytes(collected.stdout),
        stdout_total=collected.stdout_total,
        stdout_spill=collected.spill_path,
        stderr=stderr,
        result=result,
        has_result=has_result,
        message=message[:_MESSAGE_CHARS],
        isolation=isolation,
        tool_calls=collected.tool_calls,
    )


def _signal_of(code: int | None, signal_as_128: bool) -> int | None:
    if code is None:
        return None
    if code < 0:
        return -code
    if signal_as_128 and 128 < code <= 128 + 64:
        return code - 128
    return None


def _signal_message(number: int, limits: Limits) -> str:
    if number == signal.SIGKILL:
        return f"killed by SIGKILL (the {limits.cpu_s} s CPU-time limit, or out of memory)"
    if number == signal.SIGXCPU:
        return f"killed by SIGXCPU: the {limits.cpu_s} s CPU-time limit"
    if number == signal.SIGSEGV:
        return "killed by SIGSEGV (a crash, e.g. the C stack overflowed)"
    try:
        return f"killed by {signal.Signals(number).name}"
    except ValueError:
        return f"killed by signal {number}"


def _last_line(data: bytes) -> str:
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:_MESSAGE_CHARS] if lines else ""
