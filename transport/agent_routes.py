"""The agent as the playground edits it (DESIGN §8, §10).

``GET /api/agent`` serves the head revision of the agent's template with its recent
revisions and, read-only, ``additional_context.playground_build_kit
.agent_template_overlay``. ``POST /api/agent/commit`` commits a new revision on top of
the version the user read. A chat request may carry the playground's working copy of the
template (``agentTemplate``: the committed one with the build kit laid over it, or the
user's uncommitted edits) for that turn only; it may not bring function tools the
committed agent does not have, because a function tool names server code to import.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runner.agents import AgentStore, RevisionConflictError, check_function_tools
from runner.errors import TemplateError
from runner.template import AgentTemplate, load_template
from transport.errors import HTTPError
from transport.requests import invalid_body, principal_of, read_json
from widgets_api.overlay import build_kit_overlay

__all__ = ["agent_routes", "working_template"]


class _CommitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    template: dict[str, Any]
    expectedVersion: int = Field(ge=1)
    summary: str = Field(default="", max_length=500)


def _agents(request: Request) -> AgentStore:
    store: AgentStore | None = getattr(request.app.state, "agents", None)
    if store is None:
        raise HTTPError(404, "not_found", "this server keeps no agent revisions")
    return store


async def get_agent(request: Request) -> Response:
    principal = principal_of(request)
    store = _agents(request)
    revisions = await store.history(limit=20)
    head = revisions[0]
    return JSONResponse(
        {
            **head.public(principal),
            "editable": store.editable,
            "revisions": [
                {k: v for k, v in r.public(principal).items() if k != "template"} for r in revisions
            ],
            "additional_context": {
                "playground_build_kit": {"agent_template_overlay": build_kit_overlay()}
            },
        }
    )


async def commit_agent(request: Request) -> Response:
    principal = principal_of(request)
    try:
        body = _CommitBody.model_validate(await read_json(request))
    except ValidationError as exc:
        raise invalid_body(exc) from None
    store = _agents(request)
    try:
        revision = await store.commit(
            body.template,
            expected_version=body.expectedVersion,
            by=f"user:{principal}",
            summary=body.summary or "edited in the playground",
        )
    except RevisionConflictError as exc:
        raise HTTPError(409, exc.code, str(exc), currentVersion=exc.current) from None
    return JSONResponse(
        {k: v for k, v in revision.public(principal).items() if k != "template"},
        status_code=201,
    )


def working_template(document: Any, committed: AgentTemplate) -> AgentTemplate:
    """Validate a template the playground sends: any function tool in it must be one the
    committed agent has (same name and ref). Raises :class:`HTTPError` (422)."""
    if not isinstance(document, dict):
        raise HTTPError(422, "invalid_template", "agentTemplate must be a JSON object")
    try:
        check_function_tools(document, committed.raw)
        return load_template(document)
    except TemplateError as exc:
        raise HTTPError(422, "invalid_template", str(exc)) from None


def agent_routes() -> list[Route]:
    return [
        Route("/api/agent", get_agent, methods=["GET"]),
        Route("/api/agent/commit", commit_agent, methods=["POST"]),
    ]
