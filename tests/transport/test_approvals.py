"""Approvals answered by someone other than the requester, over HTTP (issue 28).

A real uvicorn and Redis. Two sessions are two principals: the requester (an anonymous
session from ``POST /api/sessions``) and an approver (a principal the ``approvers``
setting names). The approver finds the call in ``GET /api/approvals`` and answers it
through the settle route; the requester is refused on every route; the chat resumes as
before and its stream says who decided.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.transport.api import separate_approvals
from parkway.transport.api.sessions import SessionAuthenticator
from parkway.transport.settings import Settings
from tests.helpers.support import (
    PUBLISH_TOOL,
    TEST_SECRET,
    Api,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

APPROVER = "usr_named-approver"
FOUR_EYES = {**PUBLISH_TOOL, "approvers": "approver", "self_approval": False}
AGENT = agent_doc(
    [[call("publish", {"title": "Hello"})], [text("Result: {{last_tool_results}}")]] * 8,
    tools=[FOUR_EYES],
)


@pytest.fixture
async def site(redis_url: str, redis: Redis) -> AsyncIterator[tuple[Api, Api, Api]]:
    """A server, a requester, an approver and a stranger (a second anonymous session)."""
    del redis
    with server_thread(redis_url, AGENT, approvers=(APPROVER,)) as server:
        requester = await Api(server.base_url).login()
        stranger = await Api(server.base_url).login()
        approver = Api(server.base_url)
        approver.principal, approver.token = SessionAuthenticator(TEST_SECRET).issue(APPROVER)
        approver.http.headers["authorization"] = f"Bearer {approver.token}"
        try:
            yield requester, approver, stranger
        finally:
            for api in (requester, approver, stranger):
                await api.aclose()


async def _park(api: Api, chat_id: str) -> dict[str, Any]:
    chunks = await api.say(chat_id, "publish please")
    [request] = [c for c in chunks if c["type"] == "tool-approval-request"]
    return request


async def test_an_approver_answers_and_the_requester_cannot(site: tuple[Api, Api, Api]) -> None:
    """The approver sees the call in their queue and approves it through the settle route;
    the requester's own answer (settle route, or an AI SDK approval response in a chat
    POST) is 403 approval_by_others and changes nothing; a stranger gets 404. The chat
    resumes as before, its stream names who decided, and the audit names the approver."""
    requester, approver, stranger = site
    request = await _park(requester, "four-eyes")
    call_id = request["toolCallId"]

    queue = (await approver.http.get("/api/approvals")).json()
    [item] = queue["approvals"]
    assert item["chatId"] == "four-eyes" and item["toolCallId"] == call_id
    assert item["input"] == {"title": "Hello"} and item["requestedBy"] == requester.principal
    assert item["deadline"] > item["createdAt"]
    assert (await requester.http.get("/api/approvals")).json()["approvals"] == []
    assert (await stranger.http.get("/api/approvals")).json()["approvals"] == []

    refused = await requester.settle("four-eyes", call_id, {"outcome": "approved"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "approval_by_others"
    state = await requester.state("four-eyes")
    assert state["calls"][0]["status"] == "pending"
    assert state["calls"][0]["requestedBy"] == requester.principal
    assert (await stranger.settle("four-eyes", call_id, {"outcome": "approved"})).status_code == 404

    # the approver reads the call, not the chat
    view = await approver.http.get(f"/api/chats/four-eyes/calls/{call_id}")
    assert view.status_code == 200 and view.json()["input"] == {"title": "Hello"}
    assert (await approver.http.get("/api/chats/four-eyes")).status_code == 404

    answered = await approver.settle("four-eyes", call_id, {"outcome": "approved"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["outcome"] == {"outcome": "approved", "by": APPROVER}
    assert (await approver.http.get("/api/approvals")).json()["approvals"] == []

    resumed = await requester.resume("four-eyes")
    assert resumed.status_code == 200
    chunks = sse_chunks(resumed.text)
    [decision] = [c for c in chunks if c["type"] == "data-parkway-decision"]
    assert decision["data"] == {"toolCallId": call_id, "outcome": "approved", "by": APPROVER}
    assert any(c["type"] == "tool-output-available" for c in chunks)

    audit = (await requester.http.get("/api/chats/four-eyes/audit")).json()
    [entry] = audit["entries"]
    assert entry["principal"] == APPROVER and entry["outcome"] == "approved"


async def test_the_requester_cannot_answer_in_a_chat_post(site: tuple[Api, Api, Api]) -> None:
    """An AI SDK client resends the approval response in the next POST /api/chat: for an
    approval left to someone else that is a 403 with a clear error, nothing settled."""
    requester, _, _ = site
    request = await _park(requester, "post-answer")
    part = {
        "type": "tool-publish",
        "toolCallId": request["toolCallId"],
        "state": "approval-responded",
        "input": {"title": "Hello"},
        "approval": {"id": request["approvalId"], "approved": True},
    }
    messages = [
        user_message("publish please"),
        {"id": "a1", "role": "assistant", "parts": [part]},
    ]
    response = await requester.chat("post-answer", messages)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "approval_by_others"
    # ... nor with a new message alongside it
    messages.append(user_message("and now?", "u2"))
    response = await requester.chat("post-answer", messages)
    assert response.status_code == 403
    state = await requester.state("post-answer")
    assert state["calls"][0]["status"] == "pending"


async def test_the_queue_pages_newest_first_and_forgets_what_is_settled(
    site: tuple[Api, Api, Api],
) -> None:
    """The approver's queue lists the approvals they may answer across chats, newest
    first, a page at a time; one settled (by them) or superseded leaves it."""
    requester, approver, stranger = site
    ids = []
    for i in range(5):
        owner = requester if i % 2 == 0 else stranger
        ids.append((f"q{i}", (await _park(owner, f"q{i}"))["toolCallId"]))
    seen: list[tuple[str, str]] = []
    after = None
    while True:
        query = {"limit": 2} if after is None else {"limit": 2, "after": after}
        page = (await approver.http.get("/api/approvals", params=query)).json()
        assert len(page["approvals"]) <= 2
        seen += [(a["chatId"], a["toolCallId"]) for a in page["approvals"]]
        after = page["next"]
        if after is None:
            break
    assert seen == ids[::-1]
    bad = await approver.http.get("/api/approvals", params={"after": "not-a-cursor"})
    assert bad.status_code == 400

    assert (await approver.settle("q4", ids[4][1], {"outcome": "denied"})).status_code == 200
    await requester.say("q2", "never mind", "u2")  # a new message supersedes the call
    left = (await approver.http.get("/api/approvals")).json()["approvals"]
    assert [a["chatId"] for a in left] == ["q3", "q1", "q0"]


@pytest.mark.parametrize(
    ("settings", "separate"),
    [
        ({}, False),  # `make run`: the embedded Redis on loopback, a local playground
        ({"host": "0.0.0.0"}, True),
        ({"redis_url": "redis://127.0.0.1:6379/0"}, True),
        ({"public_url": "https://agents.example.com"}, True),
        ({"host": "0.0.0.0", "code_self_approval": True}, False),
        ({"code_self_approval": False}, True),
    ],
)
def test_code_is_approved_by_others_except_on_a_local_playground(
    settings: dict[str, Any], separate: bool
) -> None:
    """Where the server is shared, execute_code and save_function default to approval
    by someone other than their requester; a local playground keeps today's behaviour;
    the operator may say otherwise (``code_self_approval``)."""
    assert separate_approvals(Settings(**settings)) is separate
