"""Turning results into Markdown: stdout tables and ``docs/benchmarks.md``.

The document is regenerated on every run, except for the text between
:data:`NOTES_START` and :data:`NOTES_END`, which is kept from the existing file: that is
where people write their analysis of the numbers.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.eventlog import EventLogResult
from bench.http_level import HttpResult
from bench.models import ModelsResult
from bench.runner_level import Baseline, SizeResult
from bench.stats import Counts, Latency, fmt_bytes, fmt_ms, markdown_table
from bench.sweeper_lag import SPREAD_WINDOW_S, SweeperResult

__all__ = ["NOTES_END", "NOTES_START", "Machine", "Report", "machine_facts"]

NOTES_START = "<!-- notes:start (kept by make bench) -->"
NOTES_END = "<!-- notes:end -->"
# The section `make load` writes (bench/load_report.py), kept as it is.
LOAD_START = "<!-- load:start (written by make load) -->"
LOAD_END = "<!-- load:end -->"

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


@dataclass(frozen=True)
class Machine:
    """Facts about where the numbers were taken."""

    date: str
    cpus: int
    cpu_model: str
    system: str
    python: str
    redis_server: str
    redis_where: str
    libraries: str
    commit: str


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit(root: Path) -> str:
    git = shutil.which("git")
    if git is None:
        return "unknown"
    try:
        out = subprocess.run(  # noqa: S603 - fixed argv, read-only git query
            [git, "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip() or "unknown"
    try:
        status = subprocess.run(  # noqa: S603 - fixed argv, read-only git query
            [git, "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return commit
    return f"{commit} + uncommitted changes" if status.stdout.strip() else commit


def machine_facts(redis_version: str, redis_where: str, root: Path) -> Machine:
    """Collect the machine facts for the report."""
    hiredis = importlib.util.find_spec("hiredis") is not None
    uvloop = importlib.util.find_spec("uvloop") is not None
    libraries = (
        f"redis-py {_version('redis')} ({'hiredis' if hiredis else 'pure-Python'} parser), "
        f"uvicorn {_version('uvicorn')} ({'uvloop' if uvloop else 'asyncio'} event loop), "
        f"starlette {_version('starlette')}, sse-starlette {_version('sse-starlette')}, "
        f"pydantic {_version('pydantic')}, httpx {_version('httpx')} (client)"
    )
    return Machine(
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        cpus=len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count() or 0,
        cpu_model=_cpu_model(),
        system=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        redis_server=redis_version,
        redis_where=redis_where,
        libraries=libraries,
        commit=_commit(root),
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


@dataclass
class Report:
    """All results of one ``make bench`` run."""

    arguments: str
    machine: Machine
    baseline: Baseline
    runner: list[SizeResult]
    http: list[HttpResult]
    iterations: int
    http_iterations: int
    sweeper: SweeperResult | None = None
    eventlog: EventLogResult | None = None
    models: ModelsResult | None = None

    @property
    def command(self) -> str:
        """How this run was started, as Markdown."""
        if not self.arguments:
            return "`make bench` (runs `.venv/bin/python -m bench`)"
        return f"`.venv/bin/python -m bench {self.arguments}`"

    def _http_samples(self) -> str:
        if not self.http:
            return "HTTP skipped"
        n = self.http_iterations
        return f"{n} per size over HTTP ({n // 2} per resume flow)"

    # -- tables ---------------------------------------------------------------------

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
        return markdown_table(["target (from the issue)", "measured", "verdict"], rows)

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

    # -- output ---------------------------------------------------------------------

    def tables(self) -> str:
        """The results as Markdown (what stdout shows)."""
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
            "### Bytes",
            self.bytes_table(),
            "### Where the time goes (runner level, p50)",
            self.breakdown_table(),
            "### Reference",
            self.baseline_table(),
        ]
        return "\n\n".join(parts) + "\n"

    def document(self, notes: str, load: str = "") -> str:
        """The whole file; ``notes`` and ``load`` (the section ``make load`` writes, with
        its markers) are kept from the file it replaces."""
        m = self.machine
        return "\n".join(
            [
                "# Benchmarks",
                "",
                "Park, settle and resume latency of Parkway on a loopback Redis, at the "
                "runner level and through HTTP. This file is written by `make bench`; "
                "the *Notes* section and the *Load* section (written by `make load`) are kept "
                "between runs.",
                "",
                "## How to run",
                "",
                "```sh",
                "make bench                 # = .venv/bin/python -m bench",
                ".venv/bin/python -m bench --redis-url redis://127.0.0.1:6379/0  # another Redis",
                ".venv/bin/python -m bench --quick --no-write   # a fast smoke run",
                "```",
                "",
                "By default the suite starts its own `redis-server` (the binary the embedded "
                "default uses) on a free 127.0.0.1 TCP port with `--save '' --appendonly no`, "
                "and stops it at the end. With `--redis-url` it uses that Redis instead; it "
                "only writes keys under `pw:{bench-...}` and `bench:baseline` and deletes "
                "them afterwards, and members `bench-sweep-...` of the deadline index "
                "`pw:deadlines`, which it removes too. Its sweeper settles `timeout` any call "
                "of that Redis whose deadline has passed, as a worker would; "
                "`--skip-sweeper` leaves the sweeper out.",
                "",
                "## This run",
                "",
                f"- command: {self.command}",
                f"- date: {m.date}; commit {m.commit}",
                f"- machine: {m.cpus} CPUs available (`nproc`), {m.cpu_model}; {m.system}",
                f"- Python: {m.python}; {m.libraries}",
                f"- Redis: {m.redis_server}, {m.redis_where}",
                f"- samples: {self.iterations} per size at the runner level (settle and answer "
                f"alternate: {self.iterations // 2} each), {self._http_samples()}, after "
                "warm-up rounds",
                "",
                "Everything (Redis, the server process, the benchmark client) shares these "
                "CPUs, so p99 includes scheduling noise from the neighbours.",
                "",
                self.tables().replace("### ", "## "),
                *([load.strip("\n"), ""] if load else []),
                "## What is measured",
                "",
                METHOD,
                "",
                "## For comparison",
                "",
                COMPARISON,
                "",
                "## Notes",
                "",
                NOTES_START,
                notes.strip("\n"),
                NOTES_END,
                "",
            ]
        )

    def write(self, path: Path) -> None:
        """Write the document to ``path``, keeping the notes of an existing one."""
        notes, load = "_No notes yet._", ""
        if path.exists():
            old = path.read_text(encoding="utf-8")
            start, end = old.find(NOTES_START), old.find(NOTES_END)
            if 0 <= start < end:
                notes = old[start + len(NOTES_START) : end]
            start, end = old.find(LOAD_START), old.find(LOAD_END)
            if 0 <= start < end:
                load = old[start : end + len(LOAD_END)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.document(notes, load), encoding="utf-8")


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


METHOD = """\
A chat "with N messages" holds N entries in its stored history (user messages,
assistant steps, tool results) before the measured turn. Histories are built by really
running turns through the runner with the built-in demo agent's template and a scripted
model: N/4 *tool cycles* (user question, assistant step calling the client tool
`choose_option`, which parks; the tool result after settling; the assistant's answer),
plus one plain question/answer turn when N is not a multiple of 4. Messages have
realistic sizes (user ~150 B, assistant steps ~300-450 B), so 200 messages are ~58 KB
of history. Each size is seeded once and copied per sample with `DUMP`/`RESTORE`,
outside the measured regions. The measured turn asks one more question; the model says
one sentence and calls `choose_option`, so the run parks; the call is settled with
`{"choice": "Oslo"}`; the resumed run answers with one 14-word sentence and finishes.

Runner level (`bench/runner_level.py`; `Runner` and benchmark in one asyncio loop,
one operation at a time, `time.perf_counter`):

- **park**: from the moment the model's stream ends with the tool call until the caller
  receives `MessageFinished("tool-calls")`: input validation, parkedCallKey, the parked
  call record, the `COMMIT` script (history entry, call record, pending set, chat state),
  the events. It is the work parking adds to a turn. **park commit** is only the
  `ChatStore.commit` call inside it (argument encoding + one Redis round trip).
- **turn that parks**: `Runner.start_turn` until `MessageFinished("tool-calls")`: also
  claims the lease, reads the whole history, builds the model request and streams the
  model's sentence.
- **settle**: `Runner.settle`. **answer**: `Runner.answer` with the same outcome, the
  path `POST /api/chat` takes for an AI SDK tool output. They alternate per sample.
- **resume -> model request**: `Runner.resume` until the model is called with the
  rebuilt request: lease claimed, history, template snapshot and outcome loaded from
  Redis, the tool result added, the model messages built. This is the cold-resume cost
  and the one held against the target. **resume -> finished** adds the model's answer,
  the final `COMMIT` and the events.
- **Redis round trips**: network round trips, not commands: a pipeline or a Lua script
  call is one, and so is the `SCRIPT EXISTS` redis-py sends before any pipeline that
  contains a script (`bench/roundtrips.py` counts `send_packed_command` calls).
- **bytes**: *payload* is the stored strings (hash fields and values, list elements,
  sorted-set members + 8 B per score); *MEMORY USAGE* is Redis' own figure
  (`MEMORY USAGE key SAMPLES 0`), summed over the chat's keys `pw:{chat}:*` right after
  the park. *Bytes sent* is the request bytes the runner wrote to Redis.
- **where the time goes**: p50 of the `ChatStore` calls timed inside the same runs
  (with their round trips), and of the pure-Python history steps
  (`decode_entries`, `to_model_messages`, `load_template`) timed separately on the
  same seeded history of each size.

HTTP (`bench/http_level.py`): the app built by `create_app` with the CLI's uvicorn
options runs in its own process (`bench/serve.py`); an `httpx.AsyncClient` with
keep-alive and a bearer session drives it one request at a time. Request bodies carry
the whole UI-message history, as the AI SDK sends it. *first chunk* is the `start`
chunk (the run's lease is claimed and its state loaded); *[DONE]* is the end of the
stream. Round trips are read from a counter the server process exposes, in an untimed
pass. The reference row `GET /healthz` is one Redis `PING` behind HTTP. The server's own
deadline sweeper runs once an hour here (`PARKWAY_SWEEP_INTERVAL_S`), so that its
`ZRANGEBYSCORE` never lands in the round-trip counts; it is measured on its own below.

Sweeper (`bench/sweeper_lag.py`): real turns of a `Runner` park 100,000 client calls
(2,000 chats of 50 `choose_option` calls), each with its member in the deadline index.
*sweep_once, none expired* is `Sweeper.sweep_once` while none has expired: what every
worker pays every `sweep_interval_s`. For the lag, the index entries of 1,000 calls are
moved (`ZADD XX`) to instants spread evenly over 5 s, then those of 10,000 more to one
and the same millisecond, while a `Sweeper.run` with the default settings (interval
0.25 s, batches of 500, the real clock) runs in the benchmark's event loop. A call's
lag is the wall-clock time at which the sweeper's `on_timeout` reports it (after the
round trip that settled it) minus its deadline. Only the index entries move: the
sweeper reads nothing else. In a worker the sweeper shares its event loop with
requests, which this measurement leaves out."""

COMPARISON = """\
Figures given in the project's issue, **not measured by us** (we have not reproduced
their setups):

| system | resume at 200 messages |
|---|---:|
| LangGraph with its Redis checkpointer | ~25 ms |
| OpenAI Agents SDK | ~8.5 ms |
| pydantic-ai | ~8 ms |
| bare Redis SET + GETDEL of 4 KB ("here", per the issue) | ~0.1 ms |

Our own SET + GETDEL measurement on the benchmark's Redis, with the same client
library the runner uses, is in the *Reference* table above."""
