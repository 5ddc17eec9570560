"""The connect flow's state machine: start, the callback's checks, settle.

``start`` binds a random single-use ``state`` to the caller, the call and this browser
(a per-flow cookie) and redirects to the provider. The callback takes the state once,
requires every bound value to match, exchanges the code, stores the connection and
settles the parked call (see :mod:`parkway.widgets_api.connect` for the whole story).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from parkway.runner.agent import REQUEST_CONNECTION
from parkway.runner.engine import Runner, Settled, SettleResult
from parkway.runner.errors import (
    CallerError,
    CallNotFoundError,
    ChatNotFoundError,
    SettleConflictError,
)
from parkway.runner.ops import logcontext
from parkway.runner.parking import ParkedCall
from parkway.runner.store import AuditSource, RedisClient
from parkway.widgets_api.connect._http import json_error, read_ticket_body, read_use_body
from parkway.widgets_api.connect.connections import (
    AuditNote,
    ConnectionStore,
    TokenExchangeError,
    oauth_client,
)
from parkway.widgets_api.connect.exchange import Exchange
from parkway.widgets_api.connect.pages import connect_page, result_page
from parkway.widgets_api.connect.providers import Provider, ProviderRegistry
from parkway.widgets_api.connect.records import FlowRecord, FlowStore, outcome_summary
from parkway.widgets_api.connect.start_tokens import StartTokens

__all__ = ["ConnectFlow", "ConnectRequest", "connect_request"]

log = logging.getLogger(__name__)

_START_PARAMS = {"chat", "call", "retry", "origin", "token"}
# The authorization response's parameters (RFC 6749 §4.1.2, §4.1.2.1; RFC 9207)
_OAUTH_RESPONSE_PARAMS = ("state", "code", "iss", "error", "error_description", "error_uri")
_MAX_PARAM = 512
_FAILED = {"declined", "cancelled", "denied", "error", "timeout"}


@dataclass(frozen=True)
class ConnectRequest:
    """What a parked connection call asks for: a ``request_connection`` call's input, or
    the private continuation of an MCP tool call parked because its server needs OAuth
    (``resource``: the server's canonical URL, RFC 8707)."""

    provider: str
    scopes: tuple[str, ...] = ()
    resource: str | None = None


def connect_request(call: ParkedCall) -> ConnectRequest | None:
    """The connection ``call`` waits for, or None when it is no connection call."""
    if call.tool_name == REQUEST_CONNECTION:
        asked = call.input if isinstance(call.input, dict) else {}
        scopes = asked.get("scopes")
        return ConnectRequest(
            str(asked.get("provider") or ""),
            tuple(str(s) for s in scopes) if isinstance(scopes, list) else (),
        )
    mcp = (call.continuation or {}).get("mcp")
    if call.result_style != "connection" or not isinstance(mcp, Mapping):
        return None
    if mcp.get("kind") != "oauth" or not isinstance(mcp.get("resource"), str):
        return None
    scopes = mcp.get("scopes")
    return ConnectRequest(
        str(mcp.get("provider") or ""),
        tuple(str(s) for s in scopes) if isinstance(scopes, list) else (),
        str(mcp["resource"]),
    )


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _cookie_name(digest: str) -> str:
    return f"parkway_flow_{digest[:16]}"


class ConnectFlow:
    """The connect flow's routes and its settle listener (mounted by ``transport``)."""

    def __init__(
        self,
        *,
        runner: Runner,
        redis: RedisClient,
        providers: ProviderRegistry,
        connections: ConnectionStore,
        base_url: str,
        prefix: str = "",
        allowed_origins: tuple[str, ...] = (),
        cookie_secure: bool = False,
        flow_ttl_s: int = 600,
        http_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.redis = redis
        self.providers = providers
        self.connections = connections
        self.base_url = base_url.rstrip("/")
        self.own_origin = self.base_url
        # the path a host application mounts the app at ("" at the root)
        self.prefix = prefix.rstrip("/")
        self.allowed_origins = {self.own_origin, *allowed_origins}
        self.cookie_secure = cookie_secure or self.base_url.startswith("https://")
        self.flow_ttl_s = flow_ttl_s
        self.http_timeout_s = http_timeout_s
        self.clock = clock
        self.flows = FlowStore(redis, flow_ttl_s)
        self.exchange = Exchange(connections, http_timeout_s)
        self.start_tokens = StartTokens(redis, connections.cipher, ttl_s=flow_ttl_s, clock=clock)

    def start_token(self, provider: str, chat_id: str, call_id: str) -> str:
        """A one-time token for the widget's start link (widget descriptors carry it)."""
        return self.start_tokens.issue(provider, chat_id, call_id)

    def redirect_uri(self, provider: Provider) -> str:
        """The one exact callback URI of ``provider``: from configuration, never Host."""
        return f"{self.base_url}{self.prefix}/connect/{provider.name}/callback"

    def _principal(self, request: Request) -> str | None:
        found = request.app.state.authenticator.authenticate(request)
        # a principal string, or an identity carrying one (transport's Identity: this
        # package does not import transport, so it is read by its attribute)
        principal = getattr(found, "principal", found)
        if not principal:
            return None
        logcontext.bind(principal=str(principal))  # the request's log lines name it (hashed)
        return str(principal)

    async def _call(self, chat_id: str, call_id: str, principal: str) -> ParkedCall | None:
        """The principal's parked call, or None: an invalid chat id, a chat that is not
        theirs (:class:`ChatNotFoundError`) and an unknown call read alike."""
        try:
            return await self.runner.call(chat_id, principal, call_id)
        except CallerError:
            return None

    # -- start ------------------------------------------------------------------------

    async def start(self, request: Request) -> Response:
        provider = self.providers.get(request.path_params["provider"])
        if provider is None:
            return self._fail(404, "Unknown provider", "This server has no such provider.")
        params = request.query_params
        extra = sorted(set(params.keys()) - _START_PARAMS)
        repeated = len(params.multi_items()) != len(params.keys())
        if extra or repeated or any(len(v) > _MAX_PARAM for _, v in params.multi_items()):
            return self._fail(400, "Invalid request", "The connect link has unexpected parameters.")
        chat_id, call_id = str(params.get("chat", "")), str(params.get("call", ""))
        grant = self.start_tokens.open(params.get("token"), provider.name, chat_id, call_id)
        principal = self._principal(request)
        if principal is None and grant is not None and grant.kind == "ticket":
            # a page holding its user's token in memory (no cookie): the ticket it got
            # with that token names the principal (start_tokens.py, "Tickets")
            principal = grant.principal
        if principal is None:
            return self._fail(401, "Not signed in", "Sign in to the playground first.")
        origin = (params.get("origin") or self.own_origin).lower().rstrip("/")
        if origin not in self.allowed_origins:
            return self._fail(400, "Invalid request", "That origin is not allowed here.")
        call = await self._call(chat_id, call_id, principal)
        asked = None if call is None else connect_request(call)
        if call is None or asked is None:
            return self._fail(404, "Request not found", "There is no such connection request.")
        if asked.provider != provider.name:
            return self._fail(400, "Wrong provider", "This request is for another provider.")
        # Only from the page that shows the widget: a navigation from elsewhere (the
        # cookie rides along) carries no token, or one already spent (start_tokens.py).
        # A ticket names its principal, and works only in a navigation the playground's
        # own origin made (Fetch Metadata): a ticket link sent to someone else would
        # otherwise run the sender's flow in their browser, connecting their account
        # to the sender's principal.
        ticket_ok = (
            grant is None
            or grant.kind != "ticket"
            or (grant.principal == principal and self._same_origin_navigation(request))
        )
        if not ticket_ok or not await self.start_tokens.spend(grant, chat_id, call.tool_call_id):
            log.warning("connect start refused (no valid start token): call %s", call.tool_call_id)
            return self._fail(
                403,
                "Start from the chat",
                "This sign-in was not started from the chat, or its link has expired or was "
                "already used. Press Connect in the chat to start again.",
            )
        # A retry is a new flow for a call that ended without a connection; for a call
        # still pending it is just the flow (the callback settles it).
        retry = params.get("retry") == "1" and call.outcome is not None
        summary = outcome_summary(None if call.outcome is None else dict(call.outcome))
        if call.outcome is not None and not (retry and summary in _FAILED):
            return self._fail(
                409, "Request already ended", "This connection request has already ended."
            )
        state = secrets.token_urlsafe(32)
        digest = _sha(state)
        cookie = secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(64) if provider.pkce == "s256" else None
        scopes = list(provider.requested_scopes(asked.scopes))
        record = FlowRecord(
            chat=chat_id,
            call=call.tool_call_id,
            principal=principal,
            provider=provider.name,
            issuer=provider.issuer,
            verifier=verifier,
            cookie_hash=_sha(cookie),
            origin=origin,
            redirect_uri=self.redirect_uri(provider),
            scopes=scopes,
            retry=retry,
            created=self.clock(),
            ticket=grant is not None and grant.kind == "ticket",
            resource=asked.resource,
        )
        await self.flows.save(digest, record)  # one live flow per call: the older dies
        client = oauth_client(
            provider,
            timeout_s=self.http_timeout_s,
            redirect_uri=record.redirect_uri,
            scope=" ".join(scopes) or None,
            code_challenge_method="S256" if verifier else None,
        )
        async with client:
            url, _ = client.create_authorization_url(
                provider.authorization_endpoint,
                state=state,
                code_verifier=verifier,
                **dict(provider.authorize_params),
                # RFC 8707: the token is for the MCP server that asked, and no other
                **({"resource": asked.resource} if asked.resource else {}),
            )
        response = RedirectResponse(url, status_code=303)
        response.headers["cache-control"] = "no-store"
        response.headers["referrer-policy"] = "no-referrer"
        response.set_cookie(
            _cookie_name(digest),
            cookie,
            max_age=self.flow_ttl_s,
            path=f"{self.prefix}/connect/{provider.name}/callback",
            httponly=True,
            samesite="lax",
            secure=self.cookie_secure,
        )
        return response

    @staticmethod
    def _same_origin_navigation(request: Request) -> bool:
        """A navigation the server's own origin made (``Sec-Fetch-Site: same-origin``,
        which browsers send and pages cannot set): the playground opening its popup,
        not a link followed from another site, typed or pasted (``cross-site``,
        ``same-site``, ``none``), nor a client that sends no Fetch Metadata."""
        return request.headers.getlist("sec-fetch-site") == ["same-origin"]

    async def ticket(self, request: Request) -> Response:
        """``POST /connect/{provider}/ticket``: a ticket for the start link, for a page
        that authenticates with a bearer token (its popup cannot carry one)."""
        provider = self.providers.get(request.path_params["provider"])
        principal = self._principal(request)
        if principal is None:
            return json_error(401, "unauthenticated", "no valid session")
        if provider is None:
            return json_error(404, "not_found", "no such provider")
        body = await read_ticket_body(request)
        if body is None:
            return json_error(
                422, "invalid_body", "send {chatId, toolCallId} as strings, and retry as a boolean"
            )
        chat_id, call_id, retry = body
        call = await self._call(chat_id, call_id, principal)
        asked = None if call is None else connect_request(call)
        if asked is None:
            return json_error(404, "not_found", "no such connection request")
        if asked.provider != provider.name:
            return json_error(409, "wrong_provider", "the request is for another provider")
        ticket = self.start_tokens.issue_ticket(provider.name, chat_id, call_id, principal)
        query = urlencode({"chat": chat_id, "call": call_id, "token": ticket})
        url = f"{self.prefix}/connect/{quote(provider.name, safe='')}/start?{query}"
        if retry:
            url += "&retry=1"
        expires = int(self.clock()) + self.start_tokens.ticket_ttl_s
        return JSONResponse(
            {"startUrl": url, "expiresAt": expires * 1000},
            headers={"cache-control": "no-store"},
        )

    # -- callback ---------------------------------------------------------------------

    async def callback(self, request: Request) -> Response:
        provider = self.providers.get(request.path_params["provider"])
        if provider is None:
            return self._fail(404, "Unknown provider", "This server has no such provider.")
        params = request.query_params
        # RFC 6749 §3.1: a parameter sent more than once is an error. Which copy a reader
        # takes differs (the first, the last), so a duplicate could slip a second
        # ``iss`` or ``state`` past a check that read the other one: refuse the whole
        # answer, before the state is looked up or a token requested.
        repeated = sorted(n for n in _OAUTH_RESPONSE_PARAMS if len(params.getlist(n)) > 1)
        if repeated:
            log.warning("connect callback refused: repeated parameter(s) %s", ", ".join(repeated))
            return self._fail(
                400,
                "Sign-in not recognised",
                "The provider's answer repeats a parameter. Start again from the chat.",
            )
        state = params.get("state")
        if not state or len(state) > _MAX_PARAM:
            return self._fail(400, "Sign-in not recognised", "The provider's answer has no state.")
        digest = _sha(state)
        try:
            flow = await self.flows.take(digest)  # single use, whatever follows
        except ValidationError:
            log.error("connect flow record unreadable; refusing the callback")
            return self._fail(400, "Sign-in not recognised", "This sign-in cannot be completed.")
        if flow is None:
            return self._fail(
                400,
                "Sign-in not recognised",
                "This sign-in link is unknown, was already used, or has expired.",
            )
        problem = self._binding_problem(request, provider, flow, digest)
        if problem is not None:
            log.warning(
                "connect callback refused (%s): chat %s call %s", problem, flow.chat, flow.call
            )
            return self._fail(
                400 if problem != "principal" else 403,
                "Sign-in not accepted",
                "This sign-in was started elsewhere, or its answer does not match. "
                "Start again from the chat.",
            )
        error = params.get("error")
        if error is not None:
            return await self._provider_error(
                flow, provider, error, params.get("error_description")
            )
        code = params.get("code")
        if not code or len(code) > 4096:
            return await self._finish_failed(
                flow, provider, "error", "the provider sent no authorization code"
            )
        try:
            token, account, subject = await self.exchange.redeem(provider, flow, code)
        except TokenExchangeError as exc:
            log.warning(
                "connect callback: token exchange with %s failed (%s), chat %s call %s",
                provider.name,
                exc.code,
                flow.chat,
                flow.call,
            )
            return await self._finish_failed(
                flow, provider, "error", f"the provider refused the sign-in ({exc.code})"
            )
        granted = token.get("scope")
        scopes = granted.split() if isinstance(granted, str) and granted.strip() else flow.scopes
        connection = await self.connections.save(
            flow.principal, provider, token, account=account, subject=subject, scopes=scopes,
            audit=AuditNote("callback", flow.chat, flow.call), resource=flow.resource,
        )  # fmt: skip
        if flow.retry:
            return result_page(flow, provider, "connected", settled_now=False, account=account)
        try:
            await self._settle(
                flow.chat, flow.principal, flow.call, connection.reference(), source="callback"
            )
        except SettleConflictError as exc:
            return result_page(
                flow, provider, outcome_summary(exc.existing), settled_now=False, account=account
            )
        except (ChatNotFoundError, CallNotFoundError):
            return result_page(flow, provider, "gone", settled_now=False, account=account)
        return result_page(flow, provider, "connected", settled_now=True, account=account)

    async def _settle(
        self, chat_id: str, principal: str, call_id: str, output: dict[str, Any], *,
        source: AuditSource,
    ) -> SettleResult:  # fmt: skip
        """Settle a connect call with the connection result ``output``, as the server
        (which alone may record a connection): its audit entry names ``principal`` and
        ``source`` (``callback``: the OAuth callback; ``browser``: the human chose an
        existing connection in the widget)."""
        with logcontext.bound(chat_id=chat_id, call_id=call_id):
            return await self.runner.settling.settle(
                chat_id, principal, call_id, {"outcome": "output", "output": output},
                by="server", source=source,
            )  # fmt: skip

    def _binding_problem(
        self, request: Request, provider: Provider, flow: FlowRecord, digest: str
    ) -> str | None:
        if flow.provider != provider.name:
            return "provider"  # a state issued for another provider: a mix-up
        cookie = request.cookies.get(_cookie_name(digest))
        if cookie is None or not secrets.compare_digest(_sha(cookie), flow.cookie_hash):
            return "cookie"  # finished in a browser that did not start it
        principal = self._principal(request)
        if principal is None and flow.ticket:
            # Started with a ticket by a page whose user's token lives in its memory:
            # the popup has no identity to show. The principal was proven when the
            # ticket was issued, the ticket was spent by a same-origin navigation of
            # this browser, and the flow cookie proves the answer comes back to it.
            pass
        elif principal is None or not secrets.compare_digest(principal, flow.principal):
            return "principal"
        iss = request.query_params.get("iss")
        if provider.iss_parameter and (iss is None or iss != flow.issuer):
            return "iss"
        if iss is not None and flow.issuer is not None and iss != flow.issuer:
            return "iss"
        return None

    async def _provider_error(
        self, flow: FlowRecord, provider: Provider, error: str, description: str | None
    ) -> Response:
        code = "".join(c for c in error if c.isalnum() or c == "_")[:64] or "error"
        if code == "access_denied":
            return await self._finish_failed(
                flow, provider, "denied", "you did not allow access", description=description
            )
        return await self._finish_failed(
            flow, provider, "error", f"the provider answered {code}", description=description
        )

    async def _finish_failed(
        self,
        flow: FlowRecord,
        provider: Provider,
        reason: str,
        message: str,
        *,
        description: str | None = None,
    ) -> Response:
        output: dict[str, Any] = {"connected": False, "reason": reason}
        if reason == "error":
            output["message"] = message
        summary = reason
        settled_now = False
        if not flow.retry:
            try:
                await self._settle(flow.chat, flow.principal, flow.call, output, source="callback")
                settled_now = True
            except SettleConflictError as exc:
                summary = outcome_summary(exc.existing)
            except (ChatNotFoundError, CallNotFoundError):
                summary = "gone"
        return result_page(
            flow,
            provider,
            summary,
            settled_now=settled_now,
            detail=message,
            description=description,
        )

    @staticmethod
    def _fail(status: int, title: str, message: str) -> Response:
        return connect_page(status=status, title=title, message=message, ok=False)

    # -- use an existing connection, list, delete -------------------------------------

    async def use(self, request: Request) -> Response:
        provider = self.providers.get(request.path_params["provider"])
        principal = self._principal(request)
        if principal is None:
            return json_error(401, "unauthenticated", "no valid session")
        if provider is None:
            return json_error(404, "not_found", "no such provider")
        body = await read_use_body(request)
        if body is None:
            return json_error(
                422, "invalid_body", "send {chatId, toolCallId, connectionId} as strings"
            )
        chat_id, call_id, connection_id = body
        call = await self._call(chat_id, call_id, principal)
        asked = None if call is None else connect_request(call)
        if asked is None:
            return json_error(404, "not_found", "no such connection request")
        connection = await self.connections.get(principal, connection_id)
        if connection is None or connection.provider != provider.name:
            return json_error(404, "not_found", "no such connection")
        if asked.provider != provider.name:
            return json_error(409, "wrong_provider", "the request is for another provider")
        if connection.resource != asked.resource:
            # a token goes only where it was issued for: an MCP server's connection to
            # that server, a plain connection to request_connection
            return json_error(409, "wrong_resource", "that connection is for something else")
        if connection.status != "active":
            return json_error(409, "needs_reconnect", "that connection must be connected again")
        wanted = provider.requested_scopes(asked.scopes)
        missing = [s for s in wanted if s not in connection.scopes]
        if missing:
            return json_error(
                409, "missing_scope", f"that connection lacks {', '.join(missing)}; connect again"
            )
        result = await self._settle(
            chat_id, principal, call_id, connection.reference(), source="browser"
        )
        return JSONResponse({"outcome": dict(result.call.outcome or {})})

    async def list_connections(self, request: Request) -> Response:
        principal = self._principal(request)
        if principal is None:
            return json_error(401, "unauthenticated", "no valid session")
        provider = request.query_params.get("provider")
        found = await self.connections.list(principal, provider)
        names = self.providers.names()
        return JSONResponse(
            {
                "connections": [
                    {**c.public(), "providerName": names.get(c.provider, c.provider)} for c in found
                ]
            }
        )

    async def delete_connection(self, request: Request) -> Response:
        principal = self._principal(request)
        if principal is None:
            return json_error(401, "unauthenticated", "no valid session")
        connection_id = str(request.path_params["connection_id"])
        deleted = len(connection_id) <= 64 and await self.connections.delete(
            principal, connection_id, audit=AuditNote("browser")
        )
        if not deleted:
            return json_error(404, "not_found", "no such connection")
        return Response(status_code=204)

    # -- settle listener ----------------------------------------------------------------

    async def on_settled(self, settled: Settled) -> None:
        """A connect call the browser settled (Not now, Cancel, an error) forgets its
        flow: a callback arriving later with that state is refused."""
        if settled.by != "client" or connect_request(settled.call) is None:
            return
        await self.flows.forget(settled.chat_id, settled.call.tool_call_id)
