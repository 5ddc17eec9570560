"""A demo OAuth 2.0 provider on authlib's server parts, so ``make run`` can finish a
connect flow with no external provider.

One confidential client; authorization code with PKCE (S256, required on every request);
refresh tokens issued with every code and rotated on every use, with reuse detection;
RFC 7009 revocation, RFC 8414 metadata, RFC 9207 ``iss`` on every authorization response.

authlib's server callbacks are synchronous: they run in ``asyncio.to_thread`` on a
synchronous Redis client, and the Starlette handlers hand them a request already read in
full (``_HttpInput``). Redis keys hold SHA-256 digests of codes and tokens, never the
values, so a leaked keyspace yields nothing usable; every key expires.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

import redis
from authlib.common.security import is_secure_transport
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeGrant,
    AuthorizationServer,
    InvalidGrantError,
    InvalidRequestError,
    JsonRequest,
    OAuth2Error,
    OAuth2Payload,
    OAuth2Request,
    RefreshTokenGrant,
    ResourceProtector,
)
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge, create_s256_code_challenge
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc9207 import AuthorizationServerMetadata as IssMetadata
from authlib.oauth2.rfc9207 import IssuerParameter
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from runner.keys import demo_oauth_key

__all__ = ["DemoProvider"]

log = logging.getLogger(__name__)

SCOPES = ("profile", "email", "offline_access", "repo", "read:org")
DEFAULT_SCOPE = "profile"  # what a request without `scope` is given (RFC 6749 §3.3)
AUTH_METHODS = ("client_secret_basic", "client_secret_post")
AUTHORIZE_PARAMS = ("response_type", "client_id", "redirect_uri", "scope", "state")
PKCE_PARAMS = ("code_challenge", "code_challenge_method")
ACCOUNT = re.compile(r"[A-Za-z0-9_.-]{1,40}")
CONSENT_TTL_S = 600  # a consent form works once, within 10 minutes
CODE_TTL_S = 60  # RFC 9700 §4.5: codes are short-lived and single-use
SPENT_CODE_TTL_S = 600  # a redeemed code is remembered this long, to catch a replay
GRANT_TTL_S = 30 * 86400  # a grant lives 30 days from its last refresh
MAX_BODY = 16 * 1024
BROWSER_COOKIE = "pw_demo_oauth_browser"

_Args = list[str | float]  # a script's ARGV


def _key(kind: str, ident: str) -> str:
    return demo_oauth_key(kind, ident)


# Redeem a code once. KEYS: 1 code. ARGV: 1 TTL (s) of the spent marker.
# Returns {'fresh', record JSON} on first use; {'replay', grant id or ''} on a later
# one, after marking the code revoked; false for an unknown or expired code.
CONSUME_CODE = """
local v = redis.call('GET', KEYS[1])
if not v then return false end
if string.sub(v, 1, 1) == '{' then
  redis.call('SET', KEYS[1], 'spent:' .. cjson.decode(v)['grant_id'], 'EX', ARGV[1])
  return {'fresh', v}
end
redis.call('SET', KEYS[1], 'revoked', 'KEEPTTL')
if v == 'revoked' then return {'replay', ''} end
return {'replay', string.sub(v, 7)}
"""

# Start the grant of a redeemed code, unless a replay revoked the code meanwhile.
# KEYS: 1 code, 2 grant, 3 refresh, 4 access. ARGV: 1 grant id, 2 client id, 3 account,
# 4 scope, 5 refresh digest, 6 grant TTL, 7 access JSON, 8 access TTL. Returns 1 | 0.
ISSUE = """
if redis.call('GET', KEYS[1]) ~= 'spent:' .. ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'client_id', ARGV[2], 'account', ARGV[3], 'scope', ARGV[4],
           'refresh', ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[6])
redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[6])
redis.call('SET', KEYS[4], ARGV[7], 'EX', ARGV[8])
return 1
"""

# Rotate a refresh token: compare-and-set the grant's current refresh digest.
# KEYS: 1 grant, 2 new refresh, 3 new access. ARGV: 1 presented digest, 2 new digest,
# 3 grant id, 4 grant TTL, 5 access JSON, 6 access TTL.
# Returns 1 rotated | 0 no such grant | -1 the presented token was already rotated: the
# grant is deleted (RFC 9700 §4.14 reuse detection), and its access tokens die with it.
ROTATE = """
local current = redis.call('HGET', KEYS[1], 'refresh')
if not current then return 0 end
if current ~= ARGV[1] then redis.call('DEL', KEYS[1]) return -1 end
redis.call('HSET', KEYS[1], 'refresh', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
redis.call('SET', KEYS[3], ARGV[5], 'EX', ARGV[6])
return 1
"""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _s256_matches(verifier: str, challenge: str) -> bool:
    return hmac.compare_digest(create_s256_code_challenge(verifier), challenge)


def _new_token(**_: Any) -> str:
    return secrets.token_urlsafe(32)


# -- Starlette <-> authlib ---------------------------------------------------------------


@dataclass(frozen=True)
class _HttpInput:
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
    def __init__(self, http: _HttpInput) -> None:
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
class _Reply:
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


# -- the client, codes and tokens (authlib's mixins, by duck typing) ---------------------


@dataclass(frozen=True, repr=False)
class _Client:
    client_id: str
    secret: bytes
    redirect_uris: tuple[str, ...]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        return None  # every request must name its redirect_uri; it is compared exactly

    def get_allowed_scope(self, scope: str | None) -> str:
        return " ".join(dict.fromkeys((scope or "").split())) or DEFAULT_SCOPE

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return hmac.compare_digest(client_secret.encode(), self.secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in AUTH_METHODS

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass(frozen=True)
class _Code:
    grant_id: str
    client_id: str
    redirect_uri: str
    scope: str
    account: str
    code_challenge: str
    code_challenge_method: str
    expires_at: float
    digest: str = ""  # of the code itself (the key), not stored in the record

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass(frozen=True)
class _Token:
    """An access token, or a refresh token (which stands for its grant)."""

    kind: str  # "access_token" | "refresh_token"
    digest: str
    grant_id: str
    client_id: str
    account: str
    scope: str
    expires_at: float = 0.0
    expired: bool = False

    def check_client(self, client: _Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def is_expired(self) -> bool:
        return self.expired

    def is_revoked(self) -> bool:
        return False  # revoked tokens are deleted, so never found

    def record(self) -> str:
        fields = ("grant_id", "client_id", "account", "scope", "expires_at")
        return json.dumps({name: getattr(self, name) for name in fields})


class _Store:
    """The provider's Redis state, on a synchronous client (called from worker threads)."""

    def __init__(self, redis_url: str, clock: Callable[[], float], access_ttl_s: int) -> None:
        self.redis = redis.Redis.from_url(
            redis_url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5
        )
        self.clock = clock
        self.access_ttl_s = access_ttl_s
        self._consume = self.redis.register_script(CONSUME_CODE)
        self._issue = self.redis.register_script(ISSUE)
        self._rotate = self.redis.register_script(ROTATE)

    def put(self, kind: str, secret: str, record: dict[str, Any], ttl_s: int) -> None:
        self.redis.set(_key(kind, _digest(secret)), json.dumps(record), ex=ttl_s)

    def take_consent(self, consent_id: str) -> dict[str, Any] | None:
        raw = cast(str | None, self.redis.getdel(_key("consent", _digest(consent_id))))
        record: dict[str, Any] | None = json.loads(raw) if raw else None
        return record if record and record["expires_at"] > self.clock() else None

    def consume_code(self, code: str) -> _Code | None:
        digest = _digest(code)
        result = self._consume(keys=[_key("code", digest)], args=[SPENT_CODE_TTL_S])
        if not result:
            return None
        if result[0] == "replay":  # RFC 6749 §4.1.2: revoke what the first use issued
            if result[1]:
                self.redis.delete(_key("grant", result[1]))
            return None
        found = _Code(**json.loads(result[1]), digest=digest)
        return found if found.expires_at > self.clock() else None

    def issue(self, code: _Code, refresh_token: str, access: _Token) -> bool:
        refresh = _digest(refresh_token)
        keys = [_key("code", code.digest), _key("grant", code.grant_id),
                _key("refresh", refresh), _key("access", access.digest)]  # fmt: skip
        args: _Args = [code.grant_id, code.client_id, code.account, code.scope, refresh,
                       GRANT_TTL_S, access.record(), self.access_ttl_s]  # fmt: skip
        return bool(self._issue(keys=keys, args=args))

    def rotate(self, old: _Token, refresh_token: str, access: _Token) -> int:
        new = _digest(refresh_token)
        keys = [_key("grant", old.grant_id), _key("refresh", new), _key("access", access.digest)]
        args: _Args = [old.digest, new, old.grant_id, GRANT_TTL_S, access.record(),
                       self.access_ttl_s]  # fmt: skip
        return int(self._rotate(keys=keys, args=args))

    def find_refresh(self, refresh_token: str) -> _Token | None:
        """The grant a refresh token belongs to, also when it was rotated since: that is
        reuse, which ``rotate`` answers by revoking the grant."""
        digest = _digest(refresh_token)
        grant_id = cast(str | None, self.redis.get(_key("refresh", digest)))
        grant = cast(dict[str, str], self.redis.hgetall(_key("grant", grant_id or "-")))
        if not grant_id or not grant:
            return None
        return _Token("refresh_token", digest, grant_id, grant["client_id"],
                      grant["account"], grant["scope"])  # fmt: skip

    def find_access(self, access_token: str) -> _Token | None:
        digest = _digest(access_token)
        raw = cast(str | None, self.redis.get(_key("access", digest)))
        if not raw:
            return None
        record = json.loads(raw)
        if not self.redis.exists(_key("grant", record["grant_id"])):
            return None  # its grant was revoked
        expired = record["expires_at"] <= self.clock()
        return _Token("access_token", digest, expired=expired, **record)

    def revoke(self, token: _Token) -> None:
        if token.kind == "access_token":
            self.redis.delete(_key("access", token.digest))
        else:  # a refresh token takes its grant, and so every token of it, along
            self.redis.delete(_key("grant", token.grant_id))


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
        store: _Store = self.server.store
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

    def query_authorization_code(self, code: str, client: _Client) -> _Code | None:
        found: _Code | None = self.server.store.consume_code(code)
        return found if found is not None and found.client_id == client.client_id else None

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        """Nothing left to do: ``query_authorization_code`` consumed it."""

    def authenticate_user(self, authorization_code: _Code) -> str:
        return authorization_code.account


class _RefreshGrant(RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotate on every use

    def authenticate_refresh_token(self, refresh_token: str) -> _Token | None:
        store: _Store = self.server.store
        return store.find_refresh(refresh_token)

    def authenticate_user(self, refresh_token: _Token) -> str:
        return refresh_token.account

    def revoke_old_credential(self, refresh_token: _Token) -> None:
        """Nothing left to do: ``save_token`` retired it in the step that issued the new."""


class _Revocation(RevocationEndpoint):  # type: ignore[misc]
    CLIENT_AUTH_METHODS = list(AUTH_METHODS)

    def query_token(self, token_string: str, token_type_hint: str | None) -> _Token | None:
        store: _Store = self.server.store
        found = store.find_access(token_string)
        return found or store.find_refresh(token_string)

    def revoke_token(self, token: _Token, request: Any) -> None:
        self.server.store.revoke(token)


class _Bearer(BearerTokenValidator):  # type: ignore[misc]
    def __init__(self, store: _Store) -> None:
        super().__init__(realm="demo-oauth")
        self.store = store

    def authenticate_token(self, token_string: str) -> _Token | None:
        return self.store.find_access(token_string)


class _Issuer(IssuerParameter):  # type: ignore[misc]
    def __init__(self, issuer: str) -> None:
        self.issuer = issuer

    def get_issuer(self) -> str:
        return self.issuer


class _Server(AuthorizationServer):  # type: ignore[misc]
    """authlib's authorization server with the Starlette adapters and Redis storage."""

    def __init__(self, store: _Store, client: _Client, issuer: str) -> None:
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

    def query_client(self, client_id: str | None) -> _Client | None:
        return self.client if client_id == self.client.client_id else None

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        code: _Code | None = request.authorization_code
        source: _Code | _Token = code or request.refresh_token
        access = _Token(
            "access_token", _digest(token["access_token"]), source.grant_id,
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

    def create_oauth2_request(self, request: _HttpInput | OAuth2Request) -> OAuth2Request:
        return request if isinstance(request, OAuth2Request) else _OAuth2Request(request)

    def create_json_request(self, request: _HttpInput) -> JsonRequest:
        json_request = JsonRequest(request.method, request.uri, request.headers)
        json_request.payload = SimpleNamespace(data=json.loads(request.body or b"{}"))
        return json_request

    def handle_response(self, status: int, body: Any, headers: Sequence[tuple[str, str]]) -> _Reply:
        return _Reply(status, body, list(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        log.debug("demo-oauth: %s", name)  # kwargs hold tokens: never logged


class _NoTokenRecords(logging.Filter):
    """authlib's grants log each issued token at DEBUG ("Issue token %r to %r")."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Issue token")


# -- pages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Refusal:
    """An error shown on the provider's own page, never sent to an unverified URI."""

    error: str
    description: str

    def page(self) -> Response:
        body = (
            "<h1>Demo OAuth provider: request refused</h1>"
            f"<p><code>{html.escape(self.error)}</code> {html.escape(self.description)}</p>"
        )
        return _page("Request refused", body, status=400)


@dataclass(frozen=True)
class _Consent:
    consent_id: str
    client_id: str
    scope: str
    redirect_uri: str


def _page(title: str, body: str, *, status: int = 200, form_target: str = "") -> Response:
    # Clickjacking (RFC 9700 §4.16), leaks through Referer and caches (§4.2), and nothing
    # external. form-action names the client's origin too: browsers check the redirect
    # that answers the form post against it.
    csp = "default-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    headers = {
        "Content-Security-Policy": csp + form_target,
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    doc = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )
    return HTMLResponse(doc, status_code=status, headers=headers)


def _check_url(name: str, url: str) -> None:
    parts = urlsplit(url)
    if not is_secure_transport(url) or parts.query or parts.fragment:
        raise ValueError(f"{name} {url!r} must be https (or http on loopback), no query/fragment")


async def _read_form(request: Request) -> tuple[tuple[str, str], ...] | Response:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
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
    ``offline_access`` or not); each refresh rotates it.
    """

    def __init__(
        self,
        *,
        redis_url: str,
        issuer: str,
        client_id: str,
        client_secret: str,
        redirect_uris: Sequence[str],
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
        for name in ("authorization_code", "refresh_token"):
            logger = logging.getLogger(f"authlib.oauth2.rfc6749.grants.{name}")
            if not any(isinstance(f, _NoTokenRecords) for f in logger.filters):
                logger.addFilter(_NoTokenRecords())
        self._store = _Store(redis_url, clock, access_token_ttl_s)
        client = _Client(client_id, client_secret.encode(), tuple(redirect_uris))
        self._server = _Server(self._store, client, issuer)
        self._protector = ResourceProtector()
        self._protector.register_token_validator(_Bearer(self._store))

    @property
    def mount_path(self) -> str:
        """The path part of the issuer, e.g. ``/demo-oauth``."""
        return self._mount

    def metadata(self) -> dict[str, Any]:
        """The RFC 8414 authorization server metadata, as served."""
        return cast(dict[str, Any], json.loads(json.dumps(self._metadata)))

    def routes(self) -> list[BaseRoute]:
        """Starlette routes, their paths already under ``mount_path``."""
        m = self._mount
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
        http = _HttpInput("GET", f"{self._base}/authorize", params, request.headers)
        outcome = await asyncio.to_thread(self._start_consent, http, browser)
        if isinstance(outcome, _Reply):
            return outcome.to_response()
        if isinstance(outcome, _Refusal):
            return outcome.page()
        scopes = ", ".join(outcome.scope.split())
        body = (
            f"<h1>Demo OAuth provider — {html.escape(outcome.client_id)} asks for: "
            f"{html.escape(scopes)}</h1>"
            f'<form method="post" action="{html.escape(self._mount)}/authorize">'
            f'<input type="hidden" name="consent" value="{html.escape(outcome.consent_id)}">'
            '<p><label>Account name <input name="account" value="demo-user" required '
            'pattern="[A-Za-z0-9_.\\-]{1,40}" maxlength="40" autocomplete="off"></label></p>'
            '<button type="submit" name="decision" value="allow" id="allow">Allow</button> '
            '<button type="submit" name="decision" value="deny" id="deny" formnovalidate>'
            "Deny</button></form>"
        )
        target = urlsplit(outcome.redirect_uri)
        page = _page("Demo OAuth provider", body, form_target=f" {target.scheme}://{target.netloc}")
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
            return _Refusal("invalid_request", "Choose Allow or Deny.").page()
        if decision == "allow" and not ACCOUNT.fullmatch(account):
            rule = "An account name is 1 to 40 letters, digits, '_', '.' or '-'."
            return _Refusal("invalid_request", rule).page()  # the form still works
        user = account if decision == "allow" else None
        consent_id = fields.get("consent", "")
        outcome = await asyncio.to_thread(self._finish_consent, consent_id, browser, user)
        if isinstance(outcome, _Refusal):
            return outcome.page()
        return outcome.to_response(see_other=True)

    async def _userinfo(self, request: Request) -> Response:
        http = _HttpInput("GET", f"{self._base}/userinfo", (), request.headers)
        return (await asyncio.to_thread(self._whoami, http)).to_response()

    async def _post(self, endpoint: str, request: Request) -> Response:
        form = await _read_form(request)
        if isinstance(form, Response):
            return form
        http = _HttpInput("POST", f"{self._base}/{endpoint}", form, request.headers)
        if endpoint == "token":
            respond = partial(self._server.create_token_response, http)
        else:
            respond = partial(self._server.create_endpoint_response, "revocation", http)
        reply: _Reply = await asyncio.to_thread(respond)
        return reply.to_response()

    # -- authlib and Redis (worker threads) -------------------------------------------

    def _start_consent(self, http: _HttpInput, browser: str) -> _Reply | _Refusal | _Consent:
        grant = self._validate(http)
        if not isinstance(grant, AuthorizationCodeGrant):
            return grant
        request = grant.request
        wanted = AUTHORIZE_PARAMS + PKCE_PARAMS
        params = [[k, v] for k, v in request.payload.data.items() if k in wanted]
        consent_id = secrets.token_urlsafe(32)
        expires_at = self._store.clock() + CONSENT_TTL_S
        record = {"params": params, "browser": _digest(browser), "expires_at": expires_at}
        self._store.put("consent", consent_id, record, CONSENT_TTL_S)
        client_id, redirect_uri = request.client.client_id, request.payload.redirect_uri
        return _Consent(consent_id, client_id, request.scope, redirect_uri)

    def _finish_consent(self, consent_id: str, browser: str, user: str | None) -> _Reply | _Refusal:
        record = self._store.take_consent(consent_id) if consent_id else None
        if record is None or not hmac.compare_digest(record["browser"], _digest(browser)):
            return _Refusal("invalid_request", "This consent form expired or was already used.")
        params = tuple((k, v) for k, v in record["params"])
        grant = self._validate(_HttpInput("GET", f"{self._base}/authorize", params, Headers()))
        if not isinstance(grant, AuthorizationCodeGrant):
            return grant
        create = self._server.create_authorization_response
        return cast(_Reply, create(grant.request, grant_user=user, grant=grant))

    def _validate(self, http: _HttpInput) -> AuthorizationCodeGrant | _Reply | _Refusal:
        try:
            return self._server.get_consent_grant(http)
        except OAuth2Error as error:
            if error.redirect_uri:  # authlib sets it only once client and URI are verified
                reply = cast(_Reply, self._server.handle_error_response(None, error))
                self._server.iss.add_issuer_parameter(self._server, reply)
                return reply
            return _Refusal(error.error, error.get_error_description() or "")
        except ValueError:  # authlib refuses to build an error text holding '"' or '\'
            return _Refusal("invalid_request", "The authorization request is malformed.")

    def _whoami(self, http: _HttpInput) -> _Reply:
        try:
            token: _Token = self._protector.validate_request(None, http)
        except OAuth2Error as error:
            return _Reply(*error())
        claims = {"sub": token.account, "preferred_username": token.account}
        return _Reply(200, claims, [("Content-Type", "application/json")])
