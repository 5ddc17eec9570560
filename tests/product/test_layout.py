"""The package layout's rules: one-way imports and explicit public surfaces."""

from __future__ import annotations
import __future__

import ast
import importlib
import inspect
import re
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.user_install import UserInstall

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["runner", "transport", "widgets_api"]

# Each top package's units, lowest first: a unit is a subpackage (its face is what others
# import) or a module at the package's root. A unit imports only units of its own layer
# or lower, and (test_no_import_circle) no two modules import each other, even through
# others. docs/architecture.md draws the same layers.
LAYERS: dict[str, list[set[str]]] = {
    "runner": [
        {"errors", "validation", "canonical", "parking", "outcomes", "events"},
        {"sandbox"},
        {"llm"},
        {"ops"},
        {"store"},
        {"eventlog"},
        {"agent"},
        {"mcp"},
        {"codemode"},
        {"engine"},
        {"demo", "runtime"},
    ],
    "widgets_api": [
        {"keys", "highlight", "answers"},
        {"demo_provider"},
        {"descriptors"},
        {"connect"},
        {"playground"},
        {"routes"},
    ],
    "transport": [
        {"errors", "settings", "sse", "logs", "lifecycle", "serving", "tracing"},
        {"aisdk"},
        {"agui"},
        {"auth"},
        {"api"},
        {"openapi"},
        {"cassettes"},
        {"edge", "startup"},
        {"app"},
        {"cli", "cli_agent", "pytest_plugin"},
    ],
}
# ... and between the top packages: runner, then widgets_api, then transport.
TOP_ORDER = ["runner", "widgets_api", "transport"]


@dataclass(frozen=True)
class Arrow:
    """One import: the importing module, the imported one (full ``parkway.`` names)."""

    source: str
    target: str
    file: str
    line: int


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["parkway", *parts])


def is_package(module: str) -> bool:
    return ROOT.joinpath(*module.split(".")[1:], "__init__.py").is_file()


def is_module(module: str) -> bool:
    return is_package(module) or ROOT.joinpath(*module.split(".")[1:]).with_suffix(".py").is_file()


def arrows_of(folders: list[str]) -> list[Arrow]:
    """Every absolute import of a Parkway module in the folders' Python files, type-only
    imports included (a cycle of annotations is still a cycle of design). ``from X import
    y, z`` is an arrow to ``X.y`` and ``X.z`` when both are modules, else to ``X`` too."""
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            source = module_of(path) if folder in PACKAGES else path.relative_to(ROOT).as_posix()
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                targets: list[str] = []
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [f"{node.module}.{alias.name}" for alias in node.names]
                    modules = [name for name in names if is_module(name)]
                    targets = modules if len(modules) == len(names) else [node.module, *modules]
                found += [
                    Arrow(source, target, rel, node.lineno)
                    for target in targets
                    if target.startswith("parkway.")
                ]
    return found


def unit_of(module: str) -> tuple[str, str]:
    """(top package, unit) of a Parkway module: ``parkway.runner.store.chats`` is in
    runner's unit ``store``, ``parkway.runner.errors`` is its own unit ``errors``; a top
    package's own face is the unit ``""``."""
    parts = module.split(".")[1:]
    return parts[0], parts[1] if len(parts) > 1 else ""


def layer_of(top: str, unit: str) -> int:
    for index, units in enumerate(LAYERS[top]):
        if unit in units:
            return index
    raise AssertionError(f"{top}/{unit} is in no layer of LAYERS: place it")


def test_every_unit_has_a_layer() -> None:
    """A new folder or root module must be placed in LAYERS (or the rules below would
    not see it)."""
    for top in PACKAGES:
        for path in (ROOT / top).iterdir():
            name = path.stem
            if (path.is_dir() and (path / "__init__.py").is_file()) or (
                path.suffix == ".py" and name != "__init__"
            ):
                layer_of(top, name)


def test_imports_go_down_the_layers() -> None:
    """No arrow from a lower layer to a higher one: runner knows nothing of HTTP or wire
    protocols, widgets_api nothing of transport; inside each, the store never imports the
    engine, ops no model implementation, and so on (LAYERS)."""
    bad = []
    for arrow in arrows_of(PACKAGES):
        (src_top, src_unit), (dst_top, dst_unit) = unit_of(arrow.source), unit_of(arrow.target)
        if src_unit == "":
            continue  # a top package's face re-exports from anywhere below it
        if src_top != dst_top:
            if TOP_ORDER.index(dst_top) > TOP_ORDER.index(src_top):
                bad.append(arrow)
            continue
        if dst_unit != "" and layer_of(dst_top, dst_unit) > layer_of(src_top, src_unit):
            bad.append(arrow)
        if dst_unit == "":
            bad.append(arrow)  # nothing inside a package imports its own top face
    assert not bad, "\n".join(f"{a.file}:{a.line}: {a.source} -> {a.target}" for a in bad)


def test_runner_imports_no_web_framework() -> None:
    """The runner is free of HTTP and wire details: no Starlette, SSE or server."""
    bad = []
    for path in (ROOT / "runner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            bad += [
                (path.name, name)
                for name in names
                if name.split(".")[0] in {"starlette", "sse_starlette", "uvicorn", "fastapi"}
            ]
    assert not bad, bad


