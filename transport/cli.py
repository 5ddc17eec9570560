"""The ``parkway`` command line. ``parkway serve`` runs the app with uvicorn (``parkway
record CASSETTE`` is ``parkway serve --record CASSETTE``);
``parkway replay FILE`` replays a recorded chat (a cassette) against a fresh server;
``parkway agent reset`` commits the agent file's version of the agent again;
``parkway agent export module:attribute`` prints the template an agent defined in Python
compiles to (both in :mod:`parkway.transport.cli_agent`). Wherever an agent file is
named, ``module:attribute`` may name an :class:`~parkway.runner.Agent` instead.

Nothing of the runtime is imported before a command runs: ``parkway --help`` and
``parkway --version`` import the standard library only."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

    from parkway.transport.settings import Settings

__all__ = ["main"]

# What `parkway --help` says (the module docstring is for readers of the code).
DESCRIPTION = (
    "Parkway: human-in-the-loop tool calls for AI agents. 'parkway serve' runs the "
    "server; 'parkway record CASSETTE' runs it recording every chat to a cassette; "
    "'parkway replay FILE' replays a recorded chat (a cassette) against a fresh "
    "server; 'parkway agent reset' commits the agent file's version of the agent again; "
    "'parkway agent export module:attr' prints the template of an agent defined in Python. "
    "Settings come from these flags and from PARKWAY_* environment variables (see "
    "docs/operations.md)."
)


def _version() -> str:
    """The installed distribution's version (its metadata, so it cannot drift from
    pyproject.toml's); "unknown" when Parkway runs from a checkout nobody installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("parkway")
    except PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parkway", description=DESCRIPTION)
    parser.add_argument("-V", "--version", action="version", version=f"parkway {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the Parkway server")
    _serve_options(serve)
    serve.add_argument(
        "--record",
        metavar="CASSETTE",
        help="record every chat exchange the server answers to this cassette, saved after "
        "each one (docs/cassettes.md, 'Recording')",
    )
    # -- parkway record (begin) --
    record = sub.add_parser(
        "record",
        help="parkway serve, recording every chat exchange to a cassette; stop it with Ctrl-C",
    )
    record.add_argument("record", metavar="CASSETTE", help="the cassette to write")
    _serve_options(record, agent_required=True)
    # -- parkway record (end) --
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
        help="Redis for the replay (default: a private one in a temporary folder); each "
        "run uses chat ids of its own there, so replays may share a database",
    )
    which = replay.add_mutually_exclusive_group()
    which.add_argument(
        "--agent",
        dest="agent_file",
        help="replay against this agent file (default: the agent file the cassette names, "
        "relative to the cassette)",
    )
    which.add_argument(
        "--cassette-agent",
        action="store_true",
        help="replay against the copy of the agent stored in the cassette",
    )
    replay.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="leave this path out of the comparison (repeatable), e.g. usage.* or "
        "data-parkway-widget:data.description (docs/cassettes.md, 'Ignore paths')",
    )
    replay.add_argument(
        "--full", action="store_true", help="list every difference, the follow-on ones too"
    )
    replay.add_argument(
        "--record-mode",
        dest="replay_record_mode",
        choices=["once", "new_episodes", "none", "all"],  # cassettes.RECORD_MODES
        default="once",
        help="a real model's recorded steps: once or none (default) serve them and never "
        "call the model; new_episodes records the steps whose request changed, all every "
        "step, with the model (its key from the environment) and writes the cassette again",
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
    reset.add_argument(
        "--agent",
        dest="agent_file",
        help="agent file, or module:attribute naming an Agent (default: the demo)",
    )
    reset.add_argument("--redis-url", help="Redis URL (default: the embedded Redis)")
    reset.add_argument("--data-dir", help="data folder of the embedded Redis (default .parkway)")
    export = agent_sub.add_parser(
        "export",
        help="print the agent template (JSON) that an agent defined in Python compiles to",
    )
    export.add_argument(
        "target", help="module:attribute naming the Agent, e.g. expenses.agent:agent"
    )
    export.add_argument(
        "--agent-file",
        dest="as_agent_file",
        action="store_true",
        help="print an agent file instead ({template, model}), for an agent whose model is "
        "given by name",
    )
    # -- parkway agent (end) --
    return parser


def _serve_options(serve: argparse.ArgumentParser, *, agent_required: bool = False) -> None:
    """The options of ``parkway serve``, which ``parkway record`` shares."""
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8000)")
    serve.add_argument(
        "--redis-url", help="Redis URL (default: an embedded Redis in the data folder)"
    )
    serve.add_argument("--data-dir", help="data folder for the embedded Redis (default .parkway)")
    serve.add_argument(
        "--agent",
        dest="agent_file",
        required=agent_required,
        help="agent file, or module:attribute naming an Agent defined in Python (e.g. "
        "expenses.agent:agent, imported from the working directory)"
        + ("" if agent_required else "; default: the demo agent"),
    )
    serve.add_argument(
        "--model",
        help="the model of every run, overriding the agent's: provider:model, e.g. "
        "anthropic:claude-sonnet-4-6, openai:gpt-5-mini, google:gemini-2.5-flash, "
        "openai-compatible:llama3.1 (keys from the environment; see docs/models.md)",
    )
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--log-format",
        choices=["auto", "json", "text"],
        help="log lines on stderr: json (one object a line), text, or auto (default: text "
        "on a terminal, json otherwise)",
    )
    serve.add_argument(
        "--metrics",
        action="store_const",
        const="on",
        help="serve Prometheus metrics at /metrics on the public port (default: off)",
    )
    serve.add_argument(
        "--metrics-port", type=int, help="serve /metrics on this port of its own instead"
    )
    serve.add_argument(
        "--tracing",
        choices=["off", "otlp", "console"],
        help="OpenTelemetry spans: export over OTLP/HTTP (OTEL_* variables) or print them "
        "(needs the otel extra; default off)",
    )
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
    serve.add_argument(
        "--auth",
        choices=["anonymous", "jwt", "header"],
        help="how requests name their user: anonymous sessions (the default on a local "
        "playground only), bearer JWTs, or a trusted proxy's header. See docs/security.md",
    )
    serve.add_argument(
        "--approvers",
        help="principals holding the 'approver' role, comma-separated: they answer "
        "approvals left to someone other than the requester (see docs/security.md)",
    )
    serve.add_argument(
        "--record-mode",
        choices=["once", "all"],
        help="with a cassette to record: once (default) refuses an existing cassette, all "
        "records it again",
    )


