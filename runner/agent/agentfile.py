"""Agent files: ``{"template": {...}, "model": ..., "suggestions": [...]}``.

The public format ``parkway serve --agent FILE`` reads: an agent template and the model
that drives it: ``{"scripted": {"turns": [...]}}``, a name ``"anthropic:claude-sonnet-4-6"``
or ``{"name": ..., "settings": {...}}`` (see :mod:`parkway.runner.llm.spec`). ``model`` may be left
out when the template names its model in ``llm``. Which model a run uses: ``parkway serve
--model`` if given, else the template's ``llm``, else the agent file's ``model``.
``suggestions`` (optional): a few first messages a person might send, which the
playground offers in an empty chat.

An agent defined in Python (:class:`parkway.runner.agent.agent.Agent`) is named by
``module:attribute`` where an agent file's path would go (:mod:`~parkway.runner.agent.reference`);
it compiles to the same :class:`AgentFile`.
"""

from __future__ import annotations

import json
import os
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
