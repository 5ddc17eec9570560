"""The private copies of the guest files (runner/sandbox/_host.py): whose copy may be
removed, and by whom. The whole lifecycle, with real servers and signals, is in
tests/transport/cassettes/test_replay_ci.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from parkway.runner.sandbox import remove_stale_guests


def _gone_pid() -> int:
    """The pid of a process that has exited (and been waited for)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_only_copies_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    """A server killed with SIGKILL cannot remove its copy, so the next one does; a copy
    whose process still runs is in use by that process's sandbox and must stay, and so
    must anything that is not a folder this user made under that name."""
    gone = tmp_path / f"parkway-sandbox-guest-{_gone_pid()}-abc"
    live = tmp_path / f"parkway-sandbox-guest-{os.getpid()}-def"
    unnamed = tmp_path / "parkway-sandbox-guest-x-ghi"
    for folder in (gone, live, unnamed):
        folder.mkdir()
        (folder / "bootstrap.py").write_text("")
    link = tmp_path / f"parkway-sandbox-guest-{_gone_pid()}-lnk"
    link.symlink_to(live)
    assert remove_stale_guests(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, unnamed.name, link.name]
    )
    assert (live / "bootstrap.py").exists()
