"""Parkway's benchmark suite, run by ``make bench`` (``python -m bench``).

It measures, on a loopback Redis, what parking and resuming a chat costs:

- runner level (:mod:`bench.runner_level`): park, settle and resume latency (p50/p99)
  with histories of 2, 20 and 200 messages, the Redis round trips of each operation,
  and the bytes a parked chat keeps in Redis;
- HTTP level (:mod:`bench.http_level`): the same operations through the real app
  served by uvicorn in its own process, measured with an HTTP client;
- concurrency (:mod:`bench.concurrency`): parks and resumes per second, 100 at once,
  and 1,000 runs at once on one runner;
- the floor (:mod:`bench.floor`): bare ``SET`` and ``GETDEL`` of 4 KB and a 200-message
  history read on the same Redis, which the targets (:mod:`bench.targets`) are ratios to.

Results are printed as Markdown and written to ``docs/benchmarks.md``
(:mod:`bench.report`). What each metric measures is defined there and in the module
docstrings here.
"""

from __future__ import annotations

__all__: list[str] = []
