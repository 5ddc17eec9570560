"""Redis clients: the one place that turns a Redis URL into a client.

Production Redis may be one server, a Sentinel-managed primary, or a Redis Cluster.
The URL's scheme says which (docs/operations.md, "Redis URLs"):

- ``redis://``, ``rediss://`` (TLS), ``unix://``: one server (``Redis.from_url``).
- ``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://`` for TLS): a
  Cluster, reached through any of the listed nodes; the client discovers the rest and
  follows slot moves. A Cluster has database 0 only.
- ``redis+sentinel://host:port[,host:port...]/<service>[/<db>]``
  (``rediss+sentinel://``): the primary the Sentinels name for ``<service>``, asked
  again after a failover.

Credentials in the URL (``redis+cluster://user:password@...``) authenticate to the data
nodes. The Sentinels themselves are reached without credentials unless the query gives
``sentinel_username`` / ``sentinel_password``. Other query options are redis-py's
connection options, read as ``Redis.from_url`` reads them (``?ssl_cert_reqs=none``).

Parkway's data works on all three because every multi-key operation names keys of one
chat, which share a hash tag (:mod:`parkway.runner.store.keys`): in a Cluster each such operation
runs on one slot.

The connection budget and faults (docs/operations.md, "Redis connections and outages"):

- A worker holds at most ``max_connections`` connections to each Redis node. On one
  server and behind Sentinel a command that finds them all busy waits up to
  ``pool_timeout_s`` for one to come free (a blocking pool) instead of failing; a
  Cluster's node pools refuse at the cap instead (redis-py has no blocking variant of
  them), which the HTTP layer answers with 503 and ``Retry-After``.
- A command that fails on a connection error or a timeout is sent again on a fresh
  connection, with jittered exponential backoff (:data:`RETRY_ATTEMPTS` attempts, waits
  from 20 ms up to 1 s, about 5 s in all): a connection left stale by a Redis restart
  never surfaces as an error. Replaying a command whose reply was lost is safe because
  every script is idempotent under replay (each script's header in
  :mod:`parkway.runner.store.scripts` says why).
- On one server and behind Sentinel, each client has a circuit breaker
  (:mod:`parkway.runner.store.breaker`): a connection that cannot be opened (refused,
  reset, timed out while connecting) opens it, and from then on calls fail at once with
  :class:`~parkway.runner.store.breaker.RedisUnavailableError` instead of paying the
  retries and the pool's wait, until a probe finds Redis answering again. The wiring
  is here: the connections trip it and ask it before connecting (:class:`_Guarded`),
  the pool asks it before handing out a connection and stops waiters when it opens
  (:class:`_GuardedPool`), and the retry stops once it is open (:class:`_GuardedRetry`).
  A Cluster client has none: its nodes fail and move one by one, and redis-py's
  cluster client already refuses at a node's cap instead of waiting.
- A connection idle for ``health_check_interval`` seconds is checked with a PING before
  use.

Commands to one server (and to a Sentinel's primary) are packed into the wire format
by hiredis' C packer (:class:`_CPacking`), as redis-py's blocking client does; its
asyncio client packs in Python, which costs a commit of a parking step about 20 us.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import AuthenticationError, MaxConnectionsError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from parkway.runner.errors import CallerError
from parkway.runner.store.breaker import Breaker, RedisUnavailableError

try:
    from hiredis import pack_command as _pack_in_c
except ImportError:  # pragma: no cover  (hiredis comes with redis[hiredis])
    _pack_in_c = None  # type: ignore[assignment]

__all__ = [
    "REDIS_URL_SCHEMES",
    "RETRY_ATTEMPTS",
    "RedisClient",
    "RedisTarget",
    "as_text",
    "breaker_of",
    "connect",
    "is_redis_outage",
    "parse_redis_url",
]

REDIS_URL_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)

# What the store and the runner accept: both speak the same commands, scripts and
# non-transactional pipelines.
RedisClient: TypeAlias = Redis | RedisCluster

# Every wait on Redis is bounded: 5 s to connect, 10 s for a reply.
_TIMEOUTS: Mapping[str, Any] = {"socket_timeout": 10, "socket_connect_timeout": 5}
RETRY_ATTEMPTS = 8
HEALTH_CHECK_INTERVAL_S = 30
_RETRIED = (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError)


def _fault_options() -> dict[str, Any]:
    """Retry and health-check options, fresh for each client (a Retry holds state)."""
    return {
        "retry": Retry(ExponentialWithJitterBackoff(base=0.02, cap=1.0), RETRY_ATTEMPTS),
        "retry_on_error": list(_RETRIED),
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }


def as_text(value: Any) -> str:
    """A Redis reply value as text: the clients here answer bytes (no
    ``decode_responses``), tests and callers may hand over strings."""
    return value.decode() if isinstance(value, bytes) else str(value)


def is_redis_outage(exc: BaseException) -> bool:
    """Whether ``exc`` means Redis cannot be reached (or this worker has no free
    connection to it, or its breaker is open) rather than a fault of the request: the
    caller answers 503."""
    return isinstance(exc, RedisConnectionError | RedisTimeoutError)


def _unreachable(exc: BaseException) -> bool:
    """Whether a failure to open a connection says Redis cannot be reached (which opens
    the breaker), rather than a fault of the configuration: refused credentials or a
    refused TLS handshake would fail the same way on every retry, and are no outage."""
    if isinstance(exc, RedisUnavailableError | AuthenticationError | ssl.SSLError):
        return False
    if isinstance(exc.__context__, ssl.SSLError):  # redis-py wraps it in ConnectionError
        return False
    return isinstance(exc, OSError | TimeoutError | RedisConnectionError | RedisTimeoutError)


def breaker_of(client: Any) -> Breaker | None:
    """The circuit breaker of a client :func:`connect` built (None for a Cluster, or a
    client built elsewhere)."""
    pool = getattr(client, "connection_pool", None)
    breaker = getattr(pool, "breaker", None)
    return breaker if isinstance(breaker, Breaker) else None


# Query options that authenticate to the Sentinels, and the client option each becomes.
_SENTINEL_AUTH = {"sentinel_username": "username", "sentinel_password": "password"}


@dataclass(frozen=True)
class RedisTarget:
    """What a Redis URL names, checked before anything connects."""

    kind: Literal["standalone", "cluster", "sentinel"]
    # The URL and the options may hold passwords: they stay out of the repr.
    url: str = field(repr=False)
    # Cluster startup nodes, or the Sentinels; empty for one server.
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""
    # Connection options for the data nodes, and for the Sentinels.
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    sentinel_options: Mapping[str, Any] = field(default_factory=dict, repr=False)


def _bad(reason: str) -> CallerError:
    # The URL itself is never quoted: it may hold a password.
    return CallerError(f"invalid Redis URL: {reason}")


def _host_port(item: str, default_port: int) -> tuple[str, int]:
    try:
        parts = urlsplit(f"//{item}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or parts.path or parts.username or parts.password:
        raise _bad(f"{item!r} is not host:port")
    return host, port or default_port


def parse_redis_url(url: str) -> RedisTarget:
    """Check ``url`` and say what it names; raise :class:`CallerError` if it is not a
    Redis URL Parkway can use."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in REDIS_URL_SCHEMES:
        raise _bad("it must start with " + ", ".join(f"{s}://" for s in REDIS_URL_SCHEMES))
    if scheme in {"redis", "rediss", "unix"}:
        try:
            parse_url(url)
        except ValueError as exc:
            raise _bad(str(exc)) from None
        return RedisTarget("standalone", url)
    kind: Literal["cluster", "sentinel"] = "cluster" if scheme.endswith("cluster") else "sentinel"
    rest, _, query = rest.partition("?")
    authority, _, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    default_port = 6379 if kind == "cluster" else 26379
    nodes = tuple(_host_port(h.strip(), default_port) for h in hosts.split(",") if h.strip())
    if not nodes:
        raise _bad(f"a {scheme}:// URL needs at least one host:port")
    segments = [s for s in path.split("/") if s]
    service, db = "", "0"
    if kind == "cluster":
        if segments not in ([], ["0"]):
            raise _bad("a Redis Cluster has database 0 only")
    else:
        if not 1 <= len(segments) <= 2:
            raise _bad("a Sentinel URL names the service: redis+sentinel://host:port/<service>")
        service = segments[0]
        db = segments[1] if len(segments) == 2 else "0"
    tls = scheme.startswith("rediss")
    # redis-py reads credentials and query options of a one-server URL; reuse that.
    single = f"{'rediss' if tls else 'redis'}://{userinfo + at}{hosts.split(',')[0]}/{db}"
    try:
        options: dict[str, Any] = dict(parse_url(f"{single}?{query}" if query else single))
    except ValueError as exc:
        raise _bad(str(exc)) from None
    for name in ("host", "port", "connection_class"):
        options.pop(name, None)
    if kind == "cluster":
        options.pop("db", None)
    if tls:
        options["ssl"] = True
    sentinel_options = {
        option: options.pop(name) for name, option in _SENTINEL_AUTH.items() if name in options
    }
    if tls:
        sentinel_options["ssl"] = True
    return RedisTarget(kind, url, nodes, service, options, sentinel_options)


