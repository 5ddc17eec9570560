"""The entries of the routes ``widgets_api`` serves (transport mounts them): the connect
flow and connections, the playground page and its files, and the demo OAuth provider.
Part of the table of :mod:`parkway.transport.openapi._paths`, which says how an entry
is written."""

from __future__ import annotations

from collections.abc import Mapping

from parkway.transport.openapi._build import (
    Answer,
    Content,
    Html,
    Json,
    NoContent,
    Operation,
    Param,
    Redirect,
)
from parkway.transport.openapi._shapes import (
    ConnectionList,
    JsonObject,
    OAuthError,
    StartTicket,
    StartTicketRequest,
    UseConnectionRequest,
    UseConnectionResult,
)
from parkway.transport.settings import Settings
from parkway.widgets_api.connect import DEMO_MOUNT

__all__ = ["WIDGET_OPERATIONS"]

_PAGE_HEADERS = {
    "content-security-policy": "default-src 'self'; no inline script or style",
    "x-content-type-options": "nosniff",
}


def _demo(settings: Settings) -> bool:
    return settings.demo_oauth_enabled


# -- the connect flow and connections ------------------------------------------------------

_CONNECT = [
    Operation(
        "GET",
        "/connect/{provider}/start",
        "The connect popup's first page: redirects to the provider",
        "connections",
        {
            303: Redirect(
                "to the provider's authorization endpoint",
                {
                    "location": "the provider's authorization URL",
                    "set-cookie": "the flow's cookie, for its callback",
                },
            ),
            400: "a page: unexpected parameters, a wrong provider or origin",
            401: "a page: not signed in",
            403: "a page: no valid start token or ticket (the flow was not started from the chat)",
            404: "a page: no such provider or request (or no providers configured)",
            409: "a page: the request has already ended",
        },
        query=(
            Param("chat", "the chat of the request_connection call", required=True),
            Param("call", "the call's toolCallId", required=True),
            Param("token", "the one-time start token of the widget's descriptor, or a ticket"),
            Param("origin", "the playground's origin, to post the result to"),
            Param("retry", "1: a new flow for a call that ended without a connection"),
        ),
        errors_as="html",
        params={"provider": "the provider's name"},
    ),
    Operation(
        "GET",
        "/connect/{provider}/callback",
        "The OAuth redirect URI: stores the connection and settles the call",
        "connections",
        {
            200: Html("the result page; it posts a hint to the playground and closes"),
            400: "a page: the answer is not recognised (state, parameters, binding)",
            403: "a page: signed in as someone else than the flow's principal",
            404: "a page: no such provider (or no providers configured)",
        },
        query=(
            Param("state", "the flow's state"),
            Param("code", "the authorization code"),
            Param("iss", "the issuer (RFC 9207)"),
            Param("error", "the provider's error"),
            Param("error_description", "the provider's description of it"),
        ),
        errors_as="html",
        params={"provider": "the provider's name"},
    ),
    Operation(
        "POST",
        "/connect/{provider}/use",
        "Settle a pending request_connection call with an existing connection",
        "connections",
        {
            200: Json(UseConnectionResult, "the call's outcome"),
            403: "outcome_not_allowed",
            404: "not_found: no such provider, request or connection",
            409: "wrong_provider, needs_reconnect, missing_scope or already_settled",
            413: "body_too_large: past 4 KiB",
            422: "invalid_body: send {chatId, toolCallId, connectionId} as strings",
        },
        body=UseConnectionRequest,
        params={"provider": "the provider's name"},
    ),
    Operation(
        "POST",
        "/connect/{provider}/ticket",
        "A start link for a page that authenticates with a bearer token (its popup cannot)",
        "connections",
        {
            200: Json(StartTicket, "the start link, with a one-time ticket bound to the caller"),
            404: "not_found: no such provider or request (or no providers configured)",
            409: "wrong_provider: the request is for another provider",
            413: "body_too_large: past 4 KiB",
            422: "invalid_body: send {chatId, toolCallId} as strings, retry as a boolean",
        },
        body=StartTicketRequest,
        params={"provider": "the provider's name"},
    ),
    Operation(
        "GET",
        "/api/connections",
        "The caller's connections (never tokens)",
        "connections",
        {
            200: Json(ConnectionList, "the connections"),
            404: "not_found: no OAuth providers are configured",
        },
        query=(Param("provider", "only this provider's"),),
    ),
    Operation(
        "DELETE",
        "/api/connections/{connection_id}",
        "Revoke a connection at its provider and delete it",
        "connections",
        {
            204: NoContent("deleted"),
            404: "not_found: no such connection (or no providers configured)",
        },
        params={"connection_id": "the connection's id"},
    ),
]

