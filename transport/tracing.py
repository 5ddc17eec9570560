"""Turning on OpenTelemetry tracing for ``parkway serve`` (setting ``tracing``).

The runner makes its spans through the OpenTelemetry API (runner/ops/telemetry.py); they go
nowhere until a tracer provider is set, once per process. ``--tracing otlp`` sets one
that exports over OTLP/HTTP, configured as every OpenTelemetry exporter is, by the
standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER`` ...); ``--tracing console`` prints spans
to stderr. Both need the ``otel`` extra (``pip install 'parkway[otel]'``). A process run
under ``opentelemetry-instrument`` already has a provider: leave ``tracing`` off there.
"""

from __future__ import annotations

import sys
from typing import Literal

from opentelemetry import trace

from parkway.transport.settings import SettingsError

__all__ = ["configure_tracing", "flush_spans"]

Tracing = Literal["off", "otlp", "console"]


def configure_tracing(kind: Tracing) -> None:
    """Set the process's tracer provider for ``kind`` (nothing for ``off``); a missing
    SDK or exporter stops the server with one line naming the extra to install."""
    if kind == "off":
        return
    try:
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        raise SettingsError(
            f"tracing ({kind}): the OpenTelemetry SDK is not installed; "
            "install Parkway with its extra: pip install 'parkway[otel]'"
        ) from None
    exporter: SpanExporter
    if kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
        except ImportError:
            raise SettingsError(
                "tracing (otlp): the OTLP exporter is not installed; "
                "install Parkway with its extra: pip install 'parkway[otel]'"
            ) from None
        exporter = OTLPSpanExporter()
    else:  # for a look while debugging: multi-line JSON among the log lines
        exporter = ConsoleSpanExporter(out=sys.stderr)
    # the standard variables name the service; without them it is "parkway"
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "parkway"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def flush_spans(timeout_s: float = 5.0) -> None:
    """Export the spans still batched, if the process's provider batches (the app's
    shutdown calls it: after a SIGTERM, uvicorn re-raises the signal once the app has
    stopped, and the process ends without running exit hooks)."""
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush(int(timeout_s * 1000))
