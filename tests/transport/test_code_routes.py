"""Code Mode over HTTP against a real uvicorn: artifact downloads for the chat's owner
only, the agent library's routes, the sandbox's status for a session, and the review
widget's descriptor (highlighted, escaped code; the isolation in force)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from parkway.runner.canonical import canonical_json
from parkway.runner.demo import get_sales
from parkway.transport.api.sessions import SessionAuthenticator
from tests.helpers.support import (
    TEST_SECRET,
    Api,
    ServerThread,
    agent_doc,
    call,
    server_thread,
    text,
)

SALES_TOOL = {"type": "function", "name": "get_sales", "ref": "parkway.runner.demo:get_sales"}
CODE_TOOL = {"type": "platform", "op": "execute_code"}
PROGRAM = 'print("<script>alert(1)</script>")\nresult(len(args))\n'


@pytest.fixture
def server(redis_url: str, redis: Redis) -> Iterator[ServerThread]:
    del redis  # a clean database, and the keyspace check afterwards
    doc = agent_doc(
        [
            [call("get_sales", {"month": "2026-10"})],
            [call("execute_code", {"code": PROGRAM, "args": [1, 2], "limits": {"memory_mb": 128}})],
            [text("done")],
        ],
        tools=[SALES_TOOL, CODE_TOOL, {"type": "platform", "op": "list_functions"}],
    )
    doc["template"]["sandbox"] = {"permissions": {"max_runtime_s": 30}}
    with server_thread(redis_url, doc) as running:
        yield running


def parts(chunks: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in chunks if c["type"] == kind]


async def test_artifacts_download_for_the_owner_only(server: ServerThread) -> None:
    alice, mallory = await Api(server.base_url).login(), await Api(server.base_url).login()
    try:
        chunks = await alice.say("sales", "summarise October")
        [output] = parts(chunks, "tool-output-available")
        reference = output["output"]
        artifact_id = reference["artifact_id"]
        listed = (await alice.http.get("/api/chats/sales/artifacts")).json()["artifacts"]
        assert [(a["artifact_id"], a["source"], a["bytes"]) for a in listed] == [
            (artifact_id, "get_sales", reference["bytes"])
        ]
        got = await alice.http.get(f"/api/chats/sales/artifacts/{artifact_id}")
        assert got.status_code == 200
        assert got.content == canonical_json(get_sales({"month": "2026-10"})).encode()
        assert got.headers["content-type"].startswith("application/json")
        assert got.headers["content-disposition"] == f'attachment; filename="{artifact_id}.json"'
        assert got.headers["x-content-type-options"] == "nosniff"
        # another principal, an unknown id, a malformed id: all missing, none leaks
        for client, path in (
            (mallory, f"/api/chats/sales/artifacts/{artifact_id}"),
            (mallory, "/api/chats/sales/artifacts"),
            (alice, "/api/chats/sales/artifacts/art_AAAAAAAAAAAAAAAA"),
            (alice, "/api/chats/sales/artifacts/..%2Fmeta"),
        ):
            response = await client.http.get(path)
            assert response.status_code == 404, (path, response.text)
            # (a path that is not an artifact id matches no route: plain not_found)
            assert response.json()["error"]["code"] in {
                "chat_not_found",
                "artifact_not_found",
                "not_found",
            }
        anonymous = httpx.get(f"{server.base_url}/api/chats/sales/artifacts/{artifact_id}")
        assert anonymous.status_code == 401
    finally:
        await alice.aclose()
        await mallory.aclose()


async def test_the_code_review_widget_carries_escaped_highlighted_code_and_the_isolation(
    server: ServerThread,
) -> None:
    """The approval of execute_code is drawn by kind ``code``: the program as
    highlighted lines whose text is escaped (it is inserted as HTML), the sandbox's
    status, and where the chat's artifacts are listed; the chat's state says the same."""
    api = await Api(server.base_url).login()
    try:
        chunks = await api.say("review", "go")
        [widget] = [c["data"] for c in parts(chunks, "data-parkway-widget")]
        assert widget["kind"] == "code" and widget["tool"] == "execute_code"
        assert widget["allowEdits"] is True and widget["callKind"] == "approval"
        lines = widget["codeLines"]
        assert len(lines) == 2
        assert "&lt;script&gt;" in lines[0] and "<script>" not in lines[0]
        assert '<span class="tok-nb">print</span>' in lines[0]
        assert widget["artifactsUrl"] == f"/api/chats/review/calls/{widget['toolCallId']}/artifacts"
        assert set(widget["sandbox"]) >= {"available", "isolation", "limits"}
        # the run's own limits: the template's runtime, the call's lower memory
        limits = widget["sandbox"]["limits"]
        assert (limits["wall_s"], limits["memory_bytes"]) == (30, 128 * 2**20)
        # and the server's own, which the card compares them with
        assert widget["sandbox"]["serverLimits"]["wall_s"] == 10
        assert "render" not in widget
        [stored] = (await api.state("review"))["calls"]
        assert stored["widget"] == widget
    finally:
        await api.aclose()


async def test_a_code_review_fetched_again_is_the_same_widget_and_its_state_is_current(
    server: ServerThread,
) -> None:
    """The review's highlighting is kept between requests (widgets_api/descriptors.py):
    every GET of the call or its chat shows the widget the stream showed, a settle shows
    at once in the call's status and outcome, and a principal who may not read the chat
    gets nothing of it."""
    alice, mallory = await Api(server.base_url).login(), await Api(server.base_url).login()
    try:
        chunks = await alice.say("again", "go")
        [widget] = [c["data"] for c in parts(chunks, "data-parkway-widget")]
        path = f"/api/chats/again/calls/{widget['toolCallId']}"
        for _ in range(2):
            pending = (await alice.http.get(path)).json()
            assert pending["status"] == "pending" and pending["widget"] == widget
            [stored] = (await alice.state("again"))["calls"]
            assert stored["widget"] == widget
        for client, where in ((mallory, path), (mallory, "/api/chats/again")):
            response = await client.http.get(where)
            assert response.status_code == 404 and "codeLines" not in response.text
        settled = await alice.settle("again", widget["toolCallId"], {"outcome": "denied"})
        assert settled.status_code == 200, settled.text
        after = (await alice.http.get(path)).json()
        assert after["status"] == "settled" and after["outcome"]["outcome"] == "denied"
        assert after["widget"] == widget
    finally:
        await alice.aclose()
        await mallory.aclose()


async def test_a_session_reads_the_sandbox_without_its_versions_and_paths(
    server: ServerThread,
) -> None:
    """The playground's code panel shows whether this server runs code and how; the
    sandbox's versions and paths on the host (the isolation's detail) stay in the server,
    and a caller with no session reads nothing."""
    assert httpx.get(f"{server.base_url}/api/sandbox").status_code == 401
    api = await Api(server.base_url).login()
    try:
        response = await api.http.get("/api/sandbox")
    finally:
        await api.aclose()
    assert response.status_code == 200, response.text
    sandbox = response.json()
    assert sandbox["provider"] == "bwrap"
    assert set(sandbox) == {"provider", "available", "confined", "isolation", "reason", "limits"}
    assert sandbox["limits"]["wall_s"] == 10
    if sandbox["available"]:
        assert sandbox["confined"] and "net" in " ".join(sandbox["isolation"]["layers"])
        assert set(sandbox["isolation"]) == {"provider", "confined", "layers"}
    else:
        assert sandbox["reason"]


async def test_the_library_routes_list_versions_and_refuse_unknown_names(
    server: ServerThread, redis: Redis
) -> None:
    del redis
    api = await Api(server.base_url).login()
    try:
        assert (await api.http.get("/api/agent/library")).json() == {"functions": []}
        for path in ("/api/agent/library/nope", "/api/agent/library/Bad%20Name"):
            response = await api.http.get(path)
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "function_not_found"
    finally:
        await api.aclose()


APPROVER = "usr_code-reviewer"
REVIEWED_AGENT = agent_doc(
    [
        [call("get_sales", {"month": "2026-09"})],
        [call("get_sales", {"month": "2026-10"})],
        [
            call(
                "execute_code",
                {"code": PROGRAM, "inputs": {"oct": "{{result.get_sales.artifact_id}}"}},
            )
        ],
        [text("done")],
    ],
    tools=[SALES_TOOL, CODE_TOOL],
)


async def test_an_approver_reads_exactly_the_artifacts_the_code_it_reviews_mounts(
    redis_url: str, redis: Redis
) -> None:
    """A reviewer who may not see the code's inputs cannot judge it: the approver of an
    execute_code call (code_self_approval off, so it is left to the approver role) reads
    the artifacts that call mounts, through the call, read-only. Nothing else of the chat:
    not its other artifact, not the chat's own artifact routes; a principal who may not
    answer the call gets 404, as for every route of someone else's chat."""
    del redis
    with server_thread(
        redis_url, REVIEWED_AGENT, code_self_approval=False, approvers=(APPROVER,)
    ) as server:
        alice, mallory = await Api(server.base_url).login(), await Api(server.base_url).login()
        _, token = SessionAuthenticator(TEST_SECRET).issue(APPROVER)
        approver = httpx.AsyncClient(
            base_url=server.base_url, headers={"authorization": f"Bearer {token}"}, timeout=30
        )
        try:
            chunks = await alice.say("reviewed", "compare the months")
            outputs = [c["output"] for c in parts(chunks, "tool-output-available")]
            other_id, mounted_id = (o["artifact_id"] for o in outputs)  # September, October
            [widget] = [c["data"] for c in parts(chunks, "data-parkway-widget")]
            assert widget["kind"] == "code" and widget["approvers"] == "approver"
            listed_by_owner = (await alice.http.get("/api/chats/reviewed/artifacts")).json()
            assert len(listed_by_owner["artifacts"]) == 2

            # the approver finds the call in their queue, and its inputs through it
            [queued] = (await approver.get("/api/approvals")).json()["approvals"]
            url = queued["widget"]["artifactsUrl"]
            assert url == f"/api/chats/reviewed/calls/{widget['toolCallId']}/artifacts"
            listed = (await approver.get(url)).json()["artifacts"]
            assert [a["artifact_id"] for a in listed] == [mounted_id]
            got = await approver.get(f"{url}/{mounted_id}")
            assert got.status_code == 200
            assert got.content == canonical_json(get_sales({"month": "2026-10"})).encode()
            assert got.headers["content-disposition"] == f'attachment; filename="{mounted_id}.json"'
            assert got.headers["cache-control"] == "private, no-store"

            # nothing else of the chat, and nothing for anyone else
            for client, path in (
                (approver, f"{url}/{other_id}"),
                (approver, f"{url}/art_AAAAAAAAAAAAAAAA"),
                (approver, "/api/chats/reviewed/artifacts"),
                (approver, f"/api/chats/reviewed/artifacts/{mounted_id}"),
                (mallory.http, url),
                (mallory.http, f"{url}/{mounted_id}"),
            ):
                answer = await client.get(path)
                assert answer.status_code == 404, (path, answer.text)
                assert "preview" not in answer.text
            # read-only: the routes take no writes
            assert (await approver.post(url)).status_code == 405
            # the owner reads them through the call too
            assert (await alice.http.get(f"{url}/{mounted_id}")).status_code == 200
        finally:
            await approver.aclose()
            await alice.aclose()
            await mallory.aclose()
