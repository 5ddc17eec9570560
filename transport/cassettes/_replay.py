"""Replaying a cassette (private to :mod:`parkway.transport.cassettes`, whose face
describes the format and the replay): sending the recorded requests, comparing each
answer, and the report.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parkway.transport.cassettes._agent import ReplayAgent, replay_agent
from parkway.transport.cassettes._diff import (
    Difference,
    IdTable,
    Note,
    diff_chunks,
    diff_json,
    merge_deltas,
    translate,
)
from parkway.transport.cassettes._format import (
    Cassette,
    Exchange,
    RequestRecord,
    ResponseRecord,
)
from parkway.transport.cassettes._format import response_record as _response_record
from parkway.transport.cassettes._ignore import IgnoreFilter, ignore_filter
from parkway.transport.cassettes._namespace import ChatNamespace
from parkway.transport.cassettes._replay_server import (
    CassetteError,
    ReplayServer,
    http_request,
    scratch_server,
)
from parkway.transport.cassettes._report import (
    Finding,
    analyse,
    exchange_ranges,
    restart_mark,
)
from parkway.transport.cassettes._tapes import (
    ModelFinding,
    TapeOutcome,
    read_outcome,
    tape_mode,
    write_tape_folder,
)

__all__ = ["ReplayReport", "check_replayable", "compare_response", "replay"]

# -- replaying ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found. ``matched`` is true when every status and body equals the
    recording up to generated ids, deadlines and the ``ignore`` paths. ``restarts_after``
    lists the exchanges after which a cold replay killed and restarted the server;
    ``requests`` and ``responses`` are what was sent (with the new ids) and received, as
    is. ``findings`` tells root differences (with a likely cause) from the follow-on
    differences they caused (docs/cassettes.md, "Reading a report")."""

    exchanges: int
    cold: bool
    restarts_after: tuple[int, ...]
    differences: tuple[Difference, ...]
    requests: tuple[RequestRecord, ...]
    responses: tuple[ResponseRecord, ...]
    ignore: tuple[str, ...] = ()
    # Real-model cassettes: model steps whose request differs from the recorded one, or
    # that the cassette lacks; the steps recorded anew (record modes new_episodes, all)
    # and the cassette recorded again with them.
    model_findings: tuple[ModelFinding, ...] = ()
    rerecorded: tuple[tuple[str, int], ...] = ()
    cassette: Cassette | None = None

    @property
    def matched(self) -> bool:
        return not self.differences and not self.model_findings

    @property
    def findings(self) -> list[Finding]:
        """Each difference with the root it follows from, or its likely cause."""
        return analyse(self.differences, self.requests, self.restarts_after)

    def summary(self) -> str:
        restarts = len(self.restarts_after)
        times = "once" if restarts == 1 else f"{restarts} times"
        mode = f"cold: killed and restarted {times}" if self.cold else "warm"
        text = f"replayed {self.exchanges} exchanges ({mode})"
        if self.rerecorded:
            text += f", {len(self.rerecorded)} model step(s) recorded anew"
        if self.model_findings:
            text += f": {len(self.model_findings)} model request(s) differ"
        if not self.differences:
            return text + (": every response matches" if not self.model_findings else "")
        count = len(self.differences)
        text += f"{',' if self.model_findings else ':'} {count} difference(s)"
        roots = sum(1 for f in self.findings if f.follows is None)
        if roots < count:
            text += f", {roots} at the root and {count - roots} follow-on"
        return text

    def format(self, *, full: bool = False, limit: int = 10) -> str:
        """The summary, then the root differences (at most ``limit``), each with its
        likely cause, then a count of the follow-on differences; ``full`` shows every
        difference. Exchanges a restarted server answered are marked."""
        lines = [self.summary()]
        if self.ignore:
            lines.append("ignoring: " + ", ".join(self.ignore))
        # A changed request to the model is the cause of what follows from it: first.
        lines += [str(finding) for finding in self.model_findings]
        if self.model_findings:
            lines.append(
                "  (record the changed steps again with the model: record mode new_episodes)"
            )
        findings = self.findings
        shown = 0
        for finding in findings:
            if not full and (finding.follows is not None or shown >= limit):
                continue
            d = finding.difference
            head, _, rest = str(d).partition("\n")
            lines.append(head + restart_mark(d.exchange, self.restarts_after))
            lines.append(rest)
            if finding.cause is not None:
                lines.append(f"  likely cause: {finding.cause}")
            if finding.follows is not None:
                root = findings[finding.follows].difference
                lines.append(f"  (follows from the difference in exchange {root.exchange})")
            shown += finding.follows is None
        if full:
            return "\n".join(lines)
        hidden_roots = [f for f in findings if f.follows is None][limit:]
        if hidden_roots:
            where = exchange_ranges([f.difference.exchange for f in hidden_roots])
            lines.append(f"+{len(hidden_roots)} more difference(s) in {where}")
        follow = [f.difference.exchange for f in findings if f.follows is not None]
        if follow:
            lines.append(
                f"+{len(follow)} follow-on difference(s) in {exchange_ranges(follow)}, "
                "caused by the ones above (a full report shows them)"
            )
        return "\n".join(lines)


