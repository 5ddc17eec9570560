"""Admission control: how many runs and streams one worker takes, per principal and in all.

A run is a turn or a resume executing on this worker (from its start until it parks or
ends); a stream is an open SSE response (a run's own stream, a reconnect, a replay).
Past a limit the request is refused with 429 and ``Retry-After`` before anything is
written to Redis, so a refused request changes nothing and can simply be sent again.
One principal's load never takes the slots of another's below the per-worker limits.

A share of the worker (setting ``admission_reserve``, a quarter by default) is kept for
light clients: once the worker is that close to its limit, a request is admitted only if
its client holds fewer than half the per-principal limit. A client is the principal, or, for
anonymous sessions, which anyone can mint, the client address that minted them: one
address with many sessions is one heavy client, so it cannot take the whole worker, and
a user from elsewhere still gets in.

The limits are per worker (settings ``max_runs_per_principal``,
``max_streams_per_principal``, ``max_runs_per_worker``, ``max_streams_per_worker``): a
principal whose requests are spread over N workers gets up to N times the per-principal
limit. Counting in Redis instead would cost a round trip per request and leak slots when
a worker dies; the per-worker count dies with its worker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Literal

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from parkway.transport.api.metrics import ADMISSION_REFUSED, STREAMS_LIVE
from parkway.transport.errors import HTTPError

__all__ = ["Admission", "AdmittedStream", "Release"]

Release = Callable[[], None]
Kind = Literal["run", "stream"]

# How long a refused client should wait: a run usually ends (or parks) within seconds; a
# stream slot frees when some reader goes away.
RETRY_AFTER_S = {"run": 2, "stream": 5}


class Admission:
    """Counts this worker's runs and streams and refuses what is past a limit."""

    def __init__(
        self,
        *,
        runs_per_principal: int,
        streams_per_principal: int,
        runs_per_worker: int,
        streams_per_worker: int,
        reserve: float = 0.25,
    ) -> None:
        self._limits: dict[Kind, tuple[int, int]] = {
            "run": (runs_per_principal, runs_per_worker),
            "stream": (streams_per_principal, streams_per_worker),
        }
        # Past this many slots taken, only light clients are admitted.
        self._open_to_all: dict[Kind, int] = {
            kind: per_worker - int(per_worker * reserve)
            for kind, (_, per_worker) in self._limits.items()
        }
        self._by_principal: dict[Kind, Counter[str]] = {"run": Counter(), "stream": Counter()}
        self._by_client: dict[Kind, Counter[str]] = {"run": Counter(), "stream": Counter()}
        self._total: Counter[Kind] = Counter()

    def in_use(self, kind: Kind, principal: str | None = None) -> int:
        """Slots of ``kind`` taken on this worker (by ``principal`` when given)."""
        if principal is None:
            return self._total[kind]
        return self._by_principal[kind][principal]

    def admit(self, kind: Kind, principal: str, client: str | None = None) -> Release:
        """Take a slot of ``kind`` for ``principal`` (of ``client``: the principal
        itself unless given), or raise a 429. The returned function gives it back
        (calling it again does nothing)."""
        per_principal, per_worker = self._limits[kind]
        counts = self._by_principal[kind]
        clients = self._by_client[kind]
        client = principal if client is None else client
        if counts[principal] >= per_principal:
            raise _refused(kind, f"you have {counts[principal]} {kind}s open on this server")
        if self._total[kind] >= per_worker:
            raise _refused(kind, f"this server is at its limit of {per_worker} {kind}s")
        heavy = clients[client] >= max(1, per_principal // 2)
        if self._total[kind] >= self._open_to_all[kind] and heavy:
            raise _refused(kind, f"this server keeps its last {kind}s for other clients")
        counts[principal] += 1
        clients[client] += 1
        self._total[kind] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._total[kind] -= 1
            for counter, name in ((counts, principal), (clients, client)):
                counter[name] -= 1
                if counter[name] <= 0:
                    del counter[name]

        return release


def _refused(kind: Kind, why: str) -> HTTPError:
    ADMISSION_REFUSED.labels(kind).inc()
    wait = RETRY_AFTER_S[kind]
    return HTTPError(
        429,
        f"too_many_{kind}s",
        f"{why}; try again in {wait} s",
        headers={"retry-after": str(wait)},
    )


class AdmittedStream(Response):
    """A streaming response that gives its slot back when it ends, however it ends (the
    client goes away, the run finishes, the server shuts down)."""

    def __init__(self, response: ASGIApp, release: Release) -> None:
        # (a Response only to routes' eyes: it sends nothing of its own)
        self.response = response
        self.release = release
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        STREAMS_LIVE.inc()
        try:
            await self.response(scope, receive, send)
        finally:
            STREAMS_LIVE.dec()
            self.release()
