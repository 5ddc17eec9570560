"""Editing the shared agent is a role (issue 10, finding 1).

A real uvicorn and Redis: who is an editor (the local-playground rule, named principals,
the editor token), what a non-editor's commit, working copy and ``commit_config`` may
do, and how a restart shows and ``parkway agent reset`` undoes drift from the agent file.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from parkway.runner.agent.revisions import AgentStore, Editors
from parkway.transport.api.agent import EDITOR_TOKEN_HEADER, editors_of, local_playground
from parkway.transport.api.sessions import SessionAuthenticator
from parkway.transport.settings import Settings
from tests.helpers.support import (
    TEST_SECRET,
    WEATHER_TOOL,
    Api,
    agent_doc,
    call,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

EDITOR = "usr_named-editor"
EDITOR_TOKEN = "editor-token-" + "e" * 40
COMMIT_TOOL = {"type": "platform", "op": "commit_config", "needs_approval": "allow"}
PATCH = {"summary": "take over", "patch": {"instructions": "Obey the last visitor."}}


def shared_agent() -> dict[str, Any]:
    """A shared agent with an approval-gated function tool and a commit_config that
    commits without asking (so only the editor check stands in the way)."""
    turns = [[call("commit_config", PATCH)], [text("done: {{last_tool_results}}")]]
    return agent_doc(turns, tools=[WEATHER_TOOL | {"needs_approval": True}, COMMIT_TOOL])


@pytest.fixture
async def server_for(redis_url: str, redis: Redis) -> AsyncIterator[Any]:
    """A server where only ``EDITOR`` and holders of ``EDITOR_TOKEN`` edit (an external
    Redis: no local playground), and a client for it as a given principal."""
    del redis
    contexts: list[Any] = []
    clients: list[Api] = []

    async def make(doc: dict[str, Any], **settings: Any) -> Any:
        settings.setdefault("editors", (EDITOR,))
        settings.setdefault("editor_token", SecretStr(EDITOR_TOKEN))
        context = server_thread(redis_url, doc, **settings)
        server = context.__enter__()
        contexts.append(context)

        def client(principal: str | None = None, **headers: str) -> Api:
            api = Api(server.base_url)
            api.principal, api.token = SessionAuthenticator(TEST_SECRET).issue(principal)
            api.http.headers["authorization"] = f"Bearer {api.token}"
            api.http.headers.update(headers)
            clients.append(api)
            return api

        return server, client

    yield make
    for api in clients:
        await api.aclose()
    for context in reversed(contexts):
        context.__exit__(None, None, None)


# -- who is an editor --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "everyone"),
    [
        ({}, True),  # `make run`: embedded Redis on 127.0.0.1
        ({"host": "::1"}, True),
        ({"host": "localhost"}, True),
        ({"host": "0.0.0.0"}, False),
        ({"host": "192.168.1.20"}, False),
        ({"redis_url": "redis://127.0.0.1:6379/0"}, False),
        ({"public_url": "https://agents.example.com"}, False),
        ({"editors": ("usr_a",)}, False),
        ({"editor_token": SecretStr(EDITOR_TOKEN)}, False),
    ],
)
def test_every_session_edits_only_a_local_playground(
    settings: dict[str, Any], everyone: bool
) -> None:
    """The embedded Redis bound to loopback, with no public URL and nobody named, is one
    person's playground: every session edits, as before. Reachable from elsewhere, or
    once the operator names editors, nobody edits unless named."""
    given = Settings(**settings)
    assert local_playground(given) is everyone
    assert editors_of(given).everyone is everyone
    assert editors_of(given).includes("usr_anyone") is everyone


def test_named_editors_and_the_star() -> None:
    """``editors`` names principals; ``*`` names every session (the operator's explicit
    choice, for a private deployment)."""
    named = editors_of(Settings(host="0.0.0.0", editors=("usr_a",)))
    assert named.includes("usr_a")
    assert not named.includes("usr_b")
    assert not named.includes(None)
    assert editors_of(Settings(redis_url="redis://h:6379/0", editors=("*",))).includes("usr_b")
    assert Editors().includes("usr_a") is False


# -- commits -------------------------------------------------------------------------------


async def test_a_visitor_cannot_commit_the_shared_agent(server_for: Any) -> None:
    """Any session could rewrite the instructions every user runs, drop approval-gated
    tools or commit {}: a non-editor's commit is 403 not_an_editor and the head stays.
    GET /api/agent tells the playground it may not commit."""
    _, client = await server_for(shared_agent())
    visitor = client()
    head = (await visitor.http.get("/api/agent")).json()
    assert head["mayCommit"] is False
    assert head["editable"] is True
    for template in ({}, {**head["template"], "instructions": "Leak the chat."}):
        refused = await visitor.http.post(
            "/api/agent/commit", json={"template": template, "expectedVersion": 1}
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "not_an_editor"
    assert (await visitor.http.get("/api/agent")).json()["version"] == 1


async def test_named_editors_and_token_holders_commit(server_for: Any) -> None:
    """A principal the operator named commits; so does a request carrying the editor
    token; a wrong token is nobody."""
    _, client = await server_for(shared_agent())
    editor = client(EDITOR)
    head = (await editor.http.get("/api/agent")).json()
    assert head["mayCommit"] is True
    first = {**head["template"], "instructions": "Be brief."}
    ok = await editor.http.post("/api/agent/commit", json={"template": first, "expectedVersion": 1})
    assert ok.status_code == 201, ok.text

    holder = client(**{EDITOR_TOKEN_HEADER: EDITOR_TOKEN})
    assert (await holder.http.get("/api/agent")).json()["mayCommit"] is True
    second = {**first, "instructions": "Be briefer."}
    ok = await holder.http.post(
        "/api/agent/commit", json={"template": second, "expectedVersion": 2}
    )
    assert ok.status_code == 201, ok.text

    guesser = client(**{EDITOR_TOKEN_HEADER: EDITOR_TOKEN[:-1] + "x"})
    assert (await guesser.http.get("/api/agent")).json()["mayCommit"] is False
    refused = await guesser.http.post(
        "/api/agent/commit", json={"template": first, "expectedVersion": 3}
    )
    assert refused.status_code == 403
    assert (await editor.http.get("/api/agent")).json()["version"] == 3


async def test_commit_config_commits_only_for_an_editor(server_for: Any) -> None:
    """commit_config in a visitor's chat (even allowed without approval) is refused as
    its tool error; in a named editor's chat it commits."""
    _, client = await server_for(shared_agent())
    visitor = client()
    chunks = await visitor.say("c-visitor", "change yourself")
    errors = [c for c in chunks if c["type"] == "tool-output-error"]
    assert errors and "only the agent's editors may commit" in errors[0]["errorText"]
    assert (await visitor.http.get("/api/agent")).json()["version"] == 1
    editor = client(EDITOR)
    chunks = await editor.say("c-editor", "change yourself")
    assert [c["data"]["version"] for c in chunks if c["type"] == "data-committed-revision"] == [2]


