"""The HTTP surface against a real uvicorn and a real Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.helpers.support import (
    Api,
    ServerThread,
    agent_doc,
    answered,
    call,
    server_thread,
    sse_chunks,
    text,
    types,
    user_message,
)

TURNS = [
    [text("Pick."), call("pick", {"q": "colour"})],
    [text("seen {{last_tool_results}}")],
    [text("third")],
]


@pytest.fixture
def server(redis: Redis, redis_url: str) -> Iterator[ServerThread]:
    with server_thread(redis_url, agent_doc(TURNS)) as srv:
        yield srv


@pytest.fixture
async def api(server: ServerThread) -> AsyncIterator[Api]:
    client = await Api(server.base_url).login()
    yield client
    await client.aclose()


def tool_part(chunks: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    return next(c for c in chunks if c["type"] == "tool-input-available" and c["toolName"] == tool)


async def test_turn_parks_with_a_clean_finish_and_widget_part(api: Api) -> None:
    """A parked turn is a valid, complete AI SDK stream: the call without output, its
    widget part keyed by toolCallId, and a clean finish — never an error chunk."""
    response = await api.chat("h1", [user_message("hi")])
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.rstrip().endswith("data: [DONE]")
    chunks = sse_chunks(response.text)
    assert types(chunks) == [
        "start", "start-step", "text-start", "text-delta", "text-end",
        "tool-input-available", "data-parkway-widget", "finish-step", "finish",
    ]  # fmt: skip
    part = tool_part(chunks, "pick")
    assert "dynamic" not in part and "output" not in part
    widget = chunks[6]
    assert widget["id"] == part["toolCallId"] and widget["data"]["tool"] == "pick"
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
    assert all(
        v is not None for c in chunks for k, v in c.items() if k not in {"input", "output", "data"}
    )


async def test_answer_post_resumes_the_same_message_with_start_step(api: Api) -> None:
    """The AI SDK continuation contract: same messageId, then start-step, and the
    client's own output is not echoed back."""
    chunks = await api.say("h2", "hi")
    response = await api.chat(
        "h2", answered(chunks, {"choice": "red"}), messageId=chunks[0]["messageId"]
    )
    assert response.status_code == 200, response.text
    cont = sse_chunks(response.text)
    assert cont[0] == {"type": "start", "messageId": chunks[0]["messageId"]}
    assert cont[1]["type"] == "start-step"
    assert "tool-output-available" not in types(cont)
    said = "".join(c["delta"] for c in cont if c["type"] == "text-delta")
    assert said == 'seen [{"result":{"choice":"red"},"tool":"pick"}]'
    state = await api.state("h2")
    assert state["state"] == "idle"
    [assistant] = [m for m in state["messages"] if m["role"] == "assistant"]
    assert assistant["id"] == chunks[0]["messageId"]
    pick = next(p for p in assistant["parts"] if p["type"] == "tool-pick")
    assert pick["state"] == "output-available" and pick["output"] == {"choice": "red"}


async def test_settle_endpoint_then_resume_endpoint_streams_the_outcome(api: Api) -> None:
    """Clients without the AI SDK settle and resume explicitly; the continuation carries
    the recorded outcome so they see it."""
    chunks = await api.say("h3", "hi")
    call_id = tool_part(chunks, "pick")["toolCallId"]
    settled = await api.settle("h3", call_id, {"outcome": "declined", "reason": "later"})
    assert settled.status_code == 200
    assert settled.json()["outcome"] == {"outcome": "declined", "reason": "later"}
    repeat = await api.settle("h3", call_id, {"outcome": "declined", "reason": "later"})
    assert repeat.status_code == 200 and repeat.json()["fresh"] is False
    conflict = await api.settle("h3", call_id, {"outcome": "output", "output": {"choice": "x"}})
    assert conflict.status_code == 409
    assert conflict.json()["error"]["outcome"] == {"outcome": "declined", "reason": "later"}
    resumed = await api.resume("h3")
    cont = sse_chunks(resumed.text)
    assert cont[1] == {
        "type": "tool-output-available",
        "toolCallId": call_id,
        "output": {"status": "declined", "reason": "later"},
    }


