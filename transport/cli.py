"""The ``parkway`` command line. ``parkway serve`` runs the app with uvicorn;
``parkway replay FILE`` replays a recorded chat (a cassette) against a fresh server;
``parkway agent reset`` commits the agent file's version of the agent again."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parkway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the Parkway server")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8000)")
    serve.add_argument(
        "--redis-url", help="Redis URL (default: an embedded Redis in the data folder)"
    )
    serve.add_argument("--data-dir", help="data folder for the embedded Redis (default .parkway)")
    serve.add_argument("--agent", dest="agent_file", help="agent file (default: the demo agent)")
    serve.add_argument(
        "--model",
        help="the model of every run, overriding the agent's: provider:model, e.g. "
        "anthropic:claude-sonnet-4-6, openai:gpt-5-mini, google:gemini-2.5-flash, "
        "openai-compatible:llama3.1 (keys from the environment; see docs/models.md)",
    )
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--public-url", help="origin browsers use to reach this server (OAuth redirect URIs)"
    )
    serve.add_argument(
        "--oauth-providers",
        help="OAuth providers: a JSON array, or @file.json (see docs/security.md)",
    )
    # -- agent editors (begin) --
    serve.add_argument(
        "--editors",
        help="principals who may commit the agent, comma-separated ('*': every session); "
        "the editor token comes only from PARKWAY_EDITOR_TOKEN, never a flag (the process "
        "list would show it). See docs/security.md",
    )
    # -- agent editors (end) --
    # -- parkway replay (begin) --
    replay = sub.add_parser(
        "replay",
        help="replay a cassette against a fresh server; exit 0 on a match, 1 on a "
        "difference, 2 when the file or the setup is bad",
    )
    replay.add_argument("file", help="the cassette (JSON, see docs/cassettes.md)")
    replay.add_argument(
        "--cold",
        action="store_true",
        help="kill the server with SIGKILL at each park point and start a new one",
    )
    replay.add_argument(
        "--redis-url",
        help="Redis for the replay (default: a private one in a temporary folder); "
        "its database must not hold the cassette's chats",
    )
    # -- parkway replay (end) --
    # -- parkway agent (begin) --
    agent = sub.add_parser("agent", help="the agent's stored revisions")
    agent_sub = agent.add_subparsers(dest="agent_command", required=True)
    reset = agent_sub.add_parser(
        "reset",
        help="commit the agent file's template as a new revision (history is kept), "
        "undoing what was committed since; run it against the server's Redis",
    )
    reset.add_argument("--agent", dest="agent_file", help="agent file (default: the demo)")
    reset.add_argument("--redis-url", help="Redis URL (default: the embedded Redis)")
    reset.add_argument("--data-dir", help="data folder of the embedded Redis (default .parkway)")
    # -- parkway agent (end) --
    return parser


# -- parkway replay (begin) --
def _replay(path: str, *, cold: bool, redis_url: str | None) -> int:
    from transport.cassettes import CassetteError, load_cassette, replay

    try:
        report = replay(load_cassette(path), cold=cold, redis_url=redis_url)
    except CassetteError as exc:
        print(f"parkway replay: {exc}", file=sys.stderr)
        return 2
    print(report.format(), flush=True)
    return 0 if report.matched else 1


# -- parkway replay (end) --


# -- parkway agent (begin) --
def _agent_reset(flags: dict[str, str | None]) -> int:
    """``parkway agent reset``: the agent file's version as the head again. The agent
    is found as the server finds it (same agent file, same Redis, same id)."""
    from runner.agentfile import load_agent_file, parse_agent_file
    from runner.agents import AgentStore
    from runner.connection import connect
    from runner.demo import DEMO_AGENT
    from runner.embedded import EmbeddedRedis
    from runner.errors import ParkwayError
    from transport.app import agent_id_for
    from transport.settings import Settings, SettingsError

    async def reset(settings: Settings) -> str:
        agent = (
            load_agent_file(settings.agent_file)
            if settings.agent_file is not None
            else parse_agent_file(DEMO_AGENT)
        )
        embedded = EmbeddedRedis(settings.data_dir) if settings.redis_url is None else None
        url = settings.redis_url if embedded is None else embedded.start()
        assert url is not None
        redis = connect(url)
        try:
            store = AgentStore(redis, agent_id_for(settings, agent), dict(agent.template.raw))
            await store.ensure_seeded()
            drift = await store.drift()
            revision = await store.reset_to_file()
        finally:
            await redis.aclose()
            if embedded is not None:
                embedded.stop()
        if revision is None or drift is None:
            return f"agent {store.agent_id}: the head already is the agent file's version"
        return (
            f"agent {store.agent_id}: version {revision.version} ({revision.revision_id}) "
            f"is the agent file's version again; version {drift.version} differed in "
            f"{', '.join(drift.keys)}"
        )

    try:
        print(asyncio.run(reset(Settings.from_sources(flags))), flush=True)
    except (SettingsError, ParkwayError) as exc:
        print(f"parkway agent reset: {exc}", file=sys.stderr)
        return 2
    return 0


# -- parkway agent (end) --


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "replay":  # -- parkway replay --
        return _replay(args.file, cold=args.cold, redis_url=args.redis_url)
    if args.command == "agent":  # -- parkway agent --
        flags = {k: v for k, v in vars(args).items() if k not in {"command", "agent_command"}}
        return _agent_reset(flags)
    if args.command != "serve":  # pragma: no cover - argparse enforces the choice
        return 2
    import uvicorn

    from runner.errors import TemplateError
    from transport.app import create_app
    from transport.settings import Settings, SettingsError
    from widgets_api.oauth import check_providers
    from widgets_api.providers import ProviderConfigError, parse_provider_specs

    flags = {k: v for k, v in vars(args).items() if k != "command"}
    try:
        settings = Settings.from_sources(flags)
        app = create_app(settings)
        specs = tuple(parse_provider_specs(settings.oauth_providers))
        if specs:
            asyncio.run(
                check_providers(specs, environ=os.environ, timeout_s=settings.oauth_http_timeout_s)
            )
    except (SettingsError, TemplateError, ProviderConfigError) as exc:
        print(f"parkway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    agent = settings.agent_file or "the built-in demo agent"
    if settings.model is not None:
        agent = f"{agent} on {settings.model}"
    print(
        f"Parkway is serving {agent} at {settings.base_url}/ "
        f"(Redis: {settings.redacted_redis_url()})",
        flush=True,
    )
    from transport.serving import header_timeout_protocol

    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=15,
        # h11 with a header read timeout (docs/operations.md, "Slow clients")
        http=header_timeout_protocol(settings.header_read_timeout_s),
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
