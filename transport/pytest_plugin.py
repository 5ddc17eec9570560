"""Pytest fixtures for cassette replays: ``parkway_cassette`` and ``parkway_replay``.

Parkway registers this module as a pytest plugin (the ``pytest11`` entry point
``parkway``), so every project with Parkway installed has the fixtures; no import and no
``pytest_plugins`` line is needed. Disable it with ``-p no:parkway``.

::

    def test_the_trip_chat_survives_kill_9(parkway_replay):
        parkway_replay("cassettes/trip.json", cold=True)

``parkway_replay`` starts a real ``parkway serve`` process for each replay (on a private
Redis in a temporary folder unless ``redis_url`` is given) and fails the test with the
report's readable diff when a response differs from the recording.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import pytest

from parkway.transport.cassettes import (
    Cassette,
    CassetteError,
    ReplayReport,
    ReplayServer,
    load_cassette,
    replay,
)

__all__ = ["CassetteLoader", "CassetteReplayer", "parkway_cassette", "parkway_replay"]


class CassetteLoader(Protocol):
    """``parkway_cassette(path)``: the cassette at ``path``; a relative path is taken
    from the folder of the test file. A bad file fails the test with the reason."""

    def __call__(self, path: str | Path) -> Cassette: ...


class CassetteReplayer(Protocol):
    """``parkway_replay(cassette, cold=False, redis_url=None, server=None, env=None)``:
    replay a cassette (or the cassette file at a path) and return the report; a
    difference fails the test with every difference listed."""

    def __call__(
        self,
        cassette: Cassette | str | Path,
        *,
        cold: bool = False,
        redis_url: str | None = None,
        server: ReplayServer | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ReplayReport: ...


@pytest.fixture
def parkway_cassette(request: pytest.FixtureRequest) -> CassetteLoader:
    """Load a cassette file; relative paths start at the test file's folder."""
    here = Path(request.path).parent

    def load(path: str | Path) -> Cassette:
        where = Path(path)
        try:
            return load_cassette(where if where.is_absolute() else here / where)
        except CassetteError as exc:
            pytest.fail(str(exc), pytrace=False)

    return load


@pytest.fixture
def parkway_replay(parkway_cassette: CassetteLoader) -> CassetteReplayer:
    """Replay a cassette against a real server process, cold or warm, and fail the test
    with a readable diff unless every response matches the recording."""

    def run(
        cassette: Cassette | str | Path,
        *,
        cold: bool = False,
        redis_url: str | None = None,
        server: ReplayServer | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ReplayReport:
        if not isinstance(cassette, Cassette):
            cassette = parkway_cassette(cassette)
        try:
            report = replay(cassette, cold=cold, redis_url=redis_url, server=server, env=env)
        except CassetteError as exc:
            pytest.fail(f"the replay could not run: {exc}", pytrace=False)
        if not report.matched:
            pytest.fail(report.format(), pytrace=False)
        return report

    return run
