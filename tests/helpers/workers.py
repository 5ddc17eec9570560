"""The suite split over pytest-xdist's worker processes (``make test`` runs two).

Each worker is a pytest session of its own: session fixtures run once per worker. Two
things must not be doubled or shared by accident:

- :func:`worker_database`: the Redis service (``PARKWAY_TEST_REDIS_URL``) is one server,
  and every test flushes its database; each worker gets a database of its own, counting
  down from the one configured (db 15 for worker gw0, 14 for gw1, ...). The embedded
  Redis needs nothing: each worker starts its own.
- :func:`shared_once`: a slow build (the user's wheel and venv) is made by the first
  worker that asks, under a file lock in the run's shared temp folder, and reused by the
  others; its result is pickled next to it.
"""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest

__all__ = ["shared_once", "worker_database", "worker_index"]

T = TypeVar("T")


def worker_index() -> int:
    """This process's xdist worker number (``gw3`` → 3), 0 without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def worker_database(url: str) -> str:
    """``url`` with the database this worker may flush: the configured one (default 0)
    less the worker's number."""
    index = worker_index()
    if index == 0:
        return url
    parts = urlsplit(url)
    configured = int(parts.path.strip("/") or 0)
    database = configured - index
    if database < 0:
        raise pytest.UsageError(
            f"PARKWAY_TEST_REDIS_URL names db {configured}: too low for {index + 1} workers"
        )
    return urlunsplit(parts._replace(path=f"/{database}"))


def shared_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """``build(folder)``, once for the whole run however many workers ask."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above every worker's own
    folder = base / f"shared-{name}"
    folder.mkdir(exist_ok=True)
    done = folder / "result.pickle"
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return pickle.loads(done.read_bytes())
        (folder / "built").mkdir(exist_ok=True)
        result = build(folder / "built")
        done.write_bytes(pickle.dumps(result))
        return result
