"""Agent revisions, commit_config and the build kit over HTTP (issue 5's server side).

A real uvicorn and Redis: ``GET /api/agent`` with the build-kit overlay, direct commits
with optimistic concurrency, ``commit_config`` under the allow / ask / deny policies with
its ``data-committed-revision`` part, and the playground's working copy changing what a
run sees but never what is committed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import Runner
from parkway.runner.agent.revisions import AgentStore
from parkway.runner.agent.template import load_template
from parkway.runner.demo import DEMO_AGENT
from parkway.runner.llm.model import ModelEvent, ModelRequest, ModelTextDelta
from tests.helpers.runner_rig import RoundTrips, said, turn
from tests.helpers.support import (
    WEATHER_TOOL,
    Api,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

COMMIT_TOOL = {"type": "platform", "op": "commit_config"}
PATCH = {"summary": "say hello", "patch": {"instructions": "Say hello first."}}
TURNS = [
    [call("commit_config", PATCH)],
    [text("done: {{last_tool_results}}")],
    [text("next turn")],
]


def agent(policy: str | None = None, tools: list[Any] | None = None) -> dict[str, Any]:
    tool = dict(COMMIT_TOOL)
    if policy is not None:
        tool["needs_approval"] = policy
    return agent_doc(TURNS, tools=tools or [WEATHER_TOOL, tool])


@pytest.fixture
async def api_for(redis_url: str, redis: Redis) -> AsyncIterator[Any]:
    del redis
    servers: list[Any] = []
    clients: list[Api] = []

    async def make(doc: dict[str, Any], model: Any = None, **settings: Any) -> Api:
        context = server_thread(redis_url, doc, model=model, **settings)
        server = context.__enter__()
        servers.append(context)
        client = await Api(server.base_url).login()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
    for context in servers:
        context.__exit__(None, None, None)


class ToolNamesModel:
    """Answers with the names of the tools it was offered: what the run sees."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ModelTextDelta(",".join(t.name for t in request.tools))


async def approve_all(api: Api, chat: str, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    request = next(c for c in chunks if c["type"] == "tool-approval-request")
    issued = next(c for c in chunks if c["type"] == "tool-input-available")
    assistant = {
        "id": chunks[0]["messageId"],
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {
                "type": f"tool-{issued['toolName']}",
                "toolCallId": issued["toolCallId"],
                "state": "approval-responded",
                "input": issued["input"],
                "approval": {"id": request["approvalId"], "approved": True},
            },
        ],
    }
    response = await api.chat(chat, [user_message("change yourself"), assistant])
    assert response.status_code == 200, response.text
    return sse_chunks(response.text)


async def test_get_agent_serves_the_head_with_the_build_kit_overlay(api_for: Any) -> None:
    """The overlay is built from the registries: every platform op, every reserved
    workflow as an embed, the authoring skill and elevated sandbox permissions; only
    those the sandbox honours (it has no network, so no network permission is listed,
    as docs/code-mode.md says). The kit starts off for a user's own agent, and the first
    revision says where it came from."""
    api = await api_for(agent())
    response = await api.http.get("/api/agent")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["version"] == 1
    assert body["summary"] == "from the agent given to the server"
    assert body["template"]["tools"][0]["name"] == "get_weather"
    kit = body["additional_context"]["playground_build_kit"]
    overlay = kit["agent_template_overlay"]
    assert {"type": "platform", "op": "commit_config"} in overlay["tools"]
    assert {
        "@ag.embed": {"@ag.references": {"workflow": {"slug": "__ag__request_connection"}}}
    } in overlay["tools"]
    assert overlay["sandbox"]["permissions"] == {"filesystem": "workspace", "max_runtime_s": 60}
    assert overlay["skills"][0]["name"] == "agent-authoring"
    assert kit["on_by_default"] is False
    anonymous = Api(api.base_url)
    try:
        assert (await anonymous.http.get("/api/agent")).status_code == 401
    finally:
        await anonymous.aclose()


async def test_the_build_kit_starts_on_for_the_built_in_demo_only(api_for: Any) -> None:
    """The demo shows what the kit does, so its kit starts on; its first revision says
    it is the built-in demo's."""
    api = await api_for(DEMO_AGENT)
    body = (await api.http.get("/api/agent")).json()
    assert body["additional_context"]["playground_build_kit"]["on_by_default"] is True
    assert body["summary"] == "from the built-in demo agent"


