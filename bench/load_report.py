"""``make load`` results: the numbers of both scenarios, as Markdown, and their own
section of ``docs/benchmarks.md``.

The section lives between :data:`LOAD_START` and :data:`LOAD_END`; :func:`write_section`
replaces only that text and leaves the rest of the document as it is (the other
sections are written by ``make bench``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import LOAD_END, LOAD_START, Machine
from bench.stats import Latency, fmt_ms, markdown_table

__all__ = [
    "FOLLOWERS_TARGET",
    "HEALTHZ_P99_TARGET_MS",
    "LOAD_END",
    "LOAD_START",
    "REDIS_CONNECTIONS_TARGET",
    "TURNS_TARGET",
    "FollowersResult",
    "LoadReport",
    "TurnsResult",
    "write_section",
]

FOLLOWERS_TARGET = 10_000
REDIS_CONNECTIONS_TARGET = 32
HEALTHZ_P99_TARGET_MS = 100.0
TURNS_TARGET = 300


def _max_ms(lat: Latency) -> float:
    return max(lat.samples, default=math.nan) * 1000


def _lat_text(lat: Latency) -> str:
    if not lat.n:
        return "-"
    return (
        f"p50 {fmt_ms(lat.p50_ms)}, p99 {fmt_ms(lat.p99_ms)}, max {fmt_ms(_max_ms(lat))} ms "
        f"({lat.n:,} samples)"
    )


def _percent(cpu_s: float, wall_s: float) -> str:
    return f"{cpu_s / wall_s:.0%}" if wall_s > 0 else "-"


@dataclass
class FollowersResult:
    """Scenario 1: many ``GET /api/chat/{id}/stream`` followers on one worker."""

    followers: int
    chats: int
    chats_started: int = 0
    settings: dict[str, str] = field(default_factory=dict)
    established: int = 0
    live_hold_start: int = 0  # streaming, without an error chunk
    live_hold_end: int = 0
    ramp_s: float = 0.0
    hold_s: float = 0.0
    healthz: Latency = field(default_factory=Latency)
    healthz_ramp: Latency = field(default_factory=Latency)
    healthz_failures: Counter[str] = field(default_factory=Counter)
    redis_connections: list[int] = field(default_factory=list)
    redis_method: str = ""
    # one failure per follower, the first that applies, in this order
    refused: Counter[str] = field(default_factory=Counter)
    error_chunks: int = 0
    errors_before_release: int = 0
    error_texts: Counter[str] = field(default_factory=Counter)
    ended_early: int = 0
    unfinished: int = 0
    release_to_done: Latency = field(default_factory=Latency)
    worker_cpu_ramp_s: float = 0.0
    worker_cpu_hold_s: float = 0.0
    worker_rss: int = 0
    client_cpu_ramp_s: float = 0.0
    client_cpu_hold_s: float = 0.0
    client_lag_ramp_ms: float = 0.0
    client_lag_hold_ms: float = 0.0
    worker_log_problems: int = 0
    load_average: float = 0.0  # of the machine (1 min), at the end of the hold

    @property
    def errors(self) -> int:
        return sum(self.refused.values()) + self.error_chunks + self.ended_early + self.unfinished

    @property
    def max_redis_connections(self) -> int:
        return max(self.redis_connections, default=0)


@dataclass
class TurnsResult:
    """Scenario 2: concurrent new turns from one session."""

    turns: int
    completed: int = 0  # 200, and the stream ended with a finish chunk and [DONE]
    incomplete: int = 0  # 200, but the stream ended without them (or with an error chunk)
    limited: int = 0  # 429
    limited_without_retry_after: int = 0
    server_errors: Counter[int] = field(default_factory=Counter)  # 5xx
    other: Counter[int] = field(default_factory=Counter)
    no_response: Counter[str] = field(default_factory=Counter)
    to_status_ok: Latency = field(default_factory=Latency)
    to_done: Latency = field(default_factory=Latency)
    to_status_limited: Latency = field(default_factory=Latency)
    wall_s: float = 0.0
    worker_log_problems: int = 0

    @property
    def failures(self) -> int:
        return (
            self.incomplete
            + self.limited_without_retry_after
            + sum(self.server_errors.values())
            + sum(self.other.values())
            + sum(self.no_response.values())
        )


def _verdict(ok: bool, at_scale: bool, unshown: str = "") -> str:
    if unshown:
        return f"**not shown**: {unshown}"
    if not ok:
        return "**missed**"
    return "met" if at_scale else "met (below target scale)"


def _counter_text(counter: Counter[str] | Counter[int]) -> str:
    if not counter:
        return "0"
    parts = ", ".join(f"{n:,} x {key}" for key, n in counter.most_common())
    return f"{sum(counter.values()):,} ({parts})"


@dataclass
class LoadReport:
    """Everything one ``make load`` run measured."""

    arguments: str
    machine: Machine
    ram: str
    open_files: int
    load_average: float  # of the machine (1 min), when the run started
    followers: FollowersResult | None
    turns: TurnsResult | None

    @property
    def command(self) -> str:
        if not self.arguments:
            return "`make load` (runs `.venv/bin/python -m bench.load`)"
        return f"`.venv/bin/python -m bench.load {self.arguments}`"

    def targets_table(self) -> str:
        rows: list[list[str]] = []
        f = self.followers
        if f is not None:
            at_scale = f.followers >= FOLLOWERS_TARGET
            # Measured "meanwhile" only if every follower was still streaming: failed
            # followers no longer load the worker.
            live = min(f.live_hold_start, f.live_hold_end)
            unshown = (
                f"only {live:,} of {f.followers:,} followers were live through the hold"
                if live < f.followers
                else ""
            )
            rows.append(
                [
                    f"{FOLLOWERS_TARGET:,} concurrent SSE followers on one worker, 0 errors",
                    f"{f.followers:,} followers on {f.chats_started} running chats: "
                    f"{f.established:,} established, {f.errors:,} errors",
                    _verdict(f.errors == 0 and f.established == f.followers, at_scale),
                ]
            )
            rows.append(
                [
                    f"<= {REDIS_CONNECTIONS_TARGET} Redis connections held by that worker",
                    f"max {f.max_redis_connections} ({len(f.redis_connections)} samples)",
                    _verdict(
                        bool(f.redis_connections)
                        and f.max_redis_connections <= REDIS_CONNECTIONS_TARGET,
                        at_scale,
                        unshown,
                    ),
                ]
            )
            rows.append(
                [
                    f"`/healthz` p99 < {HEALTHZ_P99_TARGET_MS:.0f} ms meanwhile",
                    f"{_lat_text(f.healthz)}; failed: {_counter_text(f.healthz_failures)}",
                    _verdict(
                        f.healthz.n > 0
                        and not f.healthz_failures
                        and f.healthz.p99_ms < HEALTHZ_P99_TARGET_MS,
                        at_scale,
                        unshown,
                    ),
                ]
            )
        t = self.turns
        if t is not None:
            rows.append(
                [
                    f"{TURNS_TARGET} concurrent new turns from one session: 0 x 5xx; each runs "
                    "to the end or gets 429 with `Retry-After`",
                    f"{t.completed} completed, {t.limited} x 429 "
                    f"({t.limited_without_retry_after} without `Retry-After`), "
                    f"{sum(t.server_errors.values())} x 5xx, {t.failures} failures in all",
                    _verdict(t.failures == 0, t.turns >= TURNS_TARGET),
                ]
            )
        return markdown_table(["target (from the issue)", "measured", "verdict"], rows)

    def followers_table(self) -> str:
        f = self.followers
        if f is None:
            return "(skipped)"
        given = ", ".join(f"`{k}={v}`" for k, v in sorted(f.settings.items())) or "none"
        rows = [
            ["followers opened / established", f"{f.followers:,} / {f.established:,}"],
            [
                "chats held running (followers each)",
                f"{f.chats_started} (~{f.followers // max(1, f.chats_started)})",
            ],
            ["ramp: open all followers, to their first chunk", f"{f.ramp_s:.1f} s"],
            [
                "followers live (streaming, no `error` chunk) at the start / end of the hold",
                f"{f.live_hold_start:,} / {f.live_hold_end:,}",
            ],
            ["hold (followers open, runs still running)", f"{f.hold_s:.1f} s"],
            ["`/healthz` during the hold, every 50 ms", _lat_text(f.healthz)],
            ["`/healthz` during the ramp", _lat_text(f.healthz_ramp)],
            ["`/healthz` failures during the hold", _counter_text(f.healthz_failures)],
            [
                "Redis connections of the worker, max (samples)",
                f"{f.max_redis_connections} ({len(f.redis_connections)}; counted {f.redis_method})",
            ],
            ["followers refused or cut before streaming", _counter_text(f.refused)],
            [
                "followers with an `error` chunk (of which before the runs were let go)",
                f"{f.error_chunks:,} ({f.errors_before_release:,})"
                + "".join(f"; {n:,} x {text!r}" for text, n in f.error_texts.most_common(2)),
            ],
            ["followers whose stream ended before the runs did", str(f.ended_early)],
            ["followers without `finish` + `[DONE]` after the runs ended", str(f.unfinished)],
            ["runs released -> each follower's `[DONE]`", _lat_text(f.release_to_done)],
            [
                "worker CPU, ramp / hold (of one core)",
                f"{_percent(f.worker_cpu_ramp_s, f.ramp_s)} / "
                f"{_percent(f.worker_cpu_hold_s, f.hold_s)}",
            ],
            ["worker resident memory at the end of the hold", f"{f.worker_rss / 2**20:,.0f} MiB"],
            [
                "benchmark client CPU, ramp / hold (of one core)",
                f"{_percent(f.client_cpu_ramp_s, f.ramp_s)} / "
                f"{_percent(f.client_cpu_hold_s, f.hold_s)}",
            ],
            [
                "benchmark client event-loop lag, max, ramp / hold",
                f"{fmt_ms(f.client_lag_ramp_ms)} / {fmt_ms(f.client_lag_hold_ms)} ms",
            ],
            ["error lines in the worker's log", str(f.worker_log_problems)],
            ["machine load average (1 min) at the end of the hold", f"{f.load_average:.2f}"],
            ["settings given to the worker", given],
        ]
        return markdown_table(["followers on one worker", "measured"], rows)

    def turns_table(self) -> str:
        t = self.turns
        if t is None:
            return "(skipped)"
        rows = [
            ["new turns sent at once (distinct chat ids, one session)", f"{t.turns}"],
            ["200, streamed to `finish` + `[DONE]`", str(t.completed)],
            ["200, but the stream ended short or with an `error` chunk", str(t.incomplete)],
            [
                "429 (of which without `Retry-After`)",
                f"{t.limited} ({t.limited_without_retry_after})",
            ],
            ["5xx", _counter_text(t.server_errors)],
            ["other statuses", _counter_text(t.other)],
            ["no response (connection refused, reset, timeout)", _counter_text(t.no_response)],
            ["200: request -> status", _lat_text(t.to_status_ok)],
            ["200: request -> `[DONE]`", _lat_text(t.to_done)],
            ["429: request -> status", _lat_text(t.to_status_limited)],
            ["all turns answered in", f"{t.wall_s:.2f} s"],
            ["error lines in the worker's log", str(t.worker_log_problems)],
        ]
        return markdown_table(["concurrent new turns", "measured"], rows)

    def tables(self) -> str:
        """The results as Markdown (what stdout shows)."""
        parts = [
            "### Targets",
            self.targets_table(),
            "### Followers",
            self.followers_table(),
            "### Concurrent new turns",
            self.turns_table(),
        ]
        return "\n\n".join(parts) + "\n"

    def section(self) -> str:
        """The ``## Load (make load)`` section, markers included."""
        m = self.machine
        return "\n".join(
            [
                LOAD_START,
                "## Load (make load)",
                "",
                "Written by `make load` (`bench/load.py`); `make bench` does not run it.",
                "",
                "```sh",
                "make load                  # = .venv/bin/python -m bench.load",
                ".venv/bin/python -m bench.load --followers 500 --turns 50 --no-write  # smoke",
                "```",
                "",
                f"- command: {self.command}",
                f"- date: {m.date}; commit {m.commit}",
                f"- machine: {m.cpus} CPUs (`nproc`), {m.cpu_model}; {self.ram} RAM; "
                f"`ulimit -n` {self.open_files:,}; {m.system}",
                f"- Python: {m.python}; {m.libraries}",
                f"- Redis: {m.redis_server}, {m.redis_where}",
                "",
                f"The worker, Redis and the benchmark client share these CPUs (load average "
                f"{self.load_average:.2f} when the run started: anything else running on "
                "the machine shows in the latencies).",
                "",
                self.tables(),
                "### What is measured (load)",
                "",
                LOAD_METHOD,
                LOAD_END,
            ]
        )


