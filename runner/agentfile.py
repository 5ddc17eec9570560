"""Agent files: ``{"template": {...}, "model": {"scripted": {"turns": [...]}}}``.

The public format ``parkway serve --agent FILE`` reads: an agent template and the model
that drives it. Only the scripted model is built in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import TemplateError
from runner.model import Model
from runner.scripted import ScriptedModel
from runner.template import AgentTemplate, load_template

__all__ = ["AgentFile", "load_agent_file", "parse_agent_file"]


@dataclass(frozen=True)
class AgentFile:
    template: AgentTemplate
    model: Model


def parse_agent_file(document: Any) -> AgentFile:
    """Validate an agent file document; raise :class:`TemplateError` naming the problem."""
    if not isinstance(document, Mapping):
        raise TemplateError("agent file must be a JSON object with 'template' and 'model'")
    extra = sorted(set(document) - {"template", "model"})
    if extra:
        raise TemplateError(f"agent file: unexpected key(s) {', '.join(extra)}")
    if "template" not in document or "model" not in document:
        raise TemplateError("agent file needs both 'template' and 'model'")
    return AgentFile(
        template=load_template(document["template"]),
        model=ScriptedModel.from_config(document["model"]),
    )


def load_agent_file(path: str | Path) -> AgentFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"cannot read agent file {str(path)!r}: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise TemplateError(f"agent file {str(path)!r} is not valid JSON: {exc}") from None
    return parse_agent_file(document)
