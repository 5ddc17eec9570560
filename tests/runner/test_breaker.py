"""The Redis client's circuit breaker, driven by a real redis-server that is stopped and
started again: what opens it, what it refuses while open, its probe, and its recovery.

The cool-down runs on an injected clock, so the tests decide when a probe is due rather
than waiting for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from parkway.runner.store import Breaker, BreakerState, RedisUnavailableError, is_redis_outage
from parkway.runner.store.client import RedisClient, breaker_of, connect
from tests.helpers.faults import RestartableRedis

pytestmark = [
    pytest.mark.slow,
    # (as in test_redis_faults: a handshake cut by the stop can leave a socket for the
    # garbage collector)
    pytest.mark.filterwarnings("ignore:unclosed <StreamWriter:ResourceWarning"),
]


OUTAGE = (RedisConnectionError, RedisTimeoutError)


class Clock:
    """Monotonic seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RestartableRedis]:
    started = RestartableRedis(tmp_path).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(server: RestartableRedis, clock: Clock) -> AsyncIterator[RedisClient]:
    made = connect(server.url, max_connections=4, pool_timeout_s=30, breaker=Breaker(clock=clock))
    try:
        yield made
    finally:
        await made.aclose()


def the_breaker(client: RedisClient) -> Breaker:
    breaker = breaker_of(client)
    assert breaker is not None
    return breaker


def connections(client: RedisClient) -> int:
    """How many connections the client's pool has made (idle and in use)."""
    pool = client.connection_pool  # type: ignore[union-attr]
    return len(pool._available_connections) + len(pool._in_use_connections)


async def test_a_refused_connection_opens_it_and_calls_then_fail_without_the_pool(
    server: RestartableRedis, client: RedisClient
) -> None:
    """Redis stops: the first command that cannot connect opens the breaker; every call
    after it fails at once with ``RedisUnavailableError`` (an outage to every handler),
    without taking a pooled connection or making one."""
    breaker = the_breaker(client)
    await asyncio.gather(*(client.set(f"k{i}", i) for i in range(8)))
    assert breaker.state is BreakerState.CLOSED
    await asyncio.to_thread(server.shutdown)
    with pytest.raises(OUTAGE) as first:
        await client.get("k1")
    assert is_redis_outage(first.value)
    assert breaker.state is BreakerState.OPEN and breaker.trips == 1
    made = connections(client)
    for _ in range(20):
        with pytest.raises(RedisUnavailableError) as refused:
            await client.get("k1")
        assert is_redis_outage(refused.value)
    with pytest.raises(RedisUnavailableError):
        await client.pipeline(transaction=False).get("k1").get("k2").execute()
    assert connections(client) == made
    assert client.connection_pool._in_use_connections == set()  # type: ignore[union-attr]
    assert breaker.trips == 1


async def test_errors_that_redis_answers_never_open_it(client: RedisClient) -> None:
    """A script error, ``WRONGTYPE`` and an unknown script are answers from a Redis that
    is up: they are the request's fault, and the breaker stays closed."""
    breaker = the_breaker(client)
    await client.set("s", "x")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await client.lpush("s", "y")
    with pytest.raises(ResponseError):
        await client.eval("return redis.call('no-such-command')", 0)
    with pytest.raises(NoScriptError):
        await client.evalsha("0" * 40, 0)
    assert breaker.state is BreakerState.CLOSED and breaker.trips == 0
    assert await client.get("s") == b"x"


async def test_after_the_cool_down_one_probe_reopens_or_closes_it(
    server: RestartableRedis, client: RedisClient, clock: Clock
) -> None:
    """Open, it lets nothing through until the cool-down is over; then one PING probes.
    Redis still down: the probe fails and the breaker opens for another cool-down.
    Redis back (same port, same AOF): nothing reaches it before the cool-down is over;
    then the probe closes the breaker, the call that triggered it goes through, and what
    was written before the outage is there."""
    breaker = the_breaker(client)
    await client.set("before", "kept")
    await asyncio.to_thread(server.shutdown)
    with pytest.raises(Exception, match="onnect"):
        await client.get("before")
    assert breaker.state is BreakerState.OPEN
    opened = breaker.opened_at

    clock.now += breaker.cool_down_s / 2
    with pytest.raises(RedisUnavailableError):
        await client.get("before")
    assert breaker.state is BreakerState.OPEN and breaker.opened_at == opened  # no probe

    clock.now += breaker.cool_down_s  # the cool-down is over: the next call probes
    with pytest.raises(RedisUnavailableError):
        await client.get("before")
    assert breaker.state is BreakerState.OPEN
    assert breaker.opened_at == clock.now  # the failed probe started a new cool-down
    assert breaker.trips == 1  # still the same outage

    await asyncio.to_thread(server.start)
    with pytest.raises(RedisUnavailableError):  # within the cool-down: not tried
        await client.get("before")
    assert breaker.state is BreakerState.OPEN

    clock.now += breaker.cool_down_s
    assert await client.get("before") == b"kept"
    assert breaker.state is BreakerState.CLOSED
    assert await asyncio.gather(*(client.incr("n") for _ in range(10)))
    assert await client.get("n") == b"10"


async def test_a_command_waiting_for_a_pooled_connection_stops_waiting_when_it_opens(
    server: RestartableRedis, clock: Clock
) -> None:
    """The pool's one connection is taken; a command waits for it (the pool would let it
    wait 30 s). Redis stops, and another connection of the client fails to open: the
    breaker opens, and the waiting command is refused at once, though the connection it
    waited for was never given back."""
    client = connect(server.url, max_connections=1, pool_timeout_s=30, breaker=Breaker(clock=clock))
    pool = client.connection_pool  # type: ignore[union-attr]
    taken = await pool.get_connection()
    try:
        waiting = asyncio.create_task(client.get("k"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # it waits for the pool's only connection
        await asyncio.to_thread(server.shutdown)
        with pytest.raises(OUTAGE):
            await pool.make_connection().connect()  # refused: the breaker opens
        assert the_breaker(client).state is BreakerState.OPEN
        with pytest.raises(RedisUnavailableError):
            await asyncio.wait_for(waiting, 20)
        assert pool._in_use_connections == {taken}  # still taken
    finally:
        await pool.release(taken)
        await client.aclose()
