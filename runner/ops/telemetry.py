"""What the runner tells operators: Prometheus metrics and OpenTelemetry spans.

Metrics live in prometheus-client's default registry, as that library intends, so one
scrape covers the whole process (and, with ``PROMETHEUS_MULTIPROC_DIR`` set, every
process of a multi-process server: the gauges say how they add up). The transport
serves them (``/metrics``); the runner only counts. Every metric is named
``parkway_*``; docs/operations.md lists them with the queries an operator runs.

Spans go through the OpenTelemetry API, which does nothing until a tracer provider is
configured (``parkway serve --tracing``, or ``opentelemetry-instrument``). A user's turn
is one trace, from the first model step to the message's end, across every park and
resume and whichever worker resumes it: a parked call's record keeps the W3C
``traceparent`` of the run that parked it, and the run that resumes the chat, or a
settle of the call, continues that trace. Model spans follow the OpenTelemetry GenAI
semantic conventions (``chat {model}``, ``gen_ai.*`` attributes); tool spans are
``execute_tool {name}``.

Nothing here ever sees a message's text, a tool's input or output, or a token.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    ProxyTracer,
    ProxyTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from parkway.runner.errors import ModelError
    from parkway.runner.llm import ModelStepEnd
    from parkway.runner.parking import ParkedCall

__all__ = [
    "CALLS_PARKED",
    "CALLS_SETTLED",
    "CALLS_WAITING",
    "EVENT_LOG_WRITE",
    "MODEL_REQUESTS",
    "MODEL_TOKENS",
    "PARK_SECONDS",
    "REDIS_BREAKER_OPEN",
    "REDIS_ERRORS",
    "RESUME_SECONDS",
    "RUNS",
    "RUNS_IN_PROGRESS",
    "SANDBOX_RUNS",
    "SWEEPER_LAG",
    "ModelLabel",
    "Stopwatch",
    "context_of",
    "count_parked",
    "mark_failed",
    "model_span",
    "model_step_done",
    "parent_from",
    "settle_span",
    "span",
    "traceparent",
]

# Latency buckets from 0.5 ms to 10 s: a park or a resume is a few milliseconds on a
# healthy Redis, and seconds mean something is wrong.
_FAST: Final = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

CALLS_PARKED = Counter(
    "parkway_calls_parked",
    "Tool calls parked to wait for a browser or a human, by kind (client, approval).",
    ["kind", "tool"],
)
CALLS_SETTLED = Counter(
    "parkway_calls_settled",
    "Parked calls given their outcome, by kind, outcome (answered, approved, denied, "
    "declined, cancelled, failed, timeout, ...) and source (browser, callback, sweeper, "
    "server). Counted once, by the worker whose settle won.",
    ["kind", "outcome", "source"],
)
CALLS_WAITING = Gauge(
    "parkway_calls_waiting",
    "Parked calls waiting for their outcome, on every worker of the Redis (the deadline "
    "index's size, read by each sweep).",
    multiprocess_mode="max",
)
PARK_SECONDS = Histogram(
    "parkway_park_seconds",
    "From a model step's end to its parked calls being stored (the commit that parks).",
    buckets=_FAST,
)
RESUME_SECONDS = Histogram(
    "parkway_resume_seconds",
    "From a resume's claim to the resumed run's next model request (its outcomes applied "
    "and approved calls run in between).",
    buckets=(*_FAST[:-1], 30.0, 120.0),
)
RUNS = Counter(
    "parkway_runs",
    "Runs ended, by how they started (turn, resume) and how they ended (finished, parked, "
    "stopped, failed, interrupted).",
    ["start", "end"],
)
RUNS_IN_PROGRESS = Gauge(
    "parkway_runs_in_progress",
    "Runs executing on this worker now.",
    multiprocess_mode="livesum",
)
SWEEPER_LAG = Gauge(
    "parkway_sweeper_lag_seconds",
    "How late the last sweep found the oldest expired call (0 when none was due).",
    multiprocess_mode="max",
)
EVENT_LOG_WRITE = Histogram(
    "parkway_event_log_write_seconds",
    "One append of a batch of a run's events to the chat's event log.",
    buckets=_FAST,
)
REDIS_ERRORS = Counter(
    "parkway_redis_errors",
    "Redis unreachable or out of pool connections, by where it was met (http, run, "
    "event_log, sweeper, watch).",
    ["where"],
)
REDIS_BREAKER_OPEN = Gauge(
    "parkway_redis_breaker_open",
    "1 while this worker's Redis circuit breaker is open (Redis known unreachable: "
    "calls fail at once), else 0.",
    multiprocess_mode="max",
)
MODEL_REQUESTS = Counter(
    "parkway_model_requests",
    "Requests to a model, by provider and outcome (ok, error, retryable_error, stopped).",
    ["provider", "outcome"],
)
MODEL_TOKENS = Counter(
    "parkway_model_tokens",
    "Tokens the model reported, by provider, model and type (input, output, reasoning).",
    ["provider", "model", "type"],
)
SANDBOX_RUNS = Counter(
    "parkway_sandbox_runs",
    "execute_code runs, by status (ok, error, timeout, limit, unavailable, ...).",
    ["status"],
)

_tracer = trace.get_tracer("parkway")


# -- traces ------------------------------------------------------------------------------


def traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None when none is recording
    (tracing off: nothing is stored)."""
    current = trace.get_current_span().get_span_context()
    if not current.is_valid or not current.trace_flags.sampled:
        return None
    return f"00-{current.trace_id:032x}-{current.span_id:016x}-{int(current.trace_flags):02x}"


