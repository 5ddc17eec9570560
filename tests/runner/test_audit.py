"""The audit trail: every decision on a parked call is recorded once, by the script that
wins its settle, with who, when, what and from where; agent commits and connection
grants and revocations too; only their owners (the agent's editors) read them; the
trail outlives the chat, is trimmed by age, and never holds a secret or an output."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from parkway.runner import (
    Answer,
    Runner,
    RunnerConfig,
    SettleConflictError,
    Sweeper,
    parse_agent_file,
)
from parkway.runner.canonical import canonical_json, parked_call_key
from parkway.runner.store.audit import (
    MAX_EDITS_BYTES,
    SettleEntry,
    chat_audit,
    input_digest,
    settle_audit,
)
from parkway.runner.store.keys import DEADLINES, chat_keys, deadline_member
from parkway.transport.settings import Settings, SettingsError
from tests.helpers.connect_rig import (
    TOKEN_KEY,
    Browser,
    RecordingModel,
    connection_key,
    stored_tokens,
)
from tests.helpers.support import (
    CONFIRM_TOOL,
    CONNECT_EMBED,
    EDITABLE_PUBLISH_TOOL,
    PICK_TOOL,
    TEST_SECRET,
    Api,
    agent_doc,
    call,
    server_thread,
    text,
)
from tests.helpers.sweeper_rig import Clock, deadline_ms, make_runner, park

PICK = [[call("pick", {"q": "which?"})], [text("done")]]
PICKED = {"outcome": "output", "output": {"choice": "a private answer"}}


async def entries(redis: Redis, chat_id: str, principal: str = "alice") -> list[SettleEntry]:
    page = await chat_audit(redis, chat_keys(chat_id), principal, limit=200)
    assert page is not None, f"the audit of {chat_id} is not {principal}'s"
    return page.entries


def apply_patch(document: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 add / remove / replace (what the audit's diff emits), for checking it."""
    result = copy.deepcopy(document)
    for op in patch:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target = result
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if op["op"] == "remove":
            del target[key]
        elif op["op"] == "add" and isinstance(target, list):
            target.insert(key, op["value"])
        else:
            target[key] = op["value"]
    return result


# -- every source, once --------------------------------------------------------------


async def test_a_browser_settle_is_recorded_once_with_who_what_and_from_where(
    redis: Redis, redis_url: str
) -> None:
    """ "Who approved this?": the settle route records the principal, the call, the tool,
    a digest of its input, the outcome kind and the source; a repeat, identical or not,
    adds nothing; the output itself is never stored; others get 404, like every chat
    route; and the trail outlives the chat's own keys."""
    with server_thread(redis_url, agent_doc(PICK)) as server:
        alice, mallory = await Api(server.base_url).login(), await Api(server.base_url).login()
        try:
            chunks = await alice.say("b1", "pick one")
            part = next(c for c in chunks if c["type"] == "tool-input-available")
            call_id = part["toolCallId"]
            assert (await alice.settle("b1", call_id, PICKED)).status_code == 200
            again = await alice.settle("b1", call_id, PICKED)
            assert again.status_code == 200 and again.json()["fresh"] is False
            other = await alice.settle("b1", call_id, {"outcome": "declined"})
            assert other.status_code == 409

            response = await alice.http.get("/api/chats/b1/audit")
            assert response.status_code == 200, response.text
            body = response.json()
            [entry] = body["entries"]
            assert entry["principal"] == alice.principal and entry["byYou"] is True
            assert entry["source"] == "browser" and entry["outcome"] == "output"
            assert (entry["toolCallId"], entry["toolName"]) == (call_id, "pick")
            assert entry["inputDigest"] == input_digest(parked_call_key("pick", part["input"]))
            assert entry["edits"] is None and isinstance(entry["at"], int)
            assert (body["before"], body["after"]) == (None, entry["id"])
            assert "a private answer" not in response.text
            raw = await redis.xrange(chat_keys("b1").audit)
            assert b"a private answer" not in json.dumps([repr(r) for r in raw]).encode()
            # kept longer than the chat: its TTL is audit_keep_s, not chat_ttl_s
            assert await redis.ttl(chat_keys("b1").audit) > await redis.ttl(chat_keys("b1").meta)

            stranger = await mallory.http.get("/api/chats/b1/audit")
            assert stranger.status_code == 404
            assert stranger.json()["error"]["code"] == "chat_not_found"
            for query in ("limit=0", "limit=201", "before=nope", "before=1-0&after=1-0"):
                bad = await alice.http.get(f"/api/chats/b1/audit?{query}")
                assert bad.status_code == 400, (query, bad.text)
                assert set(bad.json()["error"]) == {"code", "message"}
        finally:
            await alice.aclose()
            await mallory.aclose()