def _body_view(
    record: ResponseRecord, ids: IdTable, *, counterpart: IdTable | None = None
) -> tuple[str, Any]:
    """The body, normalised, after ``ids`` learnt its generated ids (the replayed side
    learns against its ``counterpart``, the recorded side: by parkedCallKey first)."""
    if record.chunks is not None:
        ids.learn(record.chunks, counterpart=counterpart)
        return "stream", [(i, ids.normalise(c)) for i, c in merge_deltas(record.chunks)]
    if record.events is not None:  # an AG-UI run: compared as a stream is
        ids.learn(record.events, counterpart=counterpart)
        return "events", [(i, ids.normalise(e)) for i, e in merge_deltas(record.events)]
    if record.body is not None:
        ids.learn(record.body, counterpart=counterpart)
        return "json", ids.normalise(record.body)
    if record.text is not None:
        return "text", record.text
    return "empty", None


def _describe(kind: str, view: Any) -> Note:
    if kind == "stream":
        return Note(f"a stream of {len(view)} chunk(s)")
    if kind == "events":
        return Note(f"an AG-UI stream of {len(view)} event(s)")
    if kind == "json":
        return Note(f"a JSON body {json.dumps(view)[:300]}")
    if kind == "text":
        return Note(f"a text body {str(view)[:300]!r}")
    return Note("no body")


def compare_response(
    index: int,
    request: str,
    *,
    expected: ResponseRecord,
    got: ResponseRecord,
    recorded_ids: IdTable,
    replayed_ids: IdTable,
    ignore: Sequence[str] = (),
) -> list[Difference]:
    """The differences between a replayed response and its recording (exchange
    ``index``, described as ``request``). Each :class:`IdTable` learns its side's
    generated ids first, so pass the same two tables for every exchange of a replay.
    ``ignore`` paths leave values out of the comparison (docs/cassettes.md, "Ignore
    paths"); a malformed one raises :class:`CassetteError`."""
    skip = ignore_filter(tuple(ignore))
    found: list[Difference] = []
    if expected.status != got.status:
        found.append(
            Difference(index, request, "status", expected.status, got.status, kind="status")
        )
    kind_e, view_e = _body_view(expected, recorded_ids)
    kind_g, view_g = _body_view(got, replayed_ids, counterpart=recorded_ids)
    if kind_e != kind_g:
        expected_body, got_body = _describe(kind_e, view_e), _describe(kind_g, view_g)
        found.append(Difference(index, request, "body", expected_body, got_body, kind="body"))
    elif kind_e in ("stream", "events"):
        found += diff_chunks(index, request, skip.chunks(view_e), skip.chunks(view_g))
    elif kind_e == "json":
        found += diff_json(index, request, skip.json(view_e), skip.json(view_g))
    elif view_e != view_g:
        found.append(Difference(index, request, "text body", view_e, view_g))
    # What a report needs to find causes: the calls the request names, each call's tool.
    named = tuple(re.findall(r"call#[0-9]+", str(recorded_ids.normalise(request))))
    return [
        dataclasses.replace(
            d,
            request_calls=named,
            tool=(recorded_ids.tool(d.call) or replayed_ids.tool(d.call)) if d.call else None,
        )
        for d in found
    ]


