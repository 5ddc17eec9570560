"""The package layout's rules: one-way imports and explicit public surfaces."""

from __future__ import annotations

import ast
import importlib
import re
import zipfile
from pathlib import Path

import pytest

from tests.helpers.user_install import UserInstall

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["runner", "transport", "widgets_api"]


def imported_modules(package: str) -> set[tuple[str, str]]:
    """(file, module) for each absolute import in the folder ``package``; Parkway's own
    modules are named without their ``parkway.`` prefix, for the rules below."""
    found = set()
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(
                    (path.name, alias.name.removeprefix("parkway.")) for alias in node.names
                )
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((path.name, node.module.removeprefix("parkway.")))
    return found


def test_runner_imports_neither_transport_nor_widgets_api() -> None:
    """The runner knows nothing of HTTP or wire protocols; the dependency is one way."""
    bad = {
        (f, m)
        for f, m in imported_modules("runner")
        if m.split(".")[0] in {"transport", "widgets_api", "starlette", "sse_starlette", "uvicorn"}
    }
    assert not bad, f"runner imports what it must not: {sorted(bad)}"


def test_widgets_api_does_not_import_transport() -> None:
    """transport mounts widgets_api's routes, never the other way round."""
    bad = {(f, m) for f, m in imported_modules("widgets_api") if m.split(".")[0] == "transport"}
    assert not bad, sorted(bad)


@pytest.mark.parametrize(
    "package",
    [
        *(f"parkway.{top}" for top in PACKAGES),
        "parkway.runner.llm",
        "parkway.widgets_api.connect",
        "parkway.widgets_api.demo_provider",
    ],
)
def test_each_package_declares_its_public_names(package: str) -> None:
    """Every package re-exports its public names through an explicit __all__."""
    module = importlib.import_module(package)
    names = module.__all__
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it does not define: {missing}"


# The modules that may spell Redis key names: the runner's keys and widgets_api's own.
KEY_MODULES = ("runner/keys.py", "widgets_api/keys.py")
# A string literal of any kind (plain, f-, b-, r-) that starts with Parkway's key prefix.
_KEY_LITERAL = re.compile(r"""["']pw:""")


def spells_key_names(source: str) -> bool:
    return _KEY_LITERAL.search(source) is not None


def test_redis_key_names_come_from_the_two_key_modules() -> None:
    """Only runner/keys.py and widgets_api/keys.py spell Redis key prefixes, so every key
    is documented (type, contents, lifetime) in one of two places."""
    offenders = [
        relative
        for package in [*PACKAGES, "bench"]
        for path in (ROOT / package).rglob("*.py")
        if (relative := path.relative_to(ROOT).as_posix()) not in KEY_MODULES
        and spells_key_names(path.read_text())
    ]
    assert not offenders, offenders
    assert all(spells_key_names((ROOT / module).read_text()) for module in KEY_MODULES)


@pytest.mark.parametrize(
    ("source", "spells"),
    [
        ('KEY = "pw:deadlines"', True),
        ("KEY = 'pw:deadlines'", True),
        ('key = f"pw:{{{chat}}}:meta"', True),
        ('key = b"pw:flow:x"', True),
        ('help = "keys pw:{bench-*} are deleted"', False),
        ("key = chat_keys(chat).meta  # the pw: prefix comes from runner/keys.py", False),
    ],
)
def test_the_key_name_rule_tells_a_key_literal_from_a_mention(source: str, spells: bool) -> None:
    """Control for the rule above: it must catch a key spelled in any quoting, or a
    module outside the two would slip through unnoticed."""
    assert spells_key_names(source) is spells


def test_every_package_is_installed_with_the_distribution() -> None:
    """``[tool.setuptools] packages`` lists packages one by one, so a new subpackage left
    out of it would be missing from an installed Parkway (only a checkout has it)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(("parkway", *init.parent.relative_to(ROOT).parts))
        for top in PACKAGES
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, sorted(found - listed)


@pytest.mark.slow
def test_the_wheel_installs_one_parkway_namespace_and_no_warnings(
    user_install: UserInstall,
) -> None:
    """What `pip install parkway` gets, built as pip builds it (the session's user
    install, tests/helpers/user_install.py): everything under ``parkway/`` (no generic top-level
    ``runner``, ``transport`` or ``bench``), the playground's files included, and a build
    that warns of nothing in our pyproject."""
    # pip echoes the build backend's warnings to stderr; the machine's own pip
    # configuration may add "Location ... is ignored" lines, which are not ours.
    ours = [
        line
        for line in user_install.build_log.splitlines()
        if re.search(r"warn", line, re.IGNORECASE) and "Location" not in line
    ]
    assert not ours, user_install.build_log
    wheel = user_install.wheel
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"parkway", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert "parkway/__init__.py" not in names  # a namespace package
    for expected in (
        "parkway/runner/loop.py",
        "parkway/transport/cli.py",
        "parkway/widgets_api/connect/flow.py",
        "parkway/widgets_api/static/playground.html",
    ):
        assert expected in names, expected
    assert not [name for name in names if "/bench/" in name or "/tests/" in name]
    # The Makefile silences setuptools' editable-install warning that a folder named like
    # the package could shadow it: true only while no such folder exists.
    assert not (ROOT / "parkway").exists()
