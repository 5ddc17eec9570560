"""Connections: a principal's OAuth grants, stored in Redis with the tokens encrypted.

A connection is created by the connect flow's callback and named by its id in the
``request_connection`` result; the tokens never leave this module except as the access
token handed to a server tool's code (:meth:`ConnectionStore.access_token`, the
:class:`parkway.runner.agent.credentials.Credentials` the runner is given). Several accounts per
provider are allowed; reconnecting the same account (same provider subject) updates its
connection in place.

Refresh: one refresh at a time per connection across every worker (redis-py's
``Lock``), the new refresh token persisted before the new access token is used, the old
refresh token kept when the provider does not rotate, and never more scope than was
granted. A refresh answered ``invalid_grant`` marks the connection ``needs_reconnect``:
the tool asks the model for a new connection instead of retrying.

Audit: given an :class:`AuditNote`, a grant or a revocation is appended to the
principal's connection audit trail in the same transaction as the change
(:mod:`parkway.widgets_api.connect.audit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import LockNotOwnedError

from parkway.runner.agent import ConnectionUnavailableError
from parkway.runner.store import (
    AUDIT_APPEND,
    AUDIT_KEEP_S,
    AuditPage,
    ConnectionEntry,
    RedisClient,
    as_text,
    read_page,
)
from parkway.widgets_api.connect.audit import AuditNote, audit_args
from parkway.widgets_api.connect.cipher import TokenCipher, TokenKeyError
from parkway.widgets_api.connect.providers import Provider, ProviderRegistry
from parkway.widgets_api.connect.token_endpoint import (
    TokenExchangeError,
    call_token_endpoint,
    oauth_client,
)
from parkway.widgets_api.keys import ConnectionKeys

__all__ = ["AuditNote", "Connection", "ConnectionStore", "TokenExchangeError", "oauth_client"]

log = logging.getLogger(__name__)

Status = Literal["active", "needs_reconnect"]
EXPIRY_LEEWAY_S = 60.0
# How often a caller waiting for another worker's refresh looks for its result.
_LOCK_POLL_S = 0.05

# Store refreshed tokens only into a connection that still exists (a delete may have
# happened while the refresh was in flight), and keep all the principal's keys alive.
# KEYS: 1 record, 2 index, 3 subjects. ARGV: 1 TTL (s), then field/value pairs.
# Returns 1 if written, 0 if the connection is gone.
_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
return 1
"""


@dataclass(frozen=True)
class Connection:
    """A connection as anyone but a tool's code may see it: no token."""

    id: str
    provider: str
    account: str
    scopes: tuple[str, ...]
    status: Status
    created_at: float
    updated_at: float
    subject: str | None = None
    # The RFC 8707 resource its tokens were issued for (an MCP server's canonical URL),
    # None for a plain connection: its token goes to that resource only.
    resource: str | None = None

    def reference(self) -> dict[str, Any]:
        """The ``request_connection`` result naming this connection."""
        return {
            "connected": True,
            "provider": self.provider,
            "connection_id": self.id,
            "account": self.account,
            "scopes": list(self.scopes),
        }

    def public(self) -> dict[str, Any]:
        found = {
            "id": self.id,
            "provider": self.provider,
            "account": self.account,
            "scopes": list(self.scopes),
            "status": self.status,
            "createdAt": int(self.created_at * 1000),
            "updatedAt": int(self.updated_at * 1000),
        }
        if self.resource is not None:
            found["resource"] = self.resource
        return found


def _digest(principal: str) -> str:
    return hashlib.sha256(principal.encode()).hexdigest()[:32]


_text = as_text


