"""Which agent a replay serves (private to :mod:`parkway.transport.cassettes`).

A replay exists to catch a regression in the agent as it is now, so by default it
serves the agent file the cassette names (resolved from the cassette's folder), or the
file given with ``--agent`` / ``agent=``; the copy stored in the cassette only when
asked (``--cassette-agent``). The digest of what is served is compared with the one
recorded, so the report says whether the agent changed since.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parkway.runner.agent import make_importable, parse_agent_file
from parkway.runner.errors import ParkwayError
from parkway.transport.cassettes._format import Cassette, agent_digest
from parkway.transport.cassettes._replay_server import CassetteError

__all__ = ["ReplayAgent", "replay_agent"]


@dataclass(frozen=True)
class ReplayAgent:
    """The agent a replay serves: its document, the file it came from (``None`` for the
    cassette's own copy), its digest and the digest recorded in the cassette.
    ``import_folder`` is the folder whose modules its ``ref`` tools may import."""

    document: dict[str, Any]
    path: Path | None
    digest: str
    recorded_digest: str
    import_folder: Path | None = None

    @property
    def differs(self) -> bool:
        """True when this is not the agent the cassette was recorded with."""
        return self.digest != self.recorded_digest

    def describe(self) -> str:
        """One line for the report: which agent, and whether it is the one recorded."""
        where = str(self.path) if self.path is not None else "the cassette's own copy"
        line = f"agent: {where} ({self.digest[:19]}…)"
        if self.differs:
            return f"{line}, which differs from the agent recorded ({self.recorded_digest[:19]}…)"
        return f"{line}, the agent recorded"


def _read(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CassetteError(f"cannot read agent file {str(path)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise CassetteError(f"agent file {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CassetteError(f"agent file {str(path)!r} is not a JSON object")
    return document


def _check(document: dict[str, Any], what: str, folder: Path | None) -> None:
    """Load the agent as the server will (its ``ref`` tools imported), so a bad agent
    stops the replay with one line before any process starts."""
    make_importable(folder)
    try:
        parse_agent_file(document)
    except ParkwayError as exc:
        raise CassetteError(f"{what} does not load: {exc}") from None


def replay_agent(
    cassette: Cassette, agent: str | Path | None = None, *, cassette_agent: bool = False
) -> ReplayAgent:
    """The agent to replay ``cassette`` against: the file ``agent``; else with
    ``cassette_agent`` the cassette's own copy; else the agent file the cassette names.
    Raises :class:`CassetteError` when there is none, or it does not load."""
    if agent is not None and cassette_agent:
        raise CassetteError("give either an agent file or the cassette's own agent, not both")
    named = cassette.named_agent_file()
    if cassette_agent:
        if cassette.agent is None:
            raise CassetteError(
                "the cassette holds no copy of its agent: replay it against an agent file"
            )
        folder = named.resolve().parent if named is not None else None
        _check(cassette.agent, "the cassette's agent", folder)
        return ReplayAgent(
            cassette.agent, None, agent_digest(cassette.agent), cassette.agent_digest, folder
        )
    path = Path(agent) if agent is not None else named
    if path is None:
        raise CassetteError(
            "the cassette names no agent file: replay it against one with --agent FILE "
            "(agent= in the fixture), or against its own copy with --cassette-agent "
            "(cassette_agent=True)"
        )
    path = path.resolve()
    document = _read(path)
    _check(document, f"agent file {str(path)!r}", path.parent)
    return ReplayAgent(document, path, agent_digest(document), cassette.agent_digest, path.parent)