async def test_direct_commit_is_versioned_and_refuses_stale_or_unsafe_changes(
    api_for: Any,
) -> None:
    """A commit lands on the version the user read (409 otherwise); it cannot bring a
    function tool the agent does not have (it would name server code); an invalid
    template is a 422. New turns run the new head."""
    api = await api_for(agent())
    head = (await api.http.get("/api/agent")).json()
    changed = {**head["template"], "instructions": "Be brief."}
    ok = await api.http.post(
        "/api/agent/commit",
        json={"template": changed, "expectedVersion": 1, "summary": "brief"},
    )
    assert ok.status_code == 201, ok.text
    assert ok.json()["version"] == 2
    stale = await api.http.post(
        "/api/agent/commit", json={"template": changed, "expectedVersion": 1}
    )
    assert stale.status_code == 409
    evil = {
        **changed,
        "tools": [*changed["tools"], {"type": "function", "name": "x", "ref": "os:system"}],
    }
    refused = await api.http.post(
        "/api/agent/commit", json={"template": evil, "expectedVersion": 2}
    )
    assert refused.status_code == 422
    assert "function tool 'x' differs" in refused.json()["error"]["message"]
    broken = await api.http.post(
        "/api/agent/commit",
        json={"template": {**changed, "tools": [{"type": "nope"}]}, "expectedVersion": 2},
    )
    assert broken.status_code == 422
    now = (await api.http.get("/api/agent")).json()
    assert now["version"] == 2
    assert now["template"]["instructions"] == "Be brief."
    assert [r["version"] for r in now["revisions"]] == [2, 1]


async def test_commit_config_asks_by_default_and_publishes_the_revision(api_for: Any) -> None:
    """The agent's own commit parks an approval; once approved it commits on the head and
    the stream carries data-committed-revision {agentId, revisionId, version}."""
    api = await api_for(agent())
    chunks = await api.say("c-ask", "change yourself")
    assert any(c["type"] == "tool-approval-request" for c in chunks)
    assert (await api.http.get("/api/agent")).json()["version"] == 1
    after = await approve_all(api, "c-ask", chunks)
    [part] = [c for c in after if c["type"] == "data-committed-revision"]
    head = (await api.http.get("/api/agent")).json()
    assert part["data"] == {
        "agentId": head["agentId"],
        "revisionId": head["revisionId"],
        "version": 2,
    }
    assert head["template"]["instructions"] == "Say hello first."
    assert head["revisions"][0]["committedBy"] == "agent"
    assert head["revisions"][0]["committedByYou"] is True


async def test_commit_config_policies_allow_and_deny(api_for: Any) -> None:
    """``allow`` commits without asking (and still publishes the revision); ``deny``
    refuses without asking, and nothing is committed."""
    allowed = await api_for(agent("allow"))
    chunks = await allowed.say("c-allow", "change yourself")
    assert not any(c["type"] == "tool-approval-request" for c in chunks)
    assert [c["data"]["version"] for c in chunks if c["type"] == "data-committed-revision"] == [2]

    denied = await api_for(agent("deny", tools=[COMMIT_TOOL | {"needs_approval": "deny"}]))
    chunks = await denied.say("c-deny", "change yourself")
    assert not any(c["type"] == "tool-approval-request" for c in chunks)
    errors = [c for c in chunks if c["type"] == "tool-output-error"]
    assert errors and "approval policy is 'deny'" in errors[0]["errorText"]
    assert (await denied.http.get("/api/agent")).json()["version"] == 1


async def test_working_copy_changes_the_run_but_never_the_commit(api_for: Any) -> None:
    """The playground sends its working copy (the build kit laid over the template) with
    a turn: the run sees its tools; the committed agent stays as it was. A working copy
    may not smuggle in a function tool."""
    api = await api_for(agent_doc([], tools=[WEATHER_TOOL]), model=ToolNamesModel())
    head = (await api.http.get("/api/agent")).json()
    kit = head["additional_context"]["playground_build_kit"]["agent_template_overlay"]
    working = {**head["template"], "tools": [*head["template"]["tools"], *kit["tools"]]}
    response = await api.chat("c-kit", [user_message("hi")], agentTemplate=working)
    assert response.status_code == 200, response.text
    seen = "".join(c.get("delta", "") for c in sse_chunks(response.text))
    # every registered platform op is in the kit, then the reserved workflows
    assert seen == (
        "get_weather,commit_config,execute_code,list_functions,save_function,request_connection"
    )
    plain = await api.say("c-plain", "hi")
    assert "".join(c.get("delta", "") for c in plain) == "get_weather"
    after = (await api.http.get("/api/agent")).json()
    assert after["version"] == 1
    assert after["template"] == head["template"]
    smuggled = {
        **head["template"],
        "tools": [{"type": "function", "name": "x", "ref": "os:getcwd"}],
    }
    refused = await api.chat("c-kit-2", [user_message("hi")], agentTemplate=smuggled)
    assert refused.status_code == 422


