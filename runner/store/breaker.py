"""The circuit breaker of one Redis client: once Redis is known unreachable, fail fast.

Without it, every command during an outage paid the client's whole retry schedule
(:data:`~parkway.runner.store.client.RETRY_ATTEMPTS` attempts, about 5 s) and, when every
pooled connection was busy failing, the pool's wait on top; a request making a few
commands answered its 503 after tens of seconds. With it, a worker learns of the outage
once and then answers at once, and learns of the recovery by itself.

The states (docs/operations.md, "Connections, outages and limits")::

    closed ──(a connection to Redis cannot be opened)──> open
    open ──(COOL_DOWN_S later, on the next call)──> half-open: one probe (PING)
    half-open ──(the probe answers)──> closed
    half-open ──(the probe fails or takes over PROBE_TIMEOUT_S)──> open

- **closed**: calls go through as usual, with the client's retries.
- What opens it: a connection attempt that fails at the socket: refused, reset,
  unreachable, or not connected within the connect timeout. A failure on a connection
  that was open (a reset mid-command, a lost reply) does not: that is what a Redis
  restart does to pooled connections, and the client's retry on a fresh connection
  hides it. If the fresh connection cannot be opened either, that attempt opens the
  breaker. Errors Redis answers (a script error, ``WRONGTYPE``, ``NOSCRIPT``) never do,
  nor does a TLS handshake refused (a configuration fault, not an outage).
- **open**: a call that needs a new connection, or any call through the pool, fails at
  once with :class:`RedisUnavailableError` without waiting for a pooled connection; a
  command retrying when the breaker opens stops retrying; commands waiting for a free
  connection stop waiting (:mod:`parkway.runner.store.client` does the wiring).
- **half-open**: the first call after the cool-down starts one probe, a PING on a
  connection of its own with :data:`PROBE_TIMEOUT_S` to connect and to answer, and
  every call meanwhile waits for that probe (at most :data:`PROBE_TIMEOUT_S`) rather
  than reaching Redis: success closes the breaker and the calls go on; failure opens it
  again for another cool-down, and they fail.

Nothing probes while nobody calls: a worker's background loops (the sweeper, the log
watch, lease renewal) call often enough that an idle worker closes its breaker within
about a second of Redis answering again.

One breaker per client, so per worker: workers learn of an outage and of the recovery
each on their own. The constants are not settings: the cool-down bounds both how long
a recovered Redis goes unnoticed and how often a worker knocks on a dead one (one PING a
second), and the probe timeout bounds how long a request may wait on the probe; neither
depends on the deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from parkway.runner.ops import REDIS_BREAKER_OPEN

__all__ = ["COOL_DOWN_S", "PROBE_TIMEOUT_S", "Breaker", "BreakerState", "RedisUnavailableError"]

log = logging.getLogger(__name__)

#: How long an open breaker fails every call before it lets one probe through.
COOL_DOWN_S = 1.0
#: How long the probe may take to connect, and then to have its PING answered.
PROBE_TIMEOUT_S = 0.5

Probe = Callable[[], Awaitable[None]]


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class RedisUnavailableError(RedisConnectionError):
    """Redis is known to be unreachable (the client's breaker is open): the call was not
    sent. A redis-py ``ConnectionError``, so it is handled wherever an outage is
    (:func:`parkway.runner.store.client.is_redis_outage`): the HTTP layer answers 503."""


class Breaker:
    """The circuit breaker of one Redis client (see the module docstring).

    ``clock`` is monotonic seconds, injectable so a test decides when the cool-down is
    over. The probe is given by :meth:`use_probe` once the client exists
    (:func:`parkway.runner.store.client.connect`); a breaker without one never closes
    again once opened, so a client always has one.
    """

    def __init__(
        self,
        *,
        cool_down_s: float = COOL_DOWN_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not cool_down_s >= 0 or not probe_timeout_s > 0:
            raise ValueError("cool_down_s must be >= 0 and probe_timeout_s > 0")
        self.cool_down_s = cool_down_s
        self.probe_timeout_s = probe_timeout_s
        self.clock = clock
        self.state = BreakerState.CLOSED
        self.opened_at = 0.0  # when it last opened (the clock's time)
        self.cause = ""  # what opened it, for the logs
        self.trips = 0  # closed -> open transitions, for tests and the logs
        self.reached = False  # a connection was ever opened
        self._outage_started = 0.0
        self._probe: Probe | None = None
        self._probing: asyncio.Task[bool] | None = None
        self._on_open: list[Callable[[], None]] = []

    def __deepcopy__(self, memo: dict[int, Any]) -> Breaker:
        # redis-py deep-copies each connection's Retry, which holds the breaker: every
        # copy must still share this one.
        return self

    def __repr__(self) -> str:
        return f"<Breaker {self.state.value}>"

    @property
    def closed(self) -> bool:
        return self.state is BreakerState.CLOSED

    def use_probe(self, probe: Probe) -> None:
        """How this breaker checks Redis when half-open: raises unless Redis answers."""
        self._probe = probe

    def on_open(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (no arguments, sync) each time the breaker opens."""
        self._on_open.append(callback)

    async def admit(self) -> None:
        """Return if a call may go to Redis now; raise :class:`RedisUnavailableError` if
        not. Waits only for a probe in flight, and at most ``probe_timeout_s``."""
        if self.state is BreakerState.CLOSED:
            return
        if self.state is BreakerState.OPEN:
            if self.clock() - self.opened_at < self.cool_down_s:
                raise self.unavailable()
            self._start_probe()
        probing = self._probing
        if probing is not None:
            # (the probe bounds itself the same way; a caller never waits longer)
            done, _ = await asyncio.wait({probing}, timeout=self.probe_timeout_s * 2)
            if probing in done and not probing.cancelled() and probing.result():
                return
        raise self.unavailable()

    async def wait_closed(self, within_s: float) -> bool:
        """Wait until the breaker is closed (probing each cool-down), at most
        ``within_s`` seconds of the event loop's time; whether it is. For background
        work that must reach Redis once it is back (a failed run releasing its chat),
        never for a request, which fails at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while not self.closed:
            with contextlib.suppress(RedisUnavailableError):
                await self.admit()
            left = deadline - loop.time()
            if self.closed or left <= 0:
                break
            await asyncio.sleep(min(left, max(self.cool_down_s / 4, 0.05)))
        return self.closed

    def connected(self) -> None:
        """A connection to Redis was opened."""
        self.reached = True

    def trip(self, cause: BaseException) -> None:
        """A connection to Redis could not be opened: open the breaker. A closed one
        logs the outage once and wakes what waits for a pooled connection; an open one
        starts its cool-down again; a half-open one leaves it to the probe in flight (a
        connection begun before the breaker opened has failed late)."""
        self.cause = f"{type(cause).__name__}: {cause}"
        self.opened_at = self.clock()
        if self.state is not BreakerState.CLOSED:
            return
        self.state = BreakerState.OPEN
        self.trips += 1
        self._outage_started = self.opened_at
        REDIS_BREAKER_OPEN.set(1)
        # (a Redis never reached yet is the caller's to report: startup says it in its
        # one line, ``parkway serve`` fails with it)
        level = logging.WARNING if self.reached else logging.DEBUG
        log.log(
            level,
            "Redis unreachable (%s): failing fast, probing every %g s",
            self.cause,
            self.cool_down_s,
        )
        for callback in self._on_open:
            callback()

    def unavailable(self) -> RedisUnavailableError:
        """The error a call refused by this breaker raises."""
        cause = self.cause or "a connection failed"
        return RedisUnavailableError(f"Redis is unreachable ({cause}); the command was not sent")

    def _start_probe(self) -> None:
        self.state = BreakerState.HALF_OPEN
        if self._probing is None or self._probing.done():
            self._probing = asyncio.get_running_loop().create_task(
                self._run_probe(), name="parkway-redis-probe"
            )

    async def _run_probe(self) -> bool:
        """Probe once; close or open the breaker on the result; whether it closed."""
        try:
            if self._probe is None:
                raise RedisUnavailableError("no probe")
            async with asyncio.timeout(self.probe_timeout_s * 2):  # connect, then PING
                await self._probe()
        except Exception as exc:  # whatever it is, Redis did not answer
            self.cause = f"{type(exc).__name__}: {exc}"
            self.opened_at = self.clock()
            self.state = BreakerState.OPEN
            log.debug("Redis probe failed (%s); next in %g s", self.cause, self.cool_down_s)
            return False
        self.state = BreakerState.CLOSED
        REDIS_BREAKER_OPEN.set(0)
        log.log(
            logging.WARNING if self.reached else logging.DEBUG,
            "Redis reachable again after %.1f s: breaker closed",
            self.clock() - self._outage_started,
        )
        self.reached = True
        return True

    async def aclose(self) -> None:
        """Stop a probe in flight (the client is closing)."""
        probing, self._probing = self._probing, None
        if probing is not None and not probing.done():
            probing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probing
