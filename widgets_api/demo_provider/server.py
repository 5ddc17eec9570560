"""authlib's authorization server for the demo provider, and its Starlette adapters.

authlib's server callbacks are synchronous: they run in ``asyncio.to_thread``, and the
Starlette handlers hand them a request already read in full (:class:`HttpInput`); what
authlib answers comes back as a :class:`Reply`, turned into a Starlette response on the
event loop. PKCE (S256) is required on every authorization request; refresh tokens
rotate on every use, with reuse detection; RFC 7009 revocation and RFC 9207 ``iss``.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from authlib.oauth2.rfc6749 import (
    AuthorizationCodeGrant,
    AuthorizationServer,
    InvalidGrantError,
    InvalidRequestError,
    JsonRequest,
    OAuth2Payload,
    OAuth2Request,
    RefreshTokenGrant,
)
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge, create_s256_code_challenge
from authlib.oauth2.rfc9207 import IssuerParameter
from starlette.datastructures import Headers
from starlette.responses import Response

from parkway.widgets_api.demo_provider.records import (
    AUTH_METHODS,
    PKCE_PARAMS,
    SCOPES,
    Client,
    Code,
    Token,
)
from parkway.widgets_api.demo_provider.storage import CODE_TTL_S, Store, digest_of

__all__ = ["Bearer", "HttpInput", "Reply", "Server", "hide_token_records"]

log = logging.getLogger(__name__)


def _s256_matches(verifier: str, challenge: str) -> bool:
    return hmac.compare_digest(create_s256_code_challenge(verifier), challenge)


def _new_token(**_: Any) -> str:
    return secrets.token_urlsafe(32)


# -- Starlette <-> authlib ---------------------------------------------------------------


@dataclass(frozen=True)
class HttpInput:
    """A request read in full on the event loop, so authlib (in a worker thread) never
    touches Starlette's async request. ``uri`` is built from the issuer, never ``Host``."""

    method: str
    uri: str
    params: tuple[tuple[str, str], ...]  # the query of a GET, the form of a POST
    headers: Headers
    body: bytes = b""


class _Payload(OAuth2Payload):  # type: ignore[misc]
    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._datalist: dict[str, list[str]] = {}
        for name, value in pairs:
            self._datalist.setdefault(name, []).append(value)
        self._data = {name: values[0] for name, values in self._datalist.items()}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> dict[str, list[str]]:
        return self._datalist


class _OAuth2Request(OAuth2Request):  # type: ignore[misc]
    def __init__(self, http: HttpInput) -> None:
        super().__init__(http.method, http.uri, headers=http.headers)
        self.payload = _Payload(http.params)
        self._params = dict(self.payload.data)

    @property
    def args(self) -> dict[str, str]:
        return self._params if self.method == "GET" else {}

    @property
    def form(self) -> dict[str, str]:
        return self._params if self.method == "POST" else {}


@dataclass
class Reply:
    """authlib's answer (``handle_response``), with the ``location`` that the RFC 9207
    extension rewrites; turned into a Starlette response back on the event loop."""

    status: int
    body: Any
    headers: list[tuple[str, str]]

    @property
    def location(self) -> str | None:
        return next((v for k, v in self.headers if k.lower() == "location"), None)

    @location.setter
    def location(self, value: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != "location"]
        self.headers.append(("Location", value))

    def to_response(self, *, see_other: bool = False) -> Response:
        headers = {**dict(self.headers), "Cache-Control": "no-store"}
        body = json.dumps(self.body) if isinstance(self.body, dict) else str(self.body)
        # RFC 9700 §4.12: a redirect answering a form post is a 303, never a 307.
        status = 303 if see_other and self.status == 302 else self.status
        return Response(body, status_code=status, headers=headers)


# -- authlib server parts -----------------------------------------------------------------


