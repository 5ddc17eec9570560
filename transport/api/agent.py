"""The agent as the playground edits it.

``GET /api/agent`` serves the head revision of the agent's template with its recent
revisions and, read-only, ``additional_context.playground_build_kit
.agent_template_overlay``. ``POST /api/agent/commit`` commits a new revision on top of
the version the user read. A chat request may carry the playground's working copy of the
template (``agentTemplate``: the committed one with the build kit laid over it, or the
user's uncommitted edits) for that turn only; it may not bring function tools the
committed agent does not have, because a function tool names server code to import, nor
MCP servers whose stdio command or environment-read headers the committed agent (or the
agent file) does not have: the one runs a program, the other sends a server-side secret.

Editing is a role (docs/security.md, "Agent editors"). The agent is shared by every user
of the server, so only editors commit: the principals the operator names (``editors``),
and requests carrying the operator's ``editor_token`` in ``X-Parkway-Editor-Token``. On a
local playground (the embedded Redis, bound to loopback, no public URL, nobody named)
every session is an editor. Anyone else runs working copies in their own chats only,
and those may not reach further on the server than the committed agent
(:func:`parkway.runner.agent.revisions.check_working_copy`); their build kit leaves out what they
could not use. ``GET /api/agent`` says ``mayCommit``, and ``drift`` when the head differs from
the agent file.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parkway.runner.agent import (
    AgentFile,
    AgentStore,
    AgentTemplate,
    Editors,
    NotAnEditorError,
    RevisionConflictError,
    agent_origin,
    check_function_tools,
    check_mcp_servers,
    check_working_copy,
    load_template,
    parse_agent_file,
)
from parkway.runner.demo import DEMO_AGENT
from parkway.runner.errors import TemplateError
from parkway.transport.api.audit import AgentAudit, page_query, page_response
from parkway.transport.api.requests import EDITOR_TOKEN_HEADER, is_editor, principal_of, read_json
from parkway.transport.errors import HTTPError, invalid_body
from parkway.transport.settings import Settings
from parkway.widgets_api.playground import build_kit_overlay

__all__ = [
    "EDITOR_TOKEN_HEADER",
    "agent_routes",
    "editors_of",
    "is_demo",
    "is_editor",
    "local_playground",
    "seed_origin",
    "separate_approvals",
    "warn_of_drift",
    "working_template",
]


log = logging.getLogger(__name__)


def local_playground(settings: Settings) -> bool:
    """Whether every session may edit the agent: a local playground, which only this
    machine can reach and whose one user is the operator. All of: the embedded Redis,
    bound to a loopback address, no ``public_url`` (which says browsers come from
    elsewhere, e.g. through a proxy), and no editors or editor token named."""
    return settings.local and not settings.editors and settings.editor_token is None


def separate_approvals(settings: Settings) -> bool:
    """Whether ops that run code (execute_code, save_function) are approved by someone
    other than their requester unless their entry allows self-approval: everywhere but
    a local playground, whose one user is the operator, unless ``code_self_approval``
    says otherwise."""
    if settings.code_self_approval is not None:
        return not settings.code_self_approval
    return not local_playground(settings)


def editors_of(settings: Settings) -> Editors:
    """The principals who may commit the agent (and use ``commit_config``): everyone on a
    local playground or when ``editors`` is ``*``, else the ones named."""
    named = frozenset(settings.editors)
    return Editors(everyone=local_playground(settings) or "*" in named, principals=named)


@functools.cache
def _demo_template() -> Mapping[str, Any]:
    return parse_agent_file(DEMO_AGENT).template.raw


def is_demo(template: Mapping[str, Any]) -> bool:
    """Whether ``template`` is the built-in demo agent's (as ``agent_id_for`` tells it)."""
    return template == _demo_template()


def seed_origin(settings: Settings, agent: AgentFile) -> str:
    """Where the server's agent came from, for its seed revision's summary: the agent
    file or Python agent ``--agent`` names, the built-in demo, or an agent given in code
    (``create_app(agent=...)``)."""
    if settings.agent_file is not None:
        return agent_origin(settings.agent_file)
    if is_demo(agent.template.raw):
        return "the built-in demo agent"
    if agent.name is not None:
        return f"the Python agent {agent.name!r}"
    return "the agent given to the server"


