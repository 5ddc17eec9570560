"""Cassettes: a chat recorded against a real server replays against a fresh one, warm
or cold (kill -9 at each park point), with the same event stream up to generated ids;
a replay that differs says where; ``parkway replay`` and the pytest fixtures expose it."""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import secrets
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from parkway.runner.store.keys import owned_without_ttl
from parkway.transport.cassettes import (
    Cassette,
    IdTable,
    ResponseRecord,
    ServerProcess,
    agent_digest,
    compare_response,
    load_cassette,
    replay,
    save_cassette,
)
from parkway.transport.pytest_plugin import CassetteLoader, CassetteReplayer
from tests.helpers.support import ROOT, ParkwayProcess

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "docs" / "examples"
AGENT = json.loads((EXAMPLES / "trip.agent.json").read_text())
PARKED = {"type": "finish", "finishReason": "tool-calls"}
# An exchange whose stream ends a turn: enough for a cassette to be worth replaying.
FINISHED = {
    "request": {"method": "POST", "path": "/api/chat", "json": {"id": "c", "messages": []}},
    "response": {"status": 200, "chunks": [{"type": "start"}, {"type": "finish"}]},
}


def _recorder_script() -> ModuleType:
    """docs/examples/record_trip.py, the documented way to record (tested here)."""
    spec = importlib.util.spec_from_file_location("record_trip", EXAMPLES / "record_trip.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trip(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Cassette:
    """The trip chat, recorded once per module against a real ``parkway serve``; the
    cassette names the agent file it was recorded with."""
    agent_file = tmp_path_factory.mktemp("trip") / "agent.json"
    agent_file.write_text(json.dumps(AGENT))
    client = SyncRedis.from_url(redis_url)
    client.flushdb()
    server = ParkwayProcess(redis_url, agent_file).start()
    try:
        recording = _recorder_script().record_trip(server.base_url, agent_file)
        cassette: Cassette = asyncio.run(recording)
    finally:
        server.stop()
    # The recording's keyspace, checked like the per-test fixture checks its own.
    leaked = [k for k in client.scan_iter() if not owned_without_ttl(k) and client.ttl(k) < 0]
    client.flushdb()
    client.close()
    assert not leaked, f"keys without a TTL were left behind: {leaked[:10]}"
    return cassette


def _chunk_index(chunks: list[dict[str, Any]], **match: Any) -> int:
    return next(i for i, c in enumerate(chunks) if all(c.get(k) == v for k, v in match.items()))


def _results_delta(chunks: list[dict[str, Any]]) -> int:
    """The text delta that starts "Results: " (deltas may come merged, so by prefix)."""
    return next(
        i
        for i, c in enumerate(chunks)
        if c["type"] == "text-delta" and str(c["delta"]).startswith("Results: ")
    )


def _tampered(cassette: Cassette) -> Cassette:
    """The trip cassette with a changed server-tool output (exchange 0) and a changed
    text (exchange 1)."""
    copy = cassette.model_copy(deep=True)
    first = copy.exchanges[0].response.chunks
    second = copy.exchanges[1].response.chunks
    assert first is not None and second is not None
    first[_chunk_index(first, type="tool-output-available")]["output"]["temperature_c"] = 5
    index = _results_delta(second)
    second[index]["delta"] = "Outcome: " + second[index]["delta"][len("Results: ") :]
    return copy


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parkway.transport.cli", "replay", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip


# -- recording ------------------------------------------------------------------------


def test_a_recording_keeps_every_request_and_answer_in_order(
    trip: Cassette, tmp_path: Path
) -> None:
    """A cassette is only a proof if it holds what the client really sent and got: the
    AI SDK posts with their server-generated ids, the reload, the settle call, the
    resume, each with its status and its chunks or JSON, and it survives a save/load."""
    lines = [e.request.line() for e in trip.exchanges]
    chunks = [e.response.chunks for e in trip.exchanges]
    assert chunks[2] is not None
    connection = next(c for c in chunks[2] if c["type"] == "tool-input-available")
    assert lines == [
        "POST /api/chat",
        "POST /api/chat",
        "POST /api/chat",
        "GET /api/chat/trip/stream",
        "GET /api/chats/trip",
        f"POST /api/chats/trip/calls/{connection['toolCallId']}",
        "POST /api/chats/trip/resume",
    ]
    assert [e.response.status for e in trip.exchanges] == [200] * 7
    assert [e.response.parks() for e in trip.exchanges] == [True] * 4 + [False] * 3
    kinds = ["json" if e.response.body is not None else "chunks" for e in trip.exchanges]
    assert kinds == ["chunks"] * 4 + ["json"] * 2 + ["chunks"]
    assert chunks[6] is not None and chunks[6][-1] == {"type": "finish", "finishReason": "stop"}
    # The answers carry the ids the server generated: the message id and the approval id.
    assert chunks[1] is not None
    approval = next(c for c in chunks[1] if c["type"] == "tool-approval-request")
    posted = json.dumps(trip.exchanges[2].request.body)
    assert chunks[0] is not None and chunks[0][0]["messageId"] in posted
    assert approval["approvalId"] in posted

    # Which agent and model produced it; saved, the agent file is named relative to it.
    assert trip.model == "scripted" and trip.agent == AGENT
    assert trip.agent_digest == agent_digest(AGENT)
    path = tmp_path / "cassettes" / "trip.json"
    path.parent.mkdir()
    save_cassette(trip, path)
    loaded = load_cassette(path)
    assert loaded.agent_file is not None and loaded.agent_file.startswith("../")
    named = loaded.named_agent_file()
    assert named is not None and named.resolve() == Path(str(trip.agent_file)).resolve()
    assert loaded.model_dump(exclude={"agent_file"}) == trip.model_dump(exclude={"agent_file"})
    assert '          {"type":"start-step"},\n' in path.read_text()  # one chunk per line


# -- replaying ------------------------------------------------------------------------


def test_a_warm_replay_matches_with_the_new_server_ids_written_into_requests(
    redis: Redis, redis_url: str, trip: Cassette, parkway_replay: CassetteReplayer
) -> None:
    """A fresh server generates fresh ids; the replay must send them, not the recorded
    ones, or it would test the parkedCallKey fallback (or 404) instead of the client's
    real round trip."""
    report = parkway_replay(trip, redis_url=redis_url)
    assert report.matched and not report.cold and report.restarts_after == ()
    recorded = trip.exchanges[5].request.path
    replayed = [r.chunks or [] for r in report.responses]
    new_id = next(c for c in replayed[2] if c["type"] == "tool-input-available")["toolCallId"]
    # The chat ran under this run's own id (trip.rp…), mapped back before comparing.
    chat = report.requests[3].path.split("/")[3]
    assert chat.startswith("trip.rp") and report.requests[0].body["id"] == chat
    assert report.requests[5].path == f"/api/chats/{chat}/calls/{new_id}" != recorded
    recorded_msg = (trip.exchanges[0].response.chunks or [])[0]["messageId"]
    new_msg = replayed[0][0]["messageId"]
    assert new_msg != recorded_msg
    assert new_msg in json.dumps(report.requests[1].body)
    assert recorded_msg not in json.dumps(report.requests[1].body)


class _WatchedServer(ServerProcess):
    """A replay server that notes how each of its processes ended when killed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kill_codes: list[int | None] = []

    def kill(self) -> None:
        proc = self.proc
        super().kill()
        if proc is not None:
            self.kill_codes.append(proc.returncode)


def test_a_cold_replay_kills_the_server_at_every_park_point_and_still_matches(
    redis: Redis, redis_url: str, trip: Cassette, tmp_path: Path
) -> None:
    """The real cold-resume proof: after every response that parks a turn the server
    dies by SIGKILL (no shutdown hook runs), a new process starts on the same Redis,
    and the rest of the chat still streams exactly what was recorded."""
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps(trip.agent))
    server = _WatchedServer(
        agent_file, redis_url, secrets.token_urlsafe(48), log_file=tmp_path / "server.log"
    )
    report = replay(trip, agent=agent_file, cold=True, server=server)
    assert report.matched, report.format()
    assert report.restarts_after == (0, 1, 2, 3)  # the parked turns, and the reload of one
    assert server.kill_codes == [-9] * 4
    assert server.starts == 5


def test_a_tampered_cassette_is_reported_naming_the_exchange_and_chunk(
    redis: Redis, redis_url: str, trip: Cassette
) -> None:
    """A replay that differs must say exactly where: which exchange, which chunk, which
    field, what was recorded and what came back; not just "mismatch"."""
    report = replay(_tampered(trip), redis_url=redis_url)
    assert not report.matched
    found = {(d.exchange, d.chunk, d.path, d.expected, d.got) for d in report.differences}
    output_chunk = _chunk_index(
        trip.exchanges[0].response.chunks or [], type="tool-output-available"
    )
    text_chunk = _results_delta(trip.exchanges[1].response.chunks or [])
    assert (0, output_chunk, "output.temperature_c", 5, 4) in found
    [text] = [d for d in report.differences if d.exchange == 1]
    assert (text.chunk, text.path) == (text_chunk, "delta")
    assert text.expected.startswith("Outcome: [") and text.got.startswith("Results: [")
    assert len(report.differences) == 2
    assert (
        f"exchange 1 (POST /api/chat): chunk {text_chunk} (text-delta t1) at delta"
        in report.format()
    )


def test_parkway_replay_fails_the_test_with_the_readable_diff(
    redis: Redis, redis_url: str, trip: Cassette, parkway_replay: CassetteReplayer
) -> None:
    """The fixture's failure message is the diff itself, so a red test needs no
    debugging session to see what changed."""
    with pytest.raises(pytest.fail.Exception) as failed:
        parkway_replay(_tampered(trip), redis_url=redis_url)
    message = str(failed.value)
    output_chunk = _chunk_index(
        trip.exchanges[0].response.chunks or [], type="tool-output-available"
    )
    first, summary = message.splitlines()[:2]
    assert first.startswith(f"agent: {Path(str(trip.agent_file)).resolve()} (sha256:")
    assert first.endswith(", the agent recorded")
    assert summary == "replayed 7 exchanges (warm): 2 difference(s)"
    expected = f"exchange 0 (POST /api/chat): chunk {output_chunk} (tool-output-available call#1)"
    assert expected in message
    assert "  expected: 5\n  got:      4" in message


def test_fresh_ids_deadlines_and_another_text_split_compare_equal() -> None:
    """What a faithful server changes between runs (ids, deadlines, how text is cut into
    deltas) is normalised; a dropped chunk is reported as missing, not as a shift of
    every later chunk."""

    def stream(msg: str, call: str, deadline: int, deltas: list[str]) -> ResponseRecord:
        chunks: list[dict[str, Any]] = [
            {"type": "start", "messageId": msg},
            {"type": "text-start", "id": "t0"},
        ]
        chunks += [{"type": "text-delta", "id": "t0", "delta": d} for d in deltas]
        chunks += [
            {"type": "text-end", "id": "t0"},
            {"type": "tool-input-available", "toolCallId": call, "toolName": "pick", "input": {}},
            {
                "type": "data-parkway-widget",
                "id": call,
                "data": {"statusUrl": f"/api/chats/c/calls/{call}", "deadline": deadline},
            },
            PARKED,
        ]
        return ResponseRecord(status=200, chunks=chunks)

    def differences(expected: ResponseRecord, got: ResponseRecord) -> list[Any]:
        return compare_response(
            0, "POST /api/chat", expected=expected, got=got,
            recorded_ids=IdTable(), replayed_ids=IdTable(),
        )  # fmt: skip

    recorded = stream("msg_A", "call_A", 1, ["Hello ", "there"])
    assert differences(recorded, stream("msg_B", "call_B", 2, ["Hel", "lo there"])) == []

    shorter = stream("msg_C", "call_C", 3, ["Hello there"])
    assert shorter.chunks is not None
    del shorter.chunks[1]  # text-start
    [missing] = differences(recorded, shorter)
    assert (missing.chunk, missing.what) == (1, "chunk 1 (text-start t0) is missing")


# -- the CLI and the plugin -----------------------------------------------------------


def test_the_cli_leaves_ignored_paths_out_and_refuses_a_malformed_one(
    redis: Redis, redis_url: str, trip: Cassette, tmp_path: Path
) -> None:
    """``--ignore`` (repeatable): the tampered tool output and text stop counting once
    their paths are ignored; a malformed path is a setup error (exit 2), no server run.
    A difference left is exit 1 (CI gates on it) with the diff in the log."""
    path = tmp_path / "tampered.json"
    save_cassette(_tampered(trip), path)
    ignored = ("--ignore", "tool-output-available:output.temperature_c")
    result = _cli(str(path), "--redis-url", redis_url, *ignored)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 difference(s)" in result.stdout  # the text is still compared
    text_chunk = _results_delta(trip.exchanges[1].response.chunks or [])
    expected = f"exchange 1 (POST /api/chat): chunk {text_chunk} (text-delta t1) at delta"
    assert expected in result.stdout
    assert "ignoring: tool-output-available:output.temperature_c" in result.stdout
    result = _cli(str(path), "--redis-url", redis_url, *ignored, "--ignore", "text-delta:delta")
    assert result.returncode == 0, result.stdout + result.stderr
    result = _cli(str(path), "--redis-url", redis_url, "--ignore", "a..b")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "ignore path" in result.stderr and len(result.stderr.splitlines()) == 1


def _v1(agent: Any, exchanges: list[Any]) -> str:
    return json.dumps({"version": 1, "agent": agent, "exchanges": exchanges})


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, (), "cannot read cassette"),
        ("{not json", (), "is not valid JSON"),
        (
            json.dumps({"version": 4, "agent": AGENT, "exchanges": []}),
            (),
            "version 4 is not supported",
        ),
        (
            json.dumps({"version": 1, "agent": AGENT, "exchanges": [], "extra": 1}),
            (),
            "extra: Extra inputs",
        ),
        (
            _v1(
                {
                    "template": {"tools": [{"type": "function", "name": "f", "ref": "no.such:fn"}]},
                    "model": {"scripted": {"turns": []}},
                },
                [FINISHED],
            ),
            ("--cassette-agent",),
            "the cassette's agent does not load: ",
        ),
        (_v1(AGENT, [FINISHED]), (), "the cassette names no agent file"),
    ],
    ids=["missing", "not-json", "version-3", "unknown-key", "bad-agent", "v1-names-no-file"],
)
def test_the_cli_exits_2_for_a_cassette_it_cannot_replay(
    tmp_path: Path, content: str | None, args: tuple[str, ...], message: str
) -> None:
    """A broken file is not a failed replay: exit 2 and say why, before any server runs."""
    path = tmp_path / "cassette.json"
    if content is not None:
        path.write_text(content)
    result = _cli(str(path), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stdout == ""


def test_the_fixtures_come_with_the_installed_package(
    pytestconfig: pytest.Config, parkway_cassette: CassetteLoader
) -> None:
    """Users get parkway_cassette and parkway_replay from installing Parkway (a pytest11
    entry point), with no conftest line; cassette paths are relative to the test file."""
    points = importlib.metadata.entry_points(group="pytest11")
    assert [p.value for p in points if p.name == "parkway"] == [
        "parkway.transport.pytest_plugin"
    ], "the pytest11 entry point is missing: reinstall with `pip install -e .`"
    assert pytestconfig.pluginmanager.has_plugin("parkway")
    cassette = parkway_cassette("../../../docs/examples/trip.cassette.json")
    assert cassette.agent == AGENT and len(cassette.exchanges) == 7
    assert cassette.named_agent_file() == EXAMPLES / "trip.agent.json"