def check_replayable(cassette: Cassette, *, cold: bool) -> None:
    """Refuse a cassette whose replay could not prove anything, so it never passes by
    comparing nothing: no exchanges, no stream that reaches the end of a turn, or (cold)
    no park point to kill the server at."""
    if not cassette.exchanges:
        raise CassetteError("the cassette has no exchanges: there is nothing to replay")
    if not any(exchange.response.finishes() for exchange in cassette.exchanges):
        raise CassetteError(
            "no exchange of the cassette reaches the end of a turn (no 'finish' chunk or "
            "AG-UI RUN_FINISHED in any stream): record a chat whose turn ends"
        )
    last = len(cassette.exchanges) - 1
    if cold and not any(e.response.parks() for e in cassette.exchanges[:last]):
        raise CassetteError(
            "a cold replay needs a park point (a response that parks a turn, followed by "
            "another request) to kill the server at, and this cassette has none"
        )


def _run(
    cassette: Cassette,
    server: ReplayServer,
    *,
    cold: bool,
    timeout_s: float,
    namespace: ChatNamespace,
    ignore: tuple[str, ...],
) -> ReplayReport:
    recorded_ids, replayed_ids = IdTable(), IdTable()
    differences: list[Difference] = []
    sent: list[RequestRecord] = []
    responses: list[ResponseRecord] = []
    restarts: list[int] = []
    base_url = server.start()
    try:
        status, _, raw = http_request(base_url, "POST", "/api/sessions", timeout_s=timeout_s)
        if status != 201:
            raise CassetteError(f"the replay server refused a session (status {status})")
        token = str(json.loads(raw)["token"])
        last = len(cassette.exchanges) - 1
        for index, exchange in enumerate(cassette.exchanges):
            recorded = exchange.request
            path = namespace.path(translate(recorded.path, recorded_ids, replayed_ids))
            body = namespace.body(path, translate(recorded.body, recorded_ids, replayed_ids))
            sent.append(
                RequestRecord.model_validate(
                    {"method": recorded.method, "path": path, "json": body}
                )
            )
            try:
                status, content_type, raw = http_request(
                    base_url, recorded.method, path, body, token=token, timeout_s=timeout_s
                )
            except (OSError, http.client.HTTPException) as exc:
                # The server died or hung: nothing later can be compared.
                differences.append(
                    Difference(
                        index, recorded.line(), "no answer", Note("an answer"), Note(repr(exc))
                    )
                )
                break
            got = _response_record(status, content_type, raw, path=path)
            responses.append(got)
            differences += compare_response(
                index,
                recorded.line(),
                expected=exchange.response,
                got=namespace.restore(got),
                recorded_ids=recorded_ids,
                replayed_ids=replayed_ids,
                ignore=ignore,
            )
            if cold and exchange.response.parks() and index < last:
                server.kill()
                restarts.append(index)
                base_url = server.start()
    except BaseException:
        # An error, Ctrl-C, or the signal `parkway replay` turns into an exception: the
        # server is disposable, so it dies now rather than after a graceful shutdown.
        server.kill()
        raise
    finally:
        server.stop()
    return ReplayReport(
        exchanges=len(cassette.exchanges),
        cold=cold,
        restarts_after=tuple(restarts),
        differences=tuple(differences),
        requests=tuple(sent),
        responses=tuple(responses),
        ignore=ignore,
    )