class ConnectionStore:
    """Connections in Redis (keys in :class:`parkway.widgets_api.keys.ConnectionKeys`)."""

    def __init__(
        self,
        redis: RedisClient,
        cipher: TokenCipher,
        providers: ProviderRegistry,
        *,
        ttl_s: int = 180 * 24 * 3600,
        http_timeout_s: float = 10.0,
        lock_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.cipher = cipher
        self.providers = providers
        self.ttl_s = ttl_s
        self.http_timeout_s = http_timeout_s
        self.lock_s = lock_s
        self.clock = clock
        # How long the connection audit trail keeps an entry (the server sets it).
        self.audit_keep_s = AUDIT_KEEP_S
        self._update = redis.register_script(_UPDATE)
        self._audit = redis.register_script(AUDIT_APPEND)

    # -- records ---------------------------------------------------------------------

    @staticmethod
    def _keys(principal: str) -> ConnectionKeys:
        return ConnectionKeys(_digest(principal))

    def _context(self, principal: str, connection_id: str) -> str:
        return f"parkway.connection.v1|{_digest(principal)}|{connection_id}"

    def _seal(self, principal: str, connection_id: str, token: dict[str, Any]) -> str:
        kept = {
            k: token[k]
            for k in ("access_token", "refresh_token", "token_type", "expires_at")
            if token.get(k) is not None
        }
        return self.cipher.seal(json.dumps(kept).encode(), self._context(principal, connection_id))

    def _expires_at(self, token: dict[str, Any]) -> float | None:
        if isinstance(token.get("expires_in"), int | float):
            return self.clock() + float(token["expires_in"])
        if isinstance(token.get("expires_at"), int | float):
            return float(token["expires_at"])
        return None

    @staticmethod
    def _decode(connection_id: str, raw: dict[Any, Any]) -> Connection:
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return Connection(
            id=connection_id,
            provider=fields["provider"],
            account=fields["account"],
            scopes=tuple(json.loads(fields["scopes"])),
            status="needs_reconnect" if fields["status"] == "needs_reconnect" else "active",
            created_at=float(fields["created_at"]),
            updated_at=float(fields["updated_at"]),
            subject=fields.get("subject") or None,
            resource=fields.get("resource") or None,
        )

    async def save(
        self,
        principal: str,
        provider: Provider,
        token: dict[str, Any],
        *,
        account: str,
        subject: str | None,
        scopes: Sequence[str],
        audit: AuditNote | None = None,
        resource: str | None = None,
    ) -> Connection:
        """Store a new grant; the same account of the same provider (and ``resource``,
        the RFC 8707 resource its tokens were issued for) reuses its id. With
        ``audit``, the grant's audit entry is appended in the same transaction."""
        keys = self._keys(principal)
        connection_id: str | None = None
        by_subject = f"{provider.name} {subject}" + (f" {resource}" if resource else "")
        if subject:
            existing = await self.redis.hget(keys.by_subject, by_subject)
            if existing is not None:
                connection_id = _text(existing)
        created = self.clock()
        if connection_id is None:
            connection_id = f"conn_{secrets.token_urlsafe(12)}"
        else:
            old = await self.redis.hget(keys.connection(connection_id), "created_at")
            created = float(_text(old)) if old is not None else created
        stored = dict(token)
        stored["expires_at"] = self._expires_at(token)
        record: dict[Any, Any] = {
            "provider": provider.name,
            "account": account,
            "subject": subject or "",
            "scopes": json.dumps(list(scopes)),
            "status": "active",
            "created_at": repr(created),
            "updated_at": repr(self.clock()),
            "tokens": self._seal(principal, connection_id, stored),
        }
        if resource:
            record["resource"] = resource
        key = keys.connection(connection_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.hset(key, mapping=record)
            pipe.sadd(keys.index, connection_id)
            if subject:
                pipe.hset(keys.by_subject, by_subject, connection_id)
            for k in (key, keys.index, keys.by_subject):
                pipe.expire(k, self.ttl_s)
            if audit is not None:
                await self._audited(
                    pipe, principal, "granted", self._decode(connection_id, record), audit
                )
            await pipe.execute()
        return self._decode(connection_id, record)

    async def _audited(
        self, pipe: Any, principal: str, action: Literal["granted", "revoked"],
        connection: Connection, note: AuditNote,
    ) -> None:  # fmt: skip
        """Queue the audit entry of a change of ``connection`` on the transaction."""
        args = audit_args(
            note, principal=principal, action=action, provider=connection.provider,
            connection_id=connection.id, account=connection.account,
            scopes=connection.scopes, keep_s=self.audit_keep_s,
        )  # fmt: skip
        await self._audit(keys=[self._keys(principal).audit], args=args, client=pipe)

    async def audit(
        self,
        principal: str,
        *,
        before: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> AuditPage[ConnectionEntry]:
        """A page of ``principal``'s connection audit trail (grants, revocations)."""
        return await read_page(
            self.redis,
            self._keys(principal).audit,
            ConnectionEntry,
            before=before,
            after=after,
            limit=limit,
        )

    async def get(self, principal: str, connection_id: str) -> Connection | None:
        raw = await self.redis.hgetall(self._keys(principal).connection(connection_id))
        if not raw:
            return None
        return self._decode(connection_id, raw)

    async def list(self, principal: str, provider: str | None = None) -> list[Connection]:
        keys = self._keys(principal)
        ids = sorted(_text(i) for i in await self.redis.smembers(keys.index))
        found = []
        for connection_id in ids:
            connection = await self.get(principal, connection_id)
            if connection is None:
                await self.redis.srem(keys.index, connection_id)
            elif provider is None or connection.provider == provider:
                found.append(connection)
        return sorted(found, key=lambda c: c.created_at)

    async def delete(
        self, principal: str, connection_id: str, *, audit: AuditNote | None = None
    ) -> bool:
        """Revoke the grant at the provider (where it has a revocation endpoint; a
        failure there is logged, the local copy goes anyway) and delete it, with its
        audit entry (given ``audit``) in the same transaction."""
        keys = self._keys(principal)
        key = keys.connection(connection_id)
        raw = await self.redis.hgetall(key)
        if not raw:
            return False
        connection = self._decode(connection_id, raw)
        provider = self.providers.get(connection.provider)
        if provider is not None and provider.revocation_endpoint:
            try:
                token = self._open(principal, connection_id, raw)
                await self.revoke(provider, token)
            except Exception as exc:
                log.warning(
                    "revoking connection %s at %s failed (%s); deleting it here anyway",
                    connection_id,
                    connection.provider,
                    type(exc).__name__,
                )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key, keys.refresh_lock(connection_id))
            pipe.srem(keys.index, connection_id)
            if connection.subject:
                by_subject = f"{connection.provider} {connection.subject}"
                if connection.resource:
                    by_subject += f" {connection.resource}"
                pipe.hdel(keys.by_subject, by_subject)
            if audit is not None:
                await self._audited(pipe, principal, "revoked", connection, audit)
            await pipe.execute()
        return True

    async def revoke(self, provider: Provider, token: dict[str, Any]) -> None:
        """Revoke a grant at the provider (its refresh token, else its access token);
        nothing to do where the provider has no revocation endpoint."""
        if not provider.revocation_endpoint:
            return
        target = token.get("refresh_token") or token.get("access_token")
        hint = "refresh_token" if token.get("refresh_token") else "access_token"
        async with oauth_client(provider, timeout_s=self.http_timeout_s) as client:
            response = await client.revoke_token(
                provider.revocation_endpoint, token=target, token_type_hint=hint
            )
            if response.status_code >= 400:
                raise TokenExchangeError(f"http_{response.status_code}")

    def _open(self, principal: str, connection_id: str, raw: dict[Any, Any]) -> dict[str, Any]:
        sealed = raw.get(b"tokens") or raw.get("tokens")
        if sealed is None:
            raise TokenKeyError("the connection holds no tokens")
        opened: dict[str, Any] = json.loads(
            self.cipher.open(_text(sealed), self._context(principal, connection_id))
        )
        return opened

    # -- tokens for tools --------------------------------------------------------------

    def provider_issuer(self, provider: str) -> str | None:
        """The configured provider's issuer (an MCP server's metadata must name it)."""
        found = self.providers.get(provider)
        return None if found is None else found.issuer

    async def resource_connection(self, principal: str, provider: str, resource: str) -> str | None:
        """The id of ``principal``'s latest active connection with ``provider`` issued
        for ``resource``, or None."""
        found = [
            c
            for c in await self.list(principal, provider)
            if c.resource == resource and c.status == "active"
        ]
        return max(found, key=lambda c: c.updated_at).id if found else None

    async def resource_token(self, principal: str, connection_id: str, resource: str) -> str:
        """:meth:`access_token` of a connection issued for ``resource`` only (see
        :class:`parkway.runner.agent.credentials.Credentials`)."""
        connection = await self.get(principal, connection_id)
        if connection is None or connection.resource != resource:
            raise ConnectionUnavailableError(
                f"there is no connection {connection_id!r} for this server",
                reason="not_found",
                provider=None,
            )
        return await self.access_token(principal, connection_id)

    async def access_token(
        self, principal: str, connection_id: str, *, scopes: Sequence[str] = ()
    ) -> str:
        """A usable access token (see :class:`parkway.runner.agent.credentials.Credentials`)."""
        keys = self._keys(principal)
        key = keys.connection(connection_id)
        raw = await self.redis.hgetall(key)
        if not raw:
            raise ConnectionUnavailableError(
                f"there is no connection {connection_id!r}: ask the user to connect with "
                "request_connection",
                reason="not_found",
                provider=None,
            )
        connection = self._decode(connection_id, raw)
        self._check_usable(connection, scopes)
        token = self._tokens(principal, connection, raw)
        if not self._expired(token):
            async with self.redis.pipeline(transaction=False) as pipe:
                for alive in (key, keys.index, keys.by_subject):
                    pipe.expire(alive, self.ttl_s)
                await pipe.execute()
            return str(token["access_token"])
        return await self._refreshed(principal, connection, scopes)

    def _tokens(
        self, principal: str, connection: Connection, raw: dict[Any, Any]
    ) -> dict[str, Any]:
        """The opened tokens; a record that does not open (its key was retired, or it
        was tampered with) can only be fixed by connecting again."""
        try:
            return self._open(principal, connection.id, raw)
        except TokenKeyError:
            log.warning("connection %s does not decrypt with the configured keys", connection.id)
            raise ConnectionUnavailableError(
                f"the {connection.provider} connection {connection.id!r} cannot be used any "
                f"more: call request_connection with provider {connection.provider!r}",
                reason="needs_reconnect",
                provider=connection.provider,
            ) from None

    @staticmethod
    def _reconnect_error(connection: Connection) -> ConnectionUnavailableError:
        return ConnectionUnavailableError(
            f"the {connection.provider} connection {connection.id!r} ({connection.account}) "
            "needs to be connected again: call request_connection with provider "
            f"{connection.provider!r}",
            reason="needs_reconnect",
            provider=connection.provider,
        )

    def _check_usable(self, connection: Connection, scopes: Sequence[str]) -> None:
        if connection.status == "needs_reconnect":
            raise self._reconnect_error(connection)
        missing = [s for s in scopes if s not in connection.scopes]
        if missing:
            raise ConnectionUnavailableError(
                f"the {connection.provider} connection {connection.id!r} was not granted "
                f"{', '.join(missing)}: call request_connection with provider "
                f"{connection.provider!r} and scopes {sorted(set(missing))!r}",
                reason="missing_scope",
                provider=connection.provider,
            )

    def _expired(self, token: dict[str, Any]) -> bool:
        expires_at = token.get("expires_at")
        return isinstance(expires_at, int | float) and expires_at - EXPIRY_LEEWAY_S <= self.clock()

    async def _refreshed(
        self, principal: str, connection: Connection, scopes: Sequence[str]
    ) -> str:
        """Refresh under the per-connection lock; whoever waits finds the new token."""
        keys = self._keys(principal)
        key = keys.connection(connection.id)
        # One Lock object per refresh attempt, so its token is this attempt's alone. The
        # wait is not the Lock's own blocking acquire: between tries a waiter reads the
        # record and takes the holder's new token as soon as it is stored, instead of
        # queueing for the lock only to find the work done.
        lock = self.redis.lock(keys.refresh_lock(connection.id), timeout=self.lock_s)
        waited = 0.0
        while not await lock.acquire(blocking=False):
            await asyncio.sleep(_LOCK_POLL_S)
            waited += _LOCK_POLL_S
            raw = await self.redis.hgetall(key)
            if raw:
                current = self._decode(connection.id, raw)
                self._check_usable(current, scopes)
                token = self._tokens(principal, current, raw)
                if not self._expired(token):
                    return str(token["access_token"])
            if waited > self.lock_s + 5:
                raise self._provider_error(connection, "the refresh lock was not released")
        try:
            raw = await self.redis.hgetall(key)
            if not raw:
                raise ConnectionUnavailableError(
                    f"the connection {connection.id!r} was deleted",
                    reason="not_found",
                    provider=connection.provider,
                )
            current = self._decode(connection.id, raw)
            self._check_usable(current, scopes)
            token = self._tokens(principal, current, raw)
            if not self._expired(token):  # another worker refreshed while we waited
                return str(token["access_token"])
            return await self._refresh(principal, current, token)
        finally:
            # Not owned any more: the connection was deleted (its lock with it) or the
            # refresh outlived the lock's timeout. Either way nothing is left to release.
            with contextlib.suppress(LockNotOwnedError):
                await lock.release()

    async def _refresh(self, principal: str, connection: Connection, token: dict[str, Any]) -> str:
        keys = self._keys(principal)
        key = keys.connection(connection.id)
        provider = self.providers.get(connection.provider)
        refresh_token = token.get("refresh_token")
        if provider is None or not refresh_token:
            await self._mark(key, "needs_reconnect")
            raise self._reconnect_error(connection)

        # RFC 8707: a connection issued for a resource asks for it again on refresh
        extra = {"resource": connection.resource} if connection.resource else {}

        async def operation() -> Any:
            async with oauth_client(provider, timeout_s=self.http_timeout_s) as client:
                return await client.refresh_token(
                    provider.token_endpoint, refresh_token=refresh_token, **extra
                )

        try:
            fresh = await call_token_endpoint(operation)
        except TokenExchangeError as exc:
            if exc.code in {"invalid_grant", "unauthorized_client"}:
                await self._mark(key, "needs_reconnect")
                log.info(
                    "connection %s (%s): refresh refused (%s); marked needs_reconnect",
                    connection.id,
                    connection.provider,
                    exc.code,
                )
                raise self._reconnect_error(connection) from None
            raise self._provider_error(connection, exc.code) from None
        if not fresh.get("refresh_token"):
            fresh["refresh_token"] = refresh_token  # the provider does not rotate
        fresh["expires_at"] = self._expires_at(fresh)
        granted = fresh.get("scope")
        update: dict[Any, Any] = {
            "tokens": self._seal(principal, connection.id, fresh),
            "updated_at": repr(self.clock()),
        }
        if isinstance(granted, str) and granted.strip():
            update["scopes"] = json.dumps(granted.split())
        # Persist the rotated refresh token before anyone uses the new access token.
        pairs = [item for pair in update.items() for item in pair]
        written = await self._update(
            keys=[key, keys.index, keys.by_subject], args=[self.ttl_s, *pairs]
        )
        if not written:
            raise ConnectionUnavailableError(
                f"the connection {connection.id!r} was deleted",
                reason="not_found",
                provider=connection.provider,
            )
        return str(fresh["access_token"])

    async def _mark(self, key: str, status: Status) -> None:
        if await self.redis.exists(key):
            await self.redis.hset(key, mapping={"status": status})

    @staticmethod
    def _provider_error(connection: Connection, code: str) -> ConnectionUnavailableError:
        return ConnectionUnavailableError(
            f"the {connection.provider} provider could not renew the connection "
            f"{connection.id!r} ({code}); try again later",
            reason="provider_error",
            provider=connection.provider,
        )
