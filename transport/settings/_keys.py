"""Keys the embedded default makes once and keeps in its data folder."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

__all__ = ["persisted_key"]


def persisted_key(data_dir: Path, name: str, make: Callable[[], str]) -> str:
    """The key kept in ``data_dir/name``, made by ``make`` and written there first if
    there is none (the embedded default's generated secrets)."""
    path = data_dir / name
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        # Write the whole key to a private temporary file, then publish it with a
        # hard link, which fails if another process published first: nobody ever
        # reads a half-written key, and both processes end up with the same one.
        tmp = path.with_name(f".{name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(make())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()