async def test_a_new_agent_file_is_committed_once_as_a_new_revision(redis: Redis) -> None:
    """Seeding: the agent file becomes version 1; a restart with the same file adds
    nothing; a deploy with a changed file commits it as the next revision."""
    first = {"instructions": "one", "tools": []}
    store = AgentStore(redis, "seeded", first)
    assert (await store.ensure_seeded()).version == 1
    assert (await AgentStore(redis, "seeded", first).ensure_seeded()).version == 1
    second = {"instructions": "two", "tools": []}
    assert (await AgentStore(redis, "seeded", second).ensure_seeded()).version == 2
    template = await AgentStore(redis, "seeded", second).current_template()
    assert template.instructions == "two"
    assert load_template(first).digest != template.digest


async def test_editing_is_off_by_default_with_a_shared_redis(api_for: Any) -> None:
    """With an external Redis the agent is shared by every user (and anyone can get a
    session), so commits, working copies and commit_config are refused unless the
    operator turns agent_editing on."""
    api = await api_for(agent("allow"), agent_editing=None)
    head = (await api.http.get("/api/agent")).json()
    assert head["editable"] is False
    refused = await api.http.post(
        "/api/agent/commit", json={"template": head["template"], "expectedVersion": 1}
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "agent_editing_off"
    working = await api.chat("c-off", [user_message("hi")], agentTemplate=head["template"])
    assert working.status_code == 403
    chunks = await api.say("c-off-2", "change yourself")
    errors = [c for c in chunks if c["type"] == "tool-output-error"]
    assert errors and "agent editing is off" in errors[0]["errorText"]
    assert (await api.http.get("/api/agent")).json()["version"] == 1


async def test_a_commit_cannot_loosen_an_operator_function_tool(api_for: Any) -> None:
    """Only a tool's description may change: its approval policy, edits and code are the
    operator's (a commit or working copy turning approval off is refused)."""
    api = await api_for(agent_doc([], tools=[WEATHER_TOOL | {"needs_approval": True}]))
    head = (await api.http.get("/api/agent")).json()
    [tool] = head["template"]["tools"]
    loosened = {**head["template"], "tools": [{**tool, "needs_approval": False}]}
    refused = await api.http.post(
        "/api/agent/commit", json={"template": loosened, "expectedVersion": 1}
    )
    assert refused.status_code == 422
    assert (
        await api.chat("c-loose", [user_message("hi")], agentTemplate=loosened)
    ).status_code == 422
    described = {**head["template"], "tools": [{**tool, "description": "Weather, kindly."}]}
    ok = await api.http.post(
        "/api/agent/commit", json={"template": described, "expectedVersion": 1}
    )
    assert ok.status_code == 201, ok.text
    stale = await api.http.post(
        "/api/agent/commit", json={"template": described, "expectedVersion": 1}
    )
    assert stale.status_code == 409
    assert stale.json()["error"]["currentVersion"] == 2


class InstructionsModel:
    """Answers with its instructions: which revision of the agent the turn ran on."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ModelTextDelta(request.instructions)


async def test_a_turn_checks_the_agents_head_in_its_claim(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that has read the agent's head starts the next turn in one round trip,
    its claim checking that the head has not moved; a revision committed through another
    worker since is what the next turn of any chat runs on."""
    seed = {"instructions": "one", "tools": []}
    runner = Runner(
        redis, InstructionsModel(), load_template(seed), agents=AgentStore(redis, "heads", seed)
    )
    assert said(await turn(runner, "h1", uid="u1")) == "one"
    trips = RoundTrips(monkeypatch)
    run = await runner.start_turn("h1", "alice", "again", user_message_id="u2")
    assert trips.count == 1
    assert said(await run.collect()) == "one"
    elsewhere = AgentStore(redis, "heads", seed)
    revision = await elsewhere.commit(
        {"instructions": "two", "tools": []}, expected_version=1, by="user:bob",
        summary="two", editor=True,
    )  # fmt: skip
    assert revision.version == 2
    assert said(await turn(runner, "h1", uid="u3")) == "two"
    assert said(await turn(runner, "h2", uid="u4")) == "two"
