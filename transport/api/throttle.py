"""How fast one client address may mint anonymous sessions: a token bucket per address.

Threat answered: with ``auth=anonymous`` outside a local playground, anyone who reaches
the server gets a session, and every session is a fresh principal with its own run and
stream allowances (transport/api/admission.py). Without a limit one client could mint
principals as fast as it can post, and with them sidestep the per-principal limits.

The buckets live in the worker's memory, not in Redis: minting a session touches no
Redis either (tokens are signed, nothing is stored), a limit that costs no round trip
cannot be slowed by a Redis outage, and a refused client costs nothing. The price is that
the limit is per worker: with N workers behind a balancer a client may mint up to N times
the burst (docs/operations.md, "Limits"). The table of buckets is bounded: when it is
full, buckets that have refilled are dropped first, then the oldest.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SessionThrottle"]

# At most this many addresses are tracked at once (a few hundred KB).
_MAX_ADDRESSES = 10_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class SessionThrottle:
    """``burst`` sessions at once per address, refilled at ``per_minute`` (above 0)."""

    def __init__(
        self,
        *,
        burst: int,
        per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = _MAX_ADDRESSES,
    ) -> None:
        self.burst = burst
        self.rate_s = per_minute / 60.0
        self._clock = clock
        self._max = max_addresses
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, address: str) -> float:
        """Take one session for ``address``: 0 when granted, else the seconds until one
        is available (the Retry-After)."""
        now = self._clock()
        bucket = self._buckets.pop(address, None)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate_s)
        bucket.at = now
        self._buckets[address] = bucket  # the most recent last
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            self._trim(now)
            return 0.0
        return (1 - bucket.tokens) / self.rate_s

    def _trim(self, now: float) -> None:
        if len(self._buckets) <= self._max:
            return
        full = [
            address
            for address, bucket in self._buckets.items()
            if bucket.tokens + (now - bucket.at) * self.rate_s >= self.burst
        ]
        for address in full:  # a full bucket is what a new one would be
            del self._buckets[address]
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