async def test_the_ai_sdk_answer_is_recorded_once_on_the_one_round_trip_path(
    redis: Redis,
) -> None:
    """The worker that parked the step answers and resumes in one ANSWER script: the
    entry is written by that script, as the browser's."""
    runner = make_runner(redis, PICK, Clock())
    [pending] = await park(runner, "a1")
    answers = [Answer(pending.tool_call_id, "pick", pending.input, PICKED)]
    assert runner.settling.plan("a1", answers) is not None  # the ANSWER path is taken
    report, run = await runner.answer_and_resume("a1", "alice", answers)
    assert report.settled == (pending.tool_call_id,) and run is not None
    await run.collect()
    [entry] = await entries(redis, "a1")
    assert (entry.principal, entry.source, entry.outcome) == ("alice", "browser", "output")
    assert (entry.tool_call_id, entry.tool_name) == (pending.tool_call_id, "pick")
    assert entry.input_digest == input_digest(pending.key)


async def test_the_ai_sdk_answer_is_recorded_once_on_the_general_path(redis: Redis) -> None:
    """Another worker (which did not park the step) settles each answer with SETTLE and
    then resumes: one entry all the same, and answering again adds none."""
    [pending] = await park(make_runner(redis, PICK, Clock()), "a2")
    other = make_runner(redis, PICK, Clock())
    answers = [Answer(pending.tool_call_id, "pick", pending.input, PICKED)]
    assert other.settling.plan("a2", answers) is None  # the general path is taken
    _, run = await other.answer_and_resume("a2", "alice", answers)
    assert run is not None
    await run.collect()
    again = await other.answer("a2", "alice", answers)
    assert again.settled == ()
    [entry] = await entries(redis, "a2")
    assert (entry.principal, entry.source, entry.tool_name) == ("alice", "browser", "pick")


async def test_a_timeout_is_recorded_once_by_racing_sweepers(redis: Redis) -> None:
    """The sweeper knows no call: its SETTLE reads the tool and input from the record,
    and the digest it computes in Redis is the one Python computes."""
    clock = Clock()
    runner = make_runner(redis, PICK, clock)
    [pending] = await park(runner, "t1")
    clock.at_ms(deadline_ms(pending))
    reports = await asyncio.gather(*(Sweeper(runner, clock=clock).sweep_once() for _ in range(4)))
    assert sum(r.settled for r in reports) == 1
    [entry] = await entries(redis, "t1")
    assert (entry.principal, entry.source, entry.outcome) == (None, "sweeper", "timeout")
    assert (entry.tool_call_id, entry.tool_name) == (pending.tool_call_id, "pick")
    assert entry.input_digest == input_digest(pending.key)


async def test_a_call_superseded_by_a_new_message_is_recorded_as_the_owners_cancel(
    redis: Redis,
) -> None:
    """A new user message cancels the pending calls in the claim of its turn: each gets
    its entry there, once, naming the owner and why; a call already settled keeps its own
    entry and gets no second one."""
    clock = Clock()
    turns = [[call("pick", {"q": "a"}), call("confirm", {})], [text("never mind")], [text("ok")]]
    runner = make_runner(redis, turns, clock, tools=[PICK_TOOL, CONFIRM_TOOL])
    first, second = await park(runner, "s1")
    await runner.settle("s1", "alice", first.tool_call_id, PICKED)
    events = await (await runner.start_turn("s1", "alice", "something else")).collect()
    assert events
    settled, superseded = await entries(redis, "s1")
    assert settled.tool_call_id == first.tool_call_id and settled.reason is None
    assert (superseded.tool_call_id, superseded.tool_name) == (second.tool_call_id, "confirm")
    assert (superseded.principal, superseded.source) == ("alice", "browser")
    assert (superseded.outcome, superseded.reason) == ("cancelled", "superseded_by_user_message")
    assert superseded.input_digest == input_digest(second.key)
    await runner.aclose()


