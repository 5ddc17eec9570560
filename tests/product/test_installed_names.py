"""Parkway's modules and resources are reached by their installed names, everywhere.

A checkout imports ``runner``, ``transport`` and ``widgets_api`` under their folder
names too; an installed Parkway has only ``parkway.runner`` and the rest. A page that
read its files through ``resources.files("widgets_api")`` passed the whole suite and
answered 500 to every user. These tests scan every file of the repository (code, strings,
docs, the page) for such a reference, and check that the suite itself cannot import a
bare name (the import hook tests/conftest.py installs).
"""

from __future__ import annotations

import importlib
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from tests.helpers.bare_names import bare_references

ROOT = Path(__file__).resolve().parents[2]

# Not scanned: the scanner and this test (they spell out what they look for), the
# changelog (a record of what was, including the fixes of such references) and files
# that are not text.
_NOT_SCANNED = {
    "tests/helpers/bare_names.py",
    "tests/product/test_installed_names.py",
    "CHANGELOG.md",
}
_BINARY = (".png", ".jpg", ".jpeg", ".gif", ".ico", ".whl", ".gz", ".zip")

# The one deliberate use: a `ref` written before Parkway installed under the `parkway`
# namespace ("runner.demo:get_weather") still names Parkway's module, through
# `parkway.runner.demo` (runner/agent/template.py). Its code comment, its doc and its tests
# name the old form on purpose. Each entry must still match: a stale one fails.
_ALLOWED = {
    ("runner/agent/template.py", '"runner.demo:get_weather"'),
    ("docs/protocol.md", "(`runner.demo:get_weather`, as older agent files"),
    ("tests/runner/test_units.py", '"ref": "runner.no_such_module:f"'),
    ("tests/runner/test_units.py", "\"module 'runner.no_such_module' cannot be imported\""),
    ("tests/runner/test_units.py", '"runner.demo:get_weather"; it resolves'),
    ("tests/runner/test_units.py", '"ref": "runner.demo:get_weather"'),
}


def _repository_files() -> list[str]:
    """The files a clone has (tracked), and new ones not yet committed (not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    names = [name for name in listed.stdout.decode().split("\0") if name]
    return [
        name
        for name in names
        if name not in _NOT_SCANNED
        and not name.lower().endswith(_BINARY)
        and "node_modules/" not in name
        and (ROOT / name).is_file()
    ]


def test_no_file_reaches_a_module_by_a_bare_folder_name() -> None:
    """Code, strings, docs, the page, the pyproject: every reference to Parkway's modules
    uses the installed ``parkway.*`` name, so what passes here works when installed."""
    files = _repository_files()
    assert len(files) > 200, "the scan found too few files to mean anything"
    found = []
    used = set()
    for name in files:
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        for finding in bare_references(name, text):
            allowance = next((a for a in _ALLOWED if a[0] == name and a[1] in finding.text), None)
            if allowance is None:
                found.append(str(finding))
            else:
                used.add(allowance)
    assert not found, "bare folder names (write parkway.<name>):\n" + "\n".join(found)
    assert used == _ALLOWED, f"allowances that match nothing any more: {_ALLOWED - used}"


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (
            "widgets_api/playground/page.py",
            'item = resources.files("widgets_api").joinpath("static")\n',
        ),
        ("x.py", 'module = importlib.import_module("runner.demo")\n'),
        ("x.py", "from transport.app import create_app\n"),
        ("x.py", "import widgets_api\n"),
        ("x.py", 'monkeypatch.setattr("runner.loop.Runner.start", fake)\n'),
        ("x.py", "app = 'transport.app:create_app'\n"),
        ("agent.json", '{"ref": "runner.demo:get_weather"}\n'),
        ("pyproject.toml", 'parkway = "transport.cli:main"\n'),
        ("README.md", "```sh\npython -m transport.cli serve\n```\n"),
        ("docs/x.md", "```python\nfrom runner.template import load_template\n```\n"),
    ],
)
def test_the_scan_finds_each_kind_of_bare_reference(path: str, text: str) -> None:
    """The scan would have caught the page's 500, and each other way of reaching a
    module by its folder name."""
    assert bare_references(path, text), text


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("x.py", 'item = resources.files("parkway.widgets_api").joinpath("static")\n'),
        ("x.py", "from parkway.transport.app import create_app\n"),
        ("x.py", "self.runner.driver.drive()\nrunner = getattr(app.state, 'runner', None)\n"),
        (
            "docs/x.md",
            "The page's files are in `widgets_api/playground/static/`; see runner/engine/runner.py.\n",
        ),
        ("x.py", '"""The runner: it parks; transport mounts widgets_api\'s routes."""\n'),
        ("docs/x.md", "`parkway.runner.demo:get_weather`, tests/test_runner.py\n"),
    ],
)
def test_the_scan_leaves_installed_names_paths_and_prose_alone(path: str, text: str) -> None:
    assert not bare_references(path, text)


@pytest.mark.parametrize("name", ["runner", "transport.app", "widgets_api"])
def test_the_suite_cannot_import_a_bare_folder_name(name: str) -> None:
    """The repository root is on pytest's path (for tests.*), but a product import that
    would resolve through it fails here as it fails for a user."""
    top = name.partition(".")[0]
    with pytest.raises(ModuleNotFoundError, match=f"installs as 'parkway.{top}'"):
        importlib.import_module(name)
    with pytest.raises(ModuleNotFoundError):
        resources.files(top)


def test_the_page_reads_its_files_from_the_installed_package() -> None:
    """The installed package holds the page (the 500 came from looking elsewhere)."""
    static = resources.files("parkway.widgets_api.playground").joinpath("static", "playground.html")
    assert static.is_file()
