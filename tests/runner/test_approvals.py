"""Approvals answered by someone other than the requester (issue 28), in the runner.

A real Redis. The policy a tool entry carries (``approvers``, ``self_approval``), what a
parked call records of it, who may answer (the approver, never the requester), the
defaults for the ops that run code, and the race between an approver and the deadline.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from parkway.runner import RunnerConfig, load_template
from parkway.runner.engine import Sweeper
from parkway.runner.errors import (
    ApprovalByOthersError,
    ChatNotFoundError,
    SettleConflictError,
    TemplateError,
)
from parkway.runner.store import chat_audit
from parkway.runner.store.keys import APPROVALS, chat_keys, deadline_member
from tests.helpers.support import PUBLISH_TOOL, call, text
from tests.helpers.sweeper_rig import Clock, make_runner, park

REQUESTER = "usr_requester"
APPROVER = "usr_approver"
APPROVER_ROLES = frozenset({"approver"})
FOUR_EYES = {**PUBLISH_TOOL, "self_approval": False}
TURNS = [[call("publish", {"title": "Hello"})], [text("done")]]


def test_the_policy_is_only_for_a_tool_that_asks() -> None:
    """``approvers`` on a tool that never asks would silently mean nothing: refused at
    load, as a bad role name is."""
    quiet = {**PUBLISH_TOOL, "needs_approval": False, "approvers": "approver"}
    with pytest.raises(TemplateError, match="only to a tool that needs approval"):
        load_template({"instructions": "", "tools": [quiet]})
    with pytest.raises(TemplateError):
        load_template({"instructions": "", "tools": [{**PUBLISH_TOOL, "approvers": "a b"}]})
    spec = load_template({"instructions": "", "tools": [FOUR_EYES]}).tool("publish")
    assert spec is not None and spec.self_approval is False


async def test_a_parked_approval_records_its_policy_and_requester(redis: Redis) -> None:
    """Any worker decides who may answer from the call's record alone."""
    runner = make_runner(redis, TURNS, Clock(), tools=[FOUR_EYES])
    [parked] = await park(runner, "c1", REQUESTER)
    _, [stored] = await runner.store.calls(chat_keys("c1"), [parked.tool_call_id])
    assert (stored.approvers, stored.self_approval, stored.requester) == (
        "approver",
        False,
        REQUESTER,
    )
    member = deadline_member("c1", parked.tool_call_id)
    assert await redis.zscore(APPROVALS, member) == stored.seq


async def test_the_requester_is_refused_and_the_approver_decides(redis: Redis) -> None:
    """The requester cannot approve their own request, by a settle or an answer, even
    holding the role; a principal without the role reads the call as missing; the
    approver's decision is recorded with who made it, and audited under their name."""
    runner = make_runner(redis, TURNS, Clock(), tools=[FOUR_EYES])
    [parked] = await park(runner, "c2", REQUESTER)
    call_id = parked.tool_call_id
    approved = {"outcome": "approved"}
    with pytest.raises(ApprovalByOthersError):
        await runner.settle("c2", REQUESTER, call_id, approved, roles=APPROVER_ROLES)
    with pytest.raises(ChatNotFoundError):
        await runner.settle("c2", "usr_stranger", call_id, approved)
    result = await runner.settle("c2", APPROVER, call_id, approved, roles=APPROVER_ROLES)
    assert result.fresh and result.call.outcome == {"outcome": "approved", "by": APPROVER}
    assert await redis.zcard(APPROVALS) == 0
    page = await chat_audit(redis, chat_keys("c2"), REQUESTER)
    assert page is not None
    [entry] = page.entries
    assert (entry.principal, entry.outcome) == (APPROVER, "approved")


@pytest.mark.parametrize(
    ("separate", "entry", "others"),
    [
        (True, {}, True),
        (False, {}, False),
        (True, {"self_approval": True}, False),
        (False, {"self_approval": False}, True),
    ],
)
@pytest.mark.parametrize("op", ["execute_code", "save_function"])
async def test_code_ops_default_to_approval_by_others_where_approvals_are_separate(
    redis: Redis, op: str, separate: bool, entry: dict[str, Any], others: bool
) -> None:
    """Code a model wrote runs with the server's reach: on a shared server a second
    human approves it unless the entry says otherwise; a local playground keeps
    today's behaviour (its one user is the operator)."""
    tool_input = (
        {"code": "print(1)"}
        if op == "execute_code"
        else {"name": "f", "code": "def f():\n    return 1\n", "description": "one"}
    )
    tools = [{"type": "platform", "op": op, **entry}]
    config = RunnerConfig(separate_approvals=separate)
    runner = make_runner(redis, [[call(op, tool_input)], [text("ok")]], Clock(), tools, config)
    [parked] = await park(runner, f"code-{op}", REQUESTER)
    assert parked.kind == "approval"
    assert parked.for_others is others
    assert parked.self_approval is not others
    if others:
        assert parked.approvers == "approver"
        with pytest.raises(ApprovalByOthersError):
            await runner.settle(f"code-{op}", REQUESTER, parked.tool_call_id, {"outcome": "denied"})


async def test_an_approver_and_the_deadline_have_one_winner(redis: Redis) -> None:
    """Many approvers' attempts and the sweeper's timeout race for each call: exactly one
    outcome is recorded, audited once, and the call leaves the approvers' queue."""
    clock = Clock()
    runner = make_runner(redis, TURNS, clock, tools=[FOUR_EYES])
    chats = [f"race-{i}" for i in range(6)]
    parked = {c: (await park(runner, c, REQUESTER))[0] for c in chats}
    deadline = max(p.deadline or 0 for p in parked.values())
    clock.now = deadline + 1
    sweeper = Sweeper(runner, clock=clock)

    async def approve(chat_id: str, n: int) -> Any:
        try:
            return await runner.settle(
                chat_id,
                f"{APPROVER}-{n % 2}",
                parked[chat_id].tool_call_id,
                {"outcome": "approved" if n % 3 else "denied"},
                roles=APPROVER_ROLES,
            )
        except Exception as exc:  # a loser: a conflict with the winner's outcome
            return exc

    attempts = [approve(c, n) for c in chats for n in range(8)]
    results = await asyncio.gather(sweeper.sweep_once(), *attempts)
    report, answers = results[0], results[1:]
    losers = [r for r in answers if isinstance(r, Exception)]
    assert all(isinstance(r, SettleConflictError) for r in losers), losers
    fresh = [r for r in answers if not isinstance(r, Exception) and r.fresh]
    assert len(fresh) + report.settled == len(chats)
    for chat_id in chats:
        _, [stored] = await runner.store.calls(chat_keys(chat_id), [parked[chat_id].tool_call_id])
        assert stored.outcome is not None
        page = await chat_audit(redis, chat_keys(chat_id), REQUESTER)
        assert page is not None and len(page.entries) == 1
        assert page.entries[0].outcome == stored.outcome["outcome"]
    assert await redis.zcard(APPROVALS) == 0