async def warn_of_drift(store: AgentStore) -> None:
    """At startup: say when the stored head is not the agent file's template (commits
    made since the file was seeded survive a restart with the same file), naming the
    revision and the top-level keys that differ, and how to go back to the file."""
    drift = await store.drift()
    if drift is not None:
        log.warning(
            "agent %s: the head revision (version %d, %s) differs from %s in %s; "
            "`parkway agent reset` commits its version again",
            store.agent_id,
            drift.version,
            drift.revision_id,
            store.origin,
            ", ".join(drift.keys),
        )


def _build_kit(editor: bool) -> dict[str, Any]:
    """The build kit for this user: whole for an editor; without platform ops and
    sandbox permissions for anyone else, whose working copy may not have them."""
    kit = build_kit_overlay()
    if editor:
        return kit
    kit.pop("sandbox", None)
    kit["tools"] = [t for t in kit.get("tools", []) if t.get("type") != "platform"]
    return kit


class CommitBody(BaseModel):
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
    editor = is_editor(request, principal)
    drift = await store.drift()
    return JSONResponse(
        {
            **head.public(principal),
            "editable": store.editable,
            "mayCommit": editor,
            "drift": drift is not None,
            "driftKeys": [] if drift is None else list(drift.keys),
            "revisions": [
                {k: v for k, v in r.public(principal).items() if k != "template"} for r in revisions
            ],
            "suggestions": list(getattr(request.app.state, "suggestions", ())),
            "additional_context": {
                "playground_build_kit": {
                    "agent_template_overlay": _build_kit(editor),
                    # On for the built-in demo, which shows what the kit does; off for
                    # the user's own agent, whose turns then offer the model what the
                    # deployed agent has, no more.
                    "on_by_default": is_demo(store.seed),
                }
            },
        }
    )


async def commit_agent(request: Request) -> Response:
    principal = principal_of(request)
    store = _agents(request)
    if store.editable and not is_editor(request, principal):  # 403 not_an_editor
        raise NotAnEditorError(
            "only the agent's editors may commit it; your edits can still run as a "
            "working copy in your own chats"
        )
    try:
        body = CommitBody.model_validate(await read_json(request))
    except ValidationError as exc:
        raise invalid_body(exc) from None
    try:
        revision = await store.commit(
            body.template,
            expected_version=body.expectedVersion,
            by=f"user:{principal}",
            summary=body.summary or "edited in the playground",
            editor=True,
        )
    except RevisionConflictError as exc:
        raise HTTPError(409, exc.code, str(exc), currentVersion=exc.current) from None
    return JSONResponse(
        {k: v for k, v in revision.public(principal).items() if k != "template"},
        status_code=201,
    )


async def get_agent_audit(request: Request) -> Response:
    """Who committed which revision, when: for the agent's editors only (403 for anyone
    else, as for committing)."""
    principal = principal_of(request)
    store = _agents(request)
    if not is_editor(request, principal):
        raise NotAnEditorError("only the agent's editors may read its audit trail")
    page = await store.audit(**page_query(request))
    return page_response(AgentAudit(entries=page.entries, before=page.before, after=page.after))


def working_template(
    document: Any,
    committed: AgentTemplate,
    *,
    editor: bool = False,
    seed: Mapping[str, Any] | None = None,
) -> AgentTemplate:
    """Validate a template the playground sends for one turn: any function tool in it
    must be one the committed agent (or the agent file, ``seed``) has, with the same ref
    and approval policy, and so must any MCP server's stdio command or headers read from
    the environment; for someone who is not an ``editor``, it also may not reach
    further on the server than the committed agent (platform ops, model, MCP servers,
    sandbox). Raises :class:`HTTPError` (422) or :class:`NotAnEditorError` (403)."""
    if not isinstance(document, dict):
        raise HTTPError(422, "invalid_template", "agentTemplate must be a JSON object")
    try:
        trusted = [committed.raw, *([] if seed is None else [seed])]
        check_function_tools(document, *trusted)
        check_mcp_servers(document, *trusted)
        if not editor:
            check_working_copy(document, committed.raw)
        return load_template(document)
    except TemplateError as exc:
        raise HTTPError(422, "invalid_template", str(exc)) from None


def agent_routes() -> list[Route]:
    return [
        Route("/api/agent", get_agent, methods=["GET"]),
        Route("/api/agent/commit", commit_agent, methods=["POST"]),
        Route("/api/agent/audit", get_agent_audit, methods=["GET"]),
    ]
