"""The event log: a chat's runs as any worker follows them.

- :mod:`~parkway.runner.eventlog.followers`: :func:`follow`, one run's events from its first,
  from Redis or from this worker's memory;
- :mod:`~parkway.runner.eventlog.local`: :class:`LocalLog`, what this worker's runs
  appended, kept a short while for local followers;
- :mod:`~parkway.runner.eventlog.watch`: :class:`LogWatch`, one pub/sub connection that
  wakes every follower of the worker.
"""

from parkway.runner.eventlog.followers import INTERRUPTED, cancel_requested, follow
from parkway.runner.eventlog.watch import LogWatch

__all__ = [
    "INTERRUPTED",
    "LogWatch",
    "cancel_requested",
    "follow",
]