class _S256Required(CodeChallenge):  # type: ignore[misc]
    """PKCE on every authorization request, S256 only (RFC 9700 §2.1.1). authlib's
    ``required`` only forces PKCE at the token endpoint, and only for public clients."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]
    CODE_CHALLENGE_METHODS = {"S256": _s256_matches}

    def validate_code_challenge(self, grant: Any, redirect_uri: Any) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("Missing 'code_challenge': PKCE (S256) is required.")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("'code_challenge_method' must be S256.")
        super().validate_code_challenge(grant, redirect_uri)


class _CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)

    def save_authorization_code(self, code: str, request: Any) -> None:
        store: Store = self.server.store
        data = request.payload.data
        record = {
            "grant_id": secrets.token_urlsafe(16),
            "client_id": request.client.client_id,
            "redirect_uri": request.payload.redirect_uri,
            "scope": request.scope,
            "account": request.user,
            **{name: data[name] for name in PKCE_PARAMS},
            "expires_at": store.clock() + CODE_TTL_S,
        }
        store.put("code", code, record, CODE_TTL_S)

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        found: Code | None = self.server.store.consume_code(code)
        return found if found is not None and found.client_id == client.client_id else None

    def delete_authorization_code(self, authorization_code: Code) -> None:
        """Nothing left to do: ``query_authorization_code`` consumed it."""

    def authenticate_user(self, authorization_code: Code) -> str:
        return authorization_code.account


class _RefreshGrant(RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotate on every use

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        store: Store = self.server.store
        return store.find_refresh(refresh_token)

    def authenticate_user(self, refresh_token: Token) -> str:
        return refresh_token.account

    def revoke_old_credential(self, refresh_token: Token) -> None:
        """Nothing left to do: ``save_token`` retired it in the step that issued the new."""


class _Revocation(RevocationEndpoint):  # type: ignore[misc]
    CLIENT_AUTH_METHODS = list(AUTH_METHODS)

    def query_token(self, token_string: str, token_type_hint: str | None) -> Token | None:
        store: Store = self.server.store
        found = store.find_access(token_string)
        return found or store.find_refresh(token_string)

    def revoke_token(self, token: Token, request: Any) -> None:
        self.server.store.revoke(token)


class Bearer(BearerTokenValidator):  # type: ignore[misc]
    def __init__(self, store: Store) -> None:
        super().__init__(realm="demo-oauth")
        self.store = store

    def authenticate_token(self, token_string: str) -> Token | None:
        return self.store.find_access(token_string)


class _Issuer(IssuerParameter):  # type: ignore[misc]
    def __init__(self, issuer: str) -> None:
        self.issuer = issuer

    def get_issuer(self) -> str:
        return self.issuer


class Server(AuthorizationServer):  # type: ignore[misc]
    """authlib's authorization server with the Starlette adapters and Redis storage."""

    def __init__(self, store: Store, client: Client, issuer: str) -> None:
        super().__init__(scopes_supported=list(SCOPES))
        self.store = store
        self.client = client
        generator = BearerTokenGenerator(_new_token, _new_token, store.access_ttl_s)
        self.register_token_generator("default", generator)
        self.register_grant(_CodeGrant, [_S256Required()])
        self.register_grant(_RefreshGrant)
        self.register_endpoint(_Revocation)
        self.iss = _Issuer(issuer)
        self.register_extension(self.iss)

    def query_client(self, client_id: str | None) -> Client | None:
        return self.client if client_id == self.client.client_id else None

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        code: Code | None = request.authorization_code
        source: Code | Token = code or request.refresh_token
        access = Token(
            "access_token", digest_of(token["access_token"]), source.grant_id,
            source.client_id, source.account, token.get("scope", ""),
            expires_at=self.store.clock() + int(token["expires_in"]),
        )  # fmt: skip
        if code is not None:
            if not self.store.issue(code, token["refresh_token"], access):
                raise InvalidGrantError("The authorization code was used more than once.")
        else:
            rotated = self.store.rotate(request.refresh_token, token["refresh_token"], access)
            if rotated == -1:
                log.warning("demo-oauth: a rotated refresh token was reused; grant revoked")
            if rotated != 1:
                raise InvalidGrantError("The refresh token is no longer valid.")

    def create_oauth2_request(self, request: HttpInput | OAuth2Request) -> OAuth2Request:
        return request if isinstance(request, OAuth2Request) else _OAuth2Request(request)

    def create_json_request(self, request: HttpInput) -> JsonRequest:
        json_request = JsonRequest(request.method, request.uri, request.headers)
        json_request.payload = SimpleNamespace(data=json.loads(request.body or b"{}"))
        return json_request

    def handle_response(self, status: int, body: Any, headers: Sequence[tuple[str, str]]) -> Reply:
        return Reply(status, body, list(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        log.debug("demo-oauth: %s", name)  # kwargs hold tokens: never logged


class _NoTokenRecords(logging.Filter):
    """authlib's grants log each issued token at DEBUG ("Issue token %r to %r")."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Issue token")


def hide_token_records() -> None:
    """Keep issued tokens out of the logs, whatever level authlib's loggers are at."""
    for name in ("authorization_code", "refresh_token"):
        logger = logging.getLogger(f"authlib.oauth2.rfc6749.grants.{name}")
        if not any(isinstance(f, _NoTokenRecords) for f in logger.filters):
            logger.addFilter(_NoTokenRecords())
