"""The sandbox provider against real bubblewrap: runs, limits, escapes and the `pw`
helpers (shared fixtures in this folder's conftest.py, helpers in
tests/helpers/sandbox_rig.py)."""
