"""The model's view of a history, kept up to date as a run appends to it, is exactly the
view a conversion of the whole list gives, whatever the entries (checked against a
plain reference conversion)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from parkway.runner.llm.model import (
    AssistantTurn,
    ModelMessage,
    ModelToolCall,
    ToolResult,
    UserTurn,
)
from parkway.runner.store.history import UNKNOWN_RESULT, ModelView, to_model_messages

IDS = [f"call_{i}" for i in range(6)]


def reference(entries: list[dict[str, Any]]) -> tuple[ModelMessage, ...]:
    """The conversion by definition: a call with no result anywhere in the list is
    answered "result unknown" before the next user or assistant entry (or at the end)."""
    answered = {e["id"] for e in entries if e["t"] == "result"}
    out: list[ModelMessage] = []
    open_calls: list[ModelToolCall] = []

    def close() -> None:
        out.extend(
            ToolResult(c.id or "", c.name, UNKNOWN_RESULT, is_error=True)
            for c in open_calls
            if c.id not in answered
        )
        open_calls.clear()

    for e in entries:
        if e["t"] == "user":
            close()
            out.append(UserTurn(e["text"]))
        elif e["t"] == "assistant":
            close()
            calls = tuple(ModelToolCall(c["name"], c["input"], c["id"]) for c in e["calls"])
            out.append(AssistantTurn(e["text"], calls))
            open_calls.extend(calls)
        else:
            out.append(ToolResult(e["id"], e["name"], e["result"], is_error=e["status"] == "error"))
    close()
    return tuple(out)


user = st.builds(lambda t: {"t": "user", "text": t, "uid": None}, st.text(max_size=3))
assistant = st.builds(
    lambda t, ids: {
        "t": "assistant",
        "mid": "m",
        "text": t,
        "calls": [{"id": i, "name": "tool", "input": {"n": n}} for n, i in enumerate(ids)],
    },
    st.text(max_size=3),
    st.lists(st.sampled_from(IDS), max_size=3, unique=True),
)
result = st.builds(
    lambda i, status: {"t": "result", "id": i, "name": "tool", "result": 1, "status": status},
    st.sampled_from(IDS),
    st.sampled_from(["ok", "error", "denied"]),
)
entries = st.lists(st.one_of(user, assistant, result), max_size=14)


@settings(max_examples=400, deadline=None)
@given(entries, st.lists(st.integers(min_value=0, max_value=14), max_size=5))
def test_the_view_grown_step_by_step_is_the_whole_conversion(
    history: list[dict[str, Any]], cuts: list[int]
) -> None:
    assert to_model_messages(history) == reference(history)
    view = ModelView()
    grown: list[dict[str, Any]] = []
    for cut in [*sorted(cuts), len(history)]:
        grown.extend(history[len(grown) : cut])  # the same list, longer
        assert view.update(grown) == reference(grown)


def test_a_list_that_did_not_just_grow_is_converted_afresh() -> None:
    first = [{"t": "user", "text": "a", "uid": None}]
    view = ModelView()
    assert view.update(first) == (UserTurn("a"),)
    other = [{"t": "user", "text": "b", "uid": None}]
    assert view.update(other) == (UserTurn("b"),)
    assert view.update([*other, {"t": "user", "text": "c", "uid": None}]) == (
        UserTurn("b"),
        UserTurn("c"),
    )
