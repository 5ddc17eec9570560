"""Starting and stopping a Parkway app, also when it is mounted inside a host application.

A Parkway app holds what its routes need (the Redis client or the embedded Redis, the
runner with its log watch, the deadline sweeper, OAuth, the metrics server) on
``app.state``. :class:`Lifecycle` starts all of it once and stops it once, whichever of
three ways comes first:

- Parkway's own lifespan (``parkway serve``, or any server running the app at the root);
- the host's lifespan through :func:`parkway_lifespan`
  (``FastAPI(lifespan=parkway_lifespan(pw))``): started before the first request,
  stopped gracefully (running turns finish) when the host shuts down;
- the first request, when the app is mounted (``host.mount("/pw", pw)``) and nobody ran
  either lifespan: Starlette never runs a mounted app's lifespan. :class:`LazyStart`
  starts it then. Concurrent first requests wait for the one start; a start that fails
  answers 503 and the next request tries again.

What a lazy start means for shutdown: nothing stops it. The host never tells a mounted
app that it is shutting down, so a lazily started Parkway lives as long as the process:
its runs end with it (a run cut short is taken over by a later worker once its lease
lapses, as after a crash) and an embedded Redis server is stopped at interpreter exit.
A host that wants a graceful stop runs :func:`parkway_lifespan`.

The mount's path prefix (``/pw``) is part of every URL Parkway hands out that is not
request-relative: OAuth callback URLs, the demo provider's issuer, widget descriptors'
URLs. The hook finds it among the host's routes; a lazy start takes it from the first
request's ``root_path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from parkway.transport.errors import HTTPError

__all__ = ["LazyStart", "Lifecycle", "mount_prefix", "parkway_lifespan"]

log = logging.getLogger(__name__)

#: What starts a Parkway app under a mount prefix: an async context manager that has
#: started everything when entered and stops it all on exit.
Serve = Callable[[str], AbstractAsyncContextManager[None]]


class Lifecycle:
    """One app's start and stop: at most one start runs at a time, and a started app is
    not started again until it has been stopped."""

    def __init__(self, serve: Serve) -> None:
        self._serve = serve
        self._starting: asyncio.Task[None] | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self.prefix = ""
        #: stopped by a lifespan (its own or a host's): the host is shutting down, and a
        #: late request must not start it again behind the lifespan's back
        self.stopped = False

    @property
    def started(self) -> bool:
        return self._stack is not None

    async def start(self, prefix: str = "") -> None:
        """Start, unless started already; concurrent callers share one start. The start
        runs in a task of its own, so a caller that is cancelled (a client gone away)
        does not cut a start short that other requests wait for."""
        if self._stack is not None:
            return
        self.stopped = False
        if self._starting is None:
            # A fresh context: the sweeper and the log watch outlive the request that
            # happened to start them, and must not inherit its log context.
            self._starting = asyncio.create_task(
                self._start(prefix), name="parkway-start", context=contextvars.Context()
            )
        await asyncio.shield(self._starting)

    async def _start(self, prefix: str) -> None:
        stack = contextlib.AsyncExitStack()
        try:
            await stack.enter_async_context(self._serve(prefix))
        except BaseException:
            self._starting = None  # the next caller tries again
            raise
        self.prefix = prefix
        self._stack = stack
        self._starting = None

    async def stop(self) -> None:
        """Stop what :meth:`start` started (nothing when it was not started)."""
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._starting)
        stack, self._stack = self._stack, None
        self.stopped = True
        if stack is not None:
            await stack.aclose()

    @contextlib.asynccontextmanager
    async def running(self, prefix: str = "") -> AsyncIterator[None]:
        """Started inside the block, stopped after it."""
        await self.start(prefix)
        try:
            yield
        finally:
            await self.stop()


class LazyStart:
    """The outermost middleware of a Parkway app: starts the app's :class:`Lifecycle` on
    its first HTTP or WebSocket request when no lifespan has started it, with the
    mount's prefix (the scope's ``root_path``). A failed start answers 503 JSON, and so
    does a request after a lifespan stopped the app (the host is shutting down)."""

    def __init__(self, app: ASGIApp, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.lifecycle.started:
            if self.lifecycle.stopped:
                error = HTTPError(503, "shutting_down", "the service is shutting down")
                await self._refuse(error, scope, receive, send)
                return
            prefix = str(scope.get("root_path", "")).rstrip("/")
            try:
                await self.lifecycle.start(prefix)
            except Exception:
                log.exception("Parkway could not start on its first request")
                error = HTTPError(
                    503, "not_started", "the service could not start; try again shortly"
                )
                await self._refuse(error, scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(error: HTTPError, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1011})
            return
        headers = {"retry-after": "1", "cache-control": "no-store"}
        response = JSONResponse(error.body(), status_code=error.status, headers=headers)
        await response(scope, receive, send)


def mount_prefix(host: Any, app: Any) -> str | None:
    """The path at which ``host`` mounts ``app`` (``"/pw"``), following nested mounts and
    middleware wrapping the app, or None when ``host`` does not mount it."""

    def unwrap(candidate: Any) -> bool:
        for _ in range(16):  # a middleware chain: each layer keeps the next as ``.app``
            if candidate is app:
                return True
            candidate = getattr(candidate, "app", None)
            if candidate is None:
                return False
        return False

    def search(routes: Any, base: str) -> str | None:
        for route in routes or ():
            if not isinstance(route, Mount):
                continue
            path = base + route.path.rstrip("/")
            if unwrap(route.app):
                return path
            found = search(getattr(route, "routes", None), path)
            if found is not None:
                return found
        return None

    return search(getattr(host, "routes", None), "")


def parkway_lifespan(
    app: Any, *, prefix: str | None = None
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A host application's lifespan that starts the Parkway ``app`` it mounts and stops
    it gracefully on shutdown::

        pw = create_app(settings)
        host = FastAPI(lifespan=parkway_lifespan(pw))
        host.mount("/pw", pw)

    ``prefix`` is the path under which browsers reach ``app``; by default the path at
    which the host mounts it. A host with a lifespan of its own enters this one inside
    it: ``async with parkway_lifespan(pw)(host): ...``. Once it ran, the lazy start of
    the first request does nothing."""
    lifecycle: Lifecycle | None = getattr(getattr(app, "state", None), "lifecycle", None)
    if lifecycle is None:
        raise TypeError("parkway_lifespan() takes the app create_app() returned")

    @contextlib.asynccontextmanager
    async def lifespan(host: Any = None) -> AsyncIterator[None]:
        path = prefix
        if path is None:
            path = mount_prefix(host, app) if host is not None else None
            if path is None:
                raise RuntimeError(
                    "parkway_lifespan: the host does not mount this Parkway app; mount it "
                    "(host.mount('/pw', pw)) or pass prefix='/pw'"
                )
        async with lifecycle.running(path.rstrip("/")):
            yield

    return lifespan