# -- parkway replay (begin) --
class _Stopped(BaseException):
    """SIGTERM or SIGINT while replaying: unwinds the replay so that its server, its
    private Redis and its temporary folder are cleaned up (the default SIGTERM action
    would leave them all behind, as a CI timeout does)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_on_signal(signum: int, _frame: object) -> None:
    for each in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut cleanup
        signal.signal(each, signal.SIG_IGN)
    raise _Stopped(signum)


def _replay(
    path: str,
    *,
    cold: bool,
    redis_url: str | None,
    agent: str | None,
    cassette_agent: bool,
    ignore: tuple[str, ...] = (),
    full: bool = False,
    record_mode: str = "once",
) -> int:
    """``parkway replay``: exit 0 when every response matched (or the cassette was
    recorded again, in record mode new_episodes or all), 1 with differences, 2 when
    nothing could be compared (one line on stderr), 128 + the signal's number when
    stopped by SIGTERM (143) or SIGINT (130), after cleaning up."""
    from parkway.transport.cassettes import (
        CassetteError,
        check_replayable,
        load_cassette,
        replay,
        replay_agent,
        save_cassette,
    )

    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, _stop_on_signal)
    try:
        cassette = load_cassette(path)
        check_replayable(cassette, cold=cold)
        chosen = replay_agent(cassette, agent, cassette_agent=cassette_agent)
        print(chosen.describe(), flush=True)
        report = replay(
            cassette,
            agent=chosen,
            cold=cold,
            redis_url=redis_url,
            ignore=ignore,
            record_mode=record_mode,
        )
        if report.cassette is not None:
            save_cassette(report.cassette, path)
    except CassetteError as exc:
        print(f"parkway replay: {exc}", file=sys.stderr)
        return 2
    except _Stopped as stopped:
        name = signal.Signals(stopped.signum).name
        print(f"parkway replay: stopped by {name}; nothing left running", file=sys.stderr)
        return 128 + stopped.signum
    print(report.format(full=full), flush=True)
    if report.cassette is not None:
        steps = ", ".join(f"chat {chat!r} step {index}" for chat, index in report.rerecorded)
        print(f"recorded anew: {steps}; wrote {path}", flush=True)
        return 0
    return 0 if report.matched else 1


# -- parkway replay (end) --


# -- parkway serve (begin) --
def _bind(settings: Settings) -> socket.socket:
    """The server's socket, bound before anything starts (as uvicorn binds for its
    workers), so a port in use stops ``parkway serve`` at once with one line."""
    from parkway.transport.settings import SettingsError, flag_and_variable

    host, port = settings.host, settings.port
    # IPPROTO_TCP named, not 0: accepted connections inherit it, and asyncio sets
    # TCP_NODELAY only on sockets whose protocol says TCP. Without it, Nagle's algorithm
    # holds the second small write of every response (its body after its head) until
    # the client's delayed ACK: about 40 ms per request on Linux.
    sock = socket.socket(
        socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SettingsError(
                f"port ({flag_and_variable('port')}): {host}:{port} is already in use; stop "
                "what listens there or choose another port"
            ) from None
        raise SettingsError(
            f"host ({flag_and_variable('host')}), port ({flag_and_variable('port')}): "
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    return sock


def _uvicorn_config(app: Starlette, settings: Settings) -> uvicorn.Config:
    import uvicorn

    from parkway.transport.logs import AccessTiming
    from parkway.transport.serving import event_loop, header_timeout_protocol

    return uvicorn.Config(
        AccessTiming(app),  # the access log's duration_ms
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        # logging is configured once, by _run_server (transport/logs.py): uvicorn's
        # loggers get no handlers of their own and use that format
        log_config=None,
        timeout_graceful_shutdown=15,
        # httptools (else h11) with a header read timeout and a bounded request head,
        # on uvloop where installed (docs/operations.md, "Slow clients")
        http=header_timeout_protocol(settings.header_read_timeout_s),
        loop=event_loop(),
        # The app's lifespan runs around uvicorn (see _serve), not inside it.
        lifespan="off",
        # The peer address stays the connection's own: Parkway decides which proxies it
        # believes (trusted_proxies, transport/auth/proxy.py), not uvicorn's default
        # trust in 127.0.0.1's X-Forwarded-For.
        proxy_headers=False,
    )


def _serve(
    app: Starlette,
    config: uvicorn.Config,
    sock: socket.socket,
    announce: Callable[[], None],
    farewell: Callable[[], None],
) -> None:
    """Run the app's lifespan (Redis, the agent, the sweeper), then uvicorn on ``sock``
    until SIGINT or SIGTERM, then the lifespan's shutdown.

    The lifespan runs here rather than inside uvicorn so that an error starting it (an
    unreachable Redis) leaves as the exception it is, for a one-line message, where
    uvicorn would log a traceback and exit 3. ``announce`` is called once uvicorn
    listens, after the heap is settled for a long run (:func:`parkway.runner.ops.heap.settle_heap`),
    ``farewell`` once everything stopped (before a SIGTERM ends the process).
    uvicorn's signal capture is held around the whole run: a signal during the
    lifespan's startup stops the server as soon as it is up, and the signal uvicorn
    raises again after its shutdown reaches the process's handler only after the
    lifespan's shutdown has run (running turns finish, the embedded Redis stops).
    """
    import asyncio

    import uvicorn

    from parkway.runner.ops import settle_heap

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                settle_heap()  # what startup built is kept out of later collections
                announce()

    server = Server(config)

    async def run() -> None:
        async with app.router.lifespan_context(app):
            await server.serve(sockets=[sock])

    try:
        with (
            server.capture_signals(),
            asyncio.Runner(loop_factory=config.get_loop_factory()) as runner,
        ):
            runner.run(run())
            farewell()
    except KeyboardInterrupt:  # SIGINT, raised again once everything has stopped
        pass


async def _check_redis(settings: Settings) -> None:
    """Reach the configured Redis (none for the embedded one, which starts with the app)
    as the app's startup does, with the same patience and the same one-line error."""
    if settings.redis_url is None:
        return
    from parkway.runner.store import connect
    from parkway.transport.startup import reach_redis

    redis = connect(settings.redis_url)
    try:
        # the app's own startup check, so both say the same
        await reach_redis(redis, settings)
    finally:
        await redis.aclose()


