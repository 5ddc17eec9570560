"""docs/python-api.md's examples, run as a reader runs them: their files written as they
appear in a folder outside the repository, with the installed package. The Runtime
example: ``python park.py`` and ``python resume.py`` as two processes, and mypy --strict.
The ``parkway_runtime`` fixture example: pytest in that folder as a project of its own,
with the page's pytest configuration (pytest-asyncio's default strict mode)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.user_install import ROOT, UserInstall, user_environment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DOC = ROOT / "docs" / "python-api.md"


def example_files() -> dict[str, str]:
    """Each code block the page names with ``<!-- file: NAME -->`` above it."""
    found = re.findall(r"<!-- file: (\S+) -->\n```[a-z]+\n(.*?)```", DOC.read_text(), re.DOTALL)
    files = dict(found)
    assert set(files) == {
        "shop_agent.py", "park.py", "resume.py", "pyproject.toml", "test_shop.py"
    }, sorted(files)  # fmt: skip
    return files


@pytest.fixture
def folder() -> Iterator[Path]:
    """The reader's project folder: short, since the embedded Redis's unix socket lives
    in its data folder and socket paths are limited to about 100 bytes."""
    with tempfile.TemporaryDirectory(prefix="pw-doc-") as where:
        path = Path(where)
        for name, source in example_files().items():
            (path / name).write_text(source)
        yield path


def test_the_runtime_example_parks_in_one_process_and_resumes_in_another(
    user_install: UserInstall, folder: Path
) -> None:
    """The first process parks the chat and exits (its embedded Redis stops with it);
    the second starts afresh on the same data folder, answers and resumes (a 75 EUR
    order, no approval), then takes a 150 EUR order through its approval: the page's
    output, line for line. The agent is an `Agent` with a client tool, a typed pydantic
    argument and a per-call approval rule."""

    def run(script: str) -> str:
        done = subprocess.run(
            [str(user_install.python), script],
            cwd=folder,
            env=user_environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("park.py") == "Which size? -> parked pick_size {'options': ['S', 'M', 'L']}\n"
    assert not (folder / "parkway-data" / "redis.sock").exists()  # no server kept it alive
    assert run("resume.py") == (
        "Done: 3 shirts in M, 75 EUR.\n"
        "approval: {'order': {'size': 'L', 'quantity': 6}}\n"
        "Done: 6 shirts in L, 150 EUR.\n"
    )


def test_the_fixture_example_passes_in_a_project_of_its_own_in_strict_mode(
    user_install: UserInstall, folder: Path
) -> None:
    """The page's fixture example failed as written under pytest-asyncio's default
    strict mode (with pytest's advice to install an async plugin, which was installed).
    Here it runs as a user's project: pytest of the installed package (Parkway's plugin
    found by its entry point), in the folder holding the page's pyproject.toml (no
    asyncio_mode: strict) and test file, with warnings as errors. The same tests left
    unmarked fail with Parkway's message saying what to do, not pytest's."""
    pyproject = (folder / "pyproject.toml").read_text()
    assert "asyncio_mode" not in pyproject  # the default mode is the one tried

    def pytest_in_project(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(user_install.python), "-m", "pytest", "-W", "error", "-p", "no:cacheprovider",
             "-q", *args],
            cwd=folder, env=user_environment(), capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip

    done = pytest_in_project("test_shop.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout
    assert "warning" not in done.stdout.lower(), done.stdout

    unmarked = (folder / "test_shop.py").read_text().replace("pytestmark = ", "_unused = ")
    (folder / "test_unmarked.py").write_text(unmarked)
    done = pytest_in_project("test_unmarked.py")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not natively supported" not in done.stdout, done.stdout
    assert (
        "test_the_clerk_asks_for_a_size is an async test that pytest-asyncio does not run in "
        "its strict mode (the default): mark it @pytest.mark.asyncio"
    ) in done.stdout, done.stdout


def test_the_runtime_example_passes_mypy_strict(folder: Path, tmp_path: Path) -> None:
    """The example is typed end to end: mypy --strict finds nothing to say about it
    (Parkway's own modules are read for their types, through the folders' installed
    names, as ``make lint`` does)."""
    names = tmp_path / "path" / "parkway"
    names.mkdir(parents=True)
    for package in ("runner", "transport", "widgets_api"):
        (names / package).symlink_to(ROOT / package)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(ROOT / "build" / "mypy-doc-cache"), "--no-error-summary",
         "shop_agent.py", "park.py", "resume.py", "test_shop.py"],
        cwd=folder,
        env={**os.environ, "MYPYPATH": str(tmp_path / "path")},
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