class _CPacking(AbstractConnection):
    """Packs a command with hiredis (one C call, one bytes object) instead of redis-py's
    Python packer; byte for byte the same output. Anything the C packer refuses (a
    ``bool``, an unknown type) or a client with another encoding goes to redis-py's
    packer, which raises its own ``DataError`` for what it refuses too."""

    def pack_command(self, *args: Any) -> list[bytes]:
        encoder = self.encoder
        if _pack_in_c is None or encoder.encoding != "utf-8" or encoder.encoding_errors != "strict":
            return super().pack_command(*args)
        first = args[0]
        if isinstance(first, (str, bytes)) and len(first.split()) > 1:  # 'CONFIG GET'
            args = (*first.split(), *args[1:])
        try:
            return [_pack_in_c(args)]
        except TypeError:
            return super().pack_command(*args)


class _Guarded(AbstractConnection):
    """A connection that reports to its client's breaker (``breaker``, passed by the
    pool; None for the breaker's own probe).

    - Opening it asks the breaker first: an open breaker refuses at once.
    - Failing to open it (the socket, or the handshake that follows) opens the breaker.
    - :meth:`connect` (the pool opening a connection for a command not sent yet) stops
      retrying once the breaker is open: the command has not run, and waiting cannot
      help it.
    - A command that was sent keeps the client's retries (each a new connection, refused
      at once while the breaker is open): its reply may have been lost after it ran, and
      a Redis back within the retries gets the replay (every script replays safely).
    """

    def __init__(self, *args: Any, breaker: Breaker | None = None, **kwargs: Any) -> None:
        self.breaker = breaker
        super().__init__(*args, **kwargs)

    async def connect(self) -> None:
        breaker = self.breaker
        if breaker is None:
            await super().connect()  # type: ignore[no-untyped-call]
            return
        await self.retry.call_with_retry(
            self._open_once,
            lambda error, count: self.disconnect(error=error, failure_count=count),
            is_retryable=lambda _: breaker.closed,
            with_failure_count=True,
        )

    async def _open_once(self) -> None:
        """One attempt at opening the connection (as redis-py's ``connect`` makes it)."""
        await self.connect_check_health(check_health=True, retry_socket_connect=False)

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        breaker = self.breaker
        if breaker is None or self.is_connected:
            await super().connect_check_health(check_health, retry_socket_connect)
            return
        if not breaker.closed:
            await breaker.admit()
        try:
            # One attempt: the retry around it (the command's, or :meth:`connect`'s)
            # decides on another, never a second loop of redis-py's own inside it.
            await super().connect_check_health(check_health, retry_socket_connect=False)
        except Exception as exc:
            if _unreachable(exc):
                breaker.trip(exc)
            raise
        breaker.connected()


