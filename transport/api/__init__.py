"""The HTTP API: the routes, and what every request goes through before its own work.

- :mod:`~parkway.transport.api.chats`: the chat routes (turns, calls, settles, streams, sessions);
- :mod:`~parkway.transport.api.agent`: the agent as the playground edits it;
- :mod:`~parkway.transport.api.code`: Code Mode's routes (artifacts, the function library);
- :mod:`~parkway.transport.api.audit`: the audit trails over HTTP;
- :mod:`~parkway.transport.api.health`: ``/healthz`` and ``/readyz``;
- :mod:`~parkway.transport.api.metrics`: serving ``/metrics``;
- :mod:`~parkway.transport.api.requests`: principal, chat id and body of a request;
- :mod:`~parkway.transport.api.sessions`: principals and sessions (the authenticators);
- :mod:`~parkway.transport.api.throttle`: how fast a client address may mint sessions;
- :mod:`~parkway.transport.api.admission`: how many runs and streams a worker takes.
"""

from parkway.transport.api.admission import Admission
from parkway.transport.api.agent import (
    CommitBody,
    agent_routes,
    editors_of,
    seed_origin,
    separate_approvals,
    warn_of_drift,
)
from parkway.transport.api.agui import agui_routes
from parkway.transport.api.approvals import approval_routes
from parkway.transport.api.audit import AgentAudit, ChatAudit, ConnectionAudit
from parkway.transport.api.chats import SessionRequest, SettleBody, api_routes
from parkway.transport.api.code import code_mode_from, code_routes
from parkway.transport.api.health import healthz, readyz
from parkway.transport.api.metrics import MetricsServing, metrics_routes
from parkway.transport.api.requests import BodyReader
from parkway.transport.api.sessions import (
    Authenticator,
    SessionAuthenticator,
    address_quotas,
    authenticator_from,
    page_auth,
)
from parkway.transport.api.throttle import SessionThrottle

__all__ = [
    "Admission",
    "AgentAudit",
    "Authenticator",
    "BodyReader",
    "ChatAudit",
    "CommitBody",
    "ConnectionAudit",
    "MetricsServing",
    "SessionAuthenticator",
    "SessionRequest",
    "SessionThrottle",
    "SettleBody",
    "address_quotas",
    "agent_routes",
    "agui_routes",
    "api_routes",
    "approval_routes",
    "authenticator_from",
    "code_mode_from",
    "code_routes",
    "editors_of",
    "healthz",
    "metrics_routes",
    "page_auth",
    "readyz",
    "seed_origin",
    "separate_approvals",
    "warn_of_drift",
]
