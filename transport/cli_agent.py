"""``parkway agent``: ``reset`` commits the agent file's version of the agent again (as
the server finds it: same agent, same Redis, same id); ``export`` prints the template
(or agent file) an agent defined in Python compiles to. Each imports what it needs when
it runs, so that ``parkway --help`` stays fast."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parkway.transport.settings import Settings

__all__ = ["agent_export", "agent_reset"]


def agent_reset(flags: dict[str, str | None]) -> int:
    """``parkway agent reset``: the agent file's (or Python agent's) version as the head
    again. The agent is found as the server finds it (same agent file, same Redis, same
    id)."""
    from parkway.runner.agent import AgentStore, load_agent, parse_agent_file
    from parkway.runner.demo import DEMO_AGENT
    from parkway.runner.errors import ParkwayError
    from parkway.runner.store import EmbeddedRedis, connect
    from parkway.transport.api import seed_origin
    from parkway.transport.app import agent_id_for
    from parkway.transport.settings import Settings, SettingsError

    async def reset(settings: Settings) -> str:
        agent = (
            load_agent(settings.agent_file)
            if settings.agent_file is not None
            else parse_agent_file(DEMO_AGENT)
        )
        embedded = EmbeddedRedis(settings.data_dir) if settings.redis_url is None else None
        url = settings.redis_url if embedded is None else embedded.start()
        assert url is not None
        redis = connect(url)
        try:
            store = AgentStore(
                redis,
                agent_id_for(settings, agent),
                dict(agent.template.raw),
                origin=seed_origin(settings, agent),
            )
            await store.ensure_seeded()
            drift = await store.drift()
            revision = await store.reset_to_file()
        finally:
            await redis.aclose()
            if embedded is not None:
                embedded.stop()
        if revision is None or drift is None:
            return f"agent {store.agent_id}: the head already is {store.origin}"
        return (
            f"agent {store.agent_id}: version {revision.version} ({revision.revision_id}) "
            f"is {store.origin} again; version {drift.version} differed in "
            f"{', '.join(drift.keys)}"
        )

    try:
        print(asyncio.run(reset(Settings.from_sources(flags))), flush=True)
    except (SettingsError, ParkwayError) as exc:
        print(f"parkway agent reset: {exc}", file=sys.stderr)
        return 2
    return 0


def agent_export(target: str, *, as_agent_file: bool) -> int:
    """``parkway agent export``: the template (or agent file) of an agent defined in
    Python, as JSON on stdout; a bad target is one line on stderr and exit code 2."""
    import json

    from parkway.runner.agent import Agent, is_agent_ref, resolve_agent_ref
    from parkway.runner.errors import ParkwayError

    if not is_agent_ref(target) and not target.endswith(".py"):  # .py: resolve says what to write
        print(
            f"parkway agent export: {target!r} is not module:attribute (e.g. "
            "expenses.agent:agent); an agent file is already its JSON",
            file=sys.stderr,
        )
        return 2
    try:
        found = resolve_agent_ref(target)
        if not isinstance(found, Agent):
            raise ParkwayError(f"{target} is a {type(found).__name__}, not a parkway Agent")
        document = found.agent_file_document() if as_agent_file else found.to_template()
    except ParkwayError as exc:
        print(f"parkway agent export: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(document, indent=2, ensure_ascii=False), flush=True)
    return 0
