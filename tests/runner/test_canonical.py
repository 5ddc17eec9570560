"""Canonical JSON (RFC 8785): Python and the playground's JS pass the same vectors, and a
parkedCallKey made by a JavaScript client matches the one the server stored.

tests/helpers/vectors/jcs.json pins the cases (numbers printed as ECMAScript prints them, large
integers as the double they become, string escapes, keys sorted by UTF-16 code units,
refusals); runner/canonical.py and widgets_api/playground/static/canonical.js must both pass them.
"""

from __future__ import annotations

import json
import math
import random
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import (
    Answer,
    NotPlainJSONError,
    Runner,
    canonical_json,
    chat_keys,
    is_plain_json,
    parked_call_key,
    parse_agent_file,
)
from parkway.runner.events import CallParked
from parkway.runner.parking import ParkedCall
from tests.helpers.support import (
    Api,
    agent_doc,
    answered,
    call,
    run_node_vectors,
    server_thread,
    sse_chunks,
    text,
)

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "helpers" / "vectors" / "jcs.json"
RUNNER = ROOT / "tests" / "helpers" / "vectors" / "jcs_vectors.mjs"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())["cases"]
GOOD = [c for c in CASES if not c.get("error")]
BAD = [c for c in CASES if c.get("error")]
PICK_OUTPUT = {"outcome": "output", "output": {"choice": "red"}}


def run_node(vectors: Path) -> dict[str, Any]:
    return run_node_vectors(RUNNER, vectors, "the playground's canonical.js")


def legacy_key(tool_name: str, tool_input: Any) -> str:
    """The parkedCallKey as Parkway made it before RFC 8785: Python's json.dumps with
    sorted keys (``1.0`` stays ``1.0``; keys sort by code point)."""
    text_form = json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{tool_name}#{text_form}"


# -- the vectors ----------------------------------------------------------------------


def test_vectors_cover_the_rules() -> None:
    """The vectors are the contract, so they must pin down each rule the issue names."""
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "vector names must be unique"
    for case in CASES:
        assert set(case) in ({"name", "input", "canonical"}, {"name", "input", "error"}), case
    inputs = " ".join(c["input"] for c in CASES)
    for needle in ["1.0", "-0", "1e21", "1e-7", "9007199254740993", "1e400", "\\ud83d\\ude00"]:
        assert needle in inputs, needle
    for needle in ["\\u2028", "\\u0000", "\\ud800", "\\ufb33"]:
        assert needle in inputs, needle
    assert len(BAD) >= 5 and len(GOOD) >= 25


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_python_canonicalises_vector(case: dict[str, Any]) -> None:
    value = json.loads(case["input"])
    assert canonical_json(value) == case["canonical"]
    assert is_plain_json(value)
    absent = value is None  # absent input keys as {}
    assert parked_call_key("tool", value) == "tool#" + ("{}" if absent else case["canonical"])


@pytest.mark.parametrize("case", BAD, ids=[c["name"] for c in BAD])
def test_python_refuses_vector(case: dict[str, Any]) -> None:
    """Fail closed: a value with no canonical form has no key, so it can never match."""
    value = json.loads(case["input"])
    with pytest.raises(NotPlainJSONError):
        canonical_json(value)
    assert not is_plain_json(value)


def test_js_passes_every_vector() -> None:
    """The playground's canonical.js (imported as the browser loads it) passes the same
    vectors and refuses what no JSON document can hold."""
    summary = run_node(VECTORS)
    assert summary["failures"] == []
    assert summary["passed"] == summary["cases"] == len(CASES)
    assert summary["checks_passed"] == summary["checks"] >= 10


