"""An MCP tool's request for input over HTTP: parked on either wire with its form, its
continuation never shown, answered the AI SDK way, and cold-resumed after SIGKILL.

Real uvicorn (Parkway in a thread, or ``parkway serve`` as a process), a real Redis and
the shop MCP server (tests/helpers/mcp/shop.py) on loopback in this process, so the
test sees what the server received, whichever worker called it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from parkway.runner.store import LIVE_UNSEEN_MS
from parkway.runner.store.keys import chat_keys
from tests.helpers.agui import AguiClient
from tests.helpers.mcp import McpServerThread, shop_entry
from tests.helpers.support import (
    Api,
    ParkwayProcess,
    answered,
    call,
    eventually,
    server_thread,
    sse_chunks,
    text,
    turn_once_the_lease_lapses,
)

ASK = [[call("shop__ask_person", {"item": "pan"})], [text("{{last_tool_results}}")]]
NORTH = {"responses": {"where": {"action": "accept", "content": {"w": "north"}}}}


def agent(turns: list[list[dict[str, Any]]], mcps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "template": {"instructions": "shop agent", "tools": [], "mcps": mcps},
        "model": {"scripted": {"turns": turns}},
    }


def widget(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    part = next(c for c in chunks if c["type"] == "data-parkway-widget")
    data: dict[str, Any] = part["data"]
    return data


def said(chunks: list[dict[str, Any]]) -> str:
    return "".join(c.get("delta", "") for c in chunks if c["type"] == "text-delta")


async def sealed_state(redis: Redis, chat: str, call_id: str) -> str:
    """The server's requestState as the parked call's record keeps it (in Redis only)."""
    record = json.loads(await redis.hget(chat_keys(chat).calls, call_id))
    state: str = record["continuation"]["mcp"]["requestState"]
    assert state
    return state


def private(text_value: str, state: str) -> bool:
    return state not in text_value and "continuation" not in text_value


@pytest.fixture
def shop() -> Iterator[McpServerThread]:
    with McpServerThread() as server:
        yield server


async def test_the_form_parks_privately_and_an_ai_sdk_answer_resumes_it(
    redis_url: str, redis: Redis, shop: McpServerThread
) -> None:
    """The call parks with an ``mcp-form`` widget; the server's requestState is in the
    record in Redis, never in the stream, the chat's view or the call's view. The AI SDK
    answer (``addToolOutput``, then POST /api/chat) settles it, and the resume calls
    the tool again with the answer and the state."""
    with server_thread(redis_url, agent(ASK, [shop_entry(shop.url)])) as server:
        api = await Api(server.base_url).login()
        try:
            response = await api.chat("form", [{"id": "u1", "role": "user",
                                                "parts": [{"type": "text", "text": "go"}]}])  # fmt: skip
            chunks = sse_chunks(response.text)
            card = widget(chunks)
            state = await sealed_state(redis, "form", card["toolCallId"])
            view = await api.http.get("/api/chats/form")
            one = await api.http.get(f"/api/chats/form/calls/{card['toolCallId']}")
            assert (await api.state("form"))["state"] == "parked"
            second = await api.chat("form", answered(chunks, NORTH, user="go"))
        finally:
            await api.aclose()
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
    assert card["kind"] == "mcp-form" and card["callKind"] == "client"
    assert card["render"]["requests"]["where"]["schema"]["required"] == ["w"]
    assert view.status_code == 200 and one.status_code == 200, one.text
    for shown in (response.text, view.text, one.text, second.text):
        assert private(shown, state)
    assert second.status_code == 200, second.text
    [result] = json.loads(said(sse_chunks(second.text)))
    assert result["result"]["content"][0]["text"] == "pan ships from north"
    assert shop.shop.answers == [
        ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
    ]


async def test_the_ag_ui_interrupt_shows_the_form_and_not_the_state(
    redis_url: str, redis: Redis, shop: McpServerThread
) -> None:
    with server_thread(redis_url, agent(ASK, [shop_entry(shop.url)])) as server:
        api = await Api(server.base_url).login()
        try:
            client = AguiClient(api, "agui-form")
            status, events, raw = await client.post(
                messages=[{"id": "u1", "role": "user", "content": "go"}]
            )
            state = await sealed_state(redis, "agui-form", _parked_id(events))
        finally:
            await api.aclose()
    assert status == 200, raw
    assert "mcp-form" in raw and "Which warehouse?" in raw
    assert private(raw, state)


async def test_a_forged_or_replayed_answer_never_reaches_the_server(
    redis_url: str, redis: Redis, shop: McpServerThread
) -> None:
    """Answers the server must never get: another user's (404, as for a chat that is not
    there), one the form does not accept (422), and the owner's own answer sent again
    after the resume called the server with it (the settle is idempotent, no second
    resume). One answer per round reaches the server, and the parked record is unchanged
    by each refusal."""
    with server_thread(redis_url, agent(ASK, [shop_entry(shop.url)])) as server:
        owner = await Api(server.base_url).login()
        intruder = await Api(server.base_url).login()
        try:
            chunks = sse_chunks((await owner.chat("forge", [{"id": "u1", "role": "user",
                                 "parts": [{"type": "text", "text": "go"}]}])).text)  # fmt: skip
            call_id = widget(chunks)["toolCallId"]
            record = await redis.hget(chat_keys("forge").calls, call_id)
            forged = {"outcome": "output", "output": NORTH}
            stolen = await intruder.settle("forge", call_id, forged)
            stolen_resume = await intruder.resume("forge")
            bad = await owner.settle("forge", call_id, {"outcome": "output", "output": {
                "responses": {"where": {"action": "accept", "content": {"w": 7}}}}})  # fmt: skip
            unchanged = await redis.hget(chat_keys("forge").calls, call_id)
            calls_before = list(shop.shop.answers)
            settled = await owner.settle("forge", call_id, forged)
            resumed = await owner.resume("forge")
            replayed = await owner.settle("forge", call_id, forged)
            replayed_resume = await owner.resume("forge")
        finally:
            await owner.aclose()
            await intruder.aclose()
    assert stolen.status_code == 404, stolen.text
    assert stolen.json()["error"]["code"] == "chat_not_found"
    assert stolen_resume.status_code == 404, stolen_resume.text
    assert bad.status_code == 422, bad.text
    assert unchanged == record
    assert calls_before == []  # nothing reached the server before the owner's answer
    assert settled.status_code == 200, settled.text
    assert resumed.status_code == 200, resumed.text
    assert "pan ships from north" in resumed.text
    assert replayed.status_code == 200 and replayed.json()["fresh"] is False, replayed.text
    assert replayed_resume.status_code == 409, replayed_resume.text
    assert replayed_resume.json()["error"]["code"] == "nothing_to_resume"
    assert shop.shop.answers == [
        ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
    ]


def _parked_id(events: list[dict[str, Any]]) -> str:
    for event in events:
        if event["type"] == "TOOL_CALL_START":
            return str(event["toolCallId"])
    raise AssertionError("no tool call")


@pytest.mark.slow
async def test_a_parked_form_cold_resumes_on_a_new_process_after_sigkill(
    redis_url: str, redis: Redis, shop: McpServerThread, tmp_path: Path
) -> None:
    """Process A parks the call and is killed with SIGKILL; process B, with its own
    session to the server, takes the answer and calls the tool again with the state."""
    del redis
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent(ASK, [shop_entry(shop.url)])))
    first = ParkwayProcess(redis_url, path).start()
    try:
        api = await Api(first.base_url).login()
        chunks = await api.say("cold-form", "go")
        await api.aclose()
    finally:
        first.kill()
    card = widget(chunks)
    assert card["kind"] == "mcp-form" and shop.shop.answers == []
    second = ParkwayProcess(redis_url, path).start()
    try:
        other = api.same_user(second.base_url)
        settled = await other.settle(
            "cold-form", card["toolCallId"], {"outcome": "output", "output": NORTH}
        )
        resumed = await other.resume("cold-form")
        await other.aclose()
    finally:
        second.stop()
    assert settled.status_code == 200, settled.text
    assert resumed.status_code == 200, resumed.text
    [result] = json.loads(said(sse_chunks(resumed.text)))
    assert result["result"]["content"][0]["text"] == "pan ships from north"
    assert shop.shop.answers == [
        ("pan", {"where": {"action": "accept", "content": {"w": "north"}}}, "opaque-pan")
    ]


# -- an older server's question during the call: the live wait ---------------------------

LIVE = [[call("shop__ask_live", {"item": "pan"})], [text("{{last_tool_results}}")]]
LIVE_NORTH = {"action": "accept", "content": {"warehouse": "north"}}


@pytest.fixture
def old() -> Iterator[McpServerThread]:
    """The shop as a server of the ``initialize`` era (2025-11-25)."""
    with McpServerThread(legacy=True) as server:
        yield server


async def test_a_live_question_is_answered_over_http_by_its_owner_only_and_once(
    redis_url: str, redis: Redis, old: McpServerThread
) -> None:
    """An older server's form during the call reaches the AI SDK stream as the
    ``data-parkway-live-input`` part. Its answer route refuses another user (404), a
    body too large (413), content the form does not take (422) and an unknown id (404);
    the owner's answer wins (200, again 200 for the same), a different one after it is
    409; the server gets the winner and the stream goes on to its result."""
    statuses: dict[str, tuple[int, str]] = {}
    with server_thread(redis_url, agent(LIVE, [shop_entry(old.url)])) as server:
        owner = await Api(server.base_url).login()
        intruder = await Api(server.base_url).login()
        lines: list[str] = []
        body = {"id": "live", "trigger": "submit-message", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]}  # fmt: skip
        try:
            async with owner.http.stream("POST", "/api/chat", json=body) as response:
                async for line in response.aiter_lines():
                    lines.append(line)
                    if '"data-parkway-live-input"' not in line or '"open"' not in line:
                        continue
                    part = json.loads(line.removeprefix("data:"))
                    url = (f"/api/chats/live/calls/{part['data']['toolCallId']}"
                           f"/live/{part['id']}")  # fmt: skip
                    tries = {
                        "intruder": (intruder, LIVE_NORTH),
                        "huge": (owner, {"action": "accept",
                                         "content": {"warehouse": "x" * 200_000}}),
                        "bad": (owner, {"action": "accept", "content": {"warehouse": 7}}),
                        "owner": (owner, LIVE_NORTH),
                        "again": (owner, LIVE_NORTH),
                        "other": (owner, {"action": "decline"}),
                    }  # fmt: skip
                    for name, (who, answer) in tries.items():
                        reply = await who.http.post(url, json=answer)
                        statuses[name] = (reply.status_code, reply.text)
                    unknown = await owner.http.post(
                        url.rsplit("/", 1)[0] + "/lq_AAAAAAAAAAAAAAAA", json=LIVE_NORTH
                    )
                    statuses["unknown"] = (unknown.status_code, unknown.text)
        finally:
            await owner.aclose()
            await intruder.aclose()
    chunks = sse_chunks("\n".join(lines))
    assert {k: v[0] for k, v in statuses.items()} == {
        "intruder": 404, "huge": 413, "bad": 422, "owner": 200, "again": 200,
        "other": 409, "unknown": 404,
    }, statuses  # fmt: skip
    assert json.loads(statuses["other"][1])["error"]["code"] == "live_question_closed"
    assert json.loads(statuses["owner"][1])["answer"] == LIVE_NORTH
    states = [c["data"]["state"] for c in chunks if c["type"] == "data-parkway-live-input"]
    assert states == ["open", "answered"]
    assert old.shop.live == [("accept", {"warehouse": "north"})]
    assert "pan ships from north" in said(chunks)


async def test_a_live_question_reaches_an_ag_ui_client_as_a_custom_event(
    redis_url: str, redis: Redis, old: McpServerThread
) -> None:
    """On the AG-UI wire the question is the ``parkway.data`` CUSTOM event named
    ``parkway-live-input``; answered through the same route, the run goes on."""
    with server_thread(redis_url, agent(LIVE, [shop_entry(old.url)])) as server:
        api = await Api(server.base_url).login()
        try:
            client = AguiClient(api, "agui-live")

            async def answer_when_asked() -> int:
                async def asked() -> list[Any] | None:
                    found = [k async for k in redis.scan_iter(
                        match=chat_keys("agui-live").live("*"))]  # fmt: skip
                    return found or None

                [key] = await eventually(asked, what="the live question")
                call_id = (await redis.hget(key, "call")).decode()
                live_id = key.decode().rsplit(":", 1)[1]
                reply = await api.http.post(
                    f"/api/chats/agui-live/calls/{call_id}/live/{live_id}", json=LIVE_NORTH
                )
                return reply.status_code

            answering = asyncio.create_task(answer_when_asked())
            status, events, raw = await client.post(
                messages=[{"id": "u1", "role": "user", "content": "go"}]
            )
            answered_status = await answering
        finally:
            await api.aclose()
    assert status == 200, raw
    assert answered_status == 200
    custom = [e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == "parkway.data"]
    live = [v["data"] for v in custom if v["name"] == "parkway-live-input"]
    assert [q["state"] for q in live] == ["open", "answered"]
    assert live[0]["message"] == "Where should the pan ship from?"
    assert old.shop.live == [("accept", {"warehouse": "north"})]
    assert "pan ships from north" in raw


@pytest.mark.slow
async def test_a_worker_killed_during_a_live_wait_leaves_a_definite_result_and_refuses_answers(
    redis_url: str, redis: Redis, old: McpServerThread, tmp_path: Path
) -> None:
    """SIGKILL while a live question waits: the server's question fails with the session
    (no answer ever reaches it), an answer posted once the dead worker stopped looking
    is refused (409), and the next turn on another worker reads the call's result as
    unknown, never a second run."""
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent(LIVE, [shop_entry(old.url)])))
    env = {"PARKWAY_LEASE_S": "1"}
    first = ParkwayProcess(redis_url, path, env=env).start()
    api = await Api(first.base_url).login()
    try:
        sending = asyncio.create_task(api.say("live-kill", "go", "u1"))

        async def asked() -> list[Any] | None:
            found = [k async for k in redis.scan_iter(match=chat_keys("live-kill").live("*"))]
            return found or None

        [key] = await eventually(asked, within_s=30, what="the live question")
        first.kill()
        with contextlib.suppress(httpx.HTTPError):
            await sending
    finally:
        first.kill()
    call_id = (await redis.hget(key, "call")).decode()
    url = f"/api/chats/live-kill/calls/{call_id}/live/{key.decode().rsplit(':', 1)[1]}"
    second = ParkwayProcess(redis_url, path, env=env).start()
    try:
        other = api.same_user(second.base_url)

        async def unseen() -> bool:  # the dead worker last looked LIVE_UNSEEN_MS ago
            seen = int(await redis.hget(key, "seen"))
            return time.time() * 1000 - seen > LIVE_UNSEEN_MS + 100

        await eventually(unseen, within_s=30, every_s=0.2, what="the wait unwatched")
        late = await other.http.post(url, json=LIVE_NORTH)
        await other.aclose()
        response = await turn_once_the_lease_lapses(
            api, second.base_url, "live-kill", "again", "u2"
        )
    finally:
        second.stop()
        await api.aclose()
    assert late.status_code == 409, late.text
    assert late.json()["error"]["code"] == "live_question_closed"
    assert response.status_code == 200, response.text
    [result] = json.loads(said(sse_chunks(response.text)))
    assert result["tool"] == "shop__ask_live"
    assert result["result"]["error"].startswith("result unknown")
    assert ("accept", {"warehouse": "north"}) not in old.shop.live


@pytest.mark.slow
async def test_a_parked_link_cold_resumes_on_a_new_process_after_sigkill(
    redis_url: str, old: McpServerThread, tmp_path: Path
) -> None:
    """An older server's -32042 parks the call on a link card; the worker is killed;
    on a new process the person's "I finished" settles it and the resume calls the
    tool again, whose result the model reads."""
    path = tmp_path / "agent.json"
    turns = [[call("shop__ask_url")], [text("{{last_tool_results}}")]]
    path.write_text(json.dumps(agent(turns, [shop_entry(old.url)])))
    first = ParkwayProcess(redis_url, path).start()
    try:
        api = await Api(first.base_url).login()
        chunks = await api.say("cold-link", "go")
        await api.aclose()
    finally:
        first.kill()
    card = widget(chunks)
    assert card["kind"] == "mcp-url" and old.shop.url_calls == 1
    second = ParkwayProcess(redis_url, path).start()
    try:
        other = api.same_user(second.base_url)
        done = {"outcome": "output", "output": {"responses": {"e-1": {"action": "accept"}}}}
        settled = await other.settle("cold-link", card["toolCallId"], done)
        resumed = await other.resume("cold-link")
        await other.aclose()
    finally:
        second.stop()
    assert settled.status_code == 200, settled.text
    assert resumed.status_code == 200, resumed.text
    [result] = json.loads(said(sse_chunks(resumed.text)))
    assert "authorised" in json.dumps(result["result"])
    assert old.shop.url_calls == 2


async def test_a_reload_during_a_live_wait_shows_the_question_again_and_can_answer_it(
    redis_url: str, redis: Redis, old: McpServerThread
) -> None:
    """A page reloaded while a call waits for its person follows the run
    (``resumeStream()``: GET /api/chat/{id}/stream): the question is in the message it
    rebuilds, the answer sent from there wins, and both streams end with the result."""
    with server_thread(redis_url, agent(LIVE, [shop_entry(old.url)])) as server:
        api = await Api(server.base_url).login()
        try:
            first = asyncio.create_task(api.say("reload-live", "go"))

            async def asked() -> list[Any] | None:
                found = [k async for k in redis.scan_iter(match=chat_keys("reload-live").live("*"))]
                return found or None

            await eventually(asked, what="the live question")
            lines: list[str] = []
            async with api.http.stream("GET", "/api/chat/reload-live/stream") as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    lines.append(line)
                    if '"data-parkway-live-input"' in line and '"open"' in line:
                        part = json.loads(line.removeprefix("data:"))
                        url = (f"/api/chats/reload-live/calls/{part['data']['toolCallId']}"
                               f"/live/{part['id']}")  # fmt: skip
                        answered_status = (await api.http.post(url, json=LIVE_NORTH)).status_code
            original = await first
        finally:
            await api.aclose()
    followed = sse_chunks("\n".join(lines))
    assert answered_status == 200
    for chunks in (followed, original):
        states = [c["data"]["state"] for c in chunks if c["type"] == "data-parkway-live-input"]
        assert states == ["open", "answered"]
        assert "pan ships from north" in said(chunks)
    assert old.shop.live == [("accept", {"warehouse": "north"})]
