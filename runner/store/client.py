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
- A connection idle for ``health_check_interval`` seconds is checked with a PING before
  use.

Commands to one server (and to a Sentinel's primary) are packed into the wire format
by hiredis' C packer (:class:`_CPacking`), as redis-py's blocking client does; its
asyncio client packs in Python, which costs a commit of a parking step about 20 us.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from parkway.runner.errors import CallerError

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
    connection to it) rather than a fault of the request: the caller answers 503."""
    return isinstance(exc, RedisConnectionError | RedisTimeoutError)


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


class _PackedConnection(_CPacking, Connection):
    """TCP (``redis://``)."""


class _PackedSSLConnection(_CPacking, SSLConnection):
    """TLS (``rediss://``)."""


class _PackedUnixConnection(_CPacking, UnixDomainSocketConnection):
    """A Unix socket (``unix://``: the embedded Redis)."""


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


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
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


def connect(url: str, *, max_connections: int = 32, pool_timeout_s: float = 5.0) -> RedisClient:
    """A client for ``url`` (see the module docstring for the schemes and the connection
    budget). Nothing connects until the first command."""
    target = parse_redis_url(url)
    faults = _fault_options()
    if target.kind == "cluster":
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            max_connections=max_connections,
            **{**_TIMEOUTS, **faults, **target.options},
        )
    if target.kind == "sentinel":
        sentinel = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            list(target.nodes),
            sentinel_kwargs={**_TIMEOUTS, **target.sentinel_options},
            **{**_TIMEOUTS, **faults, **target.options},
        )
        primary: _SentinelPrimary = sentinel.master_for(
            target.service,
            redis_class=_SentinelPrimary,
            connection_pool_class=_BlockingSentinelPool,
            max_connections=max_connections,
            timeout=pool_timeout_s,
        )
        return primary
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout_s,
        **_TIMEOUTS,
        **faults,
        **_packed_class(url),
    )
    return Redis.from_pool(pool)  # the client owns the pool: closing it closes both