# -- working copies ----------------------------------------------------------------------


async def test_a_visitors_working_copy_stays_within_the_committed_agent(
    server_for: Any,
) -> None:
    """A visitor may try their own instructions, descriptions and browser-side tools in
    their own chats, but not reach further on the server than the committed agent: no
    platform op it lacks (or with another approval policy), no other model, MCP servers
    or sandbox, and (as for everyone) no function tool changed but for its description.
    Their build kit leaves out what they could not use."""
    _, client = await server_for(agent_doc([[text("ok")]], tools=[WEATHER_TOOL, COMMIT_TOOL]))
    visitor = client()
    head = (await visitor.http.get("/api/agent")).json()
    template = head["template"]
    kit = head["additional_context"]["playground_build_kit"]["agent_template_overlay"]
    assert not [t for t in kit["tools"] if t.get("type") == "platform"]
    assert "sandbox" not in kit
    weather, commit = template["tools"]

    own = {
        **template,
        "instructions": "Answer in French.",
        "tools": [weather | {"description": "Weather, kindly."}, commit, *kit["tools"]],
    }
    ok = await visitor.chat("c-own", [user_message("hi")], agentTemplate=own)
    assert ok.status_code == 200, ok.text
    assert "ok" in "".join(c.get("delta", "") for c in sse_chunks(ok.text))

    reaching = {
        "platform op with its approval off": {
            **template,
            "tools": [weather, commit | {"needs_approval": "allow", "deadline_s": 5}],
        },
        "another model": {**template, "llm": "openai:gpt-5-mini"},
        "elevated sandbox": {**template, "sandbox": {"permissions": {"network": True}}},
        "mcp servers": {**template, "mcps": [{"url": "http://169.254.169.254/"}]},
    }
    for index, (what, document) in enumerate(reaching.items()):
        refused = await visitor.chat(f"c-{index}", [user_message("hi")], agentTemplate=document)
        assert refused.status_code == 403, what
        assert refused.json()["error"]["code"] == "not_an_editor", what
    changed = {**template, "tools": [weather | {"needs_approval": True, "timeout_s": 1}]}
    assert (
        await visitor.chat("c-fn", [user_message("hi")], agentTemplate=changed)
    ).status_code == 422

    editor = client(EDITOR)
    full_kit = (await editor.http.get("/api/agent")).json()["additional_context"]
    assert "sandbox" in full_kit["playground_build_kit"]["agent_template_overlay"]
    ok = await editor.chat(
        "c-editor", [user_message("hi")], agentTemplate=reaching["elevated sandbox"]
    )
    assert ok.status_code == 200, ok.text
    assert (await editor.http.get("/api/agent")).json()["version"] == 1


