"""The trusted start of every sandboxed run: ``python3 -I -S -B bootstrap.py``.

It runs inside the sandbox, before the agent's program, and speaks to the host only
through file descriptors (the host's side is :mod:`parkway.runner.sandbox._session`):

- stdin: one JSON request ``{code, args, limits, fds, inputs, paths}``, read to EOF, so
  the program's ``input()`` gets EOFError at once;
- the result fd: ``S`` as soon as the request is read (the host tells a program's exit
  status from the launcher's own errors by it), then at the end one JSON header line
  ``{status, message, has_result}`` followed by the result's JSON;
- the tool fds (when the run has a broker): one JSON line per ``tools.call``, one
  answer line back (``{ok, output}`` or ``{ok: false, error}``).

Before the program it sets the rlimits with soft = hard, so the program cannot raise
them again, and ignores SIGXFSZ so an oversize write is an OSError. The program runs
with ``args``, ``result``, ``artifacts``, ``tools``, ``ToolCallError`` and ``pw`` bound.

Exit status: 0 the program finished (the header says ok, or that its result was not
plain JSON or too big), 10 the program raised or exited non-zero, 13 the bootstrap
itself failed. Standard library only; it must run on the sandbox's system Python
(3.9 or later), not the server's.
"""

from __future__ import annotations

import _ast
import _thread
import contextlib
import json
import os
import resource
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~10 ms to import, at every run
    from types import CodeType
    from typing import Any

EXIT_OK = 0
EXIT_PROGRAM_ERROR = 10
EXIT_BOOTSTRAP_FAILURE = 13
STARTED = b"S"
PROGRAM = "<program>"
_MESSAGE_CHARS = 400


class ToolCallError(Exception):
    """A brokered tool call was refused or failed; the message is the host's."""


class Artifacts:
    """The run's inputs, read-only: ``artifacts.get(name)`` gives a file's bytes."""

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = dict(paths)

    def names(self) -> list[str]:
        """The inputs' names."""
        return sorted(self._paths)

    def path(self, name: str) -> str:
        """Where the input ``name`` is mounted (read-only)."""
        try:
            return self._paths[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"no input named {name!r} (the inputs: {known})") from None

    def get(self, name: str) -> bytes:
        with open(self.path(name), "rb") as file:
            return file.read()

    def text(self, name: str, encoding: str = "utf-8") -> str:
        return self.get(name).decode(encoding)

    def json(self, name: str) -> object:
        return json.loads(self.get(name))

    def __repr__(self) -> str:
        return f"<artifacts {self.names()}>"


class Tools:
    """Brokered tool calls: ``tools.call(name, input)`` returns the tool's output or
    raises :class:`ToolCallError`. The host decides what may be called, and how often."""

    def __init__(self, requests_fd: int | None, answers_fd: int | None) -> None:
        self._requests = requests_fd
        self._answers = answers_fd
        self._lock = _thread.allocate_lock()
        self._pending = b""

    def call(self, name: str, input: object = None) -> object:
        if not isinstance(name, str):
            raise TypeError("tools.call: the tool's name is a string")
        if self._requests is None or self._answers is None:
            raise ToolCallError("no tools are available to this program")
        line = json.dumps({"name": name, "input": input}, allow_nan=False, separators=(",", ":"))
        with self._lock:
            _write_all(self._requests, line.encode() + b"\n")
            answer = self._read_line(self._answers)
        if not answer:
            raise ToolCallError("the host closed the tool channel")
        reply = json.loads(answer)
        if reply.get("ok") is True:
            return reply.get("output")
        raise ToolCallError(str(reply.get("error") or "the tool call failed"))

    def _read_line(self, fd: int) -> bytes:
        while b"\n" not in self._pending:
            chunk = os.read(fd, 65536)
            if not chunk:
                line, self._pending = self._pending, b""
                return line
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def __repr__(self) -> str:
        return "<tools: tools.call(name, input)>"


class _Outcome:
    """What the program produced: the encoded result, once set."""

    def __init__(self) -> None:
        self.encoded: str | None = None

    def set(self, value: object) -> None:
        """``result(value)``: the run's result, plain JSON (the last call wins)."""
        self.encoded = _encode(value)


