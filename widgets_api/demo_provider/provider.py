"""The demo provider's endpoints: Starlette handlers under the issuer's path, which read
each request in full on the event loop and run authlib and Redis in worker threads.

One confidential client; authorization code with PKCE; a consent form bound to the
browser that opened it; RFC 8414 metadata; a userinfo endpoint behind bearer tokens.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

from authlib.common.security import is_secure_transport
from authlib.oauth2.rfc6749 import AuthorizationCodeGrant, OAuth2Error, ResourceProtector
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc9207 import AuthorizationServerMetadata as IssMetadata
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from parkway.widgets_api.demo_provider.pages import Consent, Refusal, consent_page
from parkway.widgets_api.demo_provider.records import (
    AUTH_METHODS,
    AUTHORIZE_PARAMS,
    PKCE_PARAMS,
    SCOPES,
    Client,
    Token,
)
from parkway.widgets_api.demo_provider.server import (
    Bearer,
    HttpInput,
    Reply,
    Server,
    hide_token_records,
)
from parkway.widgets_api.demo_provider.storage import CONSENT_TTL_S, Store, digest_of

__all__ = ["DemoProvider"]

log = logging.getLogger(__name__)

ACCOUNT = re.compile(r"[A-Za-z0-9_.-]{1,40}")
MAX_BODY = 16 * 1024
BROWSER_COOKIE = "pw_demo_oauth_browser"


def _check_url(name: str, url: str) -> None:
    parts = urlsplit(url)
    if not is_secure_transport(url) or parts.query or parts.fragment:
        raise ValueError(f"{name} {url!r} must be https (or http on loopback), no query/fragment")


async def _read_body(request: Request) -> bytes | None:
    """The body, or ``None`` past ``MAX_BODY``. Served by Parkway, the server's body
    reader (``app.state.reader``) reads it: the size limit holds while reading, a client
    trickling the body times out, and a refusal (413, 408) has the server's error shape.
    Served on its own (its tests), a plain read that stops at the limit."""
    reader = getattr(request.app.state, "reader", None)
    if reader is not None:
        body: bytes = await reader.body(request, limit=MAX_BODY)
        return body
    read = bytearray()
    async for chunk in request.stream():
        if len(read) + len(chunk) > MAX_BODY:
            return None
        read += chunk
    return bytes(read)


async def _read_form(request: Request) -> tuple[tuple[str, str], ...] | Response:
    body = await _read_body(request)
    if body is None:
        return JSONResponse({"error": "invalid_request"}, status_code=413)
    ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        return ()
    try:
        return tuple(parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=64))
    except ValueError:  # too many fields, or not UTF-8
        return JSONResponse({"error": "invalid_request"}, status_code=400)


class DemoProvider:
    """The demo provider for one confidential client, served under the issuer's path.

    ``issuer`` comes from configuration, never from a request's ``Host``; it must be
    https, or http on loopback. Every code redemption issues a refresh token (asked for
    ``offline_access`` or not); each refresh rotates it. ``route_mount`` is the path of
    its routes inside the app when it is not the issuer's path: an app mounted by a host
    application under ``/pw`` has the issuer ``.../pw/demo-oauth`` and the routes
    ``/demo-oauth/...``.
    """

    def __init__(
        self,
        *,
        redis_url: str,
        issuer: str,
        client_id: str,
        client_secret: str,
        redirect_uris: Sequence[str],
        route_mount: str | None = None,
        access_token_ttl_s: int = 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_url("issuer", issuer)
        for uri in redirect_uris:
            _check_url("redirect URI", uri)
        if not client_id or not client_secret or not redirect_uris:
            raise ValueError("the demo provider needs a client id, a secret and a redirect URI")
        self._issuer = issuer
        self._base = issuer.rstrip("/")
        self._mount = urlsplit(self._base).path
        # Where its routes are inside the app: the issuer's path, less the prefix of a
        # host application that mounts the app (the pages' links keep the whole path).
        self._routes_at = self._mount if route_mount is None else route_mount.rstrip("/")
        self._metadata: dict[str, Any] = {
            "issuer": issuer,
            "authorization_endpoint": f"{self._base}/authorize",
            "token_endpoint": f"{self._base}/token",
            "revocation_endpoint": f"{self._base}/revoke",
            "userinfo_endpoint": f"{self._base}/userinfo",
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
            "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
            "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
            "scopes_supported": list(SCOPES),
        }
        AuthorizationServerMetadata(self._metadata).validate(metadata_classes=[IssMetadata])
        hide_token_records()
        self._store = Store(redis_url, clock, access_token_ttl_s)
        client = Client(client_id, client_secret.encode(), tuple(redirect_uris))
        self._server = Server(self._store, client, issuer)
        self._protector = ResourceProtector()
        self._protector.register_token_validator(Bearer(self._store))

    @property
    def mount_path(self) -> str:
        """The path part of the issuer, e.g. ``/demo-oauth``."""
        return self._mount

    def metadata(self) -> dict[str, Any]:
        """The RFC 8414 authorization server metadata, as served."""
        return cast(dict[str, Any], json.loads(json.dumps(self._metadata)))

    def routes(self) -> list[BaseRoute]:
        """Starlette routes, their paths already under ``mount_path`` (or the
        ``route_mount`` given)."""
        m = self._routes_at
        routes: list[BaseRoute] = [
            Route(f"{m}/.well-known/oauth-authorization-server", self._serve_metadata),
            Route(f"{m}/authorize", self._authorize, methods=["GET", "POST"]),
            Route(f"{m}/token", partial(self._post, "token"), methods=["POST"]),
            Route(f"{m}/revoke", partial(self._post, "revoke"), methods=["POST"]),
            Route(f"{m}/userinfo", self._userinfo, methods=["GET"]),
        ]
        if m:  # RFC 8414 §3.1 puts the well-known segment before the issuer's path
            routes.append(
                Route(f"/.well-known/oauth-authorization-server{m}", self._serve_metadata)
            )
        return routes

    def close(self) -> None:
        self._store.redis.close()

    # -- endpoints (event loop) -------------------------------------------------------

    async def _serve_metadata(self, request: Request) -> Response:
        return JSONResponse(self._metadata)

    async def _authorize(self, request: Request) -> Response:
        browser = request.cookies.get(BROWSER_COOKIE, "")
        if request.method == "POST":
            return await self._decide(request, browser)
        if not re.fullmatch(r"[A-Za-z0-9_-]{43}", browser):
            browser = secrets.token_urlsafe(32)
        params = tuple(request.query_params.multi_items())
        http = HttpInput("GET", f"{self._base}/authorize", params, request.headers)
        outcome = await asyncio.to_thread(self._start_consent, http, browser)
        if isinstance(outcome, Reply):
            return outcome.to_response()
        if isinstance(outcome, Refusal):
            return outcome.page()
        page = consent_page(outcome, mount=self._mount)
        # Binds the form to this browser: a consent id alone, handed to someone else, fails.
        page.set_cookie(
            BROWSER_COOKIE, browser, max_age=CONSENT_TTL_S, path=f"{self._mount}/authorize",
            secure=self._issuer.startswith("https:"), httponly=True, samesite="strict",
        )  # fmt: skip
        return page

    async def _decide(self, request: Request, browser: str) -> Response:
        form = await _read_form(request)
        if isinstance(form, Response):
            return form
        fields = dict(form)
        decision, account = fields.get("decision"), fields.get("account", "")
        if decision not in ("allow", "deny"):
            return Refusal("invalid_request", "Choose Allow or Deny.").page()
        if decision == "allow" and not ACCOUNT.fullmatch(account):
            rule = "An account name is 1 to 40 letters, digits, '_', '.' or '-'."
            return Refusal("invalid_request", rule).page()  # the form still works
        user = account if decision == "allow" else None
        consent_id = fields.get("consent", "")
        outcome = await asyncio.to_thread(self._finish_consent, consent_id, browser, user)
        if isinstance(outcome, Refusal):
            return outcome.page()
        return outcome.to_response(see_other=True)

    async def _userinfo(self, request: Request) -> Response:
        http = HttpInput("GET", f"{self._base}/userinfo", (), request.headers)
        return (await asyncio.to_thread(self._whoami, http)).to_response()

    async def _post(self, endpoint: str, request: Request) -> Response:
        form = await _read_form(request)
        if isinstance(form, Response):
            return form
        http = HttpInput("POST", f"{self._base}/{endpoint}", form, request.headers)
        if endpoint == "token":
            respond = partial(self._server.create_token_response, http)
        else:
            respond = partial(self._server.create_endpoint_response, "revocation", http)
        reply: Reply = await asyncio.to_thread(respond)
        return reply.to_response()

    # -- authlib and Redis (worker threads) -------------------------------------------

    def _start_consent(self, http: HttpInput, browser: str) -> Reply | Refusal | Consent:
        grant = self._validate(http)
        if not isinstance(grant, AuthorizationCodeGrant):
            return grant
        request = grant.request
        wanted = AUTHORIZE_PARAMS + PKCE_PARAMS
        params = [[k, v] for k, v in request.payload.data.items() if k in wanted]
        consent_id = secrets.token_urlsafe(32)
        expires_at = self._store.clock() + CONSENT_TTL_S
        record = {"params": params, "browser": digest_of(browser), "expires_at": expires_at}
        self._store.put("consent", consent_id, record, CONSENT_TTL_S)
        client_id, redirect_uri = request.client.client_id, request.payload.redirect_uri
        return Consent(consent_id, client_id, request.scope, redirect_uri)

    def _finish_consent(self, consent_id: str, browser: str, user: str | None) -> Reply | Refusal:
        record = self._store.take_consent(consent_id) if consent_id else None
        if record is None or not hmac.compare_digest(record["browser"], digest_of(browser)):
            return Refusal("invalid_request", "This consent form expired or was already used.")
        params = tuple((k, v) for k, v in record["params"])
        grant = self._validate(HttpInput("GET", f"{self._base}/authorize", params, Headers()))
        if not isinstance(grant, AuthorizationCodeGrant):
            return grant
        create = self._server.create_authorization_response
        return cast(Reply, create(grant.request, grant_user=user, grant=grant))

    def _validate(self, http: HttpInput) -> AuthorizationCodeGrant | Reply | Refusal:
        try:
            return self._server.get_consent_grant(http)
        except OAuth2Error as error:
            if error.redirect_uri:  # authlib sets it only once client and URI are verified
                reply = cast(Reply, self._server.handle_error_response(None, error))
                self._server.iss.add_issuer_parameter(self._server, reply)
                return reply
            return Refusal(error.error, error.get_error_description() or "")
        except ValueError:  # authlib refuses to build an error text holding '"' or '\'
            return Refusal("invalid_request", "The authorization request is malformed.")

    def _whoami(self, http: HttpInput) -> Reply:
        try:
            token: Token = self._protector.validate_request(None, http)
        except OAuth2Error as error:
            return Reply(*error())
        claims = {"sub": token.account, "preferred_username": token.account}
        return Reply(200, claims, [("Content-Type", "application/json")])
