"""One pub/sub connection per worker that wakes the followers of every chat it serves.

A follower (:func:`parkway.runner.eventlog.followers.follow`) never blocks a Redis connection: it
reads the chat's event log with a plain, non-blocking range read, then waits on an
:class:`asyncio.Event` that this watch sets when the log grows. Every append to a log
publishes on the chat's wake-up channel (``ChatKeys.wake``, in the APPEND script), and
the watch holds one subscription per chat that has followers here, on one connection.
So a worker with 10,000 live streams holds that one connection plus the short reads of
its pool, whatever its number of streams (docs/architecture.md, "Following a run").

Nothing is lost when a notification is: a wake-up only says "read again", the read
itself is exact (after the last entry id the follower saw), and a follower that hears
nothing reads again after its quiet period anyway. The watch subscribes a chat before
its first follower reads (the subscription is confirmed by Redis before the follower
is let go), so an append that lands between the read and the wait still wakes it. A
follower of a run of this worker takes the run's entries from memory instead
(:mod:`parkway.runner.eventlog.local`, :meth:`LogWatch.local_append`), woken by the append
itself; a published entry id that memory holds wakes nobody.
When the connection fails, every follower is woken (reads again) and the watch
reconnects with backoff, subscribing again to every chat that still has followers;
meanwhile :attr:`LogWatch.healthy` is false and followers poll at a short interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster

from parkway.runner.eventlog.local import LocalLog
from parkway.runner.events import Event
from parkway.runner.store import LOGWATCH_CHANNEL, RedisClient, as_text

__all__ = ["LogWatch"]

T = TypeVar("T")

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT_S = 2.0  # how long a follower waits for its subscription to be confirmed
_IDLE_READ_S = 1.0  # how long one read of the subscription connection waits
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
# How long a wake-up for a chat whose run logs on this worker waits for that run's own
# append to answer (which wakes the followers itself) before it wakes them anyway.
_LOCAL_GRACE_S = 0.05


class _ReconnectingPubSub(PubSub):
    """redis-py reconnects a pub/sub connection (and subscribes again) on its own when
    it fails mid-read; this tells the watch, so it wakes its followers: notifications
    published while the connection was down are gone."""

    def __init__(self, *args: Any, on_reconnect: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_reconnect = on_reconnect

    async def on_connect(self, connection: Any) -> None:
        await super().on_connect(connection)
        self._on_reconnect()


class LogWatch:
    """Wake-ups for the followers of one worker, over one subscription connection."""

    def __init__(self, redis: RedisClient, *, read_slots: int = 16) -> None:
        """``read_slots``: how many followers' reads may be in flight at once, so that
        a burst of wake-ups (a thousand streams woken together) never takes every
        pooled connection from the runs' own commands; the rest wait their turn."""
        self.redis = redis
        self._read_slots = asyncio.Semaphore(max(1, read_slots))
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._pubsub: Any = None
        self._task: asyncio.Task[None] | None = None
        self._changes = asyncio.Lock()  # one subscription command at a time
        self.reconnects = 0  # how often the subscription connection came back
        self._broken = False  # a subscribe failed: the reader starts over
        self._reads: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self.healthy = False
        self._connected_before = False
        # What this worker's runs appended, for followers here (runner/eventlog/local.py).
        self.local = LocalLog()

    @property
    def channels(self) -> int:
        """How many chats have followers here."""
        return len(self._waiters)

    async def shared(self, key: str, after: str, read: Callable[[], Awaitable[T]]) -> T:
        """``read()``, shared by every caller asking for the same ``(key, after)`` while it
        is in flight: when a chat's log grows, its fifty followers, all woken at the same
        entry, cost one read, not fifty. A caller that goes away does not cancel the
        read for the others."""
        task = self._reads.get((key, after))
        if task is None:
            task = asyncio.ensure_future(self._limited(read))
            self._reads[(key, after)] = task
            task.add_done_callback(lambda _: self._reads.pop((key, after), None))
        result: T = await asyncio.shield(task)
        return result

    async def _limited(self, read: Callable[[], Awaitable[T]]) -> T:
        async with self._read_slots:
            return await read()

    def local_append(
        self,
        channel: str,
        entry_id: str,
        text: str,
        *,
        start: str,
        last: bool,
        events: Sequence[Event] | None = None,
    ) -> None:
        """A run of this worker (first entry ``start``) appended ``entry_id`` to the chat
        of ``channel`` (``last``: its end), ``text`` made of ``events``: keep it for
        followers here (:class:`LocalLog`), wake them now."""
        self.local.appended(channel, entry_id, text, start=start, last=last, events=events)
        self._wake(channel)

    @contextlib.asynccontextmanager
    async def watching(self, channel: str, *, confirm: bool = True) -> AsyncIterator[asyncio.Event]:
        """An event set whenever ``channel`` (a chat's wake-up channel) is published to,
        or the watch lost messages; the caller clears it before each read. ``confirm``:
        wait (a while) until Redis confirms the subscription, so that an append right
        after the caller's first read wakes it; a follower of a run of this worker has
        its appends from :meth:`local_append` and need not wait."""
        self._ensure_running()
        event = asyncio.Event()
        waiters = self._waiters.setdefault(channel, set())
        first = not waiters
        waiters.add(event)
        try:
            if first:
                await self._subscribe(channel)
            confirmed = self._confirmed.get(channel)
            if confirm and confirmed is not None and not confirmed.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(confirmed), CONFIRM_TIMEOUT_S)
            yield event
        finally:
            waiters.discard(event)
            if not waiters and self._waiters.get(channel) is waiters:
                del self._waiters[channel]
                self._confirmed.pop(channel, None)
                if self._pubsub is not None and self.healthy:
                    with contextlib.suppress(Exception):
                        async with self._changes:
                            if channel not in self._waiters:
                                await self._pubsub.unsubscribe(channel)

    async def _subscribe(self, channel: str) -> None:
        loop = asyncio.get_running_loop()
        self._confirmed[channel] = loop.create_future()
        if self._pubsub is None or not self.healthy:
            return  # the reader subscribes it when it (re)connects
        try:
            async with self._changes:
                await self._pubsub.subscribe(channel)
        except Exception:
            # The reader drops this connection and subscribes every chat again on a new
            # one; the followers poll meanwhile.
            log.warning("log watch: could not subscribe; reconnecting")
            self._broken = True
            self._mark_unhealthy()

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="parkway-log-watch")

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    def _mark_unhealthy(self) -> None:
        self.healthy = False
        self._wake_all()

    def _new_pubsub(self) -> Any:
        if isinstance(self.redis, RedisCluster):
            # A Cluster broadcasts classic PUBLISH to every node: any node's
            # subscription hears every chat. (Its reconnects are not reported; the
            # followers' quiet-period reads cover what they miss.)
            return self.redis.pubsub()
        return _ReconnectingPubSub(
            connection_pool=self.redis.connection_pool, on_reconnect=self._reconnected
        )

    def _reconnected(self) -> None:
        self.reconnects += 1
        self._wake_all()

    async def _run(self) -> None:
        attempt = 0
        pubsub: Any = None
        while not _cancelling():
            pubsub = self._new_pubsub()
            try:
                # A subscription that outlives every follower keeps the connection open
                # (redis-py has no connection for a PubSub with no channel).
                await pubsub.subscribe(LOGWATCH_CHANNEL, *self._waiters)
                self._pubsub = pubsub
                self._broken = False
                self.healthy = True
                if attempt:
                    self.reconnects += 1
                if self._connected_before:
                    self._wake_all()  # anything published while it was away: read again
                # (on the first connection, a follower reads once its subscription is
                # confirmed, or polls if that takes too long: none needs waking)
                self._connected_before = True
                attempt = 0
                while not _cancelling():
                    if self._broken:
                        raise ConnectionError("a subscription on this connection failed")
                    message = await pubsub.get_message(timeout=_IDLE_READ_S)
                    if message is not None:
                        self._dispatch(message)
            except asyncio.CancelledError:
                self._pubsub = None
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                raise
            except Exception as exc:
                if _cancelling():
                    break
                if self.healthy:
                    log.warning("log watch lost its connection (%s); reconnecting", exc)
                self._pubsub = None
                self._mark_unhealthy()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
                attempt += 1
        self._pubsub = None
        self.healthy = False
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
        raise asyncio.CancelledError

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        name = as_text(channel)
        if kind == "message":
            entry_id = as_text(message.get("data"))
            if self.local.logging(name):
                # Most likely an entry of this worker's run whose append has not been
                # answered yet: it wakes the followers itself once it is; anything else
                # wakes them a moment later.
                loop = asyncio.get_running_loop()
                loop.call_later(_LOCAL_GRACE_S, self._wake_unless_local, name, entry_id)
            else:
                self._wake_unless_local(name, entry_id)
        elif kind == "subscribe":
            confirmed = self._confirmed.get(name)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)

    def _wake_unless_local(self, channel: str, entry_id: str) -> None:
        """Wake the chat's followers, unless ``entry_id`` is one they take from memory
        (its append here woke them already)."""
        if not self.local.knows(channel, entry_id):
            self._wake(channel)

    def _wake(self, channel: str) -> None:
        for event in self._waiters.get(channel, ()):
            event.set()

    async def aclose(self) -> None:
        """Stop the watch and close its connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.healthy = False


def _cancelling() -> bool:
    # redis-py can swallow a cancellation that lands mid-command; the loops check.
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
