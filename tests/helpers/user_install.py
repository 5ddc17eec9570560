"""Parkway installed as its users install it, for the tests that run the product so.

:func:`install_for_user` copies the checkout as a fresh clone has it, builds the wheel as
``pip`` builds it, and installs that wheel (not editable, no extras) with pytest and
pytest-asyncio into a new virtual environment outside the repository. The suite builds it once per session
(the ``user_install`` fixture in tests/conftest.py): the example project's tests run
pytest in it, and tests/product/test_installed_product.py serves the playground from it.

:func:`user_environment` is the environment such a user has: none of this test run's
variables (``PYTHONPATH``, pytest's, ``make``'s, a virtual environment), no provider key
or base URL and no Parkway setting.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "UserInstall", "clone_files", "install_for_user", "user_environment"]

ROOT = Path(__file__).resolve().parents[2]
_PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input"]
# What a user's project installs beside Parkway to test it.
_TEST_TOOLS = ["pytest", "pytest-asyncio"]


@dataclass(frozen=True)
class UserInstall:
    """A new venv with Parkway's wheel installed, and how the wheel was built."""

    wheel: Path
    venv: Path
    build_log: str  # pip wheel's stderr: the build backend's warnings, if any

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def script(self, name: str) -> Path:
        """A console script of the venv (``parkway``)."""
        return self.venv / "bin" / name


def user_environment(**extra: str) -> dict[str, str]:
    """This process's environment as a user's shell would have it."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.endswith(("_API_KEY", "_BASE_URL"))
        and not name.startswith(("PARKWAY_", "PYTEST_", "VIRTUAL_ENV", "MAKE", "COV_"))
        and name not in {"PYTHONPATH", "MFLAGS", "PYTHONHOME"}
    }
    return {**kept, **extra}


def clone_files(into: Path) -> Path:
    """Copy what a fresh clone of this checkout has into ``into``: the tracked files and
    new ones not yet committed (nothing git ignores: no venv, build output, node_modules
    or data folder). Returns ``into``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if not name or not source.is_file():  # a deleted file still listed as tracked
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return into


def install_for_user(where: Path) -> UserInstall:
    """Build the wheel from a clone-like copy of the checkout (building in place would
    write ``build/`` and ``*.egg-info`` into the checkout, and a stale ``build/lib`` could
    reach the wheel) and install it into ``where/venv`` with pytest."""
    source = clone_files(where / "parkway-source")
    dist = where / "dist"
    built = subprocess.run(
        [sys.executable, *_PIP, "wheel", "--no-deps", "--wheel-dir", str(dist), str(source)],
        env=user_environment(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, f"pip wheel failed:\n{built.stderr}"
    (wheel,) = dist.glob("parkway-*.whl")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        # pytest-asyncio as a project testing async code has it (docs/python-api.md's
        # parkway_runtime example); it changes nothing for tests that are not async
        [str(venv / "bin" / "python"), *_PIP, "install", "--quiet", str(wheel), *_TEST_TOOLS],
        env=user_environment(),
        capture_output=True,
        text=True,
        check=False,
        timeout=480,
    )
    assert installed.returncode == 0, f"pip install failed:\n{installed.stderr}"
    return UserInstall(wheel=wheel, venv=venv, build_log=built.stderr)
