"""Host-side helpers of the local providers: where the guest files are (and the private
copies made of them), whether another uid can read a path, and a process's children."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "GUEST_DIR",
    "GUEST_FILES",
    "INPUT_NAME",
    "children",
    "remove_stale_guests",
    "staged_guest",
    "unreadable",
    "valid_input_name",
]

GUEST_DIR = Path(__file__).resolve().parent / "guest"
GUEST_FILES = ("bootstrap.py", "pw.py", "pw_query.py")
INPUT_NAME = "1-128 characters of letters, digits, '.', '_' and '-', not starting with '.'"
# A private copy of the guest files: ``parkway-sandbox-guest-<pid>-<random>`` in the
# temporary folder, the pid being the process that made it (remove_stale_guests).
_COPY_PREFIX = "parkway-sandbox-guest-"
_INPUT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def valid_input_name(name: object) -> bool:
    """Input names become file names inside the sandbox: no separators, no dot files."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= 128
        and not name.startswith(".")
        and set(name) <= _INPUT_CHARS
    )


def unreadable(path: Path, uid: int, gid: int, *, search: bool = False) -> str | None:
    """Why ``uid``/``gid`` (no supplementary groups) cannot read ``path``, or None when
    it can: every parent folder must be searchable, the path readable (and searchable
    too when ``search``). ACLs are not consulted. For the host's own uid this is
    :func:`os.access`."""
    want = os.R_OK | (os.X_OK if search else 0)
    if uid == os.geteuid():
        return None if os.access(path, want) else f"{path} is not readable by uid {uid}"
    path = Path(os.path.abspath(path))
    for folder in reversed(path.parents):
        if not _allowed(folder, uid, gid, os.X_OK):
            return f"{folder} is not searchable by uid {uid}"
    if not _allowed(path, uid, gid, want):
        return f"{path} is not readable by uid {uid}"
    return None


def _allowed(path: Path, uid: int, gid: int, want: int) -> bool:
    try:
        info = path.stat()
    except OSError:
        return False
    if uid == 0:
        return True
    if info.st_uid == uid:
        shift = 6
    elif info.st_gid == gid:
        shift = 3
    else:
        shift = 0
    bits = (info.st_mode >> shift) & 0o7
    return bits & want == want


def staged_guest(owner: object, uid: int, gid: int) -> tuple[Path, Callable[[], None]]:
    """The guest files' folder as ``uid`` can read it, and what removes it when its user
    is done: the package's own folder when ``uid`` can read it (nothing to remove), else
    a private copy (root-owned, world-readable) in the temporary folder. An installed
    Parkway under a 0700 home is not readable by the sandbox uid.

    The copy goes when the returned function is called (the provider's ``close``, on
    every way a server stops that runs its shutdown), else when ``owner`` is collected
    or the interpreter exits; a process killed outright leaves it to the next
    :func:`remove_stale_guests` (each copy is named after the pid that made it)."""
    if all(unreadable(GUEST_DIR / name, uid, gid) is None for name in GUEST_FILES):
        return GUEST_DIR, _nothing
    remove_stale_guests()
    copy = Path(tempfile.mkdtemp(prefix=f"{_COPY_PREFIX}{os.getpid()}-"))
    remove = weakref.finalize(owner, shutil.rmtree, copy, ignore_errors=True)
    for name in GUEST_FILES:
        shutil.copyfile(GUEST_DIR / name, copy / name)
        (copy / name).chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    copy.chmod(0o755)
    return copy, remove


def _nothing() -> None:
    pass


def remove_stale_guests(folder: Path | None = None) -> int:
    """Remove the guest copies (:func:`staged_guest`) in ``folder`` (default: the
    temporary folder) whose process is gone, as a server killed with SIGKILL leaves
    them; the number removed. A copy of a process that still runs is kept, and so is
    anything this user does not own (another user's folder of that name, a link)."""
    removed = 0
    for copy in Path(folder or tempfile.gettempdir()).glob(f"{_COPY_PREFIX}*-*"):
        pid = copy.name[len(_COPY_PREFIX) :].partition("-")[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        try:
            info = copy.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue
        shutil.rmtree(copy, ignore_errors=True)
        removed += 1
    return removed


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children (from /proc)."""
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(child) for child in listed.split()]
    except OSError:
        pass
    found = []
    for entry in _proc_pids():
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(entry)
    return found


def _proc_pids() -> Iterable[int]:
    return (int(name) for name in os.listdir("/proc") if name.isdigit())