def _run_server(flags: dict[str, str | None]) -> int:
    """``parkway serve``: a startup error is one line on stderr and exit code 2."""
    import asyncio
    import logging.config

    from parkway.runner.errors import ParkwayError
    from parkway.transport.app import create_app
    from parkway.transport.logs import logging_config, resolve_format
    from parkway.transport.settings import Settings, SettingsError
    from parkway.transport.tracing import configure_tracing
    from parkway.widgets_api.connect import (
        ProviderConfigError,
        check_providers,
        parse_provider_specs,
    )

    startup_errors = (SettingsError, ParkwayError, ProviderConfigError)
    try:
        settings = Settings.from_sources(flags)
        # An unreachable Redis first: the settings create_app asks for next (auth, the
        # secret key) are about another server than the one the user meant to run.
        asyncio.run(_check_redis(settings))
        app = create_app(settings)
        specs = tuple(parse_provider_specs(settings.oauth_providers))
        if specs:
            asyncio.run(
                check_providers(specs, environ=os.environ, timeout_s=settings.oauth_http_timeout_s)
            )
        configure_tracing(settings.tracing)
        sock = _bind(settings)
    except startup_errors as exc:
        print(f"parkway: {exc}", file=sys.stderr)
        return 2
    log_format = resolve_format(settings.log_format, sys.stderr)
    logging.config.dictConfig(logging_config(log_format, settings.log_level))
    agent = settings.agent_file or "the built-in demo agent"
    if settings.model is not None:
        agent = f"{agent} on {settings.model}"

    recording = "" if settings.record is None else f", recording to {settings.record}"

    def announce() -> None:
        print(
            f"Parkway is serving {agent} at {settings.base_url}/ "
            f"(Redis: {settings.redacted_redis_url()}){recording}",
            flush=True,
        )

    def farewell() -> None:
        writer = app.state.cassette_writer
        if writer is not None:  # -- parkway record --
            writer.close()
            saved, steps = writer.saved, writer.saved_steps
            what = f"{saved} exchange{'' if saved == 1 else 's'}"
            if steps:
                what += f" and {steps} model step{'' if steps == 1 else 's'}"
            print(f"recorded {what} to {settings.record}", flush=True)

    try:
        with sock:
            _serve(app, _uvicorn_config(app, settings), sock, announce, farewell)
    except startup_errors as exc:  # raised by the lifespan's startup: nothing served
        print(f"parkway: {exc}", file=sys.stderr)
        return 2
    return 0


