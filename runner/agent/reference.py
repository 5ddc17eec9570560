"""Where an agent is named: an agent file's path, or ``module:attribute`` naming an
:class:`~parkway.runner.agent.agent.Agent` defined in Python; loading it, and saying
plainly what is wrong when it cannot be loaded.

Three mistakes a new user makes, each told apart: a Python file given as a path
(``trips.py``: the message names ``trips:agent``, the Agents the module defines); a
module that is not found (run from the project's root folder); and a module found whose
own import fails (a missing third-party package, a syntax error), which is reported as
that error, with its file and line, since the folder is not what is wrong.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from parkway.runner.agent.agent import Agent
from parkway.runner.agent.agentfile import AgentFile, load_agent_file, make_importable
from parkway.runner.errors import TemplateError

__all__ = ["agent_origin", "is_agent_ref", "load_agent", "resolve_agent_ref"]

# ``package.module:attribute``: an agent defined in Python, where a path would name a file.
_AGENT_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*$")


def is_agent_ref(target: str | Path) -> bool:
    """Whether ``target`` names an agent in Python (``module:attribute``) rather than an
    agent file: a path ending in ``.json``, or with a folder in it, is a file."""
    text = str(target)
    return not text.endswith(".json") and _AGENT_REF.match(text) is not None


def agent_origin(target: str | Path) -> str:
    """Where the agent ``target`` names comes from, in words for its revisions'
    summaries (``from {origin}``): the Python agent ``trips:agent``, or the agent file
    ``trips.json``."""
    if is_agent_ref(target):
        return f"the Python agent {target}"
    return f"the agent file {Path(target).name}"


def load_agent(target: str | Path) -> AgentFile:
    """The agent ``target`` names: an agent file's path (:func:`load_agent_file`), or
    ``module:attribute`` naming an :class:`Agent` (or an :class:`AgentFile`), imported
    with the working directory (the project root) importable as for agent files' refs."""
    if not is_agent_ref(target) and not str(target).endswith(".py"):
        return load_agent_file(target)
    found = resolve_agent_ref(str(target))  # a .py path: what to write instead
    if isinstance(found, AgentFile):
        return found
    if not isinstance(found, Agent):
        raise TemplateError(
            f"agent {str(target)!r} is a {type(found).__name__}, not a parkway Agent "
            "(Agent(...) from parkway.runner)"
        )
    return found.agent_file()


def resolve_agent_ref(target: str) -> object:
    """The object ``module:attribute`` names, imported with the working directory
    importable. Raises :class:`TemplateError` saying which of the three went wrong: the
    module is not found, its own import failed (that error, where it happened), or it
    has no such attribute (and the Agents it does have). A Python file's path gets the
    ``module:attribute`` to use instead."""
    if target.endswith(".py"):
        raise TemplateError(_python_file_hint(Path(target)))
    module_name, _, attribute = target.partition(":")
    try:
        module = _import(module_name)
    except _ImportProblem as exc:
        raise TemplateError(f"agent {target!r}: {exc}") from exc.__cause__
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            agents = _agents_in(module)
            hint = f"; its agents: {', '.join(agents)}" if agents else ""
            raise TemplateError(f"agent {target!r}: {module_name!r} has no {attribute!r}{hint}")
        found = getattr(found, part)
    return found


class _ImportProblem(Exception):
    """Why a module could not be imported, in words (the caller names the agent)."""


def _import(module_name: str) -> Any:
    make_importable(None)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise _ImportProblem(  # the module itself (or its package) is not there
                f"module {module_name!r} cannot be imported ({exc}); run from the project's "
                "root folder, or install the project"
            ) from None
        raise _ImportProblem(  # found, but something it imports is missing
            f"importing {module_name!r} failed{_where(exc)}: {type(exc).__name__}: {exc}; "
            f"install it where parkway runs ({sys.prefix})"
        ) from None
    except SyntaxError as exc:
        raise _ImportProblem(f"importing {module_name!r} failed: {_syntax(exc)}") from None
    except Exception as exc:  # the user's own module failed: say how, in one line
        raise _ImportProblem(
            f"importing {module_name!r} failed{_where(exc)}: {type(exc).__name__}: {exc}"
        ) from exc


def _where(exc: BaseException) -> str:
    """`` at trips/agent.py, line 3``: the innermost frame of the user's code (not the
    import machinery's) in the error's traceback, or nothing."""
    machinery = str(Path(importlib.__file__).parent)
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(("<frozen ", machinery))
    ]
    if not frames:
        return ""
    return f" at {_shown(frames[-1].filename)}, line {frames[-1].lineno}"


def _syntax(exc: SyntaxError) -> str:
    where = f"{_shown(exc.filename)}, line {exc.lineno}" if exc.filename else "its source"
    return f"{type(exc).__name__} at {where}: {exc.msg}"


def _shown(filename: str) -> str:
    """A file name as the user knows it: relative to the working directory when inside."""
    try:
        inside = Path(filename).resolve().is_relative_to(Path.cwd().resolve())
    except (OSError, ValueError):
        return filename
    return os.path.relpath(filename) if inside else filename


def _agents_in(module: Any) -> list[str]:
    """``module:attribute`` for each Agent (or AgentFile) the module defines at its top
    level."""
    return [
        f"{module.__name__}:{name}"
        for name, value in vars(module).items()
        if not name.startswith("_") and isinstance(value, Agent | AgentFile)
    ]


def _python_file_hint(path: Path) -> str:
    """What to say for ``--agent trips.py``: an agent in Python is named by module and
    attribute. The module is imported to name the Agents it defines (it is the code the
    user asked to run); when it cannot be, the message says how to name one all the same."""
    module_name = _module_of(path)
    said = f"agent {str(path)!r} is a Python file: name the Agent in it as module:attribute"
    example = f"(e.g. {module_name or path.stem}:agent)"
    if not path.is_file():
        return f"{said} {example}; and there is no such file"
    if module_name is None:
        return f"{said} {example}, from the folder that holds it (the project's root)"
    try:
        agents = _agents_in(_import(module_name))
    except _ImportProblem as exc:
        return f"{said} {example}; {exc}"
    if not agents:
        return f"{said} {example}; {module_name!r} defines no Agent at its top level"
    return f"agent {str(path)!r} is a Python file: name its Agent as {' or '.join(agents)}"


def _module_of(path: Path) -> str | None:
    """The dotted module name of ``path`` seen from the working directory (the project
    root), or None for a file outside it or with a name no module can have."""
    try:
        relative = path.resolve().relative_to(Path.cwd().resolve())
    except (OSError, ValueError):
        return None
    parts = [*relative.parent.parts, relative.stem]
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(_MODULE_PATH.match(part) for part in parts):
        return None
    return ".".join(parts)
