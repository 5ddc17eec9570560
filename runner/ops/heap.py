"""The garbage collector, set up for a worker that runs for a long time.

CPython's cyclic collector has three generations. A full collection walks every tracked
object, and in a worker most of them come from startup and live as long as the process:
the imported modules, pydantic's schemas, the provider SDKs, the app. On the benchmark
machine that is about 290,000 objects, which a full collection takes 110-140 ms to walk,
and while it does, every stream and request of the worker waits. Measured in the HTTP
benchmark at 200 messages, such a collection came every 60 cycles or so and made the
p99 of a parking ``POST /api/chat`` 77-128 ms against a p50 of 6 ms.

Two things cause it, and :func:`settle_heap` answers both once the worker has started:

- **The startup heap is walked again and again.** It is collected once, and what is
  left is frozen (``gc.freeze``): later collections, full ones included, skip it.
- **A request's objects outlive the youngest generation.** CPython collects it every
  700 container allocations; parsing a 76 KB body or decoding a 200-message history
  allocates several thousand, so objects a request still holds get promoted, and their
  promotions are what brings the next full collection. With a threshold of
  :data:`YOUNG_THRESHOLD`, most of a request's objects are freed before a collection
  sees them.

The cost: anything frozen is never collected, so the startup heap must not hold
garbage cycles it would later drop (it is collected first), and up to
:data:`YOUNG_THRESHOLD` container objects wait between young collections (a few
megabytes at most). ``parkway serve`` calls :func:`settle_heap` once uvicorn listens;
a program that embeds the runner or the app in its own server can call it the same way.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle_heap"]

YOUNG_THRESHOLD = 10_000


def settle_heap() -> int:
    """Collect once, freeze what is left and raise the youngest generation's threshold
    to :data:`YOUNG_THRESHOLD` (the older ones keep theirs). Returns the number of
    objects now frozen. Meant to be called once, after startup; calling it again freezes
    what has been created since."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
    return gc.get_freeze_count()