def write_section(path: Path, section: str) -> None:
    """Put ``section`` (markers included) into the document at ``path``, replacing the
    previous one; a first section goes before ``## What is measured``, or at the end.
    Nothing outside the markers changes."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    start, end = old.find(LOAD_START), old.find(LOAD_END)
    if 0 <= start < end:
        new = old[:start] + section + old[end + len(LOAD_END) :]
    else:
        anchor = old.find("\n## What is measured\n")
        if anchor >= 0:
            new = f"{old[: anchor + 1]}{section}\n\n{old[anchor + 1 :]}"
        else:
            sep = (
                "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
            )
            new = f"{old}{sep}{section}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new, encoding="utf-8")


LOAD_METHOD = """\
One `parkway serve` process (one uvicorn worker, one event loop) runs against the
benchmark's Redis; each scenario starts its own worker. The client is one Python
process of raw asyncio connections (one h11 connection and one task per response,
`bench/load_client.py`).

**Followers.** The agent's scripted model says a sentence and calls a server function
tool (`bench/load_tools.py:hold`) that waits until the benchmark opens a gate. Each of
the chats gets its own session and `POST /api/chat`; that response is dropped once the
tool's `tool-input-available` chunk arrives (a disconnect never stops a run), so every
chat is *running*. The followers are AI SDK `resumeStream()` requests,
`GET /api/chat/{id}/stream` with the chat owner's bearer token, spread evenly over the
chats and opened in batches (the next batch once every follower of the previous one has
its first chunk, or has failed). The hold starts when all are open. Meanwhile a separate
keep-alive connection sends `GET /healthz` every 50 ms (latency from sending the request
to reading the whole response); the worker's Redis connections are counted with
`CLIENT LIST` every second from the first follower to the end of the hold. After the
hold the gate opens: every run finishes, and every follower must then read `finish` and
`[DONE]`. A follower is an error when it got no 200, its stream ended before the runs
did, it carried an `error` chunk, or it did not end with `finish` and `[DONE]` within a
minute of the release. The `/healthz` and Redis-connection targets are shown only when
every follower was still streaming at the start and the end of the hold (failed
followers no longer load the worker). The per-principal and per-worker admission limits
are raised just enough for the followers (listed under *settings given to the worker*).

**Concurrent new turns.** A fresh worker with the default limits; one session sends all
`POST /api/chat` at once, each a new chat id with one user message; the scripted model
answers one sentence. A 200 must stream to `finish` and `[DONE]`; a 429 must carry
`Retry-After`; anything else is a failure."""