class _PackedConnection(_Guarded, _CPacking, Connection):
    """TCP (``redis://``)."""


class _PackedSSLConnection(_Guarded, _CPacking, SSLConnection):
    """TLS (``rediss://``)."""


class _PackedUnixConnection(_Guarded, _CPacking, UnixDomainSocketConnection):
    """A Unix socket (``unix://``: the embedded Redis)."""


class _GuardedSentinelConnection(_Guarded, SentinelManagedConnection):
    """The Sentinel primary's connection (``redis+sentinel://``)."""

    async def _open_once(self) -> None:
        # asks the Sentinels for the primary, then connects to it
        await self._connect_retry()  # type: ignore[no-untyped-call]


class _GuardedSentinelSSLConnection(_GuardedSentinelConnection, SentinelManagedSSLConnection):
    """The same over TLS (``rediss+sentinel://``)."""


_PACKED: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _PackedConnection,
    SSLConnection: _PackedSSLConnection,
    UnixDomainSocketConnection: _PackedUnixConnection,
}


def _packed_class(url: str) -> dict[str, Any]:
    """``connection_class`` for ``url``'s scheme, packing in C (none when unknown)."""
    chosen = parse_url(url).get("connection_class", Connection)
    packed = _PACKED.get(chosen)
    return {} if packed is None else {"connection_class": packed}


