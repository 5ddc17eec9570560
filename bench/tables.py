"""The results of one ``make bench`` run as Markdown tables: what stdout shows, and the
body of ``docs/benchmarks.md`` (written by :mod:`bench.report`). The *Targets* table
holds the run against the targets the issue set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.code_mode import AFTER_APPROVAL_TARGET_MS, FIRST_OUTPUT_TARGET_MS, CodeModeResult
from bench.eventlog import EventLogResult
from bench.http_level import HttpResult
from bench.models import ModelsResult
from bench.runner_level import Baseline, SizeResult
from bench.stats import Counts, Latency, fmt_bytes, fmt_ms, markdown_table
from bench.sweeper_lag import SPREAD_WINDOW_S, SweeperResult

__all__ = [
    "PARK_TARGET_MS",
    "RESUME_TARGET_MS",
    "SWEEP_LAG_TARGET_MS",
    "ResultTables",
]

PARK_TARGET_MS = 0.5
RESUME_TARGET_MS = 1.0
SWEEP_LAG_TARGET_MS = 1000.0

RUNNER_ROWS = (
    ("park", "park (model's tool call -> MessageFinished)"),
    ("commit", "park, of which: commit (ChatStore.commit)"),
    ("turn", "turn that parks (start_turn -> MessageFinished)"),
    ("settle", "settle (Runner.settle)"),
    ("answer", "answer (Runner.answer, AI SDK path)"),
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
    ("healthz", "reference: GET /healthz (one PING)", "healthz"),
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

    baseline: Baseline
    runner: Sequence[SizeResult]
    http: Sequence[HttpResult] = ()
    sweeper: SweeperResult | None = None
    eventlog: EventLogResult | None = None
    models: ModelsResult | None = None
    code: CodeModeResult | None = None

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
        return f"{table}\n\nRequest bodies (the whole UI-message history): {bodies}."

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
        for name in ("meta", "history", "calls", "outcomes", "pending", "events"):
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
            "bytes sent to Redis: settle / answer",
            [
                f"{r.bytes_sent['settle'].text()} / {r.bytes_sent['answer'].text()} B"
                for r in self.runner
            ],
        )
        row(
            "bytes sent to Redis: resume (whole)",
            [r.bytes_sent["resume_finish"].text() + " B" for r in self.runner],
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

    def baseline_table(self) -> str:
        rows = [
            ["PING", fmt_ms(self.baseline.ping.p50_ms), fmt_ms(self.baseline.ping.p99_ms), "1"],
            [
                "SET + GETDEL of 4 KB",
                fmt_ms(self.baseline.set_getdel.p50_ms),
                fmt_ms(self.baseline.set_getdel.p99_ms),
                "2",
            ],
        ]
        return markdown_table(["reference on this Redis (ms)", "p50", "p99", "round trips"], rows)

    def targets_table(self) -> str:
        largest = max(self.runner, key=lambda r: r.messages)
        smallest = min(self.runner, key=lambda r: r.messages)
        park = largest.latency["park"].p50_ms
        commit = largest.latency["commit"].p50_ms
        resume = largest.latency["resume_request"].p50_ms
        finish = largest.latency["resume_finish"].p50_ms
        same_rt = len({r.round_trips["park"].text() for r in self.runner}) == 1
        sent = [r.bytes_sent["turn"].typical for r in self.runner]
        n = largest.messages
        rows = [
            [
                f"park p50 at {n} msgs <= {PARK_TARGET_MS} ms",
                f"{fmt_ms(park)} ms (commit alone {fmt_ms(commit)} ms)",
                _verdict(park <= PARK_TARGET_MS),
            ],
            [
                f"resume p50 at {n} msgs <= {RESUME_TARGET_MS} ms",
                f"{fmt_ms(resume)} ms to the model request; {fmt_ms(finish)} ms to finished",
                _verdict(resume <= RESUME_TARGET_MS),
            ],
            [
                "park cost independent of history length",
                f"round trips {largest.round_trips['park'].text()} at every size: "
                f"{'yes' if same_rt else 'no'}; bytes sent per parking turn "
                f"{min(sent):,}-{max(sent):,} B; park p50 {fmt_ms(smallest.latency['park'].p50_ms)}"
                f" ms at {smallest.messages} msgs vs {fmt_ms(park)} ms at {n}",
                _independence(
                    same_rt and max(sent) - min(sent) < 64,
                    park - smallest.latency["park"].p50_ms,
                    park / smallest.latency["park"].p50_ms - 1,
                ),
            ],
        ]
        sweep = self.sweeper
        if sweep is not None:
            worst = sweep.worst_lag_ms
            rows.append(
                [
                    f"expired call settled < {SWEEP_LAG_TARGET_MS / 1000:.0f} s after its "
                    f"deadline at {sweep.parked:,} parked",
                    f"lag p99 {fmt_ms(sweep.spread_lag.p99_ms)} ms, max "
                    f"{fmt_ms(max(sweep.spread_lag.samples, default=0) * 1000)} ms (spread "
                    f"deadlines); {sweep.burst:,} due at once: all settled within "
                    f"{fmt_ms(max(sweep.burst_lag.samples, default=0) * 1000)} ms",
                    _verdict(sweep.missed == 0 and worst < SWEEP_LAG_TARGET_MS),
                ]
            )
        logged = self.eventlog
        if logged is not None:
            added = logged.via_log.p50_ms - logged.direct.p50_ms
            rows.append(
                [
                    "streaming through the log adds < 1 ms p50 per turn over direct streaming",
                    f"{fmt_ms(added)} ms ({fmt_ms(logged.via_log.p50_ms)} ms through the log vs "
                    f"{fmt_ms(logged.direct.p50_ms)} ms direct)",
                    _verdict(added < 1.0),
                ]
            )
        models = self.models
        if models is not None:
            size = max(models.sizes)
            overhead = models.overhead[size].p50_ms
            rows.append(
                [
                    f"provider adapter per model step at {size} msgs (history conversion + "
                    "request build, no network) p50 <= 1 ms",
                    f"{fmt_ms(overhead)} ms",
                    _verdict(overhead <= 1.0),
                ]
            )
            first = models.first_token.p50_ms
            rows.append(
                [
                    "provider's first byte to the first SSE chunk leaving Parkway p50 <= 2 ms",
                    f"{fmt_ms(first)} ms (p99 {fmt_ms(models.first_token.p99_ms)} ms)",
                    _verdict(first <= 2.0),
                ]
            )
        rows.extend(self._code_targets())
        return markdown_table(["target (from the issue)", "measured", "verdict"], rows)

    def _code_targets(self) -> list[list[str]]:
        code = self.code
        if code is None or code.unavailable:
            return []
        first, after = code.first_output.p50_ms, code.after_approval.p50_ms
        return [
            [
                "sandbox start to first output, trivial code, p50 <= "
                f"{FIRST_OUTPUT_TARGET_MS:g} ms",
                f"{fmt_ms(first)} ms (p99 {fmt_ms(code.first_output.p99_ms)} ms; start to the "
                "result, which includes the first byte)",
                _verdict(first <= FIRST_OUTPUT_TARGET_MS),
            ],
            [
                f"execute_code end to end after approval, trivial code, p50 <= "
                f"{AFTER_APPROVAL_TARGET_MS:g} ms",
                f"{fmt_ms(after)} ms (p99 {fmt_ms(code.after_approval.p99_ms)} ms)",
                _verdict(after <= AFTER_APPROVAL_TARGET_MS),
            ],
        ]

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
            f"worker ({logged.concurrency} turns started at once, each followed through the "
            "log; 5 rounds)."
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
            "Park and resume are the runner-level measures defined under *What is measured*.",
            self.targets_table(),
            "### Runner level",
            self.runner_table(),
            "### HTTP",
            self.http_table() if self.http else "(skipped)",
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
            self.baseline_table(),
        ]
        return "\n\n".join(parts) + "\n"


def _part_cell(result: SizeResult, name: str) -> str:
    if name not in result.breakdown:
        return "-"
    cell = fmt_ms(result.breakdown[name].p50_ms)
    trips = result.breakdown_trips.get(name)
    return f"{cell} ({trips.text()} RT)" if trips is not None and trips.typical else cell


def _independence(redis_constant: bool, delta_ms: float, ratio: float) -> str:
    redis = "met" if redis_constant else "**missed**"
    return f"Redis work: {redis}; wall time: {delta_ms:+.3f} ms ({ratio:+.0%}) at the largest size"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"