# -- the playground page ----------------------------------------------------------------

_PAGE = [
    Operation(
        "GET",
        "/",
        "The reference playground page",
        "playground",
        {
            200: Html("the page", _PAGE_HEADERS),
            404: "not_found: the page is missing from this install",
        },
        auth=False,
        redis=False,
    ),
    Operation(
        "GET",
        "/static/{name}",
        "One of the playground's static files",
        "playground",
        {
            200: Content(("text/javascript", "text/css", "text/html"), "the file"),
            404: "not_found: no such file",
        },
        auth=False,
        redis=False,
        params={"name": "the file's name (a fixed list)"},
    ),
    Operation(
        "GET",
        "/favicon.svg",
        "The page's icon",
        "playground",
        {200: Content(("image/svg+xml",), "the icon")},
        auth=False,
        redis=False,
    ),
    Operation(
        "GET",
        "/favicon.ico",
        "The page's icon (as SVG, for browsers that ask for this name)",
        "playground",
        {200: Content(("image/svg+xml",), "the icon")},
        auth=False,
        redis=False,
    ),
]

# -- the demo OAuth provider (setting demo_oauth) ------------------------------------------


def _demo_op(
    method: str,
    path: str,
    summary: str,
    answers: Mapping[int, Answer | str],
    *,
    redis: bool = True,
    reads_body: bool = False,
    description: str = "",
) -> Operation:
    """An endpoint of the demo provider: public, RFC 6749 errors, only when it is on."""
    return Operation(
        method,
        path,
        summary,
        "demo-oauth",
        answers,
        auth=False,
        redis=redis,
        reads_body=reads_body,
        description=description,
        errors_as="oauth",
        when=_demo,
    )


_OAUTH_ERROR = Json(OAuthError, "an RFC 6749 error")
_METADATA = Json(JsonObject, "the RFC 8414 authorization server metadata")
_DEMO = [
    _demo_op("GET", f"{DEMO_MOUNT}/.well-known/oauth-authorization-server", "Metadata",
             {200: _METADATA}, redis=False),
    _demo_op("GET", f"/.well-known/oauth-authorization-server{DEMO_MOUNT}",
             "Metadata (RFC 8414 §3.1 path)", {200: _METADATA}, redis=False),
    _demo_op(
        "GET",
        f"{DEMO_MOUNT}/authorize",
        "The authorization endpoint: the consent page",
        {
            200: Html("the consent page"),
            302: Redirect("an error, to the client's redirect URI", {"location": "it"}),
            400: Html("a refusal page: the request is not valid"),
        },
        description="The query holds the authorization request (RFC 6749 §4.1.1, PKCE S256).",
    ),
    _demo_op(
        "POST",
        f"{DEMO_MOUNT}/authorize",
        "The consent form's answer",
        {
            303: Redirect("to the client's redirect URI, with a code or an error",
                          {"location": "it"}),
            400: Html("a refusal page: the form expired, was used, or is not valid"),
        },
        reads_body=True,
        description="A form (application/x-www-form-urlencoded): consent, decision "
        "(allow or deny), account.",
    ),
    _demo_op(
        "POST",
        f"{DEMO_MOUNT}/token",
        "The token endpoint",
        {200: Json(JsonObject, "the tokens"), 400: _OAUTH_ERROR, 401: _OAUTH_ERROR},
        reads_body=True,
    ),
    _demo_op(
        "POST",
        f"{DEMO_MOUNT}/revoke",
        "The revocation endpoint (RFC 7009)",
        {200: Content(("application/json",), "revoked"), 400: _OAUTH_ERROR,
         401: _OAUTH_ERROR},
        reads_body=True,
    ),
    _demo_op(
        "GET",
        f"{DEMO_MOUNT}/userinfo",
        "Who the bearer token's account is",
        {
            200: Json(JsonObject, "sub and preferred_username"),
            401: Json(OAuthError, "no valid bearer token", {"www-authenticate": "Bearer"}),
        },
    ),
]  # fmt: skip

WIDGET_OPERATIONS: tuple[Operation, ...] = (*_CONNECT, *_PAGE, *_DEMO)
