"""The app factory: settings in, a Starlette app out.

Starting the app connects to Redis (starting the embedded one when no URL is
configured), builds the runner for the agent and starts the deadline sweeper; stopping
it stops the sweeper and lets running turns finish before it closes Redis. Its own
lifespan does both; mounted in a host application, the host's lifespan does through
:func:`~parkway.transport.lifecycle.parkway_lifespan`, or else the first request starts
it (:mod:`parkway.transport.lifecycle`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import logging
import os
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from parkway.runner.agent import AgentFile, AgentStore, is_agent_ref, load_agent, parse_agent_file
from parkway.runner.codemode import CodeMode
from parkway.runner.demo import DEMO_AGENT
from parkway.runner.engine import Runner, RunnerConfig, Sweeper
from parkway.runner.errors import ParkwayError, QuotaExceededError, SettleConflictError
from parkway.runner.llm import ModelCatalog, ModelTape, ModelTimeouts, RetryPolicy
from parkway.runner.ops import REDIS_ERRORS
from parkway.runner.store import (
    EmbeddedRedis,
    Quotas,
    RedisClient,
    RedisUnavailableError,
    connect,
    is_redis_outage,
)
from parkway.transport.api import (
    Admission,
    Authenticator,
    BodyReader,
    MetricsServing,
    SessionAuthenticator,
    SessionThrottle,
    address_quotas,
    agent_routes,
    agui_routes,
    api_routes,
    approval_routes,
    authenticator_from,
    code_mode_from,
    code_routes,
    editors_of,
    healthz,
    metrics_routes,
    page_auth,
    readyz,
    seed_origin,
    separate_approvals,
    warn_of_drift,
)
from parkway.transport.auth import (
    HeaderAuthenticator,
    JwtAuthenticator,
    PrepareIdentity,
    TrustedProxies,
)
from parkway.transport.cassettes import (
    CassetteRecording,
    load_tape,
    recording_writer,
    with_model_steps,
)
from parkway.transport.errors import HTTPError, redis_unavailable, status_for
from parkway.transport.lifecycle import LazyStart, Lifecycle
from parkway.transport.openapi import openapi_json
from parkway.transport.settings import Settings, SettingsError, flag_and_variable
from parkway.transport.tracing import flush_spans
from parkway.widgets_api import describe_call, widget_routes
from parkway.widgets_api.connect import (
    DEMO_MOUNT,
    DemoDispatch,
    OAuthRuntime,
    OAuthSettings,
    parse_provider_specs,
    start_oauth,
)

__all__ = ["agent_id_for", "create_app", "memory_warning"]

log = logging.getLogger(__name__)

_STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}


class OriginGuard:
    """Refuses state-changing requests whose ``Origin`` is not allowed.

    Threat answered: cross-site request forgery with the session cookie. The default
    allowed origin is the server's own (``public_url``, else the request's own host);
    more come from ``allowed_origins``. Requests without ``Origin`` pass: browsers send
    ``Origin`` on every cross-origin POST, so a request without it is not a forged
    browser request riding on the cookie.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in _STATE_CHANGING
            # The demo provider's consent form posts with ``Origin: null`` (its page is
            # no-referrer) and guards itself: a one-time consent record bound to a
            # SameSite=Strict browser cookie. Its token endpoint is called server-side.
            # (The path inside a host's mount: ``/pw/demo-oauth/...`` is ``/demo-oauth/...``.)
            and not get_route_path(scope).startswith(f"{DEMO_MOUNT}/")
        ):
            headers = dict(scope["headers"])
            origin = headers.get(b"origin")
            if origin is not None and not self._allowed(origin.decode("latin-1"), scope, headers):
                error = HTTPError(
                    403, "origin_not_allowed", "requests from this origin are not allowed"
                )
                await JSONResponse(error.body(), status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        origin = origin.lower().rstrip("/")
        if origin in self.settings.allowed_origins:
            return True
        if self.settings.public_url is not None:
            own = self.settings.public_url.lower().rstrip("/")
        else:
            host = headers.get(b"host", b"").decode("latin-1").lower()
            own = f"{scope.get('scheme', 'http')}://{host}"
        return origin == own


async def _parkway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ParkwayError)
    extra: dict[str, Any] = {}
    if isinstance(exc, SettleConflictError):
        extra["outcome"] = exc.existing
    if isinstance(exc, QuotaExceededError):  # which quota, and its value
        extra.update(quota=exc.quota, limit=exc.limit)
    error = HTTPError(status_for(exc), exc.code, str(exc), **extra)
    if error.status == 500:
        return await _unexpected(request, exc)
    return JSONResponse(error.body(), status_code=error.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPError)
    # A 408 leaves a trickling body unread: close the connection rather than wait for
    # it. A 413 does not: closing while an honest client is still sending its body
    # makes its kernel reset the connection, and the client never reads the answer.
    # uvicorn reads and drops the rest instead; `parkway serve` bounds how long with its
    # header timeout (transport/serving.py), which runs from the answer on.
    headers = dict(exc.headers)
    if exc.status == 408:
        headers["connection"] = "close"
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    if is_redis_outage(exc):
        return await _redis_down(request, exc)
    ref = secrets.token_hex(4)
    log.error(
        "unhandled error (ref %s) on %s %s", ref, request.method, request.url.path, exc_info=exc
    )
    error = HTTPError(500, "internal_error", f"internal error (reference {ref})")
    return JSONResponse(error.body(), status_code=500)