class _GuardedPool(BlockingConnectionPool):
    """A blocking pool that asks its client's breaker (its connections' ``breaker``)
    before it hands out a connection: while the breaker is open it refuses at once,
    never waiting for a free connection, and commands already waiting for one stop
    waiting when it opens (they take a free connection if there is one, whose command
    then fails on its own unless Redis is back, else they are refused)."""

    @property
    def breaker(self) -> Breaker | None:
        breaker = self.connection_kwargs.get("breaker")
        return breaker if isinstance(breaker, Breaker) else None

    def guard(self) -> None:
        """Listen to the breaker (once the pool is built)."""
        breaker = self.breaker
        if breaker is not None:
            self._wakers: set[asyncio.Task[None]] = set()
            breaker.on_open(self._breaker_opened)
            breaker.use_probe(partial(_probe, self, breaker.probe_timeout_s))

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        breaker = self.breaker
        if breaker is not None and not breaker.closed:
            await breaker.admit()
        try:
            connection: AbstractConnection = await super().get_connection(  # type: ignore[no-untyped-call]
                *args, **kwargs
            )
        except MaxConnectionsError as exc:
            # a waiter woken by the breaker's opening (:meth:`can_get_connection`) finds
            # every connection still taken
            if breaker is not None and not breaker.closed:
                raise breaker.unavailable() from exc
            raise
        return connection

    def can_get_connection(self) -> bool:
        # (the blocking pool's waiters wait for this to be true)
        breaker = self.breaker
        return bool(super().can_get_connection()) or (breaker is not None and not breaker.closed)

    def _breaker_opened(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # opened outside a loop: nobody can be waiting
            return
        task = loop.create_task(self._wake_waiters())
        self._wakers.add(task)
        task.add_done_callback(self._wakers.discard)

    async def _wake_waiters(self) -> None:
        async with self._condition:
            self._condition.notify_all()

    async def aclose(self) -> None:
        breaker = self.breaker
        if breaker is not None:
            await breaker.aclose()
        await super().aclose()


async def _probe(pool: BlockingConnectionPool, timeout_s: float) -> None:
    """The breaker's probe: a PING on a connection of its own (made as the pool makes
    its connections, but with short timeouts, no retry and no breaker), then closed."""
    options = {
        **pool.connection_kwargs,
        "breaker": None,
        "retry": Retry(NoBackoff(), 0),
        "retry_on_error": [],
        "socket_connect_timeout": timeout_s,
        "socket_timeout": timeout_s,
        "health_check_interval": 0,
    }
    connection = pool.connection_class(**options)
    try:
        await connection.connect()  # type: ignore[no-untyped-call]
        await connection.send_command("PING", check_health=False)
        await connection.read_response()
    finally:
        await connection.disconnect()


class _BlockingSentinelPool(SentinelConnectionPool, _GuardedPool):
    """The Sentinel primary's pool, blocking as the one-server pool does: a command that
    finds every connection busy waits (up to its timeout) instead of failing."""


class _SentinelPrimary(Redis):
    """The primary's client; closing it also closes its connections to the Sentinels,
    which the Sentinel helper would otherwise leave open."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        if isinstance(manager, Sentinel):
            await manager.aclose()


def connect(
    url: str,
    *,
    max_connections: int = 32,
    pool_timeout_s: float = 5.0,
    breaker: Breaker | None = None,
) -> RedisClient:
    """A client for ``url`` (see the module docstring for the schemes, the connection
    budget and the breaker). ``breaker``: the client's circuit breaker, for a test that
    drives its clock; by default a new one (none for a Cluster). Nothing connects until
    the first command."""
    target = parse_redis_url(url)
    faults = _fault_options()
    if target.kind == "cluster":
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            max_connections=max_connections,
            **{**_TIMEOUTS, **faults, **target.options},
        )
    breaker = breaker or Breaker()
    if target.kind == "sentinel":
        sentinel = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            list(target.nodes),
            sentinel_kwargs={**_TIMEOUTS, **target.sentinel_options},
            **{**_TIMEOUTS, **faults, **target.options},
        )
        tls = bool(target.options.get("ssl"))
        primary: _SentinelPrimary = sentinel.master_for(
            target.service,
            redis_class=_SentinelPrimary,
            connection_pool_class=_BlockingSentinelPool,
            connection_class=_GuardedSentinelSSLConnection if tls else _GuardedSentinelConnection,
            breaker=breaker,
            max_connections=max_connections,
            timeout=pool_timeout_s,
        )
        _guard(primary.connection_pool)
        return primary
    # As ``from_url`` builds it (the URL's query options win over these), except that the
    # connection class is always ours: ``from_url`` would put back the URL's own for
    # ``unix://`` and ``rediss://``, which neither packs in C nor reports to the breaker.
    options = {**_TIMEOUTS, **faults, **parse_url(url), **_packed_class(url)}
    pool = _GuardedPool(
        max_connections=max_connections, timeout=pool_timeout_s, breaker=breaker, **options
    )
    _guard(pool)
    return Redis.from_pool(pool)  # the client owns the pool: closing it closes both


def _guard(pool: Any) -> None:
    if not isinstance(pool, _GuardedPool):  # pragma: no cover  (built just above)
        raise TypeError(f"not a guarded pool: {pool!r}")
    pool.guard()
