"""The bubblewrap provider: one fresh, fully unshared sandbox per run.

What a program sees (sandbox.md §1b): its own user, pid, network (loopback only), ipc,
uts and cgroup namespaces, with nested user namespaces disabled; a read-only root
holding only ``/usr`` (with the merged-usr links), the interpreter's prefix when it is
outside ``/usr``, the guest files at ``/guest``, its inputs at ``/inputs/<name>`` and
the library at ``/library-root`` (copied in by bwrap from descriptors the server
opened: on the host they stay private to the server's user); a fresh ``/proc``, a
minimal read-only ``/dev``; and a size-capped tmpfs at ``/work``, the only writable
place (``HOME`` and ``TMPDIR``). The environment holds ``LANG``, ``PATH``, ``HOME``
and ``TMPDIR`` only (and ``PWD``, which bwrap sets); it runs as uid 65534 in a new
session, so it cannot reach the server's terminal or signal it.

The launcher itself never runs as root: a root host starts bwrap as the sandbox uid,
because for a sandbox whose kernel uid is 0 the kernel skips ``RLIMIT_NPROC`` (a fork
bomb gets every process it asks for). The program is the pid namespace's pid 1
(``--as-pid-1``: no bwrap init in between), so when it ends, or is killed, the kernel
kills every other process of the run, and bwrap, which reaps it, exits only then: once
bwrap is gone, so is the run (with bwrap's init in between, bwrap exits as soon as the
program does, while the rest is still being torn down, and leaves that init for the
host's pid 1 to reap). bwrap dies with its parent.

Nothing else reaches the program: bwrap is spawned with only its standard streams, the
run's pipes and the descriptors it copies files from (``_spawn``), and where the host
lets Parkway make cgroups (v2, or v1 memory and pids) the run gets its own, bounding all
its processes' memory and their number together (``_cgroup``; otherwise
:meth:`Limits.split` bounds it with rlimits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from parkway.runner.sandbox import _host
from parkway.runner.sandbox._cgroup import Cgroups, RunCgroup, find
from parkway.runner.sandbox._outcome import early_result, size_text
from parkway.runner.sandbox._session import Launch, request_size, run_program
from parkway.runner.sandbox.provider import (
    Isolation,
    Limits,
    RunRequest,
    RunResult,
    SandboxUnavailable,
)

__all__ = ["BwrapProvider"]

_GUEST = "/guest"
_WORK = "/work"
_INPUTS = "/inputs"
_LIBRARY = "/library-root"
_ENV = {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin", "HOME": _WORK, "TMPDIR": _WORK}
# The top-level folders of a merged-/usr system (links into /usr) or an older one.
_ROOT_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_INSTALL = "apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora)"
_USERNS_FIX = (
    "on Ubuntu 23.10 or later install an AppArmor profile for bwrap, or set the sysctl "
    "kernel.apparmor_restrict_unprivileged_userns=0; elsewhere check that the sysctl "
    "user.max_user_namespaces is above 0 (and kernel.unprivileged_userns_clone=1 where it "
    "exists); in a container, allow it to create user namespaces"
)
_USERNS_SIGNS = (
    "namespace",
    "uid map",
    "gid map",
    "RTM_NEWADDR",
    "loopback",
    "Operation not permitted",
    "setgroups",
)
# The probe: a real run through the bootstrap, reporting what it sees from inside.
_PROBE = """
import os, socket, sys
result({"uid": os.getuid(), "gid": os.getgid(), "python": list(sys.version_info[:3]),
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "root": sorted(os.listdir("/")), "pw": hasattr(pw, "grep")})
"""


class BwrapProvider:
    """Runs programs under bubblewrap (see the module docstring).

    ``python`` is the interpreter inside (the system one by default: the sandbox uid
    must be able to read it, which a pyenv under root's home is not); ``sandbox_uid`` the
    uid the program runs as, and the launcher too when the host is root; ``cgroup`` where
    runs get a cgroup of their own: ``auto`` (v2, else v1, else none), ``off`` or a
    delegated cgroup v2 folder (:mod:`~parkway.runner.sandbox._cgroup`).
    """

    name = "bwrap"

    def __init__(
        self,
        bwrap: str = "bwrap",
        python: str = "/usr/bin/python3",
        sandbox_uid: int = 65534,
        cgroup: str = "auto",
    ) -> None:
        if sandbox_uid <= 0:
            raise ValueError("sandbox_uid must be an unprivileged uid, not 0")
        self.bwrap = bwrap
        self.python = python
        self.sandbox_uid = sandbox_uid
        self.cgroup = cgroup
        self._cgroups: Cgroups | None = None
        self._lock = threading.Lock()
        self._isolation: Isolation | None = None
        self._bwrap_path = ""
        self._python_path = ""
        self._guest: Path | None = None
        self._unstage: Callable[[], None] | None = None  # removes a private guest copy
        self._prefix_binds: list[str] = []

    @property
    def _launcher_uid(self) -> int:
        """Who runs bwrap: the sandbox uid on a root host, else the host's own user."""
        return self.sandbox_uid if os.geteuid() == 0 else os.geteuid()

    @property
    def _launcher_gid(self) -> int:
        return self.sandbox_uid if os.geteuid() == 0 else os.getegid()

    # -- check ------------------------------------------------------------------------

    def check(self) -> Isolation:
        """Probe once with a real sandboxed run (blocking, ~50 ms); cached when it
        passes. Raises :class:`SandboxUnavailable` with the operator's fix."""
        with self._lock:
            if self._isolation is None:
                self._resolve()
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    probe = pool.submit(asyncio.run, self._probe()).result(timeout=60)
                self._isolation = probe
            return self._isolation

    def _resolve(self) -> None:
        found = shutil.which(self.bwrap)
        if found is None:
            where = f"at {self.bwrap}" if "/" in self.bwrap else "on PATH"
            raise SandboxUnavailable(f"bubblewrap is not installed (no bwrap {where}): {_INSTALL}")
        uid, gid = self._launcher_uid, self._launcher_gid
        python = os.path.realpath(self.python)
        if not os.path.isfile(python):
            raise SandboxUnavailable(
                f"the sandbox interpreter {self.python} does not exist: set the sandbox "
                "python to a system Python 3 (e.g. /usr/bin/python3)"
            )
        why = _host.unreadable(Path(python), uid, gid, search=True)
        if why is not None:
            raise SandboxUnavailable(
                f"the sandbox interpreter {self.python} is not readable by uid {uid} "
                f"({why}): use a system Python such as /usr/bin/python3, or install one "
                "under a world-readable prefix"
            )
        try:
            self._cgroups = find(self.cgroup)
        except ValueError as exc:
            raise SandboxUnavailable(str(exc)) from None
        if self._cgroups is not None:
            self._cgroups.sweep()  # what a server killed mid-run left
        self._bwrap_path, self._python_path = found, python
        prefix = str(Path(python).parent.parent)
        self._prefix_binds = [] if python.startswith("/usr/") else ["--ro-bind", prefix, prefix]
        if self._guest is None:
            self._guest, self._unstage = _host.staged_guest(self, uid, gid)

    def close(self) -> None:
        """Remove the private copy of the guest files, if :meth:`check` made one (the
        server's shutdown calls this; a later :meth:`check` stages them again)."""
        with self._lock:
            unstage, self._unstage = self._unstage, None
            self._guest = None
            self._isolation = None
        if unstage is not None:
            unstage()

    def _layers(self) -> tuple[str, ...]:
        launcher = (
            f"launched as uid {self._launcher_uid} (not root)"
            if os.geteuid() == 0
            else f"launched as the host user (uid {self._launcher_uid})"
        )
        return (
            "user ns",
            "pid ns (the program is pid 1)",
            "net ns (no network)",
            "mount ns (read-only /usr and interpreter only)",
            "ipc, uts and cgroup ns",
            "nested user ns disabled",
            f"uid {self.sandbox_uid}",
            launcher,
            "size-capped tmpfs /work (the only writable place)",
            "rlimits (cpu, memory, processes, files)",
            (
                self._cgroups.layer
                if self._cgroups is not None
                else "total memory bounded by rlimits (processes x address space)"
            ),
            "empty environment",
            "new session",
            "only stdio and the run's pipes inherited",
            "inputs and library copied in from descriptors",
        )

    async def _probe(self) -> Isolation:
        draft = Isolation(self.name, True, self._layers())
        result = await self._run_confined(RunRequest(code=_PROBE), draft)
        seen = result.result if isinstance(result.result, dict) else {}
        if result.status != "ok" or not seen:
            raise SandboxUnavailable(self._diagnose(result.message, result.stderr))
        if seen.get("uid") != self.sandbox_uid or seen.get("interfaces") not in (["lo"], []):
            raise SandboxUnavailable(f"the bwrap probe saw an unexpected sandbox: {seen}")
        if tuple(seen.get("python") or ()) < (3, 9):
            raise SandboxUnavailable(
                f"the sandbox interpreter {self.python} is Python {seen.get('python')}; "
                "the sandbox needs Python 3.9 or later"
            )
        version = _version(self._bwrap_path)
        python = ".".join(str(part) for part in seen["python"])
        detail = f"{version} at {self._bwrap_path}; Python {python} at {self._python_path}"
        if self._guest != _host.GUEST_DIR:
            detail += f"; guest files copied to {self._guest}"
        return Isolation(self.name, True, self._layers(), detail)

    def _diagnose(self, message: str, stderr: bytes) -> str:
        said = stderr.decode("utf-8", "replace").strip() or message
        said = said.splitlines()[-1] if said else "no error message"
        if "Can't find source path" in said or ("Permission denied" in said and "/" in said):
            return (
                f"bwrap cannot mount a path as uid {self._launcher_uid} ({said}): the "
                "interpreter and the guest files must be readable by that uid"
            )
        if any(sign in said for sign in _USERNS_SIGNS):
            return f"bwrap cannot create user namespaces ({said}): {_USERNS_FIX}"
        return f"the bwrap probe failed ({said})"

    # -- run --------------------------------------------------------------------------

    async def run(self, request: RunRequest) -> RunResult:
        """Run one program; see :class:`~parkway.runner.sandbox.provider.SandboxProvider`.
        Raises ValueError only for a malformed request (an input name, a path the
        sandbox uid cannot read, args that are not JSON)."""
        isolation = self._isolation
        try:
            if isolation is None:
                isolation = await asyncio.to_thread(self.check)
        except SandboxUnavailable as exc:
            unconfined = Isolation(self.name, False, (), f"unavailable: {exc}")
            return early_result("unavailable", str(exc), unconfined)
        return await self._run_confined(request, isolation)

    async def _run_confined(self, request: RunRequest, isolation: Isolation) -> RunResult:
        size = request_size(request)
        if size > request.limits.request_bytes:
            message = (
                f"the program and its args are {size} bytes, over the "
                f"{request.limits.request_bytes}-byte cap: pass big data as an input"
            )
            return early_result("error", message, isolation)
        if self._cgroups is None:
            return await run_program(self._launch(request), request, isolation)
        try:
            cgroup = await asyncio.to_thread(self._cgroups.create, request.limits)
        except OSError as exc:
            message = f"the run's cgroup could not be made ({self._cgroups.layer}): {exc}"
            return early_result("unavailable", message, isolation)
        try:
            with cgroup.watch():
                result = await run_program(self._launch(request, cgroup), request, isolation)
        finally:
            end = await cgroup.remove()
        result = dataclasses.replace(result, memory_peak_bytes=end.memory_peak_bytes)
        if end.out_of_memory and result.status in ("killed", "error"):
            total = size_text(request.limits.total_memory_bytes)
            message = f"out of memory: the run passed its total of {total}; killed"
            result = dataclasses.replace(result, status="killed", message=message)
        return result

    def _launch(self, request: RunRequest, cgroup: RunCgroup | None = None) -> Launch:
        """The run's bwrap command. The inputs and the library's files are opened here,
        as the server, and bwrap copies each from its descriptor into the sandbox
        (``--ro-bind-data``): neither the launcher's uid nor any other local user needs
        to be able to read them on the host, so the run's folder can be private."""
        fed = _Fed()
        try:
            inputs: dict[str, str] = {}
            mounts: list[str] = []
            for name, host_path in request.inputs.items():
                if not _host.valid_input_name(name):
                    raise ValueError(f"input name {name!r}: use {_host.INPUT_NAME}")
                inputs[name] = f"{_INPUTS}/{name}"
                mounts += fed.file(Path(host_path), inputs[name], f"input {name!r}")
            paths = [_GUEST]
            if request.library is not None:
                mounts += fed.tree(Path(request.library), _LIBRARY)
                paths.append(_LIBRARY)
        except BaseException:
            fed.close()
            raise
        return Launch(
            argv=self._argv(request.limits, mounts),
            env={},  # bwrap's own environment is readable in the sandbox (/proc/1/environ)
            cwd="/",
            user=self.sandbox_uid if os.geteuid() == 0 else None,
            inputs=inputs,
            paths=paths,
            kill=_kill_sandbox,
            signal_as_128=True,
            fds=fed.fds,
            cgroup_procs=() if cgroup is None else cgroup.procs_fds,
        )

    def _argv(self, limits: Limits, mounts: list[str]) -> list[str]:
        assert self._guest is not None, "check() resolves the paths first"
        argv = [self._bwrap_path, "--unshare-all", "--unshare-user", "--disable-userns"]
        argv += ["--die-with-parent", "--as-pid-1", "--new-session", "--clearenv"]
        for name, value in _ENV.items():
            argv += ["--setenv", name, value]
        uid = str(self.sandbox_uid)
        argv += ["--uid", uid, "--gid", uid, "--ro-bind", "/usr", "/usr"]
        for name in _ROOT_DIRS:
            top = Path("/") / name
            if top.is_symlink():
                argv += ["--symlink", os.readlink(top), str(top)]
            elif top.is_dir():
                argv += ["--ro-bind", str(top), str(top)]
        argv += self._prefix_binds
        argv += ["--ro-bind", str(self._guest), _GUEST, "--proc", "/proc", "--dev", "/dev"]
        argv += ["--size", str(limits.disk_bytes), "--tmpfs", _WORK]
        argv += mounts
        # bwrap's own root and /dev are tmpfs owned by the sandbox uid, without a size
        # cap: read-only, /work stays the only (capped) writable place.
        argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", _WORK]
        argv += ["--", self._python_path, "-I", "-S", "-B", f"{_GUEST}/bootstrap.py"]
        return argv


def _kill_sandbox(pid: int) -> None:
    """Kill bwrap's child, the program as the sandbox's pid 1: the kernel then kills every
    process of the pid namespace, and bwrap exits once it has reaped it. Before that
    child exists, kill bwrap's process group. Never bwrap and its child at once, not even
    through the run's cgroup: the child would be left for the host's pid 1 to reap (a
    zombie for ever where that is the server itself)."""
    sandbox_init = _host.children(pid)
    for child in sandbox_init:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    if not sandbox_init:
        os.killpg(pid, signal.SIGKILL)


def _version(bwrap: str) -> str:
    try:
        done = subprocess.run(  # noqa: S603 (our own resolved bwrap, fixed arguments)
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "bubblewrap"
    return done.stdout.strip() or "bubblewrap"


# The most files a library may hold (each is a descriptor and a mount of the run).
_LIBRARY_FILES = 512


class _Fed:
    """Descriptors on host files for bwrap to copy into the sandbox, and the options
    that say where (``--dir`` for a folder, ``--ro-bind-data FD DEST`` for a file)."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    def file(self, path: Path, dest: str, what: str, *, follow: bool = True) -> list[str]:
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise ValueError(f"{what}: cannot open {path}: {exc.strerror}") from None
        self.fds.append(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{what}: {path} is not a file")
        return ["--ro-bind-data", str(fd), dest]

    def tree(self, root: Path, dest: str) -> list[str]:
        """A folder's subfolders and regular files (links and anything else left out,
        never followed), at most :data:`_LIBRARY_FILES` files."""
        if not root.is_dir():
            raise ValueError(f"library: {root} is not a folder")
        options = ["--dir", dest]
        files = 0
        for folder, subfolders, names in os.walk(root):
            here = Path(folder)
            inside = dest + "/" + here.relative_to(root).as_posix() if here != root else dest
            for sub in sorted(subfolders):
                if not (here / sub).is_symlink():
                    options += ["--dir", f"{inside}/{sub}"]
            for name in sorted(names):
                path = here / name
                if not stat.S_ISREG(path.lstat().st_mode):
                    continue
                files += 1
                if files > _LIBRARY_FILES:
                    raise ValueError(f"library: more than {_LIBRARY_FILES} files in {root}")
                options += self.file(path, f"{inside}/{name}", "library", follow=False)
        return options

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
