"""The OAuth connect flow of ``request_connection``.

``GET /connect/{provider}/start?chat=&call=&token=`` is the popup's first page. It checks
the caller owns the pending call and spends the one-time start token that came with the
widget's descriptor (so a navigation from another site cannot start a flow), creates a
random single-use ``state`` stored server-side (chat, call, principal, provider, issuer,
PKCE verifier, the hash of a per-flow cookie it sets, the playground origin, the redirect
URI) and redirects only to the configured authorization endpoint.

``GET /connect/{provider}/callback`` refuses an answer that repeats a parameter, takes the
state once (GETDEL), requires every bound value to match (the path's provider, the
per-flow cookie, the signed-in principal, and ``iss`` where the provider supports RFC
9207), exchanges the code with the stored PKCE verifier at the stored provider's token
endpoint, stores the connection and settles the parked call itself: the server is the
source of truth, and the page it renders only posts a hint to the playground. A provider
error settles the call ``denied`` (``access_denied``) or ``error``. A callback for a call
that has meanwhile been settled (timed out, or answered elsewhere) still stores a
connection the user authorised, never changes the recorded outcome, and says so. A
client settle of the call (Not now, Cancel) forgets its flow, so a later callback with
that state is refused.

``POST /connect/{provider}/use`` settles a pending call with an existing connection of
the caller's (the agent's re-ask after a retry finds it). ``GET /api/connections`` and
``DELETE /api/connections/{id}`` list and remove connections.

The package, one module per concern:

- :mod:`parkway.widgets_api.connect.routes`: the Starlette routes, which find the flow at
  ``app.state.connect``;
- :mod:`parkway.widgets_api.connect.flow`: :class:`ConnectFlow`, the state machine (start, the
  callback's checks, settle) and the JSON endpoints;
- :mod:`parkway.widgets_api.connect.records`: the flow record kept in Redis, and its store;
- :mod:`parkway.widgets_api.connect.start_tokens`: the start links' one-time tokens;
- :mod:`parkway.widgets_api.connect.exchange`: the code-for-token exchange and the account lookup;
- :mod:`parkway.widgets_api.connect.token_endpoint`: the authlib client of every token
  endpoint call, and its failures as ``TokenExchangeError``;
- :mod:`parkway.widgets_api.connect.pages`: the callback's result page and the error pages.
"""

from parkway.widgets_api.connect.cipher import TokenCipher, TokenKeyError, generate_token_key
from parkway.widgets_api.connect.connections import Connection, ConnectionStore
from parkway.widgets_api.connect.flow import ConnectFlow
from parkway.widgets_api.connect.oauth import (
    DEMO_MOUNT,
    DemoDispatch,
    OAuthRuntime,
    OAuthSettings,
    check_providers,
    start_oauth,
)
from parkway.widgets_api.connect.pages import MESSAGE_TYPE, connect_page, result_page
from parkway.widgets_api.connect.providers import (
    Provider,
    ProviderConfigError,
    ProviderRegistry,
    parse_provider_specs,
)
from parkway.widgets_api.connect.records import FlowRecord, FlowStore, outcome_summary
from parkway.widgets_api.connect.routes import connect_routes
from parkway.widgets_api.connect.start_tokens import StartTokens

__all__ = [
    "DEMO_MOUNT",
    "MESSAGE_TYPE",
    "ConnectFlow",
    "Connection",
    "ConnectionStore",
    "DemoDispatch",
    "FlowRecord",
    "FlowStore",
    "OAuthRuntime",
    "OAuthSettings",
    "Provider",
    "ProviderConfigError",
    "ProviderRegistry",
    "StartTokens",
    "TokenCipher",
    "TokenKeyError",
    "check_providers",
    "connect_page",
    "connect_routes",
    "generate_token_key",
    "outcome_summary",
    "parse_provider_specs",
    "result_page",
    "start_oauth",
]