def replay(
    cassette: Cassette,
    *,
    agent: ReplayAgent | str | Path | None = None,
    cassette_agent: bool = False,
    cold: bool = False,
    redis_url: str | None = None,
    server: ReplayServer | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    ignore: Sequence[str] = (),
    record_mode: str = "none",
) -> ReplayReport:
    """Replay ``cassette`` against a fresh server and compare every answer, leaving the
    ``ignore`` paths out (docs/cassettes.md, "Ignore paths").

    The server serves the agent file ``agent`` (a path, or a :class:`ReplayAgent` from
    :func:`replay_agent`); without it, the agent file the cassette names (relative to
    the cassette's folder); with ``cassette_agent``, the copy stored in the cassette.
    By default the server is ``parkway serve`` in a child process, on a private Redis in
    a temporary folder, or on ``redis_url``; every run uses chat ids of its own there,
    so replays of one cassette may run at the same time. ``server`` replaces that with
    your own :class:`ReplayServer` (which serves the agent you give it); the replay
    starts and stops it. With ``cold``, the server is killed with SIGKILL after each
    response that parks a turn and started again before the next request.

    A real model's steps are served from the cassette (no key, no network): a request to
    the model that differs from the recorded one is reported (and the recorded answer
    served), a step the cassette lacks fails its run. ``record_mode`` ``new_episodes``
    sends just those steps to the real model and records them, ``all`` every step; the
    report's ``cassette`` is then the cassette recorded again (save it with
    :func:`save_cassette`). ``once`` and ``none`` never call the model.

    Raises :class:`CassetteError` when nothing could be compared: no agent, an agent
    that does not load, a cassette with nothing to prove (see
    :func:`check_replayable`), a Redis or server that does not start. A replay that
    runs returns a report, matched or not.
    """
    try:
        mode = tape_mode(record_mode)
    except ValueError as exc:
        raise CassetteError(str(exc)) from None
    check_replayable(cassette, cold=cold)
    paths = tuple(ignore)
    IgnoreFilter(paths)  # a malformed path stops the replay before any server starts
    if not isinstance(agent, ReplayAgent):
        agent = replay_agent(cassette, agent, cassette_agent=cassette_agent)
    namespace = ChatNamespace(cassette.chat_ids(), runs=cassette.run_ids())
    if server is not None:
        return _run(
            cassette, server, cold=cold, timeout_s=timeout_s, namespace=namespace, ignore=paths
        )
    folders = [agent.import_folder] if agent.import_folder is not None else []
    with scratch_server(agent.path, agent.document, redis_url, env, folders) as scratch:
        # The model tape lives in the replay's own temporary folder, beside the log.
        tape = scratch.log_file.parent / "tape"
        write_tape_folder(tape, cassette, mode, namespace.served)
        scratch.env["PARKWAY_MODEL_TAPE"] = str(tape)
        report = _run(
            cassette, scratch, cold=cold, timeout_s=timeout_s, namespace=namespace, ignore=paths
        )
        return _with_models(report, read_outcome(tape, cassette), cassette, namespace)


def _with_models(
    report: ReplayReport, outcome: TapeOutcome, cassette: Cassette, namespace: ChatNamespace
) -> ReplayReport:
    """The report with what the model tape found; with steps recorded anew, the
    cassette recorded again: the requests as sent and the answers as received (chat ids
    mapped back), with the run's model steps."""
    again = None
    if outcome.recorded:
        exchanges = [
            Exchange(request=namespace.restore_request(request), response=namespace.restore(got))
            for request, got in zip(report.requests, report.responses, strict=False)
        ]
        again = cassette.model_copy(
            update={"exchanges": exchanges, "model_steps": outcome.model_steps()}
        )
    return dataclasses.replace(
        report,
        model_findings=tuple(outcome.findings),
        rerecorded=tuple(outcome.recorded),
        cassette=again,
    )
