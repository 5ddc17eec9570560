"""Start tokens: ``/connect/{provider}/start`` only from the page that shows the widget.

Threat answered: the session cookie is ``SameSite=Lax``, so it rides along on a
top-level navigation from any site. Someone who knows a chat's and a call's ids could
send the victim's browser to ``/start``; with a provider that remembers consent, the
flow would then complete without the user doing anything. A start token proves the
request comes from a page that was served the widget's descriptor, which only the
call's owner can read.

A token is issued with every widget descriptor (the stream, ``GET /api/chats/{id}``, a
call's status), so a reloaded page always has a fresh one. Issuing is a pure function
with no I/O, because descriptors are built synchronously while a response is encoded:
the token is the issue time and a random nonce sealed with the server's token key
(AES-GCM, :class:`parkway.widgets_api.connect.cipher.TokenCipher`, shared by every worker), with the
provider, chat and call as associated data, so it opens only for the call it was
issued for. ``start`` spends it once: ``SET NX`` of a key named by the sealed nonce (not
by the token's text, which base64 lets one spell several ways), with the rest of the
token's lifetime as TTL. A token lives as long as a connect flow (``connect_flow_ttl_s``,
10 minutes by default, the request's own deadline).

Binding to the session: the chat belongs to one principal, only that principal is
served its descriptors, and ``start`` also requires the signed-in principal to own the
call, so a token is usable only by the session it was shown to (or another session of
the same principal).

Tickets: a page that authenticates with a bearer token it holds in memory (the
playground embedded by a host application, docs/embedding.md) has no cookie, and a popup
navigation carries no Authorization header. It asks ``POST /connect/{provider}/ticket``
with its bearer token for a *ticket*: a start token of another kind (its own associated
data, so neither kind opens as the other) that also seals the principal who asked for
it, and lives :data:`TICKET_TTL_S` only. ``start`` then takes the principal from the
ticket when the request has no identity of its own, and requires the one it has to be
the ticket's otherwise. A ticket is spent like a descriptor's token (one ``SET NX``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from parkway.runner.store import RedisClient
from parkway.widgets_api.connect.cipher import TokenCipher, TokenKeyError
from parkway.widgets_api.keys import start_token_key

__all__ = ["TICKET_TTL_S", "StartGrant", "StartTokens"]

_MAX_TOKEN = 1024  # a ticket also seals a principal (at most 256 characters)
_CLOCK_SKEW_S = 60  # workers' clocks may differ a little
#: How long a ticket lives: the page asks for one right before it opens the popup.
TICKET_TTL_S = 60

_Kind = Literal["descriptor", "ticket"]
_LABELS: dict[_Kind, str] = {
    "descriptor": "parkway.connect-start.v1|",
    "ticket": "parkway.connect-ticket.v1|",
}


@dataclass(frozen=True)
class StartGrant:
    """What an opened (not yet spent) start token says: its kind, the principal a
    ticket was issued to (None for a descriptor's token), when it was issued, and the
    nonce that names it when it is spent."""

    kind: _Kind
    principal: str | None
    issued: int
    nonce: str


class StartTokens:
    """Issues start tokens (for descriptors) and spends them (for ``start``)."""

    def __init__(
        self,
        redis: RedisClient,
        cipher: TokenCipher,
        *,
        ttl_s: int = 600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.cipher = cipher
        self.ttl_s = ttl_s
        self.clock = clock

    @staticmethod
    def _context(kind: _Kind, provider: str, chat_id: str, call_id: str) -> str:
        # JSON keeps the three apart whatever characters they hold
        return _LABELS[kind] + json.dumps([provider, chat_id, call_id])

    @property
    def ticket_ttl_s(self) -> int:
        return min(TICKET_TTL_S, self.ttl_s)

    def _ttl(self, kind: _Kind) -> int:
        return self.ticket_ttl_s if kind == "ticket" else self.ttl_s

    def issue(self, provider: str, chat_id: str, call_id: str) -> str:
        """A fresh token for starting ``provider``'s flow for this call (no I/O)."""
        payload = {"t": int(self.clock()), "n": secrets.token_urlsafe(16)}
        return self.cipher.seal(
            json.dumps(payload).encode(), self._context("descriptor", provider, chat_id, call_id)
        )

    def issue_ticket(self, provider: str, chat_id: str, call_id: str, principal: str) -> str:
        """A ticket: a start token for this call that also names ``principal``, who
        asked for it with their bearer token (the caller has checked they own the
        call). It lives :data:`TICKET_TTL_S` (no I/O)."""
        payload = {"t": int(self.clock()), "n": secrets.token_urlsafe(16), "p": principal}
        return self.cipher.seal(
            json.dumps(payload).encode(), self._context("ticket", provider, chat_id, call_id)
        )

    def open(
        self, token: str | None, provider: str, chat_id: str, call_id: str
    ) -> StartGrant | None:
        """What ``token`` says, if this server issued it for this call (expired or
        not: :meth:`spend` checks the time); None otherwise. Spends nothing."""
        if not token or len(token) > _MAX_TOKEN:
            return None
        for kind in _LABELS:
            try:
                raw = self.cipher.open(token, self._context(kind, provider, chat_id, call_id))
                payload = json.loads(raw)
                issued, nonce = int(payload["t"]), str(payload["n"])
                principal = payload.get("p") if kind == "ticket" else None
            except (TokenKeyError, ValueError, TypeError, KeyError):
                continue
            if kind == "ticket" and not (isinstance(principal, str) and principal):
                return None
            return StartGrant(kind, principal, issued, nonce)
        return None

    async def spend(self, grant: StartGrant | None, chat_id: str, call_id: str) -> bool:
        """True when ``grant`` (a token :meth:`open` accepted for this call) is still
        unexpired and was not spent before; it is spent now (atomically, so of two
        concurrent requests with one token only one gets True)."""
        if grant is None:
            return False
        now = self.clock()
        left = grant.issued + self._ttl(grant.kind) - now
        if left <= 0 or grant.issued > now + _CLOCK_SKEW_S:
            return False
        spent = await self.redis.set(
            start_token_key(chat_id, call_id, grant.nonce), "1", nx=True, ex=max(1, int(left) + 1)
        )
        return bool(spent)