def parent_from(header: str | None) -> Any:
    """An OpenTelemetry context whose parent is the span ``header`` names (a stored
    ``traceparent``), or None when there is none or it is malformed."""
    if not header:
        return None
    parts = header.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    remote = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 1))
    return trace.set_span_in_context(NonRecordingSpan(remote))


def context_of(headers: Mapping[str, str | None]) -> Any:
    """The first usable stored ``traceparent`` among ``headers``' values, as a context."""
    for header in headers.values():
        found = parent_from(header)
        if found is not None:
            return found
    return None


@contextlib.contextmanager
def span(
    name: str,
    *,
    parent: Any = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span around the ``with`` block, under ``parent`` (a context from
    :func:`parent_from`) or the current span; an exception marks it as an error. With
    tracing off, nothing at all (the API's own no-op span costs a few microseconds,
    several times per park and settle)."""
    if not _tracing():
        yield INVALID_SPAN
        return
    with _tracer.start_as_current_span(
        name,
        context=parent,
        kind=kind,
        attributes=dict(attributes or {}),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            mark_failed(current, type(exc).__name__)
            raise


def _tracing() -> bool:
    """Whether spans go anywhere: a tracer provider is set for the process, or ``_tracer``
    was given one of its own (the tests')."""
    return not isinstance(_tracer, ProxyTracer) or not isinstance(
        trace.get_tracer_provider(), ProxyTracerProvider
    )


def mark_failed(current: Span, error_type: str) -> None:
    """Mark ``current`` as failed, with ``error.type`` (a class of error, never a message
    that could carry user data)."""
    if current.is_recording():
        current.set_status(Status(StatusCode.ERROR, error_type))
        current.set_attribute("error.type", error_type)


@contextlib.contextmanager
def model_span(label: ModelLabel) -> Iterator[Span]:
    """A GenAI ``chat`` span for one model request (:func:`model_step_done` counts it
    and records its outcome)."""
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": label.provider,
        "gen_ai.request.model": label.model,
    }
    with span(f"chat {label.model}", kind=SpanKind.CLIENT, attributes=attributes) as current:
        yield current


@dataclass(frozen=True)
class ModelLabel:
    """Which model a run asks, as metrics and spans name it."""

    provider: str
    model: str

    @classmethod
    def of(cls, name: str | None) -> ModelLabel:
        """From a model name (``openai:gpt-4o``, ``scripted``); None: an unnamed model."""
        if not name:
            return cls("unknown", "unknown")
        provider, _, model = name.partition(":")
        return cls(provider, model or provider)

    @classmethod
    def of_model(cls, model: object) -> ModelLabel:
        """A model given as an object, named by its class (a test's own model; the
        engine names the scripted model ``scripted`` with :meth:`of`)."""
        name = type(model).__name__.lower()
        return cls(name, name)


def count_parked(calls: Sequence[ParkedCall], watch: Stopwatch) -> None:
    """Count a step's parked calls, and how long parking them took."""
    PARK_SECONDS.observe(watch.seconds())
    for call in calls:
        CALLS_PARKED.labels(call.kind, call.tool_name).inc()


def model_step_done(
    current: Span,
    label: ModelLabel,
    end: ModelStepEnd | None,
    failure: ModelError | None,
    *,
    stopped: bool,
) -> None:
    """Count one model request by outcome, add the tokens it reported, and record both
    on its span (GenAI attributes)."""
    if failure is not None:
        outcome = "retryable_error" if failure.retryable else "error"
        mark_failed(current, outcome)
    else:
        outcome = "stopped" if stopped else "ok"
    MODEL_REQUESTS.labels(label.provider, outcome).inc()
    if end is None:
        return
    usage = end.usage
    if usage is not None:
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if count:
                MODEL_TOKENS.labels(label.provider, label.model, kind).inc(count)
    if current.is_recording():
        if end.finish_reason:
            current.set_attribute("gen_ai.response.finish_reasons", (end.finish_reason,))
        if end.model:
            current.set_attribute("gen_ai.response.model", end.model)
        if usage is not None:
            current.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            current.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)


@contextlib.contextmanager
def settle_span(call: ParkedCall, source: str) -> Iterator[Span]:
    """A span for a settle of ``call``, in the trace of the run that parked it."""
    attributes = {
        "parkway.call.id": call.tool_call_id,
        "parkway.call.kind": call.kind,
        "gen_ai.tool.name": call.tool_name,
        "parkway.settle.source": source,
    }
    with span("parkway.settle", parent=parent_from(call.trace), attributes=attributes) as current:
        yield current


class Stopwatch:
    """Seconds since it was made, on the monotonic clock (for the latency histograms)."""

    __slots__ = ("_start",)

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self._start
