"""The results of one ``make bench`` run as Markdown tables: what stdout shows, and the
body of ``docs/benchmarks.md`` (written by :mod:`bench.report`). The *Targets* table
(:mod:`bench.targets`) holds the run against the targets the issues set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.code_mode import CodeModeResult
from bench.concurrency import ConcurrencyResult
from bench.eventlog import EventLogResult
from bench.floor import Floor
from bench.http_level import HttpResult
from bench.models import ModelsResult
from bench.runner_level import SizeResult
from bench.stats import Counts, Latency, fmt_bytes, fmt_ms, markdown_table
from bench.sweeper_lag import SPREAD_WINDOW_S, SweeperResult
from bench.targets import Targets, http_overheads
from bench.workload import KEY_NAMES

__all__ = ["ResultTables"]

RUNNER_ROWS = (
    ("park", "park (model's tool call -> MessageFinished)"),
    ("commit", "park, of which: commit (ChatStore.commit)"),
    ("turn", "turn that parks (start_turn -> MessageFinished)"),
    ("settle", "settle (Runner.settle)"),
    ("answer_request", "answer + resume -> model request (AI SDK path, Runner.answer_and_resume)"),
    ("answer_finish", "answer + resume -> finished"),
    ("resume_request", "resume -> model request"),
    ("resume_finish", "resume -> finished (MessageFinished)"),
)
HTTP_ROWS = (
    ("park", "park: POST /api/chat -> [DONE]", "park"),
    ("settle", "settle: POST /api/chats/{id}/calls/{call}", "settle"),
    ("resume_first", "resume: POST /api/chats/{id}/resume -> first chunk", "resume"),
    ("resume_done", "resume: POST /api/chats/{id}/resume -> [DONE]", "resume"),
    ("answer_first", "answer + resume: POST /api/chat -> first chunk", "answer"),
    ("answer_done", "answer + resume: POST /api/chat -> [DONE]", "answer"),
    ("healthz", "reference: GET /healthz (no Redis)", "healthz"),
)


def _rt_cell(counts: Sequence[Counts]) -> str:
    texts = [c.text() for c in counts]
    return texts[0] if len(set(texts)) == 1 else " / ".join(texts)


def _latency_cells(latencies: Sequence[Latency]) -> list[str]:
    cells: list[str] = []
    for lat in latencies:
        cells.extend([fmt_ms(lat.p50_ms), fmt_ms(lat.p99_ms)])
    return cells


def _size_header(sizes: Sequence[int], first: str, last: str | None) -> list[str]:
    header = [first]
    for n in sizes:
        header.extend([f"{n} msgs p50", f"{n} msgs p99"])
    if last is not None:
        header.append(last)
    return header


@dataclass(frozen=True)
class ResultTables:
    """The Markdown tables of one run's results (HTTP, the sweeper, the event log and the
    real models are each optional: a run may skip them)."""

    floor: Floor
    runner: Sequence[SizeResult]
    http: Sequence[HttpResult] = ()
    sweeper: SweeperResult | None = None
    eventlog: EventLogResult | None = None
    models: ModelsResult | None = None
    code: CodeModeResult | None = None
    concurrency: ConcurrencyResult | None = None

    def runner_table(self) -> str:
        sizes = [r.messages for r in self.runner]
        rows = []
        for key, label in RUNNER_ROWS:
            rows.append(
                [
                    label,
                    *_latency_cells([r.latency[key] for r in self.runner]),
                    _rt_cell([r.round_trips[key] for r in self.runner]),
                ]
            )
        return markdown_table(_size_header(sizes, "runner level (ms)", "Redis round trips"), rows)

    def http_table(self) -> str:
        sizes = [h.messages for h in self.http]
        rows = []
        for key, label, rt_key in HTTP_ROWS:
            rows.append(
                [
                    label,
                    *_latency_cells([h.latency[key] for h in self.http]),
                    _rt_cell([h.round_trips[rt_key] for h in self.http]),
                ]
            )
        table = markdown_table(_size_header(sizes, "HTTP (ms)", "Redis round trips"), rows)
        bodies = "; ".join(
            f"{h.messages} msgs: park {h.park_body_bytes:,} B, answer {h.answer_body_bytes:,} B"
            for h in self.http
        )
        server = self.http[0]
        return (
            f"{table}\n\nRequest bodies (the whole UI-message history): {bodies}.\n\n"
            f"Server (as it reports itself): event loop {server.server_loop}; HTTP "
            f"{server.server_http}."
        )

    def http_overhead_table(self) -> str:
        """What Parkway's HTTP layer adds, net of a bare route (p50s, ms)."""
        found = http_overheads(self.runner, self.http)
        sizes = [o.messages for o in found["park"]]
        if not sizes:
            return "(not measured: no size was measured both over HTTP and at the runner level)"
        by_size = {h.messages: h for h in self.http}
        rows: list[list[str]] = [
            [
                "bare route: POST /bench/bare, park body -> JSON",
                *[fmt_ms(by_size[n].latency["bare"].p50_ms) for n in sizes],
            ]
        ]
        labels = {
            "park": (
                "park: POST /api/chat -> [DONE]",
                "runner level: turn that parks",
                "bare SSE route: POST /bench/bare-sse, park body -> [DONE]",
            ),
            "answer": (
                "answer + resume: POST /api/chat -> [DONE]",
                "runner level: answer + resume -> finished",
                "bare SSE route: POST /bench/bare-sse, answer body -> [DONE]",
            ),
        }
        for key, (http_label, runner_label, bare_label) in labels.items():
            items = found[key]
            rows.extend(
                [
                    [http_label, *[fmt_ms(o.http) for o in items]],
                    [runner_label, *[fmt_ms(o.runner) for o in items]],
                    [bare_label, *[fmt_ms(o.bare) for o in items]],
                    [f"{key}: raw difference (HTTP - runner)", *[fmt_ms(o.raw) for o in items]],
                    [
                        f"**{key}: overhead (HTTP - runner - bare)**",
                        *[f"**{fmt_ms(o.overhead)}**" for o in items],
                    ],
                ]
            )
        header = ["HTTP overhead, p50 (ms)", *[f"{n} msgs" for n in sizes]]
        return markdown_table(header, rows)

    def concurrency_table(self) -> str:
        conc = self.concurrency
        if conc is None:
            return "(skipped)"
        med = ConcurrencyResult.median

        def row(label: str, rates: list[float]) -> list[str]:
            return [
                label,
                f"{med(rates):,.0f}",
                f"{min(rates, default=0):,.0f}",
                f"{max(rates, default=0):,.0f}",
            ]

        w = conc.width
        rows = [
            row(f"floor: {w} SETs of 4 KB at once, SET/s", conc.set_rates),
            row(f"floor: {w} GETDELs of 4 KB at once, GETDEL/s", conc.getdel_rates),
            row(f"{w} turns that park at once ({conc.messages} msgs), parks/s", conc.park_rates),
            row(f"{w} resumes at once, each to MessageFinished, resumes/s", conc.resume_rates),
        ]
        header = [f"{w} at once (per second)", "median", "min", "max"]
        table = markdown_table(header, rows)
        text = (
            f"{len(conc.park_rates)} rounds after a warm-up round; the runner and the floor's "
            "commands share one client built as the server builds it (`connect(url)`, a "
            "blocking pool of 32 connections)."
        )
        many = conc.many
        if many is not None:
            errors = "; ".join(f"{n} x {e}" for e, n in many.errors.most_common(5)) or "none"
            text += (
                f" {many.runs:,} runs at once on one Runner (client from `connect(url)`, "
                f"pool of {many.pool} connections): {many.parked:,} parked in "
                f"{many.park_s:.2f} s, all settled in {many.settle_s:.2f} s, {many.finished:,} "
                f"resumed to MessageFinished in {many.resume_s:.2f} s; errors: {errors}."
            )
        return f"{table}\n\n{text}"

    def bytes_table(self) -> str:
        header = ["stored per parked chat", *[f"{r.messages} msgs" for r in self.runner]]
        rows: list[list[str]] = []

        def row(label: str, values: list[str]) -> None:
            rows.append([label, *values])

        parked = [r.stored_parked for r in self.runner]
        if any(p is None for p in parked):
            return "(not measured)"
        stored = [p for p in parked if p is not None]
        row("history entries when parked", [str(p.history_entries) for p in stored])
        names = [*KEY_NAMES]
        names.extend(sorted({n for p in stored for n in p.memory} - set(names)))
        for name in names:
            row(
                f"`{name}` payload / MEMORY USAGE",
                [
                    f"{p.payload.get(name, 0):,} / {p.memory.get(name, 0):,} B"
                    if name in p.memory
                    else "-"
                    for p in stored
                ],
            )
        row("  of meta: template snapshot", [f"{p.template_bytes:,} B" for p in stored])
        row("**total payload**", [f"**{fmt_bytes(p.payload_total)}**" for p in stored])
        row("**total MEMORY USAGE**", [f"**{fmt_bytes(p.memory_total)}**" for p in stored])
        row(
            "bytes sent to Redis: turn that parks",
            [r.bytes_sent["turn"].text() + " B" for r in self.runner],
        )
        row(
            "bytes sent to Redis: settle",
            [r.bytes_sent["settle"].text() + " B" for r in self.runner],
        )
        row(
            "bytes sent to Redis: resume (whole)",
            [r.bytes_sent["resume_finish"].text() + " B" for r in self.runner],
        )
        row(
            "bytes sent to Redis: answer + resume (whole)",
            [r.bytes_sent["answer_finish"].text() + " B" for r in self.runner],
        )
        row("history read back by a resume", [fmt_bytes(r.history_bytes) for r in self.runner])
        return markdown_table(header, rows)

    def breakdown_table(self) -> str:
        sizes = [r.messages for r in self.runner]
        names: list[str] = []
        for r in self.runner:
            names.extend(n for n in r.breakdown if n not in names)
        rows = [[name, *[_part_cell(r, name) for r in self.runner]] for name in names]
        park_rest = [
            fmt_ms(r.latency["park"].p50_ms - r.latency["commit"].p50_ms) for r in self.runner
        ]
        rows.insert(0, ["park: rest (validate, key, record, events)", *park_rest])
        rows.insert(
            0,
            [
                "park: commit",
                *[
                    f"{fmt_ms(r.latency['commit'].p50_ms)} ({r.round_trips['commit'].text()} RT)"
                    for r in self.runner
                ],
            ],
        )
        header = ["p50 in ms (Redis round trips)", *[f"{n} msgs" for n in sizes]]
        return markdown_table(header, rows)

    def floor_table(self) -> str:
        f = self.floor
        rows = [
            [label, fmt_ms(lat.p50_ms), fmt_ms(lat.p99_ms), trips]
            for label, lat, trips in (
                ("PING", f.ping, "1"),
                ("SET of 4 KB", f.set_4k, "1"),
                ("GETDEL of 4 KB", f.getdel_4k, "1"),
                ("SET + GETDEL of 4 KB", f.set_getdel_4k, "2"),
                (
                    f"GETDEL of 64 KB + json.loads: the {f.history_messages}-msg history as one "
                    f"JSON array ({f.history_bytes:,} B)",
                    f.getdel_history,
                    "1",
                ),
            )
        ]
        return markdown_table(["floor on this Redis (ms)", "p50", "p99", "round trips"], rows)

    def targets_table(self) -> str:
        return Targets(
            floor=self.floor,
            runner=self.runner,
            http=self.http,
            sweeper=self.sweeper,
            eventlog=self.eventlog,
            models=self.models,
            code=self.code,
            concurrency=self.concurrency,
        ).table()

    def code_table(self) -> str:
        code = self.code
        if code is None:
            return "(skipped)"
        if code.unavailable:
            return f"(not measured: the sandbox is unavailable here: {code.unavailable})"
        rows = [
            [
                "sandbox run of `print(1)`, call to result",
                fmt_ms(code.first_output.p50_ms),
                fmt_ms(code.first_output.p99_ms),
                str(code.first_output.n),
            ],
            [
                "execute_code after approval: settle, resume, sandbox run, output event",
                fmt_ms(code.after_approval.p50_ms),
                fmt_ms(code.after_approval.p99_ms),
                str(code.after_approval.n),
            ],
            [
                f"`pw.grep` over a 10 MB artifact ({code.grep_matches:,} matches)",
                fmt_ms(code.grep_10mb.p50_ms),
                fmt_ms(code.grep_10mb.p99_ms),
                str(code.grep_10mb.n),
            ],
        ]
        table = markdown_table(["code mode (ms)", "p50", "p99", "samples"], rows)
        return f"{table}\n\nbubblewrap, one fresh sandbox per run: {code.isolation}."

    def models_table(self) -> str:
        models = self.models
        if models is None:
            return "(skipped)"
        rows = [
            [
                f"adapter overhead, {size} msgs",
                fmt_ms(models.overhead[size].p50_ms),
                fmt_ms(models.overhead[size].p99_ms),
            ]
            for size in models.sizes
        ]
        rows.append(
            [
                f"first token: provider byte to Parkway chunk ({models.first_token_samples} turns)",
                fmt_ms(models.first_token.p50_ms),
                fmt_ms(models.first_token.p99_ms),
            ]
        )
        rows.append(
            [
                "of which the SDK and pydantic-ai: provider byte to the adapter's first event",
                fmt_ms(models.adapter_first_token.p50_ms),
                fmt_ms(models.adapter_first_token.p99_ms),
            ]
        )
        return markdown_table(["real models (ms)", "p50", "p99"], rows)

    def eventlog_table(self) -> str:
        logged = self.eventlog
        if logged is None:
            return "(skipped)"
        rows = [
            [
                f"turn ({logged.events_per_turn} events), read straight from the run",
                fmt_ms(logged.direct.p50_ms),
                fmt_ms(logged.direct.p99_ms),
                str(logged.direct.n),
            ],
            [
                "same turn, followed through the log (what a response does)",
                fmt_ms(logged.via_log.p50_ms),
                fmt_ms(logged.via_log.p99_ms),
                str(logged.via_log.n),
            ],
            [
                "reconnect replay of a parked chat (read + rebuild, no HTTP)",
                fmt_ms(logged.replay.p50_ms),
                fmt_ms(logged.replay.p99_ms),
                str(logged.replay.n),
            ],
        ]
        table = markdown_table(["event log (ms)", "p50", "p99", "samples"], rows)
        return (
            f"{table}\n\nThroughput: {logged.events_per_s:,.0f} events/s through the log on one "
            f"worker ({logged.concurrency} turns of {logged.events_per_turn} events started at "
            "once, all followed through the log at once; 5 rounds); the followers received "
            f"{logged.followed_per_s:,.0f} events/s, adjacent text deltas joined in the log."
        )

    def sweeper_table(self) -> str:
        sweep = self.sweeper
        if sweep is None:
            return "(skipped)"

        def lag_row(label: str, lat: Latency) -> list[str]:
            worst = max(lat.samples, default=float("nan")) * 1000
            return [label, fmt_ms(lat.p50_ms), fmt_ms(lat.p99_ms), fmt_ms(worst), str(lat.n)]

        rows = [
            [
                f"sweep_once, {sweep.parked:,} parked, none expired",
                fmt_ms(sweep.idle.p50_ms),
                fmt_ms(sweep.idle.p99_ms),
                fmt_ms(max(sweep.idle.samples, default=float("nan")) * 1000),
                f"{sweep.idle.n} ({sweep.idle_round_trips.text()} RT each)",
            ],
            lag_row(
                f"lag: deadlines spread over {SPREAD_WINDOW_S:.0f} s, deadline -> settled",
                sweep.spread_lag,
            ),
            lag_row(
                f"lag: {sweep.burst:,} deadlines at the same instant, deadline -> settled",
                sweep.burst_lag,
            ),
        ]
        table = markdown_table(["sweeper (ms)", "p50", "p99", "max", "samples"], rows)
        missed = f" **{sweep.missed} call(s) were not settled in time.**" if sweep.missed else ""
        return (
            f"{table}\n\nA running `Sweeper` (interval {sweep.interval_s} s, batches of "
            f"{sweep.batch}) against {sweep.parked:,} parked calls; parking them took "
            f"{sweep.seed_s:.1f} s.{missed}"
        )

    def markdown(self) -> str:
        """Every table under its heading (what stdout shows)."""
        parts = [
            "### Targets",
            "Park, settle and resume are the runner-level measures defined under *What is "
            "measured*; ratios are to the floor (*Reference*, and *Concurrency* for rates) "
            "measured in the same run.",
            self.targets_table(),
            "### Runner level",
            self.runner_table(),
            "### Concurrency",
            self.concurrency_table(),
            "### HTTP",
            self.http_table() if self.http else "(skipped)",
            *(["#### HTTP overhead", self.http_overhead_table()] if self.http else []),
            "### Event log",
            self.eventlog_table(),
            "### Sweeper",
            self.sweeper_table(),
            "### Real models",
            self.models_table(),
            "### Code mode",
            self.code_table(),
            "### Bytes",
            self.bytes_table(),
            "### Where the time goes (runner level, p50)",
            self.breakdown_table(),
            "### Reference",
            self.floor_table(),
        ]
        return "\n\n".join(parts) + "\n"


def _part_cell(result: SizeResult, name: str) -> str:
    if name not in result.breakdown:
        return "-"
    cell = fmt_ms(result.breakdown[name].p50_ms)
    trips = result.breakdown_trips.get(name)
    return f"{cell} ({trips.text()} RT)" if trips is not None and trips.typical else cell