def _random_double(rng: random.Random) -> float:
    while True:
        (value,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if math.isfinite(value):
            return float(value)


_CHARS = (
    'aZ0 "\\/\x00\x1f\x7f\t\n\u0080\u00e9\u2028\u20ac\ud7ff\ue000\ufb33\uffff\U0001f600\U00010000'
)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return _random_double(rng)
    if kind == 1:
        return rng.choice([1, -1]) * rng.getrandbits(rng.choice([8, 53, 54, 64, 100, 300]))
    if kind == 2:
        return round(rng.uniform(-1e6, 1e6), rng.randrange(8)) * 10.0 ** rng.randrange(-30, 30)
    if kind == 3:
        return "".join(rng.choice(_CHARS) for _ in range(rng.randrange(6)))
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 5:
        return rng.choice([None, True, False, 0.0, -0.0, 1.0])
    return {
        "".join(rng.choice(_CHARS) for _ in range(rng.randrange(4))): _random_value(rng, depth + 1)
        for _ in range(rng.randrange(5))
    }


def test_js_agrees_with_python_on_generated_values(tmp_path: Path) -> None:
    """Beyond the hand-written vectors, a seeded set of generated values (random doubles
    across the whole range, integers past 2^53, text with astral and private-use
    characters as keys) is canonicalised alike by both sides."""
    rng = random.Random(8785)
    cases = []
    for index in range(400):
        value = _random_value(rng)
        cases.append(
            {
                "name": f"generated {index}",
                "input": json.dumps(value),
                "canonical": canonical_json(value),
            }
        )
    vectors = tmp_path / "generated.json"
    vectors.write_text(json.dumps({"cases": cases}))
    summary = run_node(vectors)
    assert summary["failures"] == []
    assert summary["passed"] == len(cases)


# -- plain JSON checks that vectors cannot express --------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {1: "x"},
        {"x": (1, 2)},
        {"x": math.nan},
        {"x": -math.inf},
        10**400,
        {"x": -(10**400)},
        "\udfff",
        {"\ud800": 1},
        {"a": {"a": object()}},
    ],
    # repr, but an object's address would name the case differently in each process
    ids=lambda value: re.sub(r" at 0x[0-9a-f]+", "", repr(value)),
)
def test_values_with_no_canonical_form_are_refused(value: Any) -> None:
    """Non-string keys, tuples, non-finite numbers, integers beyond the double range and
    lone surrogates have no JCS form: refused by both checks alike."""
    with pytest.raises(NotPlainJSONError):
        canonical_json(value)
    assert not is_plain_json(value)


def test_nesting_deeper_than_64_levels_is_refused() -> None:
    value: Any = "leaf"
    for _ in range(64):
        value = {"a": value}
    assert canonical_json(value).count("{") == 64
    with pytest.raises(NotPlainJSONError, match="deeper than 64"):
        canonical_json({"a": value})


def test_an_integral_double_and_its_integer_share_a_key() -> None:
    """What a JavaScript client echoes (``1``) keys like what the model sent (``1.0``),
    and an integer past 2^53 keys like the double JSON.parse makes of it."""
    assert parked_call_key("t", {"x": 1.0}) == parked_call_key("t", {"x": 1}) == 't#{"x":1}'
    assert parked_call_key("t", [2**53 + 1]) == parked_call_key("t", [float(2**53)])
    assert legacy_key("t", {"x": 1.0}) != parked_call_key("t", {"x": 1.0})


# -- matching answers to parked calls ---------------------------------------------------


def make_runner(turns: list[list[dict[str, Any]]], redis: Redis) -> Runner:
    agent = parse_agent_file(agent_doc(turns))
    return Runner(redis, agent.model, agent.template)


async def park_one(runner: Runner, chat: str) -> ParkedCall:
    run = await runner.start_turn(chat, "alice", "hi")
    [parked] = [e.call for e in await run.collect() if isinstance(e, CallParked)]
    return parked


async def test_a_js_client_echoing_1_0_as_1_matches_by_parked_call_key(redis: Redis) -> None:
    """The bug this fixes: the model sent ``1.0``, a JavaScript client replaying the
    transcript with a fresh toolCallId echoes ``1``; its answer must match the parked
    call by parkedCallKey rather than be refused or ignored."""
    runner = make_runner([[call("pick", {"q": "n", "x": 1.0})], [text("ok")]], redis)
    parked = await park_one(runner, "jcs1")
    assert parked.input == {"q": "n", "x": 1.0} and isinstance(parked.input["x"], float)
    assert parked.key == 'pick#{"q":"n","x":1}'
    js_answer = Answer("fresh-from-js", "pick", {"q": "n", "x": 1}, PICK_OUTPUT)
    report = await runner.answer("jcs1", "alice", [js_answer])
    assert report.settled == (parked.tool_call_id,) and report.pending == 0


