"""Fixtures: a real Redis for every test (embedded unless PARKWAY_TEST_REDIS_URL is
set), a clean database per test, and a check of the keyspace each test leaves; for the
real-model tests, a provider double and servers pointed at it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner.store.embedded import EmbeddedRedis
from tests.helpers.bare_names import refuse_bare_imports
from tests.helpers.llm_double import ProviderDouble
from tests.helpers.model_rig import agent, provider_env
from tests.helpers.reaper import install as install_reaper
from tests.helpers.support import ServerThread
from tests.helpers.topologies import assert_keyspace_clean
from tests.helpers.user_install import UserInstall, install_for_user
from tests.helpers.workers import shared_once, worker_database

# The repository root is on sys.path for the tests.* helpers; Parkway's own modules must
# import by their installed names all the same (tests/helpers/bare_names.py, pyproject.toml).
refuse_bare_imports()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    configured = os.environ.get("PARKWAY_TEST_REDIS_URL")
    if configured:
        yield worker_database(configured)
        return
    # Unix socket paths are short-limited; a short temp folder keeps us under it.
    folder = Path(tmp_path_factory.mktemp("redis", numbered=True))
    server = EmbeddedRedis(folder)
    url = server.start()
    try:
        yield url
    finally:
        server.stop(force=True)  # the suite's own server: never left behind


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    await client.flushdb()
    try:
        yield client
        # Every key a test leaves must expire on its own (tests/helpers/topologies.py says how).
        await assert_keyspace_clean([client], client)
    finally:
        await client.flushdb()
        await client.aclose()


# -- real models: the provider double and servers pointed at it (tests/helpers/model_rig.py)


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProviderDouble]:
    """A provider double on loopback, with every provider's key and base URL pointing at
    it in this test's environment."""
    with ProviderDouble() as started:
        for name, value in provider_env(started).items():
            monkeypatch.setenv(name, value)
        yield started


@pytest.fixture
def serve(redis: Redis, redis_url: str) -> Iterator[Any]:
    """Starts Parkway servers on a model name, on the test's clean database."""
    servers: list[ServerThread] = []

    def start(model: str, **settings: Any) -> ServerThread:
        settings.setdefault("model_retry_max_wait_s", 5.0)
        server = ServerThread(redis_url, agent(model), **settings).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def browser(redis: Redis) -> Iterator[Any]:
    """One chromium per test (the playground's browser tests). It depends on ``redis``
    so that it closes before the ``redis`` fixture's async teardown (sync Playwright
    holds the thread's loop)."""
    from tests.helpers.browser import chromium  # Playwright only where a browser is asked for

    with chromium() as launched:
        yield launched


# -- Parkway as users install it (tests/helpers/user_install.py) -----------------------


@pytest.fixture(scope="session")
def user_install(tmp_path_factory: pytest.TempPathFactory) -> UserInstall:
    """The wheel, built as pip builds it, installed into a new venv outside the
    repository: built once for the session (shared by pytest-xdist's workers), for every
    test that runs the installed product (the example project, the served playground).
    The build starts in the background as soon as the tests are collected
    (:func:`pytest_collection_finish`): it waits mostly on the package index, and the
    first test to ask for it would otherwise hold a worker for all of that wait."""
    return shared_once(tmp_path_factory, "user", install_for_user)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the user install in a thread when a collected test will use it;
    the fixture then takes the result (:func:`shared_once` makes it once per run: a
    second worker's thread waits for the first's build and reads it)."""
    if session.config.getoption("collectonly") or not any(
        "user_install" in getattr(item, "fixturenames", ()) for item in session.items
    ):
        return
    factory = session.config._tmp_path_factory  # type: ignore[attr-defined]  # pytest's own

    def build() -> None:
        with contextlib.suppress(Exception):  # the fixture builds it again, and says why
            shared_once(factory, "user", install_for_user)

    threading.Thread(target=build, name="user-install", daemon=True).start()


def pytest_configure(config: pytest.Config) -> None:
    """Every process this pytest process starts, and everything below it, ends when
    it ends, however it ends (SIGTERM, Ctrl-C, SIGKILL): tests/helpers/reaper.py."""
    install_reaper()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial-files",
        metavar="PATH",
        help="write the test files that hold tests marked serial to PATH, one a line "
        "(make test's second pass, which runs those tests, then collects only these files)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that checks the sandbox uid leaves no process behind (the ``leftovers``
    fixture) counts every process of that uid on the host, and some hit its process cap:
    another worker's sandbox would be counted, or starved. They are ``serial``. A test
    that runs the user install may wait for its build: it gets a longer timeout.

    With ``--serial-files PATH`` (``make test``'s first pass), the files holding them are
    written to PATH, from every test collected (this runs before ``-m`` deselects any)."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "leftovers" in fixtures:
            item.add_marker(pytest.mark.serial)
        if "user_install" in fixtures and item.get_closest_marker("timeout") is None:
            # The per-test timeout counts fixture setup: the test that first needs the
            # user install waits for its build (pip and the package index: minutes on a
            # busy machine).
            item.add_marker(pytest.mark.timeout(900))
    target = config.getoption("serial_files")
    if target:
        files = {
            item.path.relative_to(config.rootpath).as_posix()
            for item in items
            if item.get_closest_marker("serial") is not None
        }
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f"{path.name}.{os.getpid()}")  # each xdist worker writes it
        draft.write_text("".join(f"{name}\n" for name in sorted(files)))
        draft.replace(path)
