"""An app's serving, from start to stop: Redis reached (the embedded one started when
no URL is configured), the agent's revisions, the sandbox, the runner, OAuth and the
deadline sweeper on ``app.state``; stopped in the reverse order, letting running turns
finish before Redis closes. :func:`serve` is what the app's
:class:`~parkway.transport.lifecycle.Lifecycle` runs, whichever lifespan starts it.
Also the checks startup makes first: the models (:func:`model_catalog`), Redis answering
(:func:`reach_redis`) and its memory settings (:func:`memory_warning`)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import logging
import os
import re
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.routing import Router

from parkway.runner.agent import AgentFile, AgentStore, is_agent_ref, parse_agent_file
from parkway.runner.codemode import CodeMode
from parkway.runner.demo import DEMO_AGENT
from parkway.runner.engine import Runner, RunnerConfig, Sweeper
from parkway.runner.llm import ModelCatalog, ModelTape, ModelTimeouts, RetryPolicy
from parkway.runner.store import (
    EmbeddedRedis,
    Quotas,
    RedisClient,
    RedisUnavailableError,
    connect,
    is_redis_outage,
)
from parkway.transport.api import (
    MetricsServing,
    address_quotas,
    code_mode_from,
    editors_of,
    seed_origin,
    separate_approvals,
    warn_of_drift,
)
from parkway.transport.cassettes import load_tape
from parkway.transport.settings import Settings, SettingsError, flag_and_variable
from parkway.transport.tracing import flush_spans
from parkway.widgets_api import describe_call
from parkway.widgets_api.connect import (
    OAuthRuntime,
    OAuthSettings,
    parse_provider_specs,
    start_oauth,
)

__all__ = [
    "REACH_S",
    "agent_id_for",
    "memory_warning",
    "model_catalog",
    "oauth_settings_of",
    "reach_redis",
    "serve",
]

log = logging.getLogger(__name__)


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


async def reach_redis(redis: RedisClient, settings: Settings) -> None:
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


def oauth_settings_of(settings: Settings) -> OAuthSettings:
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
async def serve(
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
        await reach_redis(redis, settings)
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