async def test_many_concurrent_settles_of_one_call_leave_exactly_one_entry(
    redis: Redis, redis_url: str
) -> None:
    """Workers racing with different outcomes and identical repeats, each on its own
    connection: exactly one wins, and the trail holds its decision only."""
    clients = [Redis.from_url(redis_url) for _ in range(4)]
    try:
        runners = [make_runner(client, PICK, Clock()) for client in clients]
        [pending] = await park(runners[0], "r1")
        outcomes = [
            {"outcome": "output", "output": {"choice": str(i % 3)}} if i % 4 else {"outcome": "declined"}
            for i in range(40)
        ]  # fmt: skip

        async def settle(i: int) -> Any:
            runner = runners[i % len(runners)]
            try:
                return await runner.settle("r1", "alice", pending.tool_call_id, outcomes[i])
            except SettleConflictError as exc:
                return exc

        results = await asyncio.gather(*(settle(i) for i in range(len(outcomes))))
        winners = [r for r in results if not isinstance(r, Exception) and r.fresh]
        assert len(winners) == 1
        winner = winners[0].call.outcome
        repeat = await runners[1].settle("r1", "alice", pending.tool_call_id, winner)
        assert repeat.fresh is False
        [entry] = await entries(redis, "r1")
        assert entry.outcome == winner["outcome"] and entry.principal == "alice"
    finally:
        for client in clients:
            await client.aclose()


async def test_a_replayed_settle_writes_no_second_entry(redis: Redis) -> None:
    """A SETTLE whose reply was lost is sent again by the client with the same nonce: it
    answers 'settled' again, and the audit has one entry."""
    runner = make_runner(redis, PICK, Clock())
    [pending] = await park(runner, "p1")
    keys, store = chat_keys("p1"), runner.store
    audit = settle_audit(pending, PICKED, who="alice", source="browser")
    script_keys = [
        keys.calls, keys.outcomes, keys.pending, keys.meta, keys.history,
        keys.settle_attempt(pending.tool_call_id), keys.audit, DEADLINES,
    ]  # fmt: skip
    args = [
        pending.tool_call_id, canonical_json(PICKED), store.ttl_s, "nonce-1", "alice",
        deadline_member("p1", pending.tool_call_id), *audit.args(store.audit_keep_s),
    ]  # fmt: skip
    first = await store._settle(keys=script_keys, args=args)
    second = await store._settle(keys=script_keys, args=args)
    assert first == second == [b"settled", 0]
    assert len(await redis.xrange(keys.audit)) == 1


async def test_an_edited_approval_records_its_edits_as_a_json_patch(redis: Redis) -> None:
    """What the human changed before approving is the heart of "who approved this?": an
    RFC 6902 patch from the input shown to the input approved, whole when small, its
    paths only when large (so the trail stays bounded)."""
    shown = {"title": "Draft", "tags": ["a", "b"], "meta/x": {"~k": 1}}
    edited = {"title": "Final", "tags": ["a"], "note": "x", "meta/x": {"~k": 2}}
    big = {"title": "y" * (MAX_EDITS_BYTES + 10)}
    turns = [[call("publish_editable", shown), call("publish_editable", {"title": "z"})]]
    runner = make_runner(redis, turns, Clock(), tools=[EDITABLE_PUBLISH_TOOL])
    first, second = await park(runner, "e1")
    for pending, new_input in ((first, edited), (second, big)):
        outcome = {"outcome": "approved", "input": new_input}
        assert (await runner.settle("e1", "alice", pending.tool_call_id, outcome)).fresh

    small, large = await entries(redis, "e1")
    assert small.outcome == "approved" and small.edits is not None and small.edits.complete
    assert small.edits.patch == [
        {"op": "replace", "path": "/meta~1x/~0k", "value": 2},
        {"op": "add", "path": "/note", "value": "x"},
        {"op": "remove", "path": "/tags/1"},
        {"op": "replace", "path": "/title", "value": "Final"},
    ]
    assert apply_patch(shown, small.edits.patch) == edited
    assert large.edits is not None and not large.edits.complete
    assert large.edits.patch == [{"op": "replace", "path": "/title"}]
    raw = await redis.xrange(chat_keys("e1").audit)
    assert all(len(repr(fields)) < 2 * MAX_EDITS_BYTES for _, fields in raw)


async def test_an_execute_code_approval_is_recorded_with_its_tool(redis: Redis) -> None:
    """Approving code is a parked call's settle like any other, named execute_code."""
    code_tool = {"type": "platform", "op": "execute_code"}
    runner = make_runner(
        redis, [[call("execute_code", {"code": "print(1)"})]], Clock(), tools=[code_tool]
    )
    [pending] = await park(runner, "x1")
    await runner.settle("x1", "alice", pending.tool_call_id, {"outcome": "approved"})
    [entry] = await entries(redis, "x1")
    assert (entry.tool_name, entry.outcome, entry.source) == ("execute_code", "approved", "browser")


