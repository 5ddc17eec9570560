"""Replay diffs that find the cause: calls are matched by parkedCallKey before order,
a report leads with its root differences and their likely cause and counts what
follows from them, ignore paths leave chosen values out, and exchanges a restarted
server answered are marked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from parkway.transport.cassettes import (
    CassetteError,
    Difference,
    IdTable,
    Recorder,
    ReplayReport,
    RequestRecord,
    ResponseRecord,
    compare_response,
    replay,
)
from parkway.transport.cassettes._ids import translate
from parkway.transport.cassettes._ignore import IgnoreFilter
from tests.helpers.support import CONFIRM_TOOL, PICK_TOOL, ServerThread

HELLO = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}


def _call(call: str, tool: str, tool_input: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "tool-input-available", "toolCallId": call, "toolName": tool, "input": tool_input}]  # fmt: skip


def _widget(call: str, tool: str, description: str = "Pick one option.") -> dict[str, Any]:
    return {
        "type": "data-parkway-widget",
        "data": {
            "tool": tool,
            "toolCallId": call,
            "statusUrl": f"/api/chats/c/calls/{call}",
            "description": description,
            "deadline": 1,
        },
    }


def _parked(msg: str, calls: list[tuple[str, str, dict[str, Any]]], text: str = "Let me ask. ") -> ResponseRecord:  # fmt: skip
    """A turn that says ``text`` and parks ``calls`` (id, tool, input), in that order."""
    chunks: list[dict[str, Any]] = [
        {"type": "start", "messageId": msg},
        {"type": "start-step"},
        {"type": "text-start", "id": "t0"},
        {"type": "text-delta", "id": "t0", "delta": text},
        {"type": "text-end", "id": "t0"},
    ]
    for call, tool, tool_input in calls:
        chunks += _call(call, tool, tool_input)
    chunks += [_widget(call, tool) for call, tool, _ in calls]
    chunks += [{"type": "finish-step"}, {"type": "finish", "finishReason": "tool-calls"}]
    return ResponseRecord(status=200, chunks=chunks)


def _compare(
    expected: ResponseRecord,
    got: ResponseRecord,
    tables: tuple[IdTable, IdTable] | None = None,
    **options: Any,
) -> list[Difference]:
    recorded, replayed = tables or (IdTable(), IdTable())
    return compare_response(
        0, "POST /api/chat", expected=expected, got=got,
        recorded_ids=recorded, replayed_ids=replayed, **options,
    )  # fmt: skip


def _request(method: str, path: str, body: Any = None) -> RequestRecord:
    return RequestRecord.model_validate({"method": method, "path": path, "json": body})


def _report(
    differences: list[Difference],
    requests: list[RequestRecord],
    restarts_after: tuple[int, ...] = (),
) -> ReplayReport:
    return ReplayReport(
        exchanges=len(requests),
        cold=bool(restarts_after),
        restarts_after=restarts_after,
        differences=tuple(differences),
        requests=tuple(requests),
        responses=(),
    )


# -- matching calls by parkedCallKey ---------------------------------------------------


def test_calls_made_in_another_order_are_matched_by_their_parked_call_key() -> None:
    """Order alone maps the recorded `pick` to the replayed `confirm`: every answer then
    reaches the wrong call and the replay cascades into 404s and 409s. By key, each
    recorded call finds its true counterpart, and later requests name the right one."""
    recorded, replayed = IdTable(), IdTable()
    expected = _parked("msg_R", [("call_RP", "pick", {"q": "a"}), ("call_RC", "confirm", {})])
    got = _parked("msg_N", [("call_NC", "confirm", {}), ("call_NP", "pick", {"q": "a"})])
    found = _compare(expected, got, (recorded, replayed))

    assert recorded.label("call_RP") == replayed.label("call_NP") == "call#1"
    assert recorded.label("call_RC") == replayed.label("call_NC") == "call#2"
    assert translate("/api/chats/c/calls/call_RP", recorded, replayed) == "/api/chats/c/calls/call_NP"  # fmt: skip
    # What remains is the order itself, said once: no field of either call differs.
    assert {d.kind for d in found} == {"moved"}
    assert not [d for d in found if d.path]


def test_equal_keys_match_first_in_first_out_and_order_decides_only_what_keys_do_not() -> None:
    """Two calls with one key keep their order; a call whose input changed takes the
    recorded call left over (so the report says its input differs), and a call with no
    recorded counterpart gets a label of its own instead of one a later call needs."""
    recorded, replayed = IdTable(), IdTable()
    expected = _parked(
        "msg_R",
        [
            ("call_R1", "pick", {"q": "a"}),
            ("call_R2", "pick", {"q": "a"}),
            ("call_R3", "pick", {"q": "b"}),
        ],
    )
    got = _parked(
        "msg_N",
        [("call_N0", "pick", {"q": "changed"}), ("call_N1", "pick", {"q": "a"}),
         ("call_N2", "pick", {"q": "a"}), ("call_N4", "confirm", {})],
    )  # fmt: skip
    found = _compare(expected, got, (recorded, replayed))
    assert [replayed.label(c) for c in ("call_N1", "call_N2", "call_N0", "call_N4")] == [
        "call#1", "call#2", "call#3", "call#extra1",
    ]  # fmt: skip
    changed = [d for d in found if d.path == "input.q"]
    assert [(d.expected, d.got, d.call, d.tool) for d in changed] == [("b", "changed", "call#3", "pick")]  # fmt: skip


def test_an_approval_follows_the_call_it_approves() -> None:
    """Approval ids are answered by id too: the replayed approval of `publish(B)` must
    stand for the recorded approval of `publish(B)`, whatever order they came in."""

    def approvals(pairs: list[tuple[str, str, str]]) -> ResponseRecord:
        chunks: list[dict[str, Any]] = [{"type": "start", "messageId": "msg_1"}]
        for call, approval, title in pairs:
            chunks += _call(call, "publish", {"title": title})
            chunks.append({"type": "tool-approval-request", "approvalId": approval, "toolCallId": call})  # fmt: skip
        return ResponseRecord(status=200, chunks=chunks)

    recorded, replayed = IdTable(), IdTable()
    _compare(
        approvals([("call_RA", "apr_RA", "A"), ("call_RB", "apr_RB", "B")]),
        approvals([("call_NB", "apr_NB", "B"), ("call_NA", "apr_NA", "A")]),
        (recorded, replayed),
    )
    assert translate({"approvalId": "apr_RB"}, recorded, replayed) == {"approvalId": "apr_NB"}
    assert translate({"approvalId": "apr_RA"}, recorded, replayed) == {"approvalId": "apr_NA"}


# -- causes, follow-ons, the cap ---------------------------------------------------------


def test_a_call_the_model_no_longer_makes_is_one_root_with_its_cause() -> None:
    """The missing call's widget and its missing answer are consequences, not news: the
    report leads with the call that was not made and names it."""
    expected = _parked("msg_R", [("call_RP", "pick", {"q": "a"}), ("call_RC", "confirm", {})])
    got = _parked("msg_N", [("call_NC", "confirm", {})])
    found = _compare(expected, got)
    report = _report(found, [_request("POST", "/api/chat", {"id": "c", "messages": [HELLO]})])
    [root] = [f for f in report.findings if f.follows is None]
    assert (root.difference.kind, root.difference.chunk_type) == ("missing", "tool-input-available")
    assert root.cause is not None
    assert "the recorded call `pick` was not made" in root.cause
    assert len(report.differences) == 2  # the call, and its widget
    text = report.format()
    assert text.startswith("replayed 1 exchanges (warm): 2 difference(s), 1 at the root and 1 follow-on")  # fmt: skip
    assert "likely cause: the recorded call `pick` was not made" in text
    assert "+1 follow-on difference(s) in exchange 0" in text
    assert "data-parkway-widget" not in text  # the follow-on, counted but not shown
    assert "data-parkway-widget call#1) is missing" in report.format(full=True)


def test_a_changed_text_says_the_model_text_differs() -> None:
    """The most common regression in a scripted or recorded model: the words."""
    expected = _parked("msg_R", [("call_R", "pick", {"q": "a"})], text="Let me ask. ")
    got = _parked("msg_N", [("call_N", "pick", {"q": "a"})], text="Let me check. ")
    report = _report(_compare(expected, got), [_request("POST", "/api/chat")])
    [finding] = report.findings
    assert finding.difference.path == "delta"
    assert finding.cause == "the model's text differs from the recording"


def test_answers_to_a_call_whose_creation_differed_are_follow_ons_summarised_and_capped() -> None:
    """A turn that diverged makes every later exchange of that turn differ: the report
    shows the cause once and counts the rest with their exchanges; independent roots in
    other turns are each shown, up to the cap, and a full report shows everything."""
    requests = [_request("POST", "/api/chat", {"id": "c", "messages": [HELLO]})]
    differences = [
        Difference(0, "POST /api/chat", "chunk 5 (tool-input-available call#1) is missing",
                   {"type": "tool-input-available"}, None, chunk=5, kind="missing",
                   chunk_type="tool-input-available", call="call#1", tool="pick"),
    ]  # fmt: skip
    for index in range(1, 6):  # answers, settles and resumes of the same turn
        path = f"/api/chats/c/calls/call_{index}"
        requests.append(_request("POST", path, {"outcome": "declined"}))
        differences.append(
            Difference(
                index, f"POST {path}", "status", 200, 404, kind="status", request_calls=("call#1",)
            )
        )
    for index in range(6, 20):  # fourteen other chats, one changed text each
        user = {**HELLO, "id": f"u{index}"}
        requests.append(_request("POST", "/api/chat", {"id": f"c{index}", "messages": [user]}))
        differences.append(
            Difference(index, "POST /api/chat", "chunk 3 (text-delta t0)", "a", "b", chunk=3,
                       path="delta", chunk_type="text-delta")
        )  # fmt: skip
    report = _report(differences, requests)
    text = report.format()
    assert text.splitlines()[0] == (
        "replayed 20 exchanges (warm): 20 difference(s), 15 at the root and 5 follow-on"
    )
    assert text.count("likely cause:") == 10
    assert "+5 more difference(s) in exchanges 15-19" in text
    assert "+5 follow-on difference(s) in exchanges 1-5, caused by the ones above" in text
    assert "got:      404" not in text
    full = report.format(full=True)
    assert full.count("got:      404") == 5
    assert full.count("(follows from the difference in exchange 0)") == 5
    assert full.count("likely cause:") == 15


def test_a_409_after_an_earlier_difference_says_it_cascaded() -> None:
    """A settle refused as already settled, in another turn than the first difference,
    is still a root (nothing proves it follows), but the cause line says what is likely."""
    requests = [
        _request("POST", "/api/chat", {"id": "c", "messages": [HELLO]}),
        _request("POST", "/api/chat", {"id": "d", "messages": [HELLO]}),
        _request("POST", "/api/chats/d/calls/call_x", {"outcome": "declined"}),
    ]
    differences = [
        Difference(0, "POST /api/chat", "chunk 3 (text-delta t0)", "a", "b", path="delta",
                   chunk_type="text-delta"),
        Difference(2, "POST /api/chats/d/calls/call_x", "status", 200, 409, kind="status"),
    ]  # fmt: skip
    causes = [f.cause for f in _report(differences, requests).findings]
    assert causes[1] == (
        "a different status: the call was already settled (409) — an earlier difference cascaded"
    )


# -- ignore paths ------------------------------------------------------------------------


def test_ignore_paths_leave_out_a_widget_description_in_streams_and_json() -> None:
    """Editing a client tool's description changes its widget, not its behaviour: with
    the path ignored the replay matches; without it, or with a path that does not reach
    the field, it does not."""
    expected = _parked("msg_R", [("call_R", "pick", {"q": "a"})])
    got = _parked("msg_N", [("call_N", "pick", {"q": "a"})])
    assert got.chunks is not None
    got.chunks[-3]["data"]["description"] = "Pick one of the options."
    [unfiltered] = _compare(expected, got)
    assert (unfiltered.path, unfiltered.chunk_type) == ("data.description", "data-parkway-widget")
    for path in ("data.description", "data-parkway-widget:data.description", "*.description",
                 "**.description", "data-*:data.desc*", "data-parkway-widget:"):  # fmt: skip
        assert _compare(expected, got, ignore=[path]) == [], path
    for path in ("description", "text-delta:data.description", "data.description.x", "widget.*"):
        assert len(_compare(expected, got, ignore=[path])) == 1, path

    def settled(description: str, tokens: int) -> ResponseRecord:
        body = {"toolCallId": "call_A", "widget": {"description": description, "kind": "choice"},
                "usage": {"input": tokens, "output": 3}, "calls": [{"status": "settled"}, {"status": "x"}]}  # fmt: skip
        return ResponseRecord(status=200, json=body)

    before, after = settled("old", 10), settled("new", 12)
    assert {d.path for d in _compare(before, after)} == {"$.widget.description", "$.usage.input"}
    assert _compare(before, after, ignore=["widget.description", "usage.*"]) == []
    assert _compare(before, after, ignore=["$.widget.description", "usage.input"]) == []
    assert [d.path for d in _compare(before, after, ignore=["widget.description"])] == ["$.usage.input"]  # fmt: skip
    # An index, any index, and the kind field: only what is named goes.
    changed = ResponseRecord(status=200, json={**(after.body or {}), "calls": [{"status": "a"}, {"status": "b"}]})  # fmt: skip
    keep = ["widget.description", "usage"]
    assert [d.path for d in _compare(before, changed, ignore=[*keep, "calls[0].status"])] == ["$.calls[1].status"]  # fmt: skip
    assert _compare(before, changed, ignore=[*keep, "calls[*].status"]) == []
    assert _compare(before, changed, ignore=[*keep, "calls.*.status"]) == []


def test_ignore_paths_reach_message_metadata_and_drop_whole_chunks() -> None:
    """Usage in a finish chunk's metadata, or reasoning chunks as a whole, vary with a
    real model; each can be left out without hiding anything else."""

    def finish(tokens: int, reasoning: str) -> ResponseRecord:
        return ResponseRecord(
            status=200,
            chunks=[
                {"type": "start", "messageId": "msg_1"},
                {"type": "reasoning-start", "id": "r0"},
                {"type": "reasoning-delta", "id": "r0", "delta": reasoning},
                {"type": "reasoning-end", "id": "r0"},
                {
                    "type": "finish",
                    "finishReason": "stop",
                    "messageMetadata": {"usage": {"total": tokens}},
                },
            ],
        )

    assert len(_compare(finish(1, "hmm"), finish(2, "ah"))) == 2
    assert [d.chunk_type for d in _compare(finish(1, "hmm"), finish(2, "ah"), ignore=["messageMetadata.usage"])] == ["reasoning-delta"]  # fmt: skip
    assert _compare(finish(1, "hmm"), finish(2, "ah"), ignore=["finish:messageMetadata", "reasoning-*:"]) == []  # fmt: skip


@pytest.mark.parametrize("path", ["", "a..b", "a.[x]", "calls[-1]", "$", "**:x[", "  "])
def test_a_malformed_ignore_path_is_refused_naming_it(path: str) -> None:
    """A typo in an ignore path must not silently ignore nothing (or everything)."""
    with pytest.raises(CassetteError, match="ignore path"):
        IgnoreFilter([path])


# -- restart marks -----------------------------------------------------------------------


def test_differences_after_a_restart_are_marked() -> None:
    """In a cold replay the first request a new process answers is where state kept
    only in memory shows; the report marks it and the exchanges after it."""
    requests = [
        _request("POST", "/api/chat", {"id": "c", "messages": [HELLO]}),
        _request("POST", "/api/chats/c/calls/call_1", {"outcome": "declined"}),
        _request("GET", "/api/chats/c"),
        _request("POST", "/api/chats/c/resume"),
    ]
    differences = [
        Difference(1, "POST /api/chats/c/calls/call_1", "JSON body", "settled", "pending",
                   path="$.status"),
        Difference(3, "POST /api/chats/c/resume", "chunk 2 (text-delta t1)", "a", "b",
                   path="delta", chunk_type="text-delta"),
    ]  # fmt: skip
    text = _report(differences, requests, restarts_after=(0,)).format()
    assert "exchange 1 (POST /api/chats/c/calls/call_1): JSON body at $.status [first request after restart 1]" in text  # fmt: skip
    assert "does the chat depend on a process's memory?" in text
    assert "exchange 3 (POST /api/chats/c/resume): chunk 2 (text-delta t1) at delta [after restart 1]" in text  # fmt: skip
    warm = _report(differences, requests).format()
    assert "restart" not in warm


# -- end to end ----------------------------------------------------------------------------

TWO_CALLS = [
    {"tool_call": {"name": "pick", "input": {"q": "Where to?"}}},
    {"tool_call": {"name": "confirm", "input": {"q": "Sure?"}}},
]


def _agent(calls: list[dict[str, Any]]) -> dict[str, Any]:
    turns = [[{"text": "Two questions. "}, *calls], [{"text": "Thanks: {{last_tool_results}}"}]]
    return {"template": {"tools": [PICK_TOOL, CONFIRM_TOOL]}, "model": {"scripted": {"turns": turns}}}  # fmt: skip


async def test_a_replay_whose_model_makes_two_calls_in_the_other_order_has_one_root(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The cascade this work removes: recorded `pick` then `confirm`, replayed (cold)
    against an agent that makes them the other way round. Each answer still reaches its
    call (the settles match), and the report has one root: the order, not dozens of
    404s/409s."""
    recorder = Recorder(_agent(TWO_CALLS), description="two parallel client calls")
    server = ServerThread(redis_url, _agent(TWO_CALLS)).start()
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            token = (await client.post("/api/sessions")).json()["token"]
            client.headers["authorization"] = f"Bearer {token}"
            recorder.attach(client)
            await client.post("/api/chat", json={"id": "two", "messages": [HELLO]})
            parked = recorder.exchanges[0].response.chunks or []
            calls = {c["toolName"]: c["toolCallId"] for c in parked if c["type"] == "tool-input-available"}  # fmt: skip
            answers = {"pick": {"choice": "Lisbon"}, "confirm": {"yes": True}}
            for tool in ("pick", "confirm"):
                settle = {"outcome": "output", "output": answers[tool]}
                await client.post(f"/api/chats/two/calls/{calls[tool]}", json=settle)
            await client.post("/api/chats/two/resume")
    finally:
        server.stop()
    await redis.flushdb()  # the replay starts from an empty database, as in CI
    cassette = recorder.cassette()
    assert [e.response.status for e in cassette.exchanges] == [200] * 4

    swapped = tmp_path / "swapped.agent.json"
    swapped.write_text(json.dumps(_agent(TWO_CALLS[::-1])))
    report = replay(cassette, agent=swapped, redis_url=redis_url, cold=True)

    roots = [f for f in report.findings if f.follows is None]
    assert len(roots) == 1, report.format(full=True)
    assert roots[0].cause == "the model made the same calls in a different order"
    assert {d.exchange for d in report.differences} <= {0, 3}  # the order, and its echo
    # The settles reached the call they answer: the replayed pick got the pick's answer.
    first = report.responses[0].chunks or []
    new_ids = {c["toolName"]: c["toolCallId"] for c in first if c["type"] == "tool-input-available"}  # fmt: skip
    settles = [r.path for r in report.requests if "/calls/" in r.path]
    assert [p.rsplit("/", 1)[1] for p in settles] == [new_ids["pick"], new_ids["confirm"]]
    assert all(r.status == 200 for r in report.responses)
    assert report.format().count("likely cause:") == 1
    # Cold: killed after the park; what the new process answered is marked as such.
    assert report.restarts_after == (0,)
    resumed = [line for line in report.format(full=True).splitlines() if line.startswith("exchange 3 ")]  # fmt: skip
    assert resumed and all(line.endswith("[after restart 1]") for line in resumed)
