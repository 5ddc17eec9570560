"""Operations: what the runner tells operators, and how a long-running worker keeps well.

- :mod:`~parkway.runner.ops.telemetry`: Prometheus metrics and OpenTelemetry spans;
- :mod:`~parkway.runner.ops.logcontext`: the chat, run, call and principal a log line is about;
- :mod:`~parkway.runner.ops.heap`: the garbage collector's settings for a worker.

It imports the runner's vocabulary and the model interface's types only: no engine, no
model implementation.
"""

from parkway.runner.ops import logcontext
from parkway.runner.ops.heap import settle_heap
from parkway.runner.ops.telemetry import (
    CALLS_SETTLED,
    CALLS_WAITING,
    EVENT_LOG_WRITE,
    REDIS_BREAKER_OPEN,
    REDIS_ERRORS,
    RESUME_SECONDS,
    RUNS,
    RUNS_IN_PROGRESS,
    SANDBOX_RUNS,
    SWEEPER_LAG,
    ModelLabel,
    Stopwatch,
    context_of,
    count_parked,
    mark_failed,
    model_span,
    model_step_done,
    settle_span,
    span,
    traceparent,
)

__all__ = [
    "CALLS_SETTLED",
    "CALLS_WAITING",
    "EVENT_LOG_WRITE",
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
    "logcontext",
    "mark_failed",
    "model_span",
    "model_step_done",
    "settle_heap",
    "settle_span",
    "span",
    "traceparent",
]
