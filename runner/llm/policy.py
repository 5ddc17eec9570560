"""Retry and timeout policies of provider requests (plain values: no provider SDK here)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["ModelTimeouts", "RetryPolicy", "Sleep"]

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """How a request that failed before its first token is tried again.

    ``retries`` more attempts at most; the n-th waits ``base_s * 2**n`` (capped at
    ``max_wait_s``, with up to 25% jitter), or what the provider's ``Retry-After`` asks
    when it says. A provider that asks for longer than ``max_wait_s`` is not waited for.
    """

    retries: int = 2
    base_s: float = 0.5
    max_wait_s: float = 20.0

    def wait(self, attempt: int, retry_after: float | None) -> float | None:
        if retry_after is not None:
            return retry_after if retry_after <= self.max_wait_s else None
        delay: float = min(self.base_s * 2**attempt, self.max_wait_s)
        return delay * (1 + random.random() / 4)  # noqa: S311 - jitter, not a secret


@dataclass(frozen=True)
class ModelTimeouts:
    """Per-request timeouts of provider HTTP calls: connecting, and waiting for the next
    bytes of a response (a stream that stalls that long fails)."""

    connect_s: float = 10.0
    read_s: float = 120.0