async def _redis_down(request: Request, exc: Exception) -> Response:
    REDIS_ERRORS.labels("http").inc()
    # A request refused by the open breaker is one of many during an outage, which the
    # breaker logged once when it opened (runner/store/breaker.py).
    level = logging.DEBUG if isinstance(exc, RedisUnavailableError) else logging.WARNING
    log.log(level, "Redis unavailable on %s %s: %s", request.method, request.url.path, exc)
    return await _http_error(request, redis_unavailable())


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    codes = {404: "not_found", 405: "method_not_allowed"}
    error = HTTPError(status, codes.get(status, "http_error"), str(getattr(exc, "detail", "")))
    return JSONResponse(error.body(), status_code=status)


class RedactCallbackQuery(logging.Filter):
    """Keeps OAuth codes and states out of the access log: uvicorn logs each request's
    path with its query string, and a connect callback's query holds both."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path = args[2]
            # (under a host's mount prefix too: ``/pw/connect/...``)
            if "/connect/" in path.split("?", 1)[0] and "?" in path:
                record.args = (*args[:2], path.split("?", 1)[0] + "?[redacted]", *args[3:])
        return True


_ACCESS_FILTER = RedactCallbackQuery()


def _unauthenticated_hint(authenticator: Authenticator) -> str | None:
    """What a 401 tells the client to do, when it is not "get a session"."""
    if isinstance(authenticator, JwtAuthenticator):
        return "no valid bearer token: send 'Authorization: Bearer <JWT>' from your sign-in"
    if isinstance(authenticator, HeaderAuthenticator):
        return "no identity: requests must come through the authenticating proxy"
    if not isinstance(authenticator, SessionAuthenticator):  # the host application's own
        return "not signed in: sign in to the application that serves this API"
    return None


def agent_id_for(settings: Settings, agent: AgentFile) -> str:
    """The agent's id for its revisions: ``demo`` for the built-in demo, the agent file's
    name, an :class:`~parkway.runner.Agent`'s name, or (an agent given in code otherwise)
    a digest of its template."""
    in_python = settings.agent_file is None or is_agent_ref(settings.agent_file)
    if agent.name is not None and in_python:
        return re.sub(r"[^A-Za-z0-9_.-]", "-", agent.name)[:64] or "agent"
    if settings.agent_file is not None:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "-", settings.agent_file.stem)[:64]
        return stem or "agent"
    if agent.template.raw == parse_agent_file(DEMO_AGENT).template.raw:
        return "demo"
    return f"agent-{agent.template.digest[:16]}"


def model_catalog(
    settings: Settings, agent: AgentFile, *, tape: ModelTape | None = None
) -> ModelCatalog:
    """The models of the server's runs, checked now: a model that cannot be built here (a
    missing key or base URL) stops the server at startup with a one-line error. Provider
    models go through ``tape`` if given (a recording), else through the model tape
    ``parkway replay`` names (``model_tape``), else straight to the provider."""
    if tape is None and settings.model_tape is not None:
        tape = load_tape(settings.model_tape)
    models = ModelCatalog(
        agent.model,
        default_spec=agent.spec,
        override=settings.model_spec,
        environ=os.environ,
        timeouts=ModelTimeouts(
            connect_s=settings.model_connect_timeout_s, read_s=settings.model_read_timeout_s
        ),
        retry=RetryPolicy(
            retries=settings.model_retries, max_wait_s=settings.model_retry_max_wait_s
        ),
        tape=tape,
    )
    spec = models.chosen(agent.template.llm)
    problem = models.problem(spec)
    if problem is not None:
        where = "--model / PARKWAY_MODEL" if settings.model is not None else "the agent's model"
        raise SettingsError(f"{problem} ({where})")
    if spec is None and agent.model is None:
        raise SettingsError(
            "no model: give the agent file a 'model', the template an 'llm', or pass --model"
        )
    return models


# How long startup keeps trying to reach Redis (one started alongside the server).
REACH_S = 5.0


async def _reach(redis: RedisClient, settings: Settings) -> None:
    """Ping Redis at startup, for up to :data:`REACH_S` (the client's breaker refuses
    the tries at once after the first failure, and lets one through each cool-down): an
    unreachable one then stops the server with one line naming the setting (``parkway
    serve`` prints it and exits 2) and the first failure's cause, not a traceback."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REACH_S
    cause: Exception | None = None
    while True:
        try:
            await redis.ping()
            return
        except Exception as exc:
            if not is_redis_outage(exc):
                raise
            if cause is None or isinstance(cause, RedisUnavailableError):
                cause = exc
        if loop.time() >= deadline:
            raise SettingsError(
                f"redis_url ({flag_and_variable('redis_url')}): cannot reach Redis at "
                f"{settings.redacted_redis_url()}: {cause}"
            )
        await asyncio.sleep(0.1)