async def test_an_answer_by_call_id_carrying_1_for_1_0_is_not_a_mismatch(redis: Redis) -> None:
    """Answering by toolCallId checks the echoed input against the call's; ``1`` for
    ``1.0`` is the same input, not another one."""
    runner = make_runner([[call("pick", {"q": "n", "x": 1.0})], [text("ok")]], redis)
    parked = await park_one(runner, "jcs2")
    answer = Answer(parked.tool_call_id, "pick", {"x": 1, "q": "n"}, PICK_OUTPUT)
    report = await runner.answer("jcs2", "alice", [answer])
    assert report.settled == (parked.tool_call_id,)


async def test_a_call_parked_with_a_legacy_key_still_matches(redis: Redis) -> None:
    """A call parked before keys were RFC 8785 holds the old form of its key
    (``{"x":1.0}``) in Redis. Matching recomputes the key from the stored input, so an
    answer keyed either way still finds it, by key and by id, with no migration."""
    runner = make_runner(
        [[call("pick", {"q": "n", "x": 1.0}), call("pick", {"q": "m", "x": 2.5e-7})], [text("ok")]],
        redis,
    )
    run = await runner.start_turn("jcs3", "alice", "hi")
    first, second = [e.call for e in await run.collect() if isinstance(e, CallParked)]
    keys = chat_keys("jcs3")
    for parked in (first, second):
        record = json.loads(await redis.hget(keys.calls, parked.tool_call_id))
        record["key"] = legacy_key("pick", parked.input)
        await redis.hset(keys.calls, parked.tool_call_id, json.dumps(record))
    stored = await runner.chat("jcs3", "alice")
    assert [c.key for c in stored.calls] == ['pick#{"q":"n","x":1.0}', 'pick#{"q":"m","x":2.5e-07}']
    by_key = Answer("fresh-js", "pick", {"q": "n", "x": 1}, PICK_OUTPUT)
    report = await runner.answer("jcs3", "alice", [by_key])
    assert report.settled == (first.tool_call_id,) and report.pending == 1
    by_id = Answer(second.tool_call_id, "pick", {"q": "m", "x": 2.5e-7}, PICK_OUTPUT)
    report = await runner.answer("jcs3", "alice", [by_id])
    assert report.settled == (second.tool_call_id,) and report.pending == 0


async def test_other_input_still_does_not_match_a_legacy_key(redis: Redis) -> None:
    """Recomputing the key loosens nothing: other input matches no pending call."""
    runner = make_runner([[call("pick", {"q": "n", "x": 1.0})], [text("ok")]], redis)
    parked = await park_one(runner, "jcs4")
    keys = chat_keys("jcs4")
    record = json.loads(await redis.hget(keys.calls, parked.tool_call_id))
    record["key"] = legacy_key("pick", parked.input)
    await redis.hset(keys.calls, parked.tool_call_id, json.dumps(record))
    forged = Answer("fresh-js", "pick", {"q": "n", "x": 1.5}, PICK_OUTPUT)
    report = await runner.answer("jcs4", "alice", [forged])
    assert report.settled == () and report.pending == 1


async def test_a_js_client_replay_over_http_resumes_the_parked_call(
    redis: Redis, redis_url: str
) -> None:
    """End to end through the AI SDK endpoint: the stream shows ``{"x":1.0}``, a browser
    posts the history back with a fresh toolCallId and ``{"x":1}``, and the run resumes
    with the answer."""
    del redis
    agent = agent_doc([[call("pick", {"q": "n", "x": 1.0})], [text("seen {{last_tool_results}}")]])
    with server_thread(redis_url, agent) as srv:
        api = await Api(srv.base_url).login()
        try:
            chunks = await api.say("jcs-http", "hi")
            history = answered(chunks, {"choice": "red"})
            part = history[1]["parts"][-1]
            part["toolCallId"] = "call_fresh_from_the_browser"
            part["input"] = {"q": "n", "x": 1}
            response = await api.chat("jcs-http", history, messageId=chunks[0]["messageId"])
            assert response.status_code == 200, response.text
            said = "".join(c.get("delta", "") for c in sse_chunks(response.text))
            assert said == 'seen [{"result":{"choice":"red"},"tool":"pick"}]'
            state = await api.state("jcs-http")
            assert [c["status"] for c in state["calls"]] == ["settled"]
        finally:
            await api.aclose()