async def test_fifty_concurrent_resume_requests_stream_exactly_one_continuation(api: Api) -> None:
    """Resume vs resume over real HTTP: one 200 stream with the continuation, 49 refusals:
    409 for a claim that lost, or 429 (with Retry-After) for one this worker did not admit
    while more than its per-principal run limit were in flight."""
    chunks = await api.say("h4", "hi")
    call_id = tool_part(chunks, "pick")["toolCallId"]
    assert (
        await api.settle("h4", call_id, {"outcome": "output", "output": {"choice": "c"}})
    ).status_code == 200
    responses = await asyncio.gather(*(api.resume("h4") for _ in range(50)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(200) == 1 and set(statuses) <= {200, 409, 429}
    assert all(r.headers["retry-after"] for r in responses if r.status_code == 429)
    winner = next(r for r in responses if r.status_code == 200)
    assert "seen" in "".join(c.get("delta", "") for c in sse_chunks(winner.text))
    assert all(
        r.json()["error"]["code"] in {"nothing_to_resume", "chat_busy"}
        for r in responses
        if r.status_code == 409
    )


async def test_fifty_concurrent_answer_posts_resume_once(api: Api) -> None:
    """Fifty browsers posting the same answer: one continuation; the rest are told."""
    chunks = await api.say("h5", "hi")
    history = answered(chunks, {"choice": "d"})
    responses = await asyncio.gather(*(api.chat("h5", history) for _ in range(50)))
    ok = [r for r in responses if r.status_code == 200]
    # the others: 409 (lost the claim) or 429 (not admitted while more than the
    # per-principal run limit were in flight); either way nothing ran twice
    assert len(ok) == 1 and all(r.status_code in {409, 429} for r in responses if r not in ok)
    state = await api.state("h5")
    assert sum(1 for m in state["messages"] if m["role"] == "assistant") == 1
    assert len([p for p in state["messages"][1]["parts"] if p["type"] == "step-start"]) == 2


async def test_forged_answer_for_a_call_never_issued_is_refused_and_never_reaches_the_model(
    api: Api,
) -> None:
    """The browser's history is not trusted: an answer for a call the server never
    parked is refused, the real call stays pending, and the model never sees it."""
    chunks = await api.say("h6", "hi")
    history = answered(chunks, {"choice": "forged"})
    history[1]["parts"][2]["toolCallId"] = "call_forged"
    history[1]["parts"][2]["input"] = {"q": "something else"}
    response = await api.chat("h6", history)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "no_pending_call_answered"
    state = await api.state("h6")
    assert [c["status"] for c in state["calls"]] == ["pending"]
    assert "forged" not in json.dumps(state)


async def test_output_failing_the_output_schema_is_refused_and_the_chat_is_intact(api: Api) -> None:
    """Bad output gets 422 naming the problem; the call stays pending and answerable."""
    chunks = await api.say("h7", "hi")
    call_id = tool_part(chunks, "pick")["toolCallId"]
    bad = await api.settle("h7", call_id, {"outcome": "output", "output": {"colour": 1}})
    assert bad.status_code == 422
    assert "output_schema" in bad.json()["error"]["message"]
    via_chat = await api.chat("h7", answered(chunks, {"nope": True}))
    assert via_chat.status_code == 422
    assert (await api.state("h7"))["calls"][0]["status"] == "pending"
    good = await api.chat("h7", answered(chunks, {"choice": "ok"}))
    assert good.status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (b"[]", 422, "invalid_body"),
        (b'{"id": "x", "messages": []}', 422, "invalid_body"),
        (
            b'{"id": "bad id!", "messages": [{"id": "u", "role": "user", "parts": []}]}',
            400,
            "invalid_request",
        ),
        (
            b'{"id": "x", "messages": [{"id": "u", "role": "robot", "parts": []}]}',
            422,
            "invalid_body",
        ),
    ],
)
async def test_malformed_chat_posts_get_clear_json_errors(
    api: Api, body: bytes, status: int, code: str
) -> None:
    """Bad input gets a JSON error with the right status, never a stack trace."""
    response = await api.http.post(
        "/api/chat", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


async def test_oversized_body_is_refused_with_413(api: Api) -> None:
    """Size limits hold before anything is parsed."""
    huge = json.dumps({"id": "big", "messages": [user_message("x" * 1_100_000)]})
    response = await api.http.post(
        "/api/chat", content=huge, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


async def test_other_principals_get_404_and_anonymous_requests_401(
    api: Api, server: ServerThread
) -> None:
    """A chat, its calls and its stream exist only for their owner."""
    chunks = await api.say("h8", "hi")
    call_id = tool_part(chunks, "pick")["toolCallId"]
    other = await Api(server.base_url).login()
    try:
        assert (await other.http.get("/api/chats/h8")).status_code == 404
        assert (await other.settle("h8", call_id, {"outcome": "declined"})).status_code == 404
        assert (await other.resume("h8")).status_code == 404
        assert (await other.chat("h8", answered(chunks, {"choice": "x"}))).status_code == 404
        assert (await other.chat("h8", [user_message("hijack", "u9")])).status_code == 404
    finally:
        await other.aclose()
    async with httpx.AsyncClient(base_url=server.base_url) as anon:
        response = await anon.get("/api/chats/h8")
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated"
        forged = await anon.get(
            "/api/chats/h8", headers={"authorization": "Bearer forged.token.value"}
        )
        assert forged.status_code == 401
    assert (await api.state("h8"))["calls"][0]["status"] == "pending"


async def test_unknown_chat_and_unknown_call_are_404(api: Api) -> None:
    assert (await api.http.get("/api/chats/nobody")).status_code == 404
    await api.say("h9", "hi")
    response = await api.settle("h9", "call_nope", {"outcome": "declined"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "call_not_found"


async def test_settle_body_is_validated(api: Api) -> None:
    """Unknown fields and wrong outcomes are refused with 422 and change nothing."""
    chunks = await api.say("h10", "hi")
    call_id = tool_part(chunks, "pick")["toolCallId"]
    extra = await api.settle("h10", call_id, {"outcome": "declined", "sneaky": 1})
    assert extra.status_code == 422
    wrong = await api.settle("h10", call_id, {"outcome": "approved"})
    assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "invalid_outcome"
    server_only = await api.settle("h10", call_id, {"outcome": "timeout"})
    assert server_only.status_code == 403
    assert (await api.state("h10"))["calls"][0]["status"] == "pending"


async def test_cookie_sessions_work_and_foreign_origins_are_refused(server: ServerThread) -> None:
    """Browsers use the session cookie; a state-changing request from another origin is
    refused (CSRF), while the server's own origin passes."""
    async with httpx.AsyncClient(base_url=server.base_url) as browser:
        created = await browser.post("/api/sessions")
        assert created.status_code == 201
        assert "httponly" in created.headers["set-cookie"].lower()
        assert "samesite=lax" in created.headers["set-cookie"].lower()
        body = {"id": "ck1", "messages": [user_message("hi")]}
        foreign = await browser.post(
            "/api/chat", json=body, headers={"origin": "https://evil.example"}
        )
        assert (
            foreign.status_code == 403 and foreign.json()["error"]["code"] == "origin_not_allowed"
        )
        own = await browser.post("/api/chat", json=body, headers={"origin": server.base_url})
        assert own.status_code == 200
        again = await browser.post("/api/sessions")
        assert again.json()["principal"] == created.json()["principal"]
        assert (await browser.get("/api/chats/ck1")).status_code == 200


async def test_new_user_message_over_http_supersedes_the_pending_call(api: Api) -> None:
    """Typing instead of answering cancels the pending call before the new turn."""
    chunks = await api.say("h11", "hi", "u1")
    history = [*answered(chunks, None)[:1], {"id": chunks[0]["messageId"], "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-pick", "toolCallId": tool_part(chunks, "pick")["toolCallId"], "state": "input-available", "input": {"q": "colour"}},
    ]}, user_message("something else", "u2")]  # fmt: skip
    response = await api.chat("h11", history)
    assert response.status_code == 200
    assert sse_chunks(response.text)[0]["messageId"] != chunks[0]["messageId"]
    state = await api.state("h11")
    assert state["calls"][0]["outcome"] == {
        "outcome": "cancelled",
        "reason": "superseded_by_user_message",
    }


async def test_a_new_message_with_the_widget_answered_settles_the_call_first(api: Api) -> None:
    """The client answered the widget and then typed (its tool output rides along with
    the new message): the call keeps that answer, and the new turn sees it."""
    chunks = await api.say("h12", "hi", "u1")
    history = [*answered(chunks, {"choice": "red"}), user_message("and now?", "u2")]
    response = await api.chat("h12", history)
    assert response.status_code == 200, response.text
    said = "".join(c["delta"] for c in sse_chunks(response.text) if c["type"] == "text-delta")
    assert json.loads(said.removeprefix("seen ")) == [{"tool": "pick", "result": {"choice": "red"}}]
    state = await api.state("h12")
    assert state["calls"][0]["outcome"] == {"outcome": "output", "output": {"choice": "red"}}


async def test_get_chat_rebuilds_ui_messages_and_calls(api: Api) -> None:
    """A reload or another tab gets the chat as UI messages plus its parked calls with
    widget descriptors."""
    chunks = await api.say("h12", "hi")
    state = await api.state("h12")
    assert state["state"] == "parked"
    assert [m["role"] for m in state["messages"]] == ["user", "assistant"]
    [parked] = state["calls"]
    assert parked["parkedCallKey"] == 'pick#{"q":"colour"}'
    assert parked["widget"]["statusUrl"] == f"/api/chats/h12/calls/{parked['toolCallId']}"
    one = await api.http.get(parked["widget"]["statusUrl"])
    assert one.status_code == 200 and one.json()["status"] == "pending"
    assert parked["toolCallId"] == tool_part(chunks, "pick")["toolCallId"]


async def test_health_and_unknown_routes_answer_json(server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        health = (await client.get("/healthz")).json()
        assert health == {"status": "ok"}
        ready = (await client.get("/readyz")).json()
        assert (ready["status"], ready["checks"]["redis"]["ok"]) == ("ready", True)
        missing = await client.get("/api/nothing-here")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        wrong = await client.get("/api/chat")
        assert wrong.status_code == 405


async def test_approval_responses_in_the_chat_post_stream_the_result_or_the_denial(
    redis: Redis, redis_url: str
) -> None:
    """AI SDK approvals: the continuation carries tool-output-available after an
    approval and tool-output-denied after a denial, so the part leaves approval-responded."""
    turns = [[call("publish", {"title": "A"}), call("publish", {"title": "B"})], [text("done")]]
    with server_thread(redis_url, agent_doc(turns)) as srv:
        api = await Api(srv.base_url).login()
        chunks = await api.say("ap1", "hi")
        requests = {
            c["toolCallId"]: c["approvalId"] for c in chunks if c["type"] == "tool-approval-request"
        }
        calls = [c for c in chunks if c["type"] == "tool-input-available"]
        parts = [{"type": "step-start"}]
        for index, part in enumerate(calls):
            parts.append({
                "type": "tool-publish", "toolCallId": part["toolCallId"], "state": "approval-responded",
                "input": part["input"],
                "approval": {"id": requests[part["toolCallId"]], "approved": index == 0, "reason": "no"},
            })  # fmt: skip
        history = [
            user_message("hi"),
            {"id": chunks[0]["messageId"], "role": "assistant", "parts": parts},
        ]
        response = await api.chat("ap1", history)
        await api.aclose()
    cont = sse_chunks(response.text)
    assert types(cont)[:4] == ["start", "tool-output-denied", "tool-output-available", "start-step"]
    assert cont[1] == {"type": "tool-output-denied", "toolCallId": calls[1]["toolCallId"]}
    assert cont[2]["output"] == {"published": "A"}


async def test_a_browser_disconnect_does_not_stop_the_run(redis: Redis, redis_url: str) -> None:
    """The response is only a view: when the browser goes away mid-turn, the run still
    finishes its step and persists, so a reload finds the result."""
    from tests.helpers import tools as test_tools

    gated = {"type": "function", "name": "gated", "ref": "tests.helpers.tools:gated"}
    turns = [[text("working"), call("gated")], [text("finished after the disconnect")]]
    test_tools.GATE.clear()
    with server_thread(redis_url, agent_doc(turns, tools=[gated])) as srv:
        api = await Api(srv.base_url).login()
        body = {"id": "dc1", "messages": [user_message("go")]}
        async with api.http.stream("POST", "/api/chat", json=body) as response:
            async for line in response.aiter_lines():
                if "tool-input-available" in line:
                    break  # the tool is running now; drop the connection
        test_tools.GATE.set()
        deadline = asyncio.get_running_loop().time() + 20
        while (state := await api.state("dc1"))["state"] != "idle":
            assert asyncio.get_running_loop().time() < deadline, state
            await asyncio.sleep(0.02)
        await api.aclose()
    texts = [p["text"] for m in state["messages"] for p in m["parts"] if p["type"] == "text"]
    assert texts[-1] == "finished after the disconnect"


async def test_resume_stream_replays_a_parked_message_and_is_204_otherwise(api: Api) -> None:
    """AI SDK resumeStream(): a parked chat's message is replayed from its start, the
    pending call and its widget as they were; once answered and finished, the whole
    message replays, its answered call rebuilt without re-firing onToolCall."""
    turns_chat = "rs1"
    chunks = await api.say(turns_chat, "hi")
    response = await api.http.get(f"/api/chat/{turns_chat}/stream")
    assert response.status_code == 200
    replay = sse_chunks(response.text)
    assert replay[0] == {"type": "start", "messageId": chunks[0]["messageId"]}
    assert types(replay) == [
        "start", "start-step", "text-start", "text-delta", "text-end",
        "tool-input-available", "data-parkway-widget", "finish-step", "finish",
    ]  # fmt: skip
    assert tool_part(replay, "pick") == tool_part(chunks, "pick")
    answer = await api.chat(turns_chat, answered(chunks, {"choice": "r"}))
    assert answer.status_code == 200
    finished = sse_chunks((await api.http.get(f"/api/chat/{turns_chat}/stream")).text)
    assert finished[0] == {"type": "start", "messageId": chunks[0]["messageId"]}
    assert finished[-1] == {"type": "finish", "finishReason": "stop"}
    assert "tool-input-available" not in types(finished)  # answered: no onToolCall again
    assert (await api.http.get("/api/chat/unknown-chat/stream")).status_code == 404


async def test_resume_stream_is_204_once_a_finished_message_is_old(
    redis: Redis, redis_url: str
) -> None:
    """Nothing recent to resume answers 204, so the client stays ready."""
    with server_thread(redis_url, agent_doc([[text("done")]]), stream_grace_s=0) as srv:
        api = await Api(srv.base_url).login()
        await api.say("old", "hi")
        response = await api.http.get("/api/chat/old/stream")
        await api.aclose()
    assert response.status_code == 204


async def test_an_answer_post_resumes_when_the_server_already_settled_the_call(api: Api) -> None:
    """When the call was settled another way first (another tab, the settle endpoint, the
    server itself), the AI SDK's automatic POST still continues the run, with the
    recorded outcome rather than the browser's claim."""
    chunks = await api.say("pre", "hi")
    call_id = tool_part(chunks, "pick")["toolCallId"]
    assert (
        await api.settle("pre", call_id, {"outcome": "output", "output": {"choice": "tab"}})
    ).status_code == 200
    response = await api.chat("pre", answered(chunks, {"choice": "browser"}))
    assert response.status_code == 200, response.text
    said = "".join(c.get("delta", "") for c in sse_chunks(response.text))
    assert said == 'seen [{"result":{"choice":"tab"},"tool":"pick"}]'


async def test_an_answer_for_a_settled_call_never_takes_a_twin_pending_calls_place(
    redis: Redis, redis_url: str
) -> None:
    """Two identical calls in one step (same parkedCallKey). One is settled through its
    status URL; the client then posts its history carrying only that call's answer.
    That answer belongs to the settled call: it must not be matched by key to the other
    call, which stays pending until someone answers it."""
    del redis
    twins = agent_doc([[call("pick", {"q": "same"}), call("pick", {"q": "same"})], [text("ok")]])
    with server_thread(redis_url, twins) as srv:
        api = await Api(srv.base_url).login()
        try:
            chunks = await api.say("twins", "go")
            first, second = [c for c in chunks if c["type"] == "tool-input-available"]
            settled = await api.settle(
                "twins", first["toolCallId"], {"outcome": "output", "output": {"choice": "a"}}
            )
            assert settled.status_code == 200, settled.text
            history = answered(chunks, {"choice": "a"}, user="go")
            response = await api.chat("twins", history)
            assert response.status_code == 409, response.text
            assert response.json()["error"]["code"] == "no_pending_call_answered"
            state = await api.state("twins")
            pending = [c["toolCallId"] for c in state["calls"] if c["status"] == "pending"]
            assert pending == [second["toolCallId"]]
        finally:
            await api.aclose()
