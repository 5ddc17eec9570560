"""The app factory: settings in, a Starlette app out.

It assembles the app from its parts: the routes of every API (:mod:`parkway.transport.api`),
the playground's and the OAuth flow's (:mod:`parkway.widgets_api`), the edge every
request passes (:mod:`parkway.transport.edge`: the origin guard, JSON errors), identity
resolution, and a :class:`~parkway.transport.lifecycle.Lifecycle` whose start connects
to Redis and builds the runner (:mod:`parkway.transport.startup`). Its own lifespan
starts it; mounted in a host application, the host's lifespan does through
:func:`~parkway.transport.lifecycle.parkway_lifespan`, or else the first request starts
it (:mod:`parkway.transport.lifecycle`).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from parkway.runner.agent import AgentFile, load_agent, parse_agent_file
from parkway.runner.demo import DEMO_AGENT
from parkway.runner.llm import ModelTape
from parkway.transport.api import (
    Admission,
    Authenticator,
    BodyReader,
    SessionAuthenticator,
    SessionThrottle,
    agent_routes,
    agui_routes,
    api_routes,
    approval_routes,
    authenticator_from,
    code_routes,
    healthz,
    metrics_routes,
    page_auth,
    readyz,
)
from parkway.transport.auth import PrepareIdentity, TrustedProxies
from parkway.transport.cassettes import CassetteRecording, recording_writer, with_model_steps
from parkway.transport.edge import (
    OriginGuard,
    exception_handlers,
    redact_access_log,
    unauthenticated_hint,
)
from parkway.transport.lifecycle import LazyStart, Lifecycle
from parkway.transport.openapi import openapi_json
from parkway.transport.settings import Settings
from parkway.transport.startup import (
    agent_id_for,
    memory_warning,
    model_catalog,
    oauth_settings_of,
    serve,
)
from parkway.widgets_api import describe_call, widget_routes
from parkway.widgets_api.connect import DEMO_MOUNT, DemoDispatch

__all__ = ["agent_id_for", "create_app", "memory_warning"]


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
    redact_access_log()
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
    oauth_settings = oauth_settings_of(settings)

    # Started by its own lifespan, a host's (parkway_lifespan) or its first request.
    lifecycle = Lifecycle(
        lambda prefix: serve(
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
        exception_handlers=exception_handlers(),
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
    app.state.unauthenticated_hint = unauthenticated_hint(authenticator)
    app.state.describe = describe_call
    app.state.connect = None
    app.state.cassette_writer = writer
    if writer is not None:
        app.add_middleware(CassetteRecording, writer=writer)
    return app
