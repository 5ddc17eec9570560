"""The ``parkway`` command line. ``parkway serve`` runs the app with uvicorn;
``parkway replay FILE`` replays a recorded chat (a cassette) against a fresh server."""

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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "replay":  # -- parkway replay --
        return _replay(args.file, cold=args.cold, redis_url=args.redis_url)
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
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=15,
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