async def memory_warning(redis: RedisClient) -> str | None:
    """What is wrong with the Redis server's memory settings for Parkway, or None: no
    ``maxmemory`` (one Redis filling its host's memory takes every chat down with it), or
    a policy that evicts keys (a parked run or a connection would vanish). A server that
    does not let clients read its configuration (some managed services) is not judged."""
    try:
        config = await redis.config_get("maxmemory*")
    except Exception:
        return None
    maxmemory = str(config.get("maxmemory", "0"))
    policy = str(config.get("maxmemory-policy", "noeviction"))
    if policy != "noeviction":
        return (
            f"Redis evicts keys under memory pressure (maxmemory-policy {policy}): a parked "
            "run or a connection could vanish; set maxmemory-policy noeviction "
            "(docs/operations.md, 'Redis memory')"
        )
    if maxmemory in ("0", ""):
        return (
            "Redis has no maxmemory: should it fill its host's memory, every chat stops; "
            "set maxmemory with room for the quotas (docs/operations.md, 'Redis memory')"
        )
    return None


def _oauth_settings(settings: Settings) -> OAuthSettings:
    """The OAuth part of the settings: providers, the demo provider, keys and TTLs."""
    specs = tuple(parse_provider_specs(settings.oauth_providers))
    return OAuthSettings(
        specs=specs,
        demo=settings.demo_oauth_enabled,
        base_url=settings.base_url,
        # the demo provider's client secret derives from the session key; nothing else
        # here needs it (a custom authenticator may run without one)
        secret=(
            settings.resolve_secret().get_secret_value() if settings.demo_oauth_enabled else ""
        ),
        token_key=(
            settings.resolve_token_key().get_secret_value()
            if specs or settings.demo_oauth_enabled
            else None
        ),
        allowed_origins=settings.allowed_origins,
        cookie_secure=settings.cookie_secure,
        flow_ttl_s=settings.connect_flow_ttl_s,
        connection_ttl_s=settings.connection_ttl_s,
        http_timeout_s=settings.oauth_http_timeout_s,
    )


