"""``POST /api/agui`` with real processes: ``parkway serve`` workers sharing only Redis
(and the session key), killed with SIGKILL, raced against each other.

The AG-UI client is the bare one of tests/transport/test_agui.py: every 200 response is
validated event by event with ``ag-ui-protocol``'s types and checked as one well-formed
run (RUN_STARTED first, one RUN_FINISHED or RUN_ERROR last). The side-effecting tool
appends a line to a file (``tests.helpers.tools:note``), so "it ran exactly once" is
checked across processes; nothing waits on a clock, only on conditions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.helpers.agui import (
    AguiClient,
    kinds,
    outcome,
    results,
    same_run,
    stream_run,
    texts,
)
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    agent_doc,
    call,
    eventually,
    text,
)

pytestmark = pytest.mark.slow

# One principal races its own requests on purpose; admission control (tested in
# test_admission.py) must not turn the race into 429s.
UNLIMITED = {
    "PARKWAY_MAX_RUNS_PER_PRINCIPAL": "100000",
    "PARKWAY_MAX_STREAMS_PER_PRINCIPAL": "100000",
}
# A killed worker's lease lapses quickly (the tests wait for it by condition).
SHORT_LEASE = {**UNLIMITED, "PARKWAY_LEASE_S": "1"}


def publish_tool() -> dict[str, Any]:
    """A side-effecting server tool that needs approval: each run appends ``line`` to
    the file at ``path``, which every process (and the test) can read."""
    return {
        "type": "function",
        "name": "publish",
        "ref": "tests.helpers.tools:note",
        "needs_approval": True,
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "line": {"type": "string"}},
            "required": ["path", "line"],
        },
    }


def write_agent(tmp_path: Path, turns: list[list[dict[str, Any]]], tools: list[Any]) -> Path:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent_doc(turns, tools=tools)))
    return path


def runs_of(marker: Path) -> list[str]:
    """The lines the tool wrote: one per execution."""
    return marker.read_text().splitlines() if marker.exists() else []


def approve(interrupt_id: str) -> list[dict[str, Any]]:
    """The AG-UI resume entries that approve the interrupt."""
    return [{"interruptId": interrupt_id, "status": "resolved", "payload": {"approved": True}}]


def snapshot_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    [snapshot] = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    return list(snapshot["messages"])


def tool_messages(messages: list[dict[str, Any]], call_id: str) -> list[Any]:
    return [
        json.loads(m["content"])
        for m in messages
        if m["role"] == "tool" and m["toolCallId"] == call_id
    ]


async def start_all(workers: list[ParkwayProcess]) -> None:
    """Start worker processes side by side (each waits for its own /healthz)."""
    await asyncio.gather(*(asyncio.to_thread(w.start) for w in workers))


async def park(client: AguiClient) -> tuple[dict[str, Any], str]:
    """A user message whose run parks one approval: the interrupt and the run's
    assistant message id."""
    first = await client.say("publish it")
    end = outcome(first)
    assert end["type"] == "interrupt", end
    [interrupt] = end["interrupts"]
    assert interrupt["reason"] == "tool_call"
    assert interrupt["id"] == interrupt["toolCallId"]
    [start] = [e for e in first if e["type"] == "TEXT_MESSAGE_START"]
    return interrupt, start["messageId"]


async def test_an_agui_resume_after_a_sigkill_continues_on_another_process_once(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Worker A parks an approval over AG-UI and is killed with SIGKILL as soon as its
    response ended; the AG-UI resume on worker B continues the same assistant message
    (step ``M-1`` of message ``M``) with the approved call's result, the tool having run
    once. The same resume sent again, to B and to a third worker C, changes nothing:
    the call is settled with that very answer already (the entry is acknowledged) and
    the run has ended, so each answers the chat as it is, a MESSAGES_SNAPSHOT and a
    ``success`` outcome, and the tool is not run again."""
    marker = tmp_path / "published.txt"
    agent = write_agent(
        tmp_path,
        [
            [text("Publishing."), call("publish", {"path": str(marker), "line": "Q3"})],
            [text("Published: {{last_tool_results}}")],
        ],
        [publish_tool()],
    )
    # three workers sharing only Redis (and the session key) with each other
    first, second, third = workers = [ParkwayProcess(redis_url, agent) for _ in range(3)]
    try:
        await start_all(workers)
        api = await Api(first.base_url).login()
        client = AguiClient(api)
        interrupt, message_id = await park(client)
        first.kill()  # the response has ended: nothing of the run lives only in A
        call_id = interrupt["id"]
        assert interrupt["metadata"]["parkway"]["toolName"] == "publish"
        assert runs_of(marker) == []

        client.api = api.same_user(second.base_url)
        resumed = await client.run(resume=approve(call_id))
        assert runs_of(marker) == ["Q3"]
        # the same resume again, to B (which ran it) and to C (which never saw the chat)
        repeats = []
        for worker in (second, third):
            late = AguiClient(api.same_user(worker.base_url), client.thread_id)
            repeats.append(await late.run(resume=approve(call_id)))
            await late.api.aclose()
        state = await client.api.state(client.thread_id)
        await client.api.aclose()
        await api.aclose()
    finally:
        first.kill()
        second.stop()
        third.stop()
    assert outcome(resumed) == {"type": "success"}
    assert results(resumed) == {call_id: {"noted": True}}
    [result] = [e for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert result["messageId"] == f"{call_id}-result"
    # the same assistant message goes on: its next step is M-1
    said = [e for e in resumed if e["type"].startswith("TEXT_MESSAGE")]
    assert {e["messageId"] for e in said} == {f"{message_id}-1"}
    assert texts(resumed) == 'Published: [{"result":{"noted":true},"tool":"publish"}]'
    assert runs_of(marker) == ["Q3"]  # exactly once, across three processes
    for again in repeats:
        assert kinds(again) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        assert outcome(again) == {"type": "success"}
        messages = snapshot_of(again)
        assert [m["id"] for m in messages if m["role"] == "assistant"] == [
            message_id,
            f"{message_id}-1",
        ]
        assert tool_messages(messages, call_id) == [{"noted": True}]
    assert state["state"] == "idle"
    [parked] = state["calls"]
    assert parked["outcome"]["outcome"] == "approved"


async def test_racing_agui_resumes_across_two_processes_have_one_winner(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Twelve identical AG-UI resumes of one parked approval, spread over two worker
    processes: exactly one continues the run (the approved call's result and the next
    step's text, in the same message), and the tool runs once. Every other response is
    one of three, each what the loser's moment gives:

    - the winner's run followed live (the loser read the call settled and the chat
      running: its entry is acknowledged, and a run in progress is followed), after a
      snapshot of the chat as it was when the run began: the very events the winner got;
    - the chat as it is once the run ended (a snapshot with the result, ``success``);
    - the JSON 409 ``chat_busy`` of a loser that read the call pending, found its
      settle already done (the same answer: nothing to write) and its resume refused
      while the winner's run held the chat.
    """
    marker = tmp_path / "published.txt"
    agent = write_agent(
        tmp_path,
        [
            [text("Publishing."), call("publish", {"path": str(marker), "line": "Q3"})],
            [text("the one continuation")],
        ],
        [publish_tool()],
    )
    workers = [ParkwayProcess(redis_url, agent, env=UNLIMITED) for _ in range(2)]
    try:
        await start_all(workers)
        owner = await Api(workers[0].base_url).login()
        parker = AguiClient(owner)
        interrupt, message_id = await park(parker)
        call_id = interrupt["id"]
        clients = [AguiClient(owner.same_user(w.base_url), parker.thread_id) for w in workers]
        for client in clients:
            client.messages = [dict(m) for m in parker.messages]
        answers = await asyncio.gather(
            *(clients[i % 2].post(resume=approve(call_id)) for i in range(12))
        )
        state = await owner.state(parker.thread_id)
        for client in clients:
            await client.api.aclose()
        await owner.aclose()
    finally:
        for worker in workers:
            worker.stop()
    assert runs_of(marker) == ["Q3"]
    ran = [
        ev for status, ev, _ in answers if status == 200 and "MESSAGES_SNAPSHOT" not in kinds(ev)
    ]
    [winner] = ran
    assert results(winner) == {call_id: {"noted": True}}
    assert texts(winner) == "the one continuation"
    assert {e["messageId"] for e in winner if e["type"] == "TEXT_MESSAGE_CONTENT"} == {
        f"{message_id}-1"
    }
    assert outcome(winner) == {"type": "success"}
    followed = ended = busy = 0
    for status, events, raw in answers:
        if status == 409:
            assert json.loads(raw)["error"]["code"] == "chat_busy", raw
            busy += 1
        elif events is not winner:
            assert status == 200 and kinds(events)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
            if len(events) == 3:  # the chat as it is: the run had ended
                assert tool_messages(snapshot_of(events), call_id) == [{"noted": True}]
                ended += 1
            else:  # the run followed live, from the chat as it was before it
                assert tool_messages(snapshot_of(events), call_id) == []
                assert same_run(events[2:], winner[1:])
                followed += 1
            assert outcome(events) == {"type": "success"}
    assert followed + ended + busy == 11
    assert state["state"] == "idle"
    steps = [p for p in state["messages"][1]["parts"] if p["type"] == "step-start"]
    assert len(steps) == 2


async def test_an_agui_approval_racing_a_denial_on_the_settle_route_has_one_outcome(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """An AG-UI resume that approves and a settle-route answer that denies, racing for
    the same parked call from two worker processes (in six chats at once, the order
    alternating): one outcome wins each chat, and everyone reads that one. The loser on
    the settle route gets the JSON 409 ``already_settled`` with the winner's outcome; the
    AG-UI request that loses gets the run continued with the denial (it read the call
    pending: its settle is refused and the resume it then makes carries the stored
    denial) or a refusal (RUN_ERROR ``already_settled``, or the JSON 409 of a settle that
    lost at the last moment), after which an AG-UI no-input run continues the chat.
    Afterwards GET /api/chats/{chat}, the model's view and an AG-UI no-input run agree
    with the winner, and the tool ran once exactly where the approval won."""
    agent = write_agent(
        tmp_path,
        [
            [text("Publishing."), call("publish", {"path": "{{last_user_text}}", "line": "Q3"})],
            [text("after: {{last_tool_results}}")],
        ],
        [publish_tool()],
    )
    workers = [ParkwayProcess(redis_url, agent, env=UNLIMITED) for _ in range(2)]
    try:
        await start_all(workers)
        owner = await Api(workers[0].base_url).login()
        apis = [owner.same_user(w.base_url) for w in workers]
        chats = [AguiClient(apis[i % 2]) for i in range(6)]
        markers = [tmp_path / f"published-{i}.txt" for i in range(6)]
        parked = []
        for client, marker in zip(chats, markers, strict=True):
            client.messages.append({"id": "u-1", "role": "user", "content": str(marker)})
            first = await client.run()
            [interrupt] = outcome(first)["interrupts"]
            parked.append(interrupt["id"])

        async def race(i: int) -> tuple[Any, httpx.Response]:
            client, call_id = chats[i], parked[i]
            denier = apis[(i + 1) % 2]
            approving = client.post(resume=approve(call_id))
            denying = denier.settle(client.thread_id, call_id, {"outcome": "denied"})
            if i % 2:
                denied, approved = await asyncio.gather(denying, approving)
            else:
                approved, denied = await asyncio.gather(approving, denying)
            return approved, denied

        raced = await asyncio.gather(*(race(i) for i in range(6)))
        finals = []
        for i, client in enumerate(chats):
            # whatever is left to do (a chat whose resume was refused goes on now), then
            # the chat as every client reads it
            await AguiClient(apis[(i + 1) % 2], client.thread_id).run()
            finals.append(
                (
                    await AguiClient(apis[i % 2], client.thread_id).run(),
                    await owner.state(client.thread_id),
                )
            )
        for api in [owner, *apis]:
            await api.aclose()
    finally:
        for worker in workers:
            worker.stop()
    won = []
    for i, ((status, events, raw), denied) in enumerate(raced):
        call_id = parked[i]
        if denied.status_code == 200:  # the denial won
            assert denied.json()["outcome"]["outcome"] == "denied"
            expected: dict[str, Any] = {"approved": False, "reason": "denied"}
            if status == 409:
                assert json.loads(raw)["error"]["code"] == "already_settled", raw
            elif events[-1]["type"] == "RUN_ERROR":
                assert kinds(events) == ["RUN_STARTED", "RUN_ERROR"]
                assert events[-1]["code"] == "already_settled"
            else:  # it read the call pending, and its resume carried the denial on
                assert "MESSAGES_SNAPSHOT" not in kinds(events)
                assert results(events) == {call_id: expected}
            assert runs_of(markers[i]) == []
            won.append("denied")
        else:  # the approval won
            assert denied.status_code == 409, denied.text
            error = denied.json()["error"]
            assert error["code"] == "already_settled"
            assert status == 200 and "MESSAGES_SNAPSHOT" not in kinds(events)
            expected = {"noted": True}
            assert results(events) == {call_id: expected}
            assert runs_of(markers[i]) == ["Q3"]
            won.append("approved")
        final, state = finals[i]
        assert kinds(final) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        assert tool_messages(snapshot_of(final), call_id) == [expected]
        [first_step, assistant] = [m for m in snapshot_of(final) if m["role"] == "assistant"]
        assert assistant["id"] == f"{first_step['id']}-1"
        assert assistant["content"] == (
            "after: " + json.dumps([{"result": expected, "tool": "publish"}], separators=(",", ":"))
        )
        assert state["state"] == "idle"
        [call_state] = state["calls"]
        assert call_state["outcome"]["outcome"] == won[-1]


async def test_an_agui_run_of_a_chat_whose_worker_died_mid_tool_ends_and_takes_over(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Worker A runs an approved server tool (resumed over AG-UI) and is killed with
    SIGKILL while the tool runs. A client that was following the run from worker B (a
    no-input AG-UI run: the chat as stored, then the run live) gets a definite end, a
    RUN_ERROR saying the run was interrupted, once A's lease lapses, never a hang. The
    next no-input run on B takes the chat over from its last stored step: the tool's
    result is unknown (it is never run a second time) and the same message goes on."""
    marker = tmp_path / "marker.txt"
    hang = {
        "type": "function",
        "name": "hang",
        "ref": "tests.helpers.tools:hang",
        "timeout_s": 60,
        "needs_approval": True,
    }
    agent = write_agent(
        tmp_path,
        [
            [text("Starting."), call("hang", {"marker": str(marker)})],
            [text("after the crash: {{last_tool_results}}")],
        ],
        [hang],
    )
    first, second = workers = [ParkwayProcess(redis_url, agent, env=SHORT_LEASE) for _ in range(2)]
    try:
        await start_all(workers)
        api = await Api(first.base_url).login()
        other = api.same_user(second.base_url)
        try:
            client = AguiClient(api)
            interrupt, message_id = await park(client)
            call_id = interrupt["id"]
            resuming = asyncio.create_task(client.post(resume=approve(call_id)))
            await eventually(lambda: runs_of(marker) == ["started"], within_s=30, what="hang ran")
            opened = asyncio.Event()
            following = asyncio.create_task(stream_run(AguiClient(other, client.thread_id), opened))
            await eventually(opened.is_set, within_s=30, what="B is following the run")
            first.kill()
            with contextlib.suppress(httpx.HTTPError):
                await resuming
            followed = await asyncio.wait_for(following, 30)
            taken = await AguiClient(other, client.thread_id).run()
            state = await other.state(client.thread_id)
            after = await AguiClient(other, client.thread_id).run()
        finally:
            await api.aclose()
            await other.aclose()
    finally:
        first.kill()
        second.stop()
    # the follower: what was stored before the run, then the run, then its end
    assert kinds(followed)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    assert followed[-1]["type"] == "RUN_ERROR", followed[-1]
    assert followed[-1]["code"] == "run_failed"
    assert "interrupted" in followed[-1]["message"]
    assert call_id not in results(followed)
    assert [m["id"] for m in snapshot_of(followed)][1:] == [message_id]
    # the takeover: the same message goes on; the model is told the tool's result is
    # unknown (the runner stores no result for it, so no TOOL_CALL_RESULT comes)
    assert "MESSAGES_SNAPSHOT" not in kinds(taken)
    assert results(taken) == {}
    said = texts(taken)
    assert said.startswith("after the crash: ")
    [seen] = json.loads(said[len("after the crash: ") :])
    assert seen["tool"] == "hang"
    assert seen["result"]["error"].startswith("result unknown")
    assert {e["messageId"] for e in taken if e["type"] == "TEXT_MESSAGE_CONTENT"} == {
        f"{message_id}-1"
    }
    assert outcome(taken) == {"type": "success"}
    assert runs_of(marker) == ["started"]  # never run a second time
    assert state["state"] == "idle"
    # every client now reads the same: the call with no result, the message's next step
    messages = snapshot_of(after)
    assert [m["id"] for m in messages if m["role"] == "assistant"] == [
        message_id,
        f"{message_id}-1",
    ]
    assert tool_messages(messages, call_id) == []
    assert outcome(after) == {"type": "success"}