# -- connections (the OAuth callback) and the agent -----------------------------------


def consent(browser: Browser, location: str) -> str:
    """Allow at the demo provider's consent page; the callback URL it redirects to."""
    page = browser.get(location)
    form = re.search(r'name="consent" value="([^"]+)"', page.text)
    assert form, page.text
    answer = browser.http.post(
        location.split("?", maxsplit=1)[0],
        data={"consent": form.group(1), "account": "demo-user", "decision": "allow"},
    )
    assert answer.status_code == 303, answer.text
    return str(answer.headers["location"])


async def test_the_connect_callback_grant_and_a_delete_are_recorded_without_secrets(
    redis: Redis, redis_url: str
) -> None:
    """A real OAuth flow (the built-in demo provider): the callback's settle is in the
    chat's trail with source ``callback``, the grant and the later DELETE in the
    principal's connection trail; no code, token or key appears in any trail."""
    agent = {
        "template": {"instructions": "connect", "tools": [CONNECT_EMBED]},
        "model": {"scripted": {"turns": []}},
    }
    with server_thread(
        redis_url, agent, model=RecordingModel(), demo_oauth=True, token_key=SecretStr(TOKEN_KEY)
    ) as server:
        browser, stranger = Browser(server.base_url).login(), Browser(server.base_url).login()
        try:
            call_id = browser.park("c1", provider="demo")
            start = browser.get(browser.call("c1", call_id)["widget"]["startUrl"])
            callback_url = consent(browser, start.headers["location"])
            code = parse_qs(urlsplit(callback_url).query)["code"][0]
            assert browser.get(callback_url).status_code == 200
            connection_id = browser.call("c1", call_id)["outcome"]["output"]["connection_id"]
            raw = await redis.hgetall(connection_key(browser.principal, connection_id))
            tokens = stored_tokens(raw, browser.principal, connection_id)
            deleted = browser.http.delete(f"{server.base_url}/api/connections/{connection_id}")
            assert deleted.status_code == 204

            [settled] = browser.get("/api/chats/c1/audit").json()["entries"]
            assert (settled["source"], settled["toolName"]) == ("callback", "request_connection")
            assert settled["principal"] == browser.principal and settled["outcome"] == "output"
            trail = browser.get("/api/connections/audit").json()["entries"]
            assert [(e["action"], e["source"]) for e in trail] == [
                ("granted", "callback"),
                ("revoked", "browser"),
            ]
            granted = trail[0]
            assert granted["principal"] == browser.principal
            assert (granted["provider"], granted["connectionId"]) == ("demo", connection_id)
            assert (granted["chatId"], granted["toolCallId"]) == ("c1", call_id)
            assert granted["account"] == "demo-user"
            assert stranger.get("/api/connections/audit").json()["entries"] == []
            assert stranger.get("/api/chats/c1/audit").status_code == 404
        finally:
            browser.close()
            stranger.close()
    secrets = [code, tokens["access_token"], tokens["refresh_token"], TOKEN_KEY, TEST_SECRET]
    trails = [key async for key in redis.scan_iter(match="*:audit", count=1000)]
    assert len(trails) >= 3  # the chat's, the principal's connections', the agent's
    dumped = repr([await redis.xrange(key) for key in trails])
    for secret in secrets:
        assert len(secret) > 10 and secret not in dumped


async def test_agent_commits_are_recorded_and_read_by_editors_only(
    redis: Redis, redis_url: str
) -> None:
    """Who changed the shared agent: each revision's commit is in the agent's trail
    (the agent file's seed as the server's), readable with the same right as
    committing; anyone else gets 403."""
    del redis
    token = "editor-token-" + "e" * 32
    with server_thread(
        redis_url, agent_doc(PICK), editors=("nobody",), editor_token=SecretStr(token)
    ) as server:
        editor, other = await Api(server.base_url).login(), await Api(server.base_url).login()
        editor.http.headers["x-parkway-editor-token"] = token
        try:
            head = (await editor.http.get("/api/agent")).json()
            template = {**head["template"], "instructions": "renamed"}
            body = {"template": template, "expectedVersion": head["version"], "summary": "rename"}
            committed = await editor.http.post("/api/agent/commit", json=body)
            assert committed.status_code == 201, committed.text

            trail = await editor.http.get("/api/agent/audit")
            assert trail.status_code == 200, trail.text
            seed, change = trail.json()["entries"]
            assert (seed["committedBy"], seed["principal"], seed["source"]) == (
                "agent-file", None, "server"
            )  # fmt: skip
            assert change["committedBy"] == "user" and change["principal"] == editor.principal
            assert (change["version"], change["previousVersion"]) == (seed["version"] + 1, 1)
            assert change["summary"] == "rename" and change["source"] == "browser"
            assert change["revisionId"] == committed.json()["revisionId"]
            refused = await other.http.get("/api/agent/audit")
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "not_an_editor"
        finally:
            await editor.aclose()
            await other.aclose()


