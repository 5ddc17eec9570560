"""Liveness and readiness: ``GET /healthz`` and ``GET /readyz``.

- ``/healthz`` (liveness) answers ``200 {"status": "ok"}`` whenever the process serves
  requests, and says nothing else. It touches nothing outside the process, so an
  orchestrator never restarts a worker because Redis is away: a restart would not bring
  Redis back, and the worker recovers by itself.
- ``/readyz`` (readiness) answers 200 when this worker can do its work, 503 otherwise,
  naming each check, so a load balancer sends traffic elsewhere meanwhile.

Both answer anyone (probes carry no credentials), so neither names a version (Parkway's,
Python's, bubblewrap's), a path on the host, or a limit: what an attacker would look up
first. An operator reads the details in the server's log (the sandbox's reason is logged
at startup, an unparsable OAuth setting when ``/readyz`` meets it); a signed-in client
reads the sandbox's status at ``GET /api/sandbox`` (transport/api/code.py).

The checks of ``/readyz``:

- ``redis``: a ``PING`` answered within :data:`READYZ_REDIS_TIMEOUT_S`;
- ``sandbox``: code mode's status as probed at startup. An unavailable sandbox fails
  readiness only when it is *required*: the agent's head revision has the
  ``execute_code`` op and the operator asked for a sandbox (setting ``sandbox`` is not
  ``off``). Then every worker like this one would answer every code call
  ``unavailable``, which is a broken deployment (a host without user namespaces, say),
  not a degraded one. Otherwise it is reported and the worker stays ready:
  ``execute_code`` answers ``unavailable`` by the operator's choice, or nobody calls it;
- ``models``: the model the agent's head revision runs on can be built here (its key
  and base URL are in the environment): a commit may have moved the agent to a
  provider this worker has no key for;
- ``oauth``: every configured OAuth provider (and the demo one, when on) was loaded;
- ``mcp``: the MCP servers of the agent's head revision, each ``reachable`` or not (with
  why, in words that name no address), their tools listed through this worker's
  sessions (from its cache while fresh), each within :data:`READYZ_MCP_TIMEOUT_S`. A
  server that cannot be reached marks the check ``degraded`` but does not fail
  readiness: every worker would fail it alike, and runs go on without its tools (the
  model is told), so taking workers out of service would only stop the rest of the
  agent too;
- ``worker``: the lifespan finished starting and the runner is not shutting down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parkway.runner.agent import AgentTemplate
from parkway.runner.codemode import CodeMode
from parkway.runner.engine import Runner
from parkway.runner.llm import ScriptedModel
from parkway.transport.settings import Settings
from parkway.widgets_api.connect import ProviderConfigError, parse_provider_specs

__all__ = ["READYZ_MCP_TIMEOUT_S", "READYZ_REDIS_TIMEOUT_S", "healthz", "readyz"]

READYZ_REDIS_TIMEOUT_S = 1.0
READYZ_MCP_TIMEOUT_S = 1.0
_CODE_OP = "execute_code"

log = logging.getLogger(__name__)


async def healthz(request: Request) -> Response:
    """Liveness: 200 while the process serves; nothing else (it needs no Redis)."""
    del request
    return JSONResponse({"status": "ok"}, headers={"cache-control": "no-store"})


async def readyz(request: Request) -> Response:
    """Readiness: 200 ``ready`` when every check passes, else 503 ``not_ready``; each
    check says ``ok`` and, when it fails, why."""
    state = request.app.state
    settings: Settings = state.settings
    runner: Runner | None = getattr(state, "runner", None)
    redis, template = await _redis_and_template(state, runner)
    checks = {
        "redis": redis,
        "sandbox": _sandbox(getattr(state, "code", None), template, settings),
        "models": _models(runner, template),
        "oauth": _oauth(state, settings),
        "mcp": await _mcp(runner, template),
        "worker": _worker(runner),
    }
    ready = all(check["ok"] for check in checks.values())
    body = {"status": "ready" if ready else "not_ready", "checks": checks}
    headers = {"cache-control": "no-store"}
    return JSONResponse(body, status_code=200 if ready else 503, headers=headers)


async def _redis_and_template(
    state: Any, runner: Runner | None
) -> tuple[dict[str, Any], AgentTemplate | None]:
    """The Redis check, and the agent's head template (read in the same time budget; the
    template the runner started with when Redis cannot give it)."""
    redis = getattr(state, "redis", None)
    fallback = None if runner is None else runner.template
    if redis is None:
        return {"ok": False, "reason": "not connected yet: the server is starting"}, fallback
    started = time.perf_counter()
    try:
        async with asyncio.timeout(READYZ_REDIS_TIMEOUT_S):
            await redis.ping()
            latency_ms = round((time.perf_counter() - started) * 1000, 3)
            agents = getattr(state, "agents", None)
            template = fallback if agents is None else await agents.current_template()
    except TimeoutError:
        reason = f"no PING reply within {READYZ_REDIS_TIMEOUT_S:g} s"
        return {"ok": False, "reason": reason}, fallback
    except Exception as exc:  # any failure to reach it reads as "not ready", never a 500
        return {"ok": False, "reason": f"unreachable: {type(exc).__name__}"}, fallback
    return {"ok": True, "latency_ms": latency_ms}, template


def _sandbox(
    code: CodeMode | None, template: AgentTemplate | None, settings: Settings
) -> dict[str, Any]:
    uses_code = template is not None and _has_code_op(template)
    required = uses_code and settings.sandbox != "off"
    if code is None:
        return {"ok": False, "required": required, "reason": "not probed yet: starting"}
    available = code.available
    check: dict[str, Any] = {
        "ok": available or not required,
        "required": required,
        "available": available,
        "provider": None if code.provider is None else code.provider.name,
    }
    if not available:
        # code.reason is the operator's fix, with the paths it tried: in the log only
        check["reason"] = (
            "turned off (setting sandbox=off)"
            if code.provider is None
            else "unavailable: the server's log says why (at startup)"
        )
    return check


def _has_code_op(template: AgentTemplate) -> bool:
    spec = template.tool(_CODE_OP)
    return spec is not None and spec.kind == "platform"


def _models(runner: Runner | None, template: AgentTemplate | None) -> dict[str, Any]:
    if runner is None or template is None:
        return {"ok": False, "reason": "not started yet"}
    models = runner.models
    spec = models.chosen(template.llm)  # None: the agent file's model, already built
    named = spec or models.default_spec
    if named is not None:
        name = named.name
    else:
        name = "scripted" if isinstance(models.default, ScriptedModel) else "the agent's model"
    if spec is None and models.default is None:
        return {"ok": False, "model": name, "reason": "no model is configured"}
    problem = models.problem(spec)
    if problem is not None:
        return {"ok": False, "model": name, "reason": problem}
    return {"ok": True, "model": name}


def _oauth(state: Any, settings: Settings) -> dict[str, Any]:
    expected: frozenset[str] | None = getattr(state, "readyz_oauth_expected", None)
    if expected is None:  # parsed once (the setting may name a file)
        try:
            names = {spec.name for spec in parse_provider_specs(settings.oauth_providers)}
        except ProviderConfigError as exc:
            # the message may name a file or an issuer's URL: in the log only
            log.warning("readiness: the OAuth provider settings do not parse: %s", exc)
            reason = "the OAuth provider settings do not parse: the server's log says why"
            return {"ok": False, "providers": [], "reason": reason}
        expected = frozenset(names | ({"demo"} if settings.demo_oauth_enabled else set()))
        state.readyz_oauth_expected = expected
    oauth = getattr(state, "oauth", None)
    loaded = set() if oauth is None else set(oauth.providers.names())
    missing = sorted(expected - loaded)
    if missing:
        reason = f"configured, not loaded: {', '.join(missing)}"
        return {"ok": False, "providers": sorted(loaded), "reason": reason}
    return {"ok": True, "providers": sorted(loaded)}


async def _mcp(runner: Runner | None, template: AgentTemplate | None) -> dict[str, Any]:
    if runner is None or template is None or not template.mcps:
        return {"ok": True, "servers": []}
    statuses = await runner.mcp.status(template.mcps, within_s=READYZ_MCP_TIMEOUT_S)
    servers = []
    for status in statuses:
        server: dict[str, Any] = {
            "name": status.server,
            "transport": status.transport,
            "reachable": status.reachable,
        }
        if status.reason is not None:
            server["reason"] = status.reason
        if status.tools is not None:
            server["tools"] = status.tools
        servers.append(server)
    check: dict[str, Any] = {"ok": True, "servers": servers}
    down = [s.server for s in statuses if s.reachable is False]
    if down:
        check["degraded"] = True
        check["reason"] = (
            f"unreachable: {', '.join(down)} (their tools are unavailable; runs go on without them)"
        )
    return check


def _worker(runner: Runner | None) -> dict[str, Any]:
    if runner is None:
        return {"ok": False, "reason": "starting"}
    if runner.closing:
        return {"ok": False, "reason": "shutting down: it takes no new runs"}
    return {"ok": True}
