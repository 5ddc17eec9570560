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
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable

from parkway.runner.store import RedisClient
from parkway.widgets_api.connect.cipher import TokenCipher, TokenKeyError
from parkway.widgets_api.keys import start_token_key

__all__ = ["StartTokens"]

_MAX_TOKEN = 512
_CLOCK_SKEW_S = 60  # workers' clocks may differ a little


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
    def _context(provider: str, chat_id: str, call_id: str) -> str:
        # JSON keeps the three apart whatever characters they hold
        return "parkway.connect-start.v1|" + json.dumps([provider, chat_id, call_id])

    def issue(self, provider: str, chat_id: str, call_id: str) -> str:
        """A fresh token for starting ``provider``'s flow for this call (no I/O)."""
        payload = {"t": int(self.clock()), "n": secrets.token_urlsafe(16)}
        return self.cipher.seal(
            json.dumps(payload).encode(), self._context(provider, chat_id, call_id)
        )

    async def spend(self, token: str | None, provider: str, chat_id: str, call_id: str) -> bool:
        """True when ``token`` was issued for this call, has not expired and was not
        spent before; it is spent by this call (atomically, so of two concurrent
        requests with one token only one gets True)."""
        if not token or len(token) > _MAX_TOKEN:
            return False
        try:
            raw = self.cipher.open(token, self._context(provider, chat_id, call_id))
            payload = json.loads(raw)
            issued, nonce = int(payload["t"]), str(payload["n"])
        except (TokenKeyError, ValueError, TypeError, KeyError):
            return False
        left = issued + self.ttl_s - self.clock()
        if left <= 0 or issued > self.clock() + _CLOCK_SKEW_S:
            return False
        spent = await self.redis.set(
            start_token_key(chat_id, call_id, nonce), "1", nx=True, ex=max(1, int(left) + 1)
        )
        return bool(spent)
