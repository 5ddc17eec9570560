"""Agent files: ``{"template": {...}, "model": ..., "suggestions": [...]}``.

The public format ``parkway serve --agent FILE`` reads: an agent template and the model
that drives it: ``{"scripted": {"turns": [...]}}``, a name ``"anthropic:claude-sonnet-4-6"``
or ``{"name": ..., "settings": {...}}`` (see :mod:`parkway.runner.llm.spec`). ``model`` may be left
out when the template names its model in ``llm``. Which model a run uses: ``parkway serve
--model`` if given, else the template's ``llm``, else the agent file's ``model``.
``suggestions`` (optional): a few first messages a person might send, which the
playground offers in an empty chat.

An agent defined in Python (:class:`parkway.runner.agent.agent.Agent`) is named by
``module:attribute`` where an agent file's path would go (:func:`load_agent`); it
compiles to the same :class:`AgentFile`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parkway.runner.agent.template import AgentTemplate, load_template
from parkway.runner.errors import TemplateError
from parkway.runner.llm import Model, ModelSpec, build_model, parse_model_spec

__all__ = [
    "AgentFile",
    "is_agent_ref",
    "load_agent",
    "load_agent_file",
    "make_importable",
    "model_of",
    "parse_agent_file",
]


@dataclass(frozen=True)
class AgentFile:
    """A template and its model. ``model`` is the scripted model when the file has one;
    ``spec`` names a provider model (built by :class:`parkway.runner.llm.ModelCatalog` once the
    server knows its environment). With neither, the template's ``llm`` decides.
    ``name`` is an agent defined in Python's name (its revisions' id when served)."""

    template: AgentTemplate
    model: Model | None = None
    spec: ModelSpec | None = None
    suggestions: tuple[str, ...] = ()
    name: str | None = None


MAX_SUGGESTIONS = 5
MAX_SUGGESTION_CHARS = 200


def _suggestions(value: Any) -> tuple[str, ...]:
    """The agent file's ``suggestions``: up to 5 non-empty strings of at most 200
    characters (they are shown as buttons and sent as the user's message)."""
    if (
        not isinstance(value, list)
        or len(value) > MAX_SUGGESTIONS
        or not all(
            isinstance(s, str) and s.strip() and len(s) <= MAX_SUGGESTION_CHARS for s in value
        )
    ):
        raise TemplateError(
            f"agent file: 'suggestions' must be a list of at most {MAX_SUGGESTIONS} non-empty "
            f"strings of at most {MAX_SUGGESTION_CHARS} characters, for example "
            '["What can you do?"]'
        )
    return tuple(s.strip() for s in value)


def parse_agent_file(document: Any) -> AgentFile:
    """Validate an agent file document; raise :class:`TemplateError` naming the problem."""
    if not isinstance(document, Mapping):
        raise TemplateError("agent file must be a JSON object with 'template' and 'model'")
    extra = sorted(set(document) - {"template", "model", "suggestions"})
    if extra:
        raise TemplateError(f"agent file: unexpected key(s) {', '.join(extra)}")
    if "template" not in document:
        raise TemplateError("agent file needs a 'template'")
    template = load_template(document["template"])
    suggestions = _suggestions(document["suggestions"]) if "suggestions" in document else ()
    if "model" not in document:
        if template.llm is None:
            raise TemplateError(
                "agent file needs a 'model' (or the template an 'llm'), for example "
                "\"anthropic:claude-sonnet-4-6\" or {'scripted': {'turns': [...]}}"
            )
        return AgentFile(template=template, suggestions=suggestions)
    model, spec = model_of(document["model"])
    return AgentFile(template=template, model=model, spec=spec, suggestions=suggestions)


def model_of(value: Any, where: str = "model") -> tuple[Model | None, ModelSpec | None]:
    """An agent file's ``model`` as (the model, when it needs no environment: the
    scripted one; else None) and (its spec, for a provider model; else None)."""
    spec = parse_model_spec(value, where)
    if spec.provider == "scripted":  # needs no environment: built now
        return build_model(spec, {}), None
    return None, spec


def load_agent_file(path: str | Path) -> AgentFile:
    """Read and validate the agent file at ``path``.

    Its folder goes first on ``sys.path`` (once), as a script's folder does for
    ``python script.py``: a function tool's ``ref`` imports a module kept next to the
    agent file, or in the working directory, without setting ``PYTHONPATH``. A module
    next to the agent file also shadows an installed one of the same name, so that
    folder holds trusted code only.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"cannot read agent file {str(path)!r}: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise TemplateError(f"agent file {str(path)!r} is not valid JSON: {exc}") from None
    make_importable(Path(path).resolve().parent)
    return parse_agent_file(document)


def make_importable(agent_folder: Path | None) -> None:
    """Let a function tool's ``ref`` import the user's own modules: ``agent_folder``
    first on ``sys.path`` (once), and the working directory (the project root, as
    ``python -m`` and pytest have it) last, so a file there never shadows an installed
    package. :func:`load_agent_file` calls it; replays call it for a cassette's copy."""
    if agent_folder is not None and str(agent_folder) not in sys.path:
        sys.path.insert(0, str(agent_folder))
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


# ``package.module:attribute``: an agent defined in Python, where a path would name a file.
_AGENT_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_agent_ref(target: str | Path) -> bool:
    """Whether ``target`` names an agent in Python (``module:attribute``) rather than an
    agent file: a path ending in ``.json``, or with a folder in it, is a file."""
    text = str(target)
    return not text.endswith(".json") and _AGENT_REF.match(text) is not None


def load_agent(target: str | Path) -> AgentFile:
    """The agent ``target`` names: an agent file's path (:func:`load_agent_file`), or
    ``module:attribute`` naming an :class:`~parkway.runner.agent.agent.Agent` (or an
    :class:`AgentFile`), imported with the working directory (the project root)
    importable as for agent files' refs."""
    if not is_agent_ref(target):
        return load_agent_file(target)
    module_name, _, attribute = str(target).partition(":")
    make_importable(None)
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise TemplateError(
            f"agent {str(target)!r}: module {module_name!r} cannot be imported ({exc}); run "
            "from the project's root folder, or install the project"
        ) from None
    except Exception as exc:  # the operator's own module failed: say how, in one line
        raise TemplateError(
            f"agent {str(target)!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise TemplateError(f"agent {str(target)!r}: {module_name!r} has no {attribute!r}")
        found = getattr(found, part)
    if isinstance(found, AgentFile):
        return found
    compile_agent = getattr(found, "agent_file", None)
    if not callable(compile_agent):
        raise TemplateError(
            f"agent {str(target)!r} is a {type(found).__name__}, not a parkway Agent "
            "(Agent(...) from parkway.runner)"
        )
    agent_file = compile_agent()
    if not isinstance(agent_file, AgentFile):
        raise TemplateError(f"agent {str(target)!r}: agent_file() did not return an AgentFile")
    return agent_file