def _encode(value: object) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise ValueError("the result is nested too deeply to be JSON") from None
    except TypeError as exc:
        raise TypeError(f"the result must be plain JSON: {exc}") from None
    except ValueError as exc:  # NaN or infinity, a circular reference
        raise ValueError(f"the result must be plain JSON: {exc}") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _apply_limits(limits: dict[str, int]) -> None:
    for name, value in (
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NPROC", limits["processes"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _compile(code: str) -> tuple[CodeType, CodeType | None]:
    """The program, and its last statement separately when it is an expression (its
    value is the result unless ``result(...)`` was called)."""
    tree = compile(code, PROGRAM, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
    assert isinstance(tree, _ast.Module)
    last = None
    node = tree.body[-1] if tree.body else None
    if isinstance(node, _ast.Expr):
        tree.body.pop()
        last = compile(_ast.Expression(node.value), PROGRAM, "eval", dont_inherit=True)
    body = compile(tree, PROGRAM, "exec", dont_inherit=True)
    return body, last


def _report(exc: BaseException, code: str) -> str:
    """Print the traceback (without the bootstrap's frames) to stderr; the one-line
    reason for the host."""
    try:
        import linecache  # noqa: PLC0415 (only a failed run needs them)
        import traceback  # noqa: PLC0415

        linecache.cache[PROGRAM] = (len(code), None, code.splitlines(True), PROGRAM)
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
        message = traceback.format_exception_only(type(exc), exc)[-1].strip()
    except BaseException:  # memory may be short: the exception's name is enough
        message = type(exc).__name__
    return message[:_MESSAGE_CHARS]


def _finish(result_fd: int, status: str, message: str, encoded: str | None) -> None:
    """Flush the program's output, then send the header and the result."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    header = {"status": status, "message": message, "has_result": encoded is not None}
    data = json.dumps(header).encode() + b"\n" + (encoded or "").encode()
    with contextlib.suppress(OSError):
        _write_all(result_fd, data)


def _exit_message(code: object) -> str:
    if isinstance(code, str):
        sys.stderr.write(code + "\n")  # what the interpreter does with sys.exit("text")
        return code[:_MESSAGE_CHARS]
    return f"the program exited with status {code!r}"


def _run(request: dict[str, Any], result_fd: int) -> int:
    code = str(request["code"])
    fds = request["fds"]
    outcome = _Outcome()
    namespace: dict[str, object] = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "__doc__": None,
        "args": request.get("args"),
        "result": outcome.set,
        "artifacts": Artifacts(request.get("inputs") or {}),
        "tools": Tools(fds.get("tool_requests"), fds.get("tool_answers")),
        "ToolCallError": ToolCallError,
        "pw": __import__("pw"),
    }
    sys.argv = [PROGRAM]
    try:
        body, last = _compile(code)
        exec(body, namespace)  # noqa: S102 (running the program is the point)
        value = None if last is None else eval(last, namespace)  # noqa: S307 (same)
        if outcome.encoded is None and value is not None:
            try:
                outcome.encoded = _encode(value)
            except (TypeError, ValueError) as exc:
                message = f"the last expression's value is not plain JSON: {exc}"
                _finish(result_fd, "error", message[:_MESSAGE_CHARS], None)
                return EXIT_OK
    except SystemExit as exc:
        if exc.code not in (None, 0):
            namespace.clear()
            _finish(result_fd, "error", _exit_message(exc.code), None)
            return EXIT_PROGRAM_ERROR
    except BaseException as exc:  # any failure of the program is its result
        namespace.clear()  # frees what the program held, e.g. after a MemoryError
        _finish(result_fd, "error", _report(exc, code), None)
        return EXIT_PROGRAM_ERROR
    encoded = outcome.encoded
    cap = int(request["limits"]["result_bytes"])
    size = 0 if encoded is None else len(encoded.encode())
    if size > cap:
        message = f"the result is {size} bytes of JSON, over the {cap}-byte cap"
        _finish(result_fd, "output_limit", message, None)
        return EXIT_OK
    _finish(result_fd, "ok", "", encoded)
    return EXIT_OK


def main() -> int:
    try:
        request = json.loads(sys.stdin.buffer.read())
        result_fd = int(request["fds"]["result"])
        _write_all(result_fd, STARTED)
        _apply_limits(request["limits"])
        sys.path.extend(str(path) for path in request.get("paths") or ())
    except BaseException as exc:  # any failure here is the bootstrap's, not the program's
        sys.stderr.write(f"sandbox bootstrap failed: {type(exc).__name__}: {exc}\n")
        return EXIT_BOOTSTRAP_FAILURE
    return _run(request, result_fd)


if __name__ == "__main__":
    # os._exit: the run ends with the program's main code; threads it left running and
    # atexit hooks do not hold the sandbox open (the host kills what remains).
    os._exit(main())
