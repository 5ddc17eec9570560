"""Pytest fixtures: ``parkway_runtime`` (a :class:`~parkway.runner.Runtime` on a private
Redis), the cassette fixtures ``parkway_cassette``, ``parkway_replay`` and
``parkway_record``, and pytest's ``--record-mode`` option.

Parkway registers this module as a pytest plugin (the ``pytest11`` entry point
``parkway``), so every project with Parkway installed has the fixtures; no import and no
``pytest_plugins`` line is needed. Disable it with ``-p no:parkway``.

::

    def test_the_trip_chat_survives_kill_9(parkway_replay):
        parkway_replay("cassettes/trip.json", cold=True)  # the agent file it names

``parkway_runtime`` opens runtimes, each on its own embedded Redis (in a temporary folder)
unless ``redis_url`` is given, and closes them when the test ends; it is an async
fixture, so it needs ``pytest-asyncio`` (in ``auto`` or ``strict`` mode alike)::

    async def test_the_agent_asks_before_publishing(parkway_runtime):
        rt = await parkway_runtime(agent, model=TestModel())
        result = await rt.send("chat-1", "publish it")
        assert result.parked[0].kind == "approval"

``parkway_replay`` starts a real ``parkway serve`` process for each replay (on a private
Redis in a temporary folder unless ``redis_url`` is given) and fails the test with the
report's readable diff when a response differs from the recording.

``parkway_record(path, drive, agent=...)`` records the cassette on the first run, as
VCR.py users expect: ``drive(client)`` talks to a recording ``parkway serve`` through an
``httpx2.Client``; once the cassette exists, the test replays it instead.
``--record-mode`` (or the ini option ``parkway_record_mode``) says when to record:
``once`` (default: when the cassette is missing), ``new_episodes`` (the same, for now),
``none`` (never: a missing cassette fails the test, for CI) or ``all`` (always).
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

import httpx2
import pytest

from parkway.runner.agent import AgentFile
from parkway.runner.engine import RunnerConfig
from parkway.runner.llm import Model
from parkway.runner.runtime import DEFAULT_PRINCIPAL, AgentSource, Runtime
from parkway.transport.cassettes import (
    RECORD_MODES,
    Cassette,
    CassetteError,
    ReplayReport,
    ReplayServer,
    check_replayable,
    load_cassette,
    replay,
    replay_agent,
    save_cassette,
    scratch_server,
)

__all__ = [
    "RECORD_MODES",
    "CassetteLoader",
    "CassetteRecorder",
    "CassetteReplayer",
    "RuntimeFactory",
    "parkway_cassette",
    "parkway_record",
    "parkway_replay",
    "parkway_runtime",
    "pytest_addoption",
    "pytest_runtest_setup",
    "record_action",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("parkway", "Parkway cassettes")
    group.addoption(
        "--record-mode",
        choices=RECORD_MODES,
        default=None,
        help="when parkway_record records a cassette: once (default: when it is missing), "
        "new_episodes, none (never: a missing cassette fails) or all (always)",
    )
    parser.addini(
        "parkway_record_mode", "parkway_record's mode when --record-mode is not given", "string"
    )


class CassetteLoader(Protocol):
    """``parkway_cassette(path)``: the cassette at ``path``; a relative path is taken
    from the folder of the test file. A bad file fails the test with the reason."""

    def __call__(self, path: str | Path) -> Cassette: ...


class CassetteReplayer(Protocol):
    """``parkway_replay(cassette, agent=None, cassette_agent=False, cold=False,
    redis_url=None, server=None, env=None, ignore=(), full=False)``: replay a cassette
    (or the cassette file at a path) against the agent file ``agent`` (relative to the
    test file's folder), else the agent file the cassette names, else with
    ``cassette_agent`` its own copy, leaving the ``ignore`` paths out of the comparison;
    return the report. A difference fails the test with the agent replayed and the
    report (every difference with ``full``); so does a cassette that proves nothing."""

    def __call__(
        self,
        cassette: Cassette | str | Path,
        *,
        agent: str | Path | None = None,
        cassette_agent: bool = False,
        cold: bool = False,
        redis_url: str | None = None,
        server: ReplayServer | None = None,
        env: Mapping[str, str] | None = None,
        ignore: Sequence[str] = (),
        full: bool = False,
        record_mode: str = "none",
    ) -> ReplayReport: ...


def _fail(message: str) -> NoReturn:
    """Fail the test with ``message`` alone. Called outside any ``except`` block: a
    failure raised while handling an exception carries it as its context, and pytest
    then prints the message twice ("During handling of the above exception...")."""
    pytest.fail(message, pytrace=False)


@pytest.fixture
def parkway_cassette(request: pytest.FixtureRequest) -> CassetteLoader:
    """Load a cassette file; relative paths start at the test file's folder."""
    here = Path(request.path).parent

    def load(path: str | Path) -> Cassette:
        where = Path(path)
        try:
            return load_cassette(where if where.is_absolute() else here / where)
        except CassetteError as exc:
            error = str(exc)
        _fail(error)

    return load


@pytest.fixture
def parkway_replay(
    request: pytest.FixtureRequest, parkway_cassette: CassetteLoader
) -> CassetteReplayer:
    """Replay a cassette against a real server process, cold or warm, and fail the test
    with a readable diff unless every response matches the recording."""
    here = Path(request.path).parent

    def run(
        cassette: Cassette | str | Path,
        *,
        agent: str | Path | None = None,
        cassette_agent: bool = False,
        cold: bool = False,
        redis_url: str | None = None,
        server: ReplayServer | None = None,
        env: Mapping[str, str] | None = None,
        ignore: Sequence[str] = (),
        full: bool = False,
        record_mode: str = "none",
    ) -> ReplayReport:
        if not isinstance(cassette, Cassette):
            cassette = parkway_cassette(cassette)
        if agent is not None and not Path(agent).is_absolute():
            agent = here / agent
        try:
            check_replayable(cassette, cold=cold)
            chosen = replay_agent(cassette, agent, cassette_agent=cassette_agent)
            report = replay(
                cassette,
                agent=chosen,
                cold=cold,
                redis_url=redis_url,
                server=server,
                env=env,
                ignore=ignore,
                record_mode=record_mode,
            )
            if report.cassette is not None:  # model steps recorded anew: keep them
                if cassette.source is None:
                    raise CassetteError(
                        "model steps were recorded anew, but the cassette was given as an "
                        "object, not a file: pass its path to have it written again"
                    )
                save_cassette(report.cassette, cassette.source)
        except CassetteError as exc:
            error = f"the replay could not run: {exc}"
        else:
            if report.matched or report.cassette is not None:
                return report
            error = f"{chosen.describe()}\n{report.format(full=full)}"
        _fail(error)

    return run


# -- recording ------------------------------------------------------------------------


class CassetteRecorder(Protocol):
    """``parkway_record(cassette, drive, agent=None, cold=False, ignore=(),
    redis_url=None, env=None, full=False)``: record the cassette at ``cassette`` by
    calling ``drive(client)`` against a recording server for the agent file ``agent``,
    or replay it (as ``parkway_replay`` does, failing the test on a difference) when the
    record mode says so; paths are relative to the test file's folder. Returns the
    replay's report, or None after a recording."""

    def __call__(
        self,
        cassette: str | Path,
        drive: Callable[[httpx2.Client], object],
        *,
        agent: str | Path | None = None,
        cold: bool = False,
        ignore: Sequence[str] = (),
        redis_url: str | None = None,
        env: Mapping[str, str] | None = None,
        full: bool = False,
    ) -> ReplayReport | None: ...


def _record_mode(config: pytest.Config) -> str:
    """``--record-mode``, else the ini option, else ``once``."""
    mode = config.getoption("record_mode", None) or config.getini("parkway_record_mode")
    return str(mode or "once")


def record_action(mode: str, exists: bool) -> str:
    """What ``parkway_record`` does in record mode ``mode`` with the cassette there
    (``exists``) or not: ``"replay"``; ``"replay-new-episodes"`` (the replay sends the
    model steps whose request changed, or that the cassette lacks, to the real model and
    writes the cassette again with them); ``"record"``; or ``"missing"`` (mode none and
    no cassette: the test fails)."""
    if mode not in RECORD_MODES:
        raise ValueError(f"record mode {mode!r} is not one of {', '.join(RECORD_MODES)}")
    if exists and mode != "all":
        return "replay-new-episodes" if mode == "new_episodes" else "replay"
    return "missing" if mode == "none" else "record"


def _record(
    target: Path,
    agent: Path,
    drive: Callable[[httpx2.Client], object],
    *,
    cold: bool,
    redis_url: str | None,
    env: Mapping[str, str] | None,
) -> str | None:
    """Record ``target`` by driving a ``parkway serve --record`` child process; return
    why the recording is unusable, or None. The server records to a file next to the
    target, renamed over it only once the recording proved replayable, so a failed
    recording never leaves a cassette behind (nor destroys the one there)."""
    if not agent.is_file():
        return f"cannot record {target}: there is no agent file at {agent}"
    target.parent.mkdir(parents=True, exist_ok=True)
    draft = target.with_name(f".{target.name}.{os.getpid()}.recording")  # one per worker
    argv = ["--record", str(draft), "--record-mode", "all"]
    try:
        with scratch_server(agent, {}, redis_url, env, [agent.parent], extra_args=argv) as server:
            base_url = server.start()
            with httpx2.Client(base_url=base_url, timeout=60) as client:
                session = client.post("/api/sessions")
                if session.status_code != 201:
                    raise CassetteError(f"the server refused a session ({session.status_code})")
                client.headers["authorization"] = f"Bearer {session.json()['token']}"
                drive(client)
            server.stop()  # SIGTERM: the server finishes its answers, then exits
        if not draft.exists():
            raise CassetteError("drive() sent no chat request, so nothing was recorded")
        check_replayable(load_cassette(draft), cold=cold)
        os.replace(draft, target)
    except CassetteError as exc:
        return f"the recording of {target} is not usable: {exc}"
    finally:
        draft.unlink(missing_ok=True)
    return None


@pytest.fixture
def parkway_record(
    request: pytest.FixtureRequest, parkway_replay: CassetteReplayer
) -> CassetteRecorder:
    """Record a cassette on the first run (by the record mode), replay it afterwards."""
    here = Path(request.path).parent
    mode = _record_mode(request.config)

    def run(
        cassette: str | Path,
        drive: Callable[[httpx2.Client], object],
        *,
        agent: str | Path | None = None,
        cold: bool = False,
        ignore: Sequence[str] = (),
        redis_url: str | None = None,
        env: Mapping[str, str] | None = None,
        full: bool = False,
    ) -> ReplayReport | None:
        if mode not in RECORD_MODES:
            _fail(f"record mode {mode!r} is not one of {', '.join(RECORD_MODES)}")
        target = here / cassette  # an absolute path stays as it is
        agent_file = None if agent is None else here / agent
        action = record_action(mode, target.exists())
        if action in ("replay", "replay-new-episodes"):
            return parkway_replay(
                target,
                agent=agent_file,
                cold=cold,
                redis_url=redis_url,
                env=env,
                ignore=ignore,
                full=full,
                record_mode="new_episodes" if action == "replay-new-episodes" else "none",
            )
        if action == "missing":
            _fail(f"no cassette at {target} and --record-mode=none (record it with once)")
        if agent_file is None:
            _fail(f"recording {target} needs agent=, the agent file the server serves")
        error = _record(target, agent_file, drive, cold=cold, redis_url=redis_url, env=env)
        if error is not None:
            _fail(error)
        return None

    return run


# -- the runtime ----------------------------------------------------------------------


class RuntimeFactory(Protocol):
    """``await parkway_runtime(agent, ...)``: a started :class:`Runtime` for ``agent``
    (an agent file or an agent defined in code), closed when the test ends. The keywords
    are :class:`Runtime`'s; with no ``redis_url`` each runtime has its own embedded Redis
    in a temporary folder, removed with it."""

    async def __call__(
        self,
        agent: AgentFile | AgentSource,
        *,
        redis_url: str | None = None,
        model: Model | str | None = None,
        config: RunnerConfig | None = None,
        principal: str = DEFAULT_PRINCIPAL,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        sweep_interval_s: float | None = 0.25,
    ) -> Runtime: ...


async def _runtimes() -> AsyncIterator[RuntimeFactory]:
    opened: list[Runtime] = []

    async def open_runtime(
        agent: AgentFile | AgentSource,
        *,
        redis_url: str | None = None,
        model: Model | str | None = None,
        config: RunnerConfig | None = None,
        principal: str = DEFAULT_PRINCIPAL,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        sweep_interval_s: float | None = 0.25,
    ) -> Runtime:
        runtime = Runtime(
            agent,
            redis_url=redis_url,
            model=model,
            config=config,
            principal=principal,
            environ=environ,
            clock=clock,
            sweep_interval_s=sweep_interval_s,
        )
        await runtime.start()
        opened.append(runtime)
        return runtime

    try:
        yield open_runtime
    finally:
        for runtime in reversed(opened):
            await runtime.aclose()


def _async_fixture(body: Callable[[], AsyncIterator[RuntimeFactory]]) -> Any:
    """``body`` as an async fixture of pytest-asyncio (which runs it in the test's event
    loop, in strict mode too); without pytest-asyncio, a fixture that fails the test
    saying what to install."""
    try:
        import pytest_asyncio  # noqa: PLC0415 - optional: only projects that test async code have it
    except ImportError:

        @pytest.fixture(name="parkway_runtime")
        def missing() -> NoReturn:
            _fail("parkway_runtime is an async fixture: install pytest-asyncio to use it")

        return missing
    return pytest_asyncio.fixture(body, name="parkway_runtime")


parkway_runtime = _async_fixture(_runtimes)
"""A factory of started runtimes, closed at the test's end (:class:`RuntimeFactory`)."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """An async test that asks for ``parkway_runtime`` but that no async plugin will run:
    pytest-asyncio's default ``strict`` mode runs only the tests marked
    ``@pytest.mark.asyncio`` (its ``auto`` mode marks every async test itself). Left
    alone, pytest fails it saying to install an async plugin, which is installed; this
    says what is missing instead, before the fixture starts anything."""
    if "parkway_runtime" not in getattr(item, "fixturenames", ()):
        return
    if not item.config.pluginmanager.hasplugin("asyncio"):  # the fixture says to install it
        return
    if not inspect.iscoroutinefunction(getattr(item, "obj", None)):
        return
    if item.get_closest_marker("asyncio") or item.get_closest_marker("anyio"):
        return
    _fail(
        f"{item.name} is an async test that pytest-asyncio does not run in its strict mode "
        "(the default): mark it @pytest.mark.asyncio (or the module: pytestmark = "
        'pytest.mark.asyncio), or set asyncio_mode = "auto" in the pytest configuration'
    )
