"""Writing ``docs/benchmarks.md``: the run's facts (machine, command, samples), its
tables (:mod:`bench.tables`, also what stdout shows), and how everything is measured.

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
from dataclasses import dataclass
from pathlib import Path

from bench.code_mode import CodeModeResult
from bench.concurrency import ConcurrencyResult
from bench.eventlog import EventLogResult
from bench.floor import Floor
from bench.http_level import HttpResult
from bench.models import ModelsResult
from bench.runner_level import SizeResult
from bench.sweeper_lag import SweeperResult
from bench.tables import ResultTables

__all__ = ["NOTES_END", "NOTES_START", "Machine", "Report", "machine_facts"]

NOTES_START = "<!-- notes:start (kept by make bench) -->"
NOTES_END = "<!-- notes:end -->"
# The section `make load` writes (bench/load_report.py), kept as it is.
LOAD_START = "<!-- load:start (written by make load) -->"
LOAD_END = "<!-- load:end -->"


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


@dataclass
class Report:
    """All results of one ``make bench`` run."""

    arguments: str
    machine: Machine
    floor: Floor
    runner: list[SizeResult]
    http: list[HttpResult]
    iterations: int
    http_iterations: int
    sweeper: SweeperResult | None = None
    eventlog: EventLogResult | None = None
    models: ModelsResult | None = None
    code: CodeModeResult | None = None
    concurrency: ConcurrencyResult | None = None

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

    @property
    def results(self) -> ResultTables:
        """The run's results, as the tables show them."""
        return ResultTables(
            floor=self.floor,
            runner=self.runner,
            http=self.http,
            sweeper=self.sweeper,
            eventlog=self.eventlog,
            models=self.models,
            code=self.code,
            concurrency=self.concurrency,
        )

    def tables(self) -> str:
        """The results as Markdown (what stdout shows)."""
        return self.results.markdown()

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
                ".venv/bin/python -m bench --skip-concurrency   # without the concurrency runs",
                "```",
                "",
                "By default the suite starts its own `redis-server` (the binary the embedded "
                "default uses) on a free 127.0.0.1 TCP port with `--save '' --appendonly no`, "
                "and stops it at the end. With `--redis-url` it uses that Redis instead; it "
                "only writes keys under `pw:{bench-...}` and `bench:baseline*` and deletes "
                "them afterwards, and members `bench-...` of the deadline index "
                "`pw:deadlines`, which it removes too; the quota counts of its principals "
                "(`pw:{usage:...}`) are deleted for the runner's and expire for the HTTP "
                "sessions'. Its sweeper settles `timeout` any call "
                "of that Redis whose deadline has passed, as a worker would; "
                "`--skip-sweeper` leaves the sweeper out.",
                "",
                FLOOR,
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
one operation at a time, `time.perf_counter`; the sizes take turns, in 5 rounds of a
fifth of the samples each, so the machine's drift during the run falls on every size
alike; the benchmark's process settles its garbage collector at start as `parkway
serve` does once it listens, `runner/ops/heap.py`):

- **park**: from the moment the model's stream ends with the tool call until the caller
  receives `MessageFinished("tool-calls")`: input validation, parkedCallKey, the parked
  call record, the `COMMIT` script (history entry, call record, pending set, chat state,
  and the step's events in the event log), the events. It is the work parking adds to a
  turn. **park commit** is only the `ChatStore.commit` call inside it (argument encoding
  + one Redis round trip).
- **turn that parks**: `Runner.start_turn` until `MessageFinished("tool-calls")`: also
  claims the lease, reads the whole history, builds the model request and streams the
  model's sentence.
- **settle**: `Runner.settle` (even samples, each followed by a resume).
  **answer + resume** (odd samples): `Runner.answer_and_resume` with the same outcome,
  the path `POST /api/chat` takes for an AI SDK tool output (on the worker that parked
  the call, one `ANSWER` script settles it and claims the resume), to the model request
  and to `MessageFinished("stop")`.
- **resume -> model request**: `Runner.resume` until the model is called with the
  rebuilt request: lease claimed, history, template snapshot and outcome loaded from
  Redis, the tool result added, the model messages built. This is the cold-resume cost
  and the one held against the target. **resume -> finished** adds the model's answer,
  the final `COMMIT` and the events.
- **Redis round trips**: network round trips, not commands: a pipeline or a Lua script
  call is one, and so is the `SCRIPT EXISTS` redis-py sends before any pipeline that
  contains a script (`bench/roundtrips.py` counts `send_packed_command` calls). The
  runner's worker-wide run watch (one pipelined read of stop requests every 0.2 s and
  one pipelined lease renewal every `lease_s / 3`, for all running runs) is left out:
  it belongs to no operation and falls into a region only by chance. Before
  the first sample a few connections are opened, so that no connection handshake
  (`CLIENT SETINFO`) lands in a measured region.
- **bytes**: *payload* is the stored strings (hash fields and values, list and set
  elements, strings, stream fields and values, sorted-set members + 8 B per score);
  *MEMORY USAGE* is Redis' own figure (`MEMORY USAGE key SAMPLES 0`), summed over every
  key of the chat, found with `SCAN MATCH pw:{chat}:*` (keys `<kind>:<id>` are summed
  as `<kind>:*`), once the parking run has ended. The seeded chats are copied without
  the keys of their seeding that expire within 10 minutes (a settle's 60 s nonce), which
  a chat built over a real conversation would not hold. *Bytes sent* is the request
  bytes the runner wrote to Redis.
- **settle + resume**, **answer + resume** (round trips): a settle (or an answer) and
  the resume after it, up to the model request, summed per cycle.
- **where the time goes**: p50 of the `ChatStore` calls timed inside the same runs
  (with their round trips), and of the pure-Python history steps
  (`decode_entries`, `to_model_messages`, `load_template`) timed separately on the
  same seeded history of each size.

Concurrency (`bench/concurrency.py`; 2-message chats, one `Runner` on a client built as
the server builds it (`connect(url)`: a `BlockingConnectionPool` of 32 connections), the
floor's commands on the same client, every operation of a phase started at once with
`asyncio.gather`, wall time from the start until the last caller holds its
`MessageFinished`): per round, 100 SETs of 4 KB and then 100 GETDELs on that client (the
floor's SET/s and GETDEL/s), then 100 turns that park, one per fresh chat (parks/s),
then, once all 100 calls are settled (untimed), 100 `Runner.resume`, each until
`MessageFinished("stop")`: the whole resume, model answer and final commit included
(resumes/s). Between phases every run's task is awaited, untimed. One warm-up round,
then the median over the rounds (10; 3 with `--quick`). *Many runs at once*: 1,000 turns
that park started at once on one `Runner` whose client is built as the server builds it
(`connect(url)`: a `BlockingConnectionPool` of 32), then all 1,000 calls settled at
once, then all 1,000 chats resumed at once; an error is an exception, a run that ended
otherwise (`RunFailed`, another finish reason) or one not done within 60 s.

HTTP (`bench/http_level.py`): the app built by `create_app` with the CLI's uvicorn
options (its HTTP protocol with the header read timeout, uvicorn's `loop="auto"`; the
HTTP table says which event loop and parser the server reports) runs in its own process
(`bench/serve.py`); an `httpx.AsyncClient` with keep-alive and a bearer session drives
it one request at a time. Request bodies carry the whole UI-message history, as the AI
SDK sends it. *first chunk* is the `start` chunk (the run's lease is claimed and its
state loaded); *[DONE]* is the end of the stream. Round trips are read from a counter
the server process exposes, in an untimed pass. The reference row `GET /healthz` is liveness
only (no Redis) behind Parkway's app. The server's own deadline sweeper runs once an hour here
(`PARKWAY_SWEEP_INTERVAL_S`), so that its `ZRANGEBYSCORE` never lands in the round-trip
counts; it is measured on its own below. The same server answers two bare Starlette
routes outside Parkway's app (no middleware, no Redis), measured with the same client in
the same cycles: `POST /bench/bare` reads the body and answers a small JSON object;
`POST /bench/bare-sse` reads it and answers three SSE events with sse-starlette (two
chunks and `[DONE]`), sent the park request's body and, in answer + resume cycles, the
answer's. *HTTP overhead* = p50(HTTP) - p50(runner level) - p50(bare SSE route, same
body), at each size: for a park, against *turn that parks*; for answer + resume to
`[DONE]`, against p50(answer + resume -> finished). The raw difference (HTTP -
runner level) is shown beside it.

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

FLOOR = """\
**The floor.** Every run first measures, on the same Redis with the same client
(the runner's: redis-py asyncio as the server builds it, `connect(url)`, whose commands
hiredis packs), one command at a time (`bench/floor.py`): `PING`; a `SET` of 4 KB;
a `GETDEL` of 4 KB, timed apart from its `SET`; `SET` + `GETDEL` of 4 KB together; and
*`GETDEL` of 64 KB + `json.loads`*: the stored history of a really seeded 200-message
chat joined into one JSON array (about 59 KB), `SET` untimed, then `GETDEL` and
`json.loads` of the reply timed: a 200-message history read. *Concurrency* adds the
floor's rates: 100 `SET`s of 4 KB at once (SET/s) and 100 `GETDEL`s at once
(GETDEL/s), on the client the runner uses there (the server's: a pool of 32
connections), in the same rounds as the runner's.

**Ratios.** The *Targets* table holds issue 13's targets ("close to the floor") as
ratios to the floor of the same run, p50 to p50 (ratio column; PASS or MISS):

- park / `SET` of 4 KB <= 3, at 2 and at 200 messages;
- settle + resume / `GETDEL` of 4 KB <= 3 at 2 messages, and settle + resume /
  (`GETDEL` of 64 KB + `json.loads`) <= 4 at 200 messages, where settle + resume =
  p50(settle) + p50(resume -> model request) of the runner-level table, a resume on
  the worker that parked the chat (which keeps its decoded history); the same sum with
  the resumes made as on a worker that never saw the chat is shown beside it;
- park at 200 messages / park at 2 within 1 ± 0.10 (park independent of history length);
- parks/s / SET/s >= 0.5 and resumes/s / GETDEL/s >= 0.5 (100 at once, medians);
- memory of a parked 200-message chat (`MEMORY USAGE` of every key) / the text it holds
  <= 1.5; the text it holds is the history payload: the sum of the stored history
  entries' JSON, the conversation the chat keeps.

The other rows are absolute: round trips per operation (the largest count of any sample
of any size), 1,000 concurrent runs without errors, events/s through one worker's log
and the log's overhead per turn, and the HTTP overhead over the runner level net of a
bare route (defined under *What is measured*)."""

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
