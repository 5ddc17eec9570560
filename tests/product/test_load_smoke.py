"""The load benchmark (``make load``, bench/load.py) at a small scale: its numbers are
well-formed and complete. The targets themselves are the benchmark's to judge, at full
scale; these tests only check the harness measures what it says."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bench.load import LoadConfig, run_load
from bench.load_client import SseDecoder
from bench.load_report import LOAD_END, LOAD_START, LoadReport, write_section
from bench.report import machine_facts

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_the_load_harness_accounts_for_every_follower_and_turn(
    redis: Redis, redis_url: str
) -> None:
    """Every follower and every turn lands in exactly one bucket, the probes and Redis
    connection samples are real measurements, and the benchmark's keys are gone after:
    a harness that loses a follower or counts nothing would report a false pass."""
    config = LoadConfig(
        followers=60, chats=6, turns=20, hold_s=1.0, batch=20, timeout_s=20, drain_s=20
    )
    outcome = await run_load(config, redis_url)
    followers, turns = outcome.followers, outcome.turns
    assert followers is not None and turns is not None

    assert followers.chats_started == 6
    assert followers.established <= followers.followers == 60
    assert followers.release_to_done.n + followers.errors == 60
    assert 0 <= followers.live_hold_end <= followers.established
    assert 0 <= followers.live_hold_start <= followers.established
    assert followers.ramp_s > 0 and followers.hold_s >= config.hold_s
    assert followers.healthz.n > 0
    assert all(0 < s < 60 and math.isfinite(s) for s in followers.healthz.samples)
    assert followers.healthz.p50_ms <= followers.healthz.p99_ms
    # following a running chat takes Redis: a worker seen holding none was not counted
    assert followers.redis_connections and followers.max_redis_connections >= 1
    assert followers.redis_method

    accounted = (
        turns.completed
        + turns.incomplete
        + turns.limited
        + sum(turns.server_errors.values())
        + sum(turns.other.values())
        + sum(turns.no_response.values())
    )
    assert accounted == turns.turns == 20
    assert turns.to_done.n == turns.completed and turns.to_status_limited.n == turns.limited

    assert [key async for key in redis.scan_iter(match="*load-*")] == []

    report = LoadReport(
        arguments="--followers 60",
        machine=machine_facts("Redis test", "test", ROOT),
        ram="1 GiB",
        open_files=1024,
        load_average=0.5,
        followers=followers,
        turns=turns,
    )
    section = report.section()
    assert section.startswith(LOAD_START) and section.endswith(LOAD_END)
    assert "## Load (make load)" in section and "| target (from the issue) |" in section


def test_the_load_section_replaces_only_itself(tmp_path: Path) -> None:
    """``make load`` rewrites its own section of docs/benchmarks.md and nothing else, so
    it never erases ``make bench``'s results or the notes people wrote."""
    doc = tmp_path / "benchmarks.md"
    before, after = "# Benchmarks\n\n## HTTP\n\nx\n", "## What is measured\n\nnotes\n"
    doc.write_text(before + after)
    write_section(doc, f"{LOAD_START}\nfirst\n{LOAD_END}")
    assert doc.read_text() == f"{before}{LOAD_START}\nfirst\n{LOAD_END}\n\n{after}"
    write_section(doc, f"{LOAD_START}\nsecond\n{LOAD_END}")
    assert doc.read_text() == f"{before}{LOAD_START}\nsecond\n{LOAD_END}\n\n{after}"


def test_sse_events_split_across_reads_are_decoded_whole() -> None:
    """A follower's chunks arrive in arbitrary pieces (TCP); an event counts only once
    its blank line has arrived, whatever line endings the server uses."""
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"type":"start"}\r\n\r') == []
    assert decoder.feed(b"\n: ping\r\n\r\ndata: [DO") == ['{"type":"start"}']
    assert decoder.feed(b"NE]\n\n") == ["[DONE]"]
