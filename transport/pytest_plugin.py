"""Pytest fixtures for cassette replays: ``parkway_cassette`` and ``parkway_replay``.

Parkway registers this module as a pytest plugin (the ``pytest11`` entry point
``parkway``), so every project with Parkway installed has the fixtures; no import and no
``pytest_plugins`` line is needed. Disable it with ``-p no:parkway``.

::

    def test_the_trip_chat_survives_kill_9(parkway_replay):
        parkway_replay("cassettes/trip.json", cold=True)  # the agent file it names

``parkway_replay`` starts a real ``parkway serve`` process for each replay (on a private
Redis in a temporary folder unless ``redis_url`` is given) and fails the test with the
report's readable diff when a response differs from the recording.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn, Protocol

import pytest

from parkway.transport.cassettes import (
    Cassette,
    CassetteError,
    ReplayReport,
    ReplayServer,
    check_replayable,
    load_cassette,
    replay,
    replay_agent,
)

__all__ = ["CassetteLoader", "CassetteReplayer", "parkway_cassette", "parkway_replay"]


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
            )
        except CassetteError as exc:
            error = f"the replay could not run: {exc}"
        else:
            if report.matched:
                return report
            error = f"{chosen.describe()}\n{report.format(full=full)}"
        _fail(error)

    return run
