"""Widget descriptors built again for every follower and every GET of a parked call:
the code review's highlighted program is kept (widgets_api/descriptors.py), and nothing
that differs between requests, chats or programs is ever served from it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from parkway.runner.agent.workflows import REQUEST_CONNECTION
from parkway.runner.codemode.runtime import CodeMode
from parkway.runner.parking import ParkedCall
from parkway.widgets_api import descriptors
from parkway.widgets_api.descriptors import describe_call
from parkway.widgets_api.highlight import highlight_lines

PROGRAM = 'rows = args["rows"]\nprint("<b>", len(rows))\nresult(sum(rows))\n'
OTHER_PROGRAM = 'print("something else")\n'


def _code_call(code: str = PROGRAM, call_id: str = "c1", **over: Any) -> ParkedCall:
    fields: dict[str, Any] = {
        "tool_call_id": call_id, "tool_name": "execute_code", "kind": "approval",
        "input": {"code": code, "args": {"rows": [1, 2]}}, "key": "k", "seq": 1,
        "message_id": "m", "created_at": 1.0, "deadline": 9.0, "approval_id": "a1",
        "allow_edits": True,
    }  # fmt: skip
    fields.update(over)
    return ParkedCall(**fields)


class _Highlights:
    """Counts the highlighting the descriptors do (the real highlighter does it)."""

    def __init__(self) -> None:
        self.sources: list[str] = []

    def __call__(self, code: str) -> list[str]:
        self.sources.append(code)
        return highlight_lines(code)


@pytest.fixture
def highlights(monkeypatch: pytest.MonkeyPatch) -> _Highlights:
    """A fresh store of renderings for the test, and a count of what is highlighted."""
    counted = _Highlights()
    monkeypatch.setattr(descriptors, "highlight_lines", counted)
    monkeypatch.setattr(descriptors, "_CODE_LINES", descriptors.CodeLines())
    return counted


def test_a_code_review_is_highlighted_once_for_all_who_describe_it(
    highlights: _Highlights,
) -> None:
    """Every follower of a run that parks a code review, and every GET of its call or
    chat, describes the call again; highlighting is most of that (milliseconds for a
    page of code), so it is done once per call and program, not once per view."""
    call = _code_call()
    first = describe_call("chat", call)
    again = [describe_call("chat", call) for _ in range(3)]
    assert highlights.sources == [PROGRAM]
    assert all(d == first for d in again)
    assert first["codeLines"] == highlight_lines(PROGRAM)
    assert "&lt;b&gt;" in first["codeLines"][1]
    # a descriptor is the caller's own: changing one changes no other view of the call
    first["codeLines"].append("<script>")
    first["codeLines"][0] = "changed"
    assert describe_call("chat", call)["codeLines"] == highlight_lines(PROGRAM)


def test_a_kept_rendering_is_never_another_program_s_or_another_chat_s(
    highlights: _Highlights,
) -> None:
    """The rendering is keyed by the call and the digest of the very program it shows:
    the same call id with other code (a chat deleted and begun again, a replayed id)
    shows that code, and another chat's call with the same program is highlighted for
    that chat, so one chat's reviews never answer (or time) another's."""
    assert describe_call("chat", _code_call())["codeLines"] == highlight_lines(PROGRAM)
    replaced = describe_call("chat", _code_call(OTHER_PROGRAM))
    assert replaced["codeLines"] == highlight_lines(OTHER_PROGRAM)
    elsewhere = describe_call("another-chat", _code_call())
    assert elsewhere["codeLines"] == highlight_lines(PROGRAM)
    other_call = describe_call("chat", _code_call(call_id="c2"))
    assert other_call["codeLines"] == highlight_lines(PROGRAM)
    assert highlights.sources == [PROGRAM, OTHER_PROGRAM, PROGRAM, PROGRAM]
    # a library change's review (save_function) is rendered the same way, for its call
    library = _code_call(
        call_id="c3", tool_name="save_function", input={"name": "f", "code": OTHER_PROGRAM}
    )
    assert describe_call("chat", library)["codeLines"] == highlight_lines(OTHER_PROGRAM)
    assert highlights.sources[4:] == [OTHER_PROGRAM]


async def test_what_differs_between_requests_is_built_for_each(highlights: _Highlights) -> None:
    """Only the highlighting is kept. A connect widget's start link carries a one-time
    token minted for each descriptor; a code review shows the sandbox as the server has
    it now and the limits the call would run with on this server; the call's status
    and outcome are not in a descriptor (the routes add them from the stored call)."""
    minted = itertools.count()
    asked: list[tuple[str, str, str]] = []

    def start_token(provider: str, chat_id: str, call_id: str) -> str:
        asked.append((provider, chat_id, call_id))
        return f"token-{next(minted)}"

    connect = ParkedCall(
        tool_call_id="k1", tool_name=REQUEST_CONNECTION, kind="client",
        input={"provider": "demo", "scopes": ["read"]}, key="k", seq=1, message_id="m",
        created_at=1.0, render={"kind": "connect"},
    )  # fmt: skip
    links = [
        describe_call("chat", connect, {"demo": "Demo"}, start_token)["startUrl"] for _ in range(3)
    ]
    assert len(set(links)) == 3 and all("&token=token-" in link for link in links)
    assert asked == [("demo", "chat", "k1")] * 3

    call = _code_call()
    assert describe_call("chat", call)["sandbox"] == {
        "available": False,
        "reason": "not configured",
    }
    code = CodeMode(None)
    before = describe_call("chat", call, code=code)["sandbox"]
    await code.start()  # the server's sandbox changes state (here: found turned off)
    after = describe_call("chat", call, code=code)["sandbox"]
    assert before["reason"] is None and after["reason"] == code.reason
    assert after["limits"] == code.limits.as_dict()
    assert "status" not in after and "outcome" not in describe_call("chat", call, code=code)
    mounted = describe_call("chat", call, code=code, prefix="/pw")
    assert mounted["statusUrl"].startswith("/pw/") and mounted["artifactsUrl"].startswith("/pw/")
    assert highlights.sources == [PROGRAM]  # and every one of them had the same lines


def test_the_kept_renderings_stay_within_their_bounds(highlights: _Highlights) -> None:
    """Bounded by count and by size: the least recently used go first, and a program
    whose rendering would take over a quarter of the budget is not kept at all."""
    kept = descriptors.CodeLines(max_entries=2, max_chars=4000)
    for n in range(3):
        kept.lines("chat", f"c{n}", f"x = {n}\n")
    assert len(kept) == 2
    kept.lines("chat", "c2", "x = 2\n")  # kept
    kept.lines("chat", "c0", "x = 0\n")  # the least recently used, gone: done again
    assert highlights.sources == ["x = 0\n", "x = 1\n", "x = 2\n", "x = 0\n"]
    big = "\n".join(f"value_{n} = {n}" for n in range(40))
    assert kept.lines("chat", "big", big) == kept.lines("chat", "big", big)
    assert highlights.sources[4:] == [big, big]  # over a quarter of the budget
    assert len(kept) == 2
    assert kept.chars == sum(
        len(line) for code in ("x = 2\n", "x = 0\n") for line in highlight_lines(code)
    )


def test_an_approval_left_to_others_says_who_answers_it() -> None:
    """The requester's page must know, from the descriptor the stream carries, that it
    cannot answer an approval left to someone else (so it shows "waiting for an
    approver", not buttons the server refuses); an ordinary approval says nothing."""
    four_eyes = _code_call(approvers="approver", self_approval=False, requester="usr_a")
    described = describe_call("chat", four_eyes)
    assert described["approvers"] == "approver" and described["selfApproval"] is False
    plain = describe_call("chat", _code_call())
    assert "approvers" not in plain and "selfApproval" not in plain