# -- ownership, retention, paging -----------------------------------------------------


async def test_the_trail_outlives_the_chat_and_stays_its_owners(redis: Redis) -> None:
    """The meta key (the owner) may expire while the trail lives on: each entry names
    the owner, so only they still read it, and a chat id taken again by someone else
    shows neither of them the other's decisions."""
    runner = make_runner(redis, PICK, Clock())
    [pending] = await park(runner, "o1")
    await runner.settle("o1", "alice", pending.tool_call_id, PICKED)
    keys = chat_keys("o1")
    await redis.delete(*keys.all(), DEADLINES)  # as if the chat expired
    assert [e.tool_call_id for e in await entries(redis, "o1")] == [pending.tool_call_id]
    assert await chat_audit(redis, keys, "bob") is None
    [again] = await park(runner, "o1", principal="bob")
    await runner.settle("o1", "bob", again.tool_call_id, {"outcome": "declined"})
    assert [e.outcome for e in await entries(redis, "o1", "bob")] == ["declined"]
    assert await chat_audit(redis, keys, "alice") is None


async def test_retention_trims_entries_older_than_audit_keep_s_and_sets_the_ttl(
    redis: Redis,
) -> None:
    """The trail is kept ``audit_keep_s`` (Redis's clock): each append drops what is
    older and sets the TTL, so an idle trail expires whole."""
    agent = parse_agent_file(agent_doc(PICK))
    config = RunnerConfig(audit_keep_s=3600)
    runner = Runner(redis, agent.model, agent.template, config=config, clock=Clock())
    [pending] = await park(runner, "k1")
    keys = chat_keys("k1")
    seconds, micros = await redis.time()
    now_ms = seconds * 1000 + micros // 1000
    old, recent = f"{now_ms - 3601 * 1000}-0", f"{now_ms - 1800 * 1000}-0"
    for entry_id in (old, recent):
        await redis.xadd(keys.audit, {"who": "seeded", "owner": "alice"}, id=entry_id)
    await runner.settle("k1", "alice", pending.tool_call_id, PICKED)
    kept = [entry_id.decode() for entry_id, _ in await redis.xrange(keys.audit)]
    assert kept[0] == recent and old not in kept and len(kept) == 2
    assert 3590 < await redis.ttl(keys.audit) <= 3600


def test_audit_keep_s_defaults_to_90_days_and_must_outlive_the_chats() -> None:
    assert Settings().audit_keep_s == 90 * 24 * 3600
    with pytest.raises(SettingsError, match="audit_keep_s"):
        Settings(audit_keep_s=60)
    with pytest.raises(SettingsError, match="at least chat_ttl_s"):
        Settings(chat_ttl_s=30 * 24 * 3600, audit_keep_s=7 * 24 * 3600)


async def test_pages_come_oldest_first_with_cursors_both_ways(redis: Redis) -> None:
    turns = [[call("pick", {"q": "1"}), call("confirm", {}), call("pick", {"q": "3"})]]
    runner = make_runner(redis, turns, Clock(), tools=[PICK_TOOL, CONFIRM_TOOL])
    calls = await park(runner, "g1")
    for pending in calls:
        await runner.settle("g1", "alice", pending.tool_call_id, {"outcome": "cancelled"})
    keys, ids = chat_keys("g1"), [c.tool_call_id for c in calls]
    newest = await chat_audit(redis, keys, "alice", limit=2)
    assert newest is not None and [e.tool_call_id for e in newest.entries] == ids[1:]
    assert newest.before == newest.entries[0].id and newest.after == newest.entries[-1].id
    older = await chat_audit(redis, keys, "alice", before=newest.before, limit=2)
    assert older is not None and [e.tool_call_id for e in older.entries] == ids[:1]
    assert older.before is None
    newer = await chat_audit(redis, keys, "alice", after=older.after, limit=1)
    assert newer is not None and [e.tool_call_id for e in newer.entries] == ids[1:2]
    assert newer.after == newer.entries[0].id
