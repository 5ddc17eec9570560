"""Code Mode over HTTP: the sandbox built from settings, artifacts and the agent library.

- ``GET /api/chats/{chat_id}/artifacts``: the chat's artifacts (owner only);
- ``GET /api/chats/{chat_id}/artifacts/{artifact_id}``: one artifact's bytes, as a
  download (owner only; another principal's chat reads as missing);
- ``GET /api/chats/{chat_id}/calls/{call_id}/artifacts`` and ``.../{artifact_id}``: the
  artifacts an ``execute_code`` call mounts, for whoever may read the call (its chat's
  owner, or an approver it is left to), and nothing else of the chat;
- ``GET /api/agent/library`` and ``GET /api/agent/library/{name}``: the agent's saved
  functions, and every version of one (any session, as ``GET /api/agent``);
- ``GET /api/sandbox``: whether this server can run code, and how (any session): the
  playground's code panel shows it. Not on ``/healthz``, which anyone may read
  (transport/api/health.py).

:func:`code_mode_from` turns the ``sandbox*`` settings into the runtime's
:class:`~parkway.runner.codemode.runtime.CodeMode` (docs/code-mode.md, "Providers").
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parkway.runner.codemode import FUNCTION_NAME, CodeMode, FunctionLibrary
from parkway.runner.sandbox import BwrapProvider, Limits, SandboxProvider, UnconfinedProvider
from parkway.runner.store import Artifact, check_call_id
from parkway.transport.api.requests import chat_id_of, principal_of, roles_of, runner_of
from parkway.transport.errors import HTTPError
from parkway.transport.settings import Settings

__all__ = ["code_mode_from", "code_routes"]

_EXTENSIONS = {"application/json": "json"}


def code_mode_from(settings: Settings) -> CodeMode:
    """The sandbox the settings ask for; it is probed by ``CodeMode.start``."""
    provider: SandboxProvider | None = None
    if settings.sandbox == "bwrap":
        provider = BwrapProvider(
            bwrap=settings.sandbox_bwrap,
            python=settings.sandbox_python,
            sandbox_uid=settings.sandbox_uid,
            cgroup=settings.sandbox_cgroup,
        )
    elif settings.sandbox == "unconfined":
        provider = UnconfinedProvider(python=settings.sandbox_python)
    limits = Limits(
        wall_s=settings.sandbox_timeout_s,
        memory_bytes=settings.sandbox_memory_mb * 2**20,
        total_memory_bytes=settings.sandbox_total_memory_mb * 2**20,
        processes=settings.sandbox_processes,
    )
    return CodeMode(
        provider,
        limits=limits,
        allow_raise=settings.sandbox_allow_raise,
        concurrency=settings.sandbox_concurrency,
    )


async def list_artifacts(request: Request) -> Response:
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    found = await runner_of(request).artifacts.list_for_owner(chat_id, principal)
    return JSONResponse({"artifacts": [a.as_dict() for a in found]})


async def get_artifact(request: Request) -> Response:
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    artifact_id = str(request.path_params["artifact_id"])
    artifact, data = await runner_of(request).artifacts.for_owner(chat_id, principal, artifact_id)
    return _download(artifact, data)


def _call_id(request: Request) -> str:
    return check_call_id(str(request.path_params["call_id"]))


async def list_call_inputs(request: Request) -> Response:
    """The artifacts a call mounts: what its reviewer needs to read, nothing more."""
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    found = await runner_of(request).call_inputs(
        chat_id, principal, _call_id(request), roles=roles_of(request)
    )
    return JSONResponse({"artifacts": [a.as_dict() for a in found]})


async def get_call_input(request: Request) -> Response:
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    artifact_id = str(request.path_params["artifact_id"])
    artifact, data = await runner_of(request).call_input(
        chat_id, principal, _call_id(request), artifact_id, roles=roles_of(request)
    )
    return _download(artifact, data)


def _download(artifact: Artifact, data: bytes) -> Response:
    artifact_id = artifact.artifact_id
    extension = _EXTENSIONS.get(artifact.media_type, "txt")
    return Response(
        data,
        media_type=artifact.media_type,
        headers={
            "Content-Disposition": f'attachment; filename="{artifact_id}.{extension}"',
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, no-store",
        },
    )


def _library(request: Request) -> FunctionLibrary:
    agents = getattr(request.app.state, "agents", None)
    if agents is None:
        raise HTTPError(404, "not_found", "this server keeps no agent library")
    return FunctionLibrary.of(agents)


async def list_library(request: Request) -> Response:
    principal_of(request)
    heads = await _library(request).heads()
    return JSONResponse({"functions": [f.summary() for f in heads]})


async def get_library_function(request: Request) -> Response:
    principal_of(request)
    name = str(request.path_params["name"])
    if not FUNCTION_NAME.match(name):
        raise HTTPError(404, "function_not_found", "the library has no such function")
    versions = await _library(request).versions(name)
    if not versions:
        raise HTTPError(404, "function_not_found", "the library has no such function")
    return JSONResponse(
        {
            "name": name,
            "versions": [
                {
                    "version": v.version,
                    "code": v.code,
                    "description": v.description,
                    "by": v.by,
                    "at": v.at,
                }
                for v in versions
            ],
        }
    )


async def sandbox_status(request: Request) -> Response:
    """Code mode's status as probed at startup: the provider, whether it is available and
    confined, its isolation layers, why not, the server's limits. The isolation's
    ``detail`` (the sandbox's versions and paths on the host) stays in the server."""
    principal_of(request)
    code: CodeMode | None = getattr(request.app.state, "code", None)
    # (None only before the lifespan's start, which every request waits for)
    status = CodeMode(None).status() if code is None else code.status()
    isolation = status.get("isolation")
    if isinstance(isolation, dict):
        status["isolation"] = {k: v for k, v in isolation.items() if k != "detail"}
    return JSONResponse(status, headers={"cache-control": "no-store"})


def code_routes() -> list[Route]:
    return [
        Route("/api/sandbox", sandbox_status, methods=["GET"]),
        Route("/api/chats/{chat_id}/artifacts", list_artifacts, methods=["GET"]),
        Route("/api/chats/{chat_id}/artifacts/{artifact_id}", get_artifact, methods=["GET"]),
        Route("/api/chats/{chat_id}/calls/{call_id}/artifacts", list_call_inputs, methods=["GET"]),
        Route(
            "/api/chats/{chat_id}/calls/{call_id}/artifacts/{artifact_id}",
            get_call_input,
            methods=["GET"],
        ),
        Route("/api/agent/library", list_library, methods=["GET"]),
        Route("/api/agent/library/{name}", get_library_function, methods=["GET"]),
    ]