def import_cycles(arrows: list[Arrow]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for arrow in arrows:
        if arrow.target != arrow.source:
            graph[arrow.source].add(arrow.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle() -> None:
    """No module imports itself through others, type-only imports included."""
    assert import_cycles(arrows_of(PACKAGES)) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """Control for the rule above: a three-module circle and a two-module one are found,
    a chain is not."""
    arrows = [
        Arrow(a, b, "x.py", 1)
        for a, b in [("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "d"), ("f", "g")]
    ]
    assert sorted(import_cycles(arrows)) == [["a", "b", "c"], ["d", "e"]]


def test_private_modules_stay_in_their_package() -> None:
    """Underscore means private: nothing outside a package imports its ``_parts``, not
    Parkway's other packages, nor the benchmarks, nor the tests, except a package's own
    white-box tests in a test folder named after it (``tests/.../sandbox/``)."""
    bad = []
    for arrow in arrows_of([*PACKAGES, "tests", "bench"]):
        parts = arrow.target.split(".")
        for depth, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                owner = ".".join(parts[:depth])
                inside = arrow.source == owner or arrow.source.startswith(owner + ".")
                # a package's white-box tests, in a test folder named after it
                own_tests = arrow.file.startswith("tests/") and (
                    parts[depth - 1] in Path(arrow.file).parent.parts
                )
                if not inside and not own_tests:
                    bad.append(arrow)
                break
    assert not bad, "\n".join(f"{a.file}:{a.line}: {a.target}" for a in bad)


def test_other_packages_import_a_subpackage_through_its_face() -> None:
    """Across units, Parkway imports a subpackage's face (``parkway.runner.store``),
    never one of its modules (``parkway.runner.store.chats``): the face's ``__all__`` is
    the subpackage's whole surface. A face may export a module as a namespace by naming it
    in ``__all__`` (``parkway.runner.ops.logcontext``, ``parkway.transport.aisdk.chunks``)."""
    bad = []
    for arrow in arrows_of(PACKAGES):
        parts = arrow.target.split(".")
        if len(parts) <= 3 or not is_package(".".join(parts[:3])):
            continue
        face = ".".join(parts[:3])
        inside = arrow.source == face or arrow.source.startswith(face + ".")
        if not inside and not (len(parts) == 4 and parts[3] in declared_names(face)):
            bad.append(arrow)
    assert not bad, "\n".join(f"{a.file}:{a.line}: {a.source} -> {a.target}" for a in bad)


def declared_names(face: str) -> set[str]:
    """The names a face's ``__all__`` lists, read from its source."""
    tree = ast.parse(ROOT.joinpath(*face.split(".")[1:], "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__":
            return {element.value for element in node.value.elts}  # type: ignore[attr-defined]
    return set()


def faces() -> list[str]:
    return sorted(
        module_of(init)
        for top in PACKAGES
        for init in (ROOT / top).rglob("__init__.py")
        if "guest" not in init.parts
    )


@pytest.mark.parametrize("package", faces())
def test_each_face_declares_exactly_its_public_names(package: str) -> None:
    """Every package's ``__all__`` names exactly the public names its face binds (as
    httpx checks its own): nothing missing, nothing stale, and no stray helper a reader
    would take for part of the surface."""
    module = importlib.import_module(package)
    declared = list(module.__all__)
    for name in declared:  # a lazy face (parkway.transport) binds a name on first use
        getattr(module, name, None)
    namespaces = {name for name in declared if inspect.ismodule(getattr(module, name, None))}
    public = namespaces | {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and not isinstance(value, __future__._Feature)
    }
    assert len(declared) == len(set(declared)), f"{package}.__all__ repeats a name"
    assert set(declared) == public, (
        f"{package}: missing from __all__ {sorted(public - set(declared))}, "
        f"named but not bound {sorted(set(declared) - public)}"
    )


# The modules that may spell Redis key names: the runner's keys and widgets_api's own.
KEY_MODULES = ("runner/store/keys.py", "widgets_api/keys.py")
# A string literal of any kind (plain, f-, b-, r-) that starts with Parkway's key prefix.
_KEY_LITERAL = re.compile(r"""["']pw:""")


def spells_key_names(source: str) -> bool:
    return _KEY_LITERAL.search(source) is not None


def test_redis_key_names_come_from_the_two_key_modules() -> None:
    """Only runner/store/keys.py and widgets_api/keys.py spell Redis key prefixes, so every key
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
        ("key = chat_keys(chat).meta  # the pw: prefix comes from runner/store/keys.py", False),
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
        "parkway/runner/engine/runner.py",
        "parkway/transport/cli.py",
        "parkway/widgets_api/connect/flow.py",
        "parkway/widgets_api/playground/static/playground.html",
        # PEP 561: downstream type checkers read Parkway's annotations
        "parkway/runner/py.typed",
        "parkway/transport/py.typed",
        "parkway/widgets_api/py.typed",
    ):
        assert expected in names, expected
    assert not [name for name in names if "/bench/" in name or "/tests/" in name]
    # The Makefile silences setuptools' editable-install warning that a folder named like
    # the package could shadow it: true only while no such folder exists.
    assert not (ROOT / "parkway").exists()