# -- drift from the agent file -----------------------------------------------------------


async def test_a_restart_shows_drift_and_agent_reset_restores_the_file(
    redis_url: str, redis: Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Commits survive a restart with the same agent file (that is what revisions are
    for), so the restart says so: a warning naming the revision and the keys that differ,
    and ``drift`` in GET /api/agent. ``parkway agent reset`` commits the file's version
    as a new revision, keeping the history; the dropped function tool comes back."""
    doc = agent_doc([[text("ok")]], tools=[WEATHER_TOOL | {"needs_approval": True}])
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(doc))
    token = SessionAuthenticator(TEST_SECRET).issue(EDITOR)[1]
    headers = {"authorization": f"Bearer {token}"}
    with server_thread(redis_url, doc, agent_file=path, editors=(EDITOR,)) as server:
        editor = Api(server.base_url)
        editor.http.headers.update(headers)
        try:
            head = (await editor.http.get("/api/agent")).json()
            assert head["drift"] is False
            assert head["agentId"] == "shop"
            gutted = {"instructions": "Obey.", "tools": []}
            ok = await editor.http.post(
                "/api/agent/commit", json={"template": gutted, "expectedVersion": 1}
            )
            assert ok.status_code == 201, ok.text
        finally:
            await editor.aclose()

    caplog.set_level(logging.WARNING, logger="parkway.transport.api.agent")
    with server_thread(redis_url, doc, agent_file=path, editors=(EDITOR,)) as server:
        warnings = [r.getMessage() for r in caplog.records]
        [warning] = [w for w in warnings if "agent shop" in w and "differs from the agent" in w]
        assert "version 2" in warning
        assert "instructions, tools" in warning
        assert ok.json()["revisionId"] in warning
        editor = Api(server.base_url)
        editor.http.headers.update(headers)
        try:
            head = (await editor.http.get("/api/agent")).json()
            assert (head["version"], head["drift"], head["driftKeys"]) == (
                2,
                True,
                ["instructions", "tools"],
            )
            # the agent file's own function tool may be committed back by an editor
            restored = {**gutted, "tools": doc["template"]["tools"]}
            back = await editor.http.post(
                "/api/agent/commit", json={"template": restored, "expectedVersion": 2}
            )
            assert back.status_code == 201, back.text
        finally:
            await editor.aclose()

    reset = [sys.executable, "-m", "parkway.transport.cli", "agent", "reset", "--agent", str(path)]
    reset += ["--redis-url", redis_url]
    done = await asyncio.to_thread(subprocess.run, reset, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "version 4" in done.stdout
    assert "version 3 differed in instructions" in done.stdout
    again = await asyncio.to_thread(subprocess.run, reset, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "already is the agent file shop.json" in again.stdout
    history = await AgentStore(redis, "shop", doc["template"]).history()
    assert [r.version for r in history] == [4, 3, 2, 1]  # the second reset had nothing to do
    # each revision the server made names where it came from
    assert history[0].summary == "reset to the agent file shop.json"
    assert history[-1].summary == "from the agent file shop.json"
    assert history[0].template == doc["template"]
    assert history[0].committed_by == "agent-file"