async def _start_serving(
    app: Starlette,
    redis: RedisClient,
    *,
    url: str,
    settings: Settings,
    agent: AgentFile,
    agent_id: str,
    models: ModelCatalog,
    oauth_settings: OAuthSettings,
    prefix: str,
) -> asyncio.Task[None]:
    """Everything a serving app holds, on ``app.state``: the agent's revisions, the
    runner, OAuth, the widget describer; returns the running deadline sweeper.
    ``prefix`` is the path a host mounts the app at (``""`` at the root): the URLs the
    app hands out (OAuth callbacks, widget descriptors) carry it."""
    app.state.redis = redis
    agents = AgentStore(
        redis,
        agent_id,
        dict(agent.template.raw),
        editable=settings.agent_editing_enabled,
        editors=editors_of(settings),
        audit_keep_s=settings.audit_keep_s,
        origin=seed_origin(settings, agent),
    )
    await agents.ensure_seeded()
    await warn_of_drift(agents)
    app.state.agents = agents
    # -- Code Mode (docs/code-mode.md): the sandbox is probed once, here
    code = code_mode_from(settings)
    app.state.code = code  # before the probe: _stop_serving closes it whatever fails next
    await code.start()
    if not code.available:
        log.warning("execute_code is unavailable: %s", code.reason)
    app.state.runner = Runner(
        redis,
        agent.model,
        agent.template,
        agents=agents,
        models=models,
        code=code,
        config=RunnerConfig(
            chat_ttl_s=settings.chat_ttl_s,
            lease_s=settings.lease_s,
            max_output_bytes=settings.max_output_bytes,
            artifact_threshold_bytes=settings.artifact_threshold_bytes,
            artifact_ttl_s=settings.artifact_ttl_s,
            quotas=Quotas(
                stored_bytes=settings.quota_stored_bytes,
                live_chats=settings.quota_live_chats,
                artifacts_per_chat=settings.quota_artifacts_per_chat,
            ),
            addresses=address_quotas(settings, app.state.authenticator),  # anonymous sessions'
            log_keep_s=settings.log_keep_s,
            audit_keep_s=settings.audit_keep_s,
            # code is approved by someone other than its requester, but where the one
            # user is the operator (a local playground) or the operator says otherwise
            separate_approvals=separate_approvals(settings),
            # half the pool for followers' reads, the rest kept for the runs
            follower_reads=max(1, settings.redis_max_connections // 2),
        ),
    )
    # -- OAuth (widgets_api/connect/oauth.py): providers, connections, the connect flow
    oauth: OAuthRuntime | None = await start_oauth(
        dataclasses.replace(oauth_settings, prefix=prefix),
        runner=app.state.runner,
        redis=redis,
        redis_url=url,
        environ=os.environ,
    )
    if oauth is not None:  # (widgets_api/connect/oauth.py builds the store; the audit's retention)
        oauth.connections.audit_keep_s = settings.audit_keep_s
    app.state.oauth = oauth
    app.state.connect = None if oauth is None else oauth.flow
    names = {} if oauth is None else oauth.providers.names()
    start = None if oauth is None else oauth.flow.start_token  # one-time start links
    app.state.describe = lambda chat_id, call: describe_call(
        chat_id, call, names, start, code=code, prefix=prefix
    )
    if oauth is not None and oauth.demo is not None:
        app.state.demo_router = Router(routes=oauth.demo.routes())
    # -- deadline sweeper (runner/engine/sweeper.py): times out expired parked calls;
    # a timeout that settles a step resumes "auto"-policy chats.
    app.state.sweeper = Sweeper(app.state.runner, on_timeout=app.state.runner.on_timeout)
    return asyncio.create_task(
        app.state.sweeper.run(settings.sweep_interval_s), name="parkway-sweeper"
    )


async def _stop_serving(app: Starlette, sweeping: asyncio.Task[None] | None) -> None:
    """Undo :func:`_start_serving` (what of it started), before Redis closes: the
    sweeper first, then the runner (its running turns finish), OAuth, the sandbox's
    host files, the telemetry."""
    if sweeping is not None:
        sweeping.cancel()
        await asyncio.wait([sweeping], timeout=5)
    runner = getattr(app.state, "runner", None)
    if runner is not None:
        await runner.aclose()
        await runner.models.aclose()
    oauth_runtime: OAuthRuntime | None = getattr(app.state, "oauth", None)
    if oauth_runtime is not None:
        oauth_runtime.close()
    code: CodeMode | None = getattr(app.state, "code", None)
    if code is not None:  # after the runner: no run uses the sandbox any more
        await code.close()
    app.state.metrics.stop()
    flush_spans()


@contextlib.asynccontextmanager
async def _serve(
    app: Starlette,
    prefix: str,
    *,
    settings: Settings,
    agent: AgentFile,
    agent_id: str,
    models: ModelCatalog,
    oauth_settings: OAuthSettings,
) -> AsyncIterator[None]:
    """The app serving inside the block: Redis (the embedded one when no URL is
    configured) and everything :func:`_start_serving` starts, stopped after it."""
    embedded = None
    url = settings.redis_url
    if url is None:
        embedded = EmbeddedRedis(settings.data_dir)
        # in a thread: a lazy start happens while the host serves other requests
        url = await asyncio.to_thread(embedded.start)
        # a lazily started app (transport/lifecycle.py) is never stopped: its embedded
        # server goes at interpreter exit
        atexit.register(embedded.stop)
    redis = connect(
        url,
        max_connections=settings.redis_max_connections,
        pool_timeout_s=settings.redis_pool_timeout_s,
    )
    sweeping: asyncio.Task[None] | None = None
    app.state.metrics = MetricsServing(
        redis, port=settings.metrics_port, host=settings.metrics_host
    )
    try:
        await _reach(redis, settings)
        if embedded is None:  # (the embedded one is the local playground's own)
            warning = await memory_warning(redis)
            if warning is not None:
                log.warning("%s", warning)
        app.state.metrics.start()
        sweeping = await _start_serving(
            app,
            redis,
            url=url,
            settings=settings,
            agent=agent,
            agent_id=agent_id,
            models=models,
            oauth_settings=oauth_settings,
            prefix=prefix,
        )
        yield
    finally:
        await _stop_serving(app, sweeping)
        await redis.aclose()
        if embedded is not None:
            embedded.stop()
            atexit.unregister(embedded.stop)


def create_app(
    settings: Settings | None = None,
    *,
    agent: AgentFile | None = None,
    authenticator: Authenticator | None = None,
) -> Starlette:
    """Build the Parkway app. ``agent`` overrides ``settings.agent_file`` (and the demo);
    ``authenticator`` replaces the one the ``auth`` setting chooses
    (docs/security.md, "Identities")."""
    settings = settings or Settings()
    # parkway serve --record (transport/cassettes/_server_recorder.py): checked before anything
    writer = recording_writer(settings, agent is not None) if settings.record else None
    access_log = logging.getLogger("uvicorn.access")
    if _ACCESS_FILTER not in access_log.filters:
        access_log.addFilter(_ACCESS_FILTER)
    if agent is None:
        agent = (
            load_agent(settings.agent_file)
            if settings.agent_file is not None
            else parse_agent_file(DEMO_AGENT)
        )
    # Anonymous sessions outside a local playground are minted at a bounded pace per
    # client address (transport/api/throttle.py).
    throttle = None
    if authenticator is None:
        authenticator = authenticator_from(settings)
        if (
            isinstance(authenticator, SessionAuthenticator)
            and not settings.local
            and settings.sessions_per_minute > 0
        ):
            throttle = SessionThrottle(
                burst=settings.session_burst, per_minute=settings.sessions_per_minute
            )
    agent_id = agent_id_for(settings, agent)
    # A recording keeps each provider model step for the cassette (runner/llm/tape.py).
    tape = ModelTape((), "all") if writer is not None else None
    models = model_catalog(settings, agent, tape=tape)
    if writer is not None and tape is not None:
        writer.finish = with_model_steps(tape)
    oauth_settings = _oauth_settings(settings)

    # Started by its own lifespan, a host's (parkway_lifespan) or its first request.
    lifecycle = Lifecycle(
        lambda prefix: _serve(
            app,
            prefix,
            settings=settings,
            agent=agent,
            agent_id=agent_id,
            models=models,
            oauth_settings=oauth_settings,
        )
    )

    app = Starlette(
        routes=[
            *api_routes(),
            *agui_routes(),
            *approval_routes(),
            *agent_routes(),
            *code_routes(),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/openapi.json", openapi_json, methods=["GET"]),
            # the host applications the operator trusts may embed the playground
            *widget_routes(embed_origins=settings.allowed_origins, auth=page_auth(authenticator)),
            Route(f"{DEMO_MOUNT}/{{rest:path}}", DemoDispatch()),
            # RFC 8414 §3.1 puts the well-known segment before the issuer's path
            Route(f"/.well-known/oauth-authorization-server{DEMO_MOUNT}", DemoDispatch()),
        ],
        middleware=[
            # a mounted app whose lifespan nobody ran starts on its first request
            Middleware(LazyStart, lifecycle=lifecycle),
            Middleware(OriginGuard, settings=settings),
            # an authenticator's I/O (a JWKS fetch) happens here, before the route
            Middleware(PrepareIdentity, authenticator=authenticator),
        ],
        exception_handlers={
            ParkwayError: _parkway_error,
            HTTPError: _http_error,
            # Redis unreachable, or no free connection within the pool's wait: 503.
            RedisConnectionError: _redis_down,
            RedisTimeoutError: _redis_down,
            404: _not_found,
            405: _not_found,
            Exception: _unexpected,
        },
        lifespan=lambda _: lifecycle.running(""),
    )
    app.router.routes.extend(metrics_routes(enabled=settings.metrics))
    app.state.settings = settings
    app.state.lifecycle = lifecycle  # parkway_lifespan(app) starts and stops it
    app.state.suggestions = agent.suggestions  # the empty chat's first messages (GET /api/agent)
    app.state.admission = Admission(
        runs_per_principal=settings.max_runs_per_principal,
        streams_per_principal=settings.max_streams_per_principal,
        runs_per_worker=settings.max_runs_per_worker,
        streams_per_worker=settings.max_streams_per_worker,
        reserve=settings.admission_reserve,
    )
    app.state.reader = BodyReader.from_settings(settings)  # every route's body reader
    app.state.authenticator = authenticator
    app.state.session_throttle = throttle
    app.state.proxies = TrustedProxies(settings.trusted_proxies)
    app.state.unauthenticated_hint = _unauthenticated_hint(authenticator)
    app.state.describe = describe_call
    app.state.connect = None
    app.state.cassette_writer = writer
    if writer is not None:
        app.add_middleware(CassetteRecording, writer=writer)
    return app