# -- parkway serve (end) --


def main(argv: Sequence[str] | None = None) -> int:
    """The console script. A reader that stops reading (``parkway agent export ... |
    head``) ends the command quietly, as Python's documentation on SIGPIPE advises: the
    output is flushed here, so a closed pipe surfaces as BrokenPipeError inside the
    ``try``; stdout then points at /dev/null, so the interpreter's own flush at exit
    does not raise again."""
    try:
        try:
            code = _command(argv)
        finally:  # --help leaves by SystemExit, its text still buffered
            sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1  # as Python exits on EPIPE
    return code


def _command(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "replay":  # -- parkway replay --
        return _replay(
            args.file,
            cold=args.cold,
            redis_url=args.redis_url,
            agent=args.agent_file,
            cassette_agent=args.cassette_agent,
            ignore=tuple(args.ignore),
            full=args.full,
            record_mode=args.replay_record_mode,
        )
    if args.command == "agent":  # -- parkway agent --
        from parkway.transport.cli_agent import agent_export, agent_reset

        if args.agent_command == "export":
            return agent_export(args.target, as_agent_file=args.as_agent_file)
        flags = {k: v for k, v in vars(args).items() if k not in {"command", "agent_command"}}
        return agent_reset(flags)
    if args.command not in {"serve", "record"}:  # pragma: no cover - argparse's choice
        return 2
    return _run_server({k: v for k, v in vars(args).items() if k != "command"})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
