"""Serving the metrics: ``/metrics`` on the public port when switched on, or a port of
its own, and the transport's own metrics (streams, admission, the Redis pool).

The runner counts in prometheus-client's default registry (runner/ops/telemetry.py). With
``PROMETHEUS_MULTIPROC_DIR`` set (a server run as several processes, e.g. under
gunicorn), a scrape reads every process's values from that folder instead, as
prometheus-client's multi-process mode does; the pool gauges then describe the process
that answered.

Threat answered: metrics name tools and models and show traffic; they carry no chat
content, ids or principals, but are still off the public port by default.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from parkway.runner.store import RedisClient

__all__ = [
    "ADMISSION_REFUSED",
    "POOLS",
    "STREAMS_LIVE",
    "MetricsPort",
    "MetricsServing",
    "PoolCollector",
    "metrics_endpoint",
    "metrics_routes",
    "registry",
]

log = logging.getLogger(__name__)

STREAMS_LIVE = Gauge(
    "parkway_streams_live",
    "Streamed responses open on this worker now (chat turns, resumes, stream resumes).",
    multiprocess_mode="livesum",
)
ADMISSION_REFUSED = Counter(
    "parkway_admission_refused",
    "Requests refused with 429 because a run or stream limit was reached, by kind.",
    ["kind"],
)


class PoolCollector(Collector):
    """The Redis connection pools' use, read at scrape time: connections in use, idle,
    and the pools' size (a blocking pool waits when in use reaches it), summed over the
    process's serving apps (one, except in tests that start several workers)."""

    def __init__(self) -> None:
        self.clients: list[RedisClient] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "parkway_redis_pool_connections",
            "Redis connections of this process's pool, by state (in_use, idle, max).",
            labels=["state"],
        )
        totals = {"in_use": 0, "idle": 0, "max": 0}
        for client in list(self.clients):
            # redis-py has no public counters for this; its pool's own two collections
            # are read (a Cluster client has one pool per node and is not described).
            pool: Any = getattr(client, "connection_pool", None)
            in_use = getattr(pool, "_in_use_connections", None)
            idle = getattr(pool, "_available_connections", None)
            if in_use is not None and idle is not None:
                totals["in_use"] += len(in_use)
                totals["idle"] += len(idle)
                totals["max"] += getattr(pool, "max_connections", 0) or 0
        for state, count in totals.items():
            family.add_metric([state], count)
        yield family


POOLS = PoolCollector()
REGISTRY.register(POOLS)


def registry() -> CollectorRegistry:
    """What a scrape reads: the process's registry, or, in multi-process mode, every
    process's values (plus this process's pools)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    merged = CollectorRegistry()
    MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
    merged.register(POOLS)
    return merged


async def metrics_endpoint(request: Request) -> Response:
    """``GET /metrics`` (Prometheus text format)."""
    body = generate_latest(registry())
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def metrics_routes(*, enabled: bool) -> list[Route]:
    """``/metrics`` on the public port, only when switched on (setting ``metrics``)."""
    return [Route("/metrics", metrics_endpoint, methods=["GET"])] if enabled else []


class MetricsPort:
    """``/metrics`` on a port of its own (``metrics_port``), served by prometheus-client's
    small threaded server, so a scrape never waits on the event loop."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._server, self._thread = start_http_server(
            self.port, addr=self.host, registry=registry()
        )
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class MetricsServing:
    """What a serving app adds to the metrics while it runs: its Redis pool's gauges and,
    with ``port``, the metrics port. :meth:`stop` takes both away again."""

    def __init__(self, redis: RedisClient, *, port: int | None, host: str) -> None:
        self.redis = redis
        self._port = None if port is None else MetricsPort(host, port)

    def start(self) -> None:
        POOLS.clients.append(self.redis)
        if self._port is not None:
            self._port.start()

    def stop(self) -> None:
        if self._port is not None:
            self._port.stop()
        if self.redis in POOLS.clients:
            POOLS.clients.remove(self.redis)
