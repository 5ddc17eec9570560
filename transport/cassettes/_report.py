"""Reading a replay's differences: which one is the cause, which follow from it (private
to :mod:`parkway.transport.cassettes`).

One change in an agent rarely makes one difference: a call the model no longer makes
leaves its widget missing, its answer refused (404) and the rest of the turn different.
:func:`analyse` walks the differences in order and marks each as a *root* (shown, with a
one-line likely cause) or a *follow-on* of an earlier root:

- in an exchange whose status differs, every other difference of that exchange;
- every difference in a later exchange of a turn that diverged: a turn diverges when a
  status, a kind of body, the calls made (missing, extra, changed or reordered), an
  approval or the way the turn ends differs. A changed text or tool output does not
  make a turn diverge: later exchanges are still compared on their own;
- a difference about a call (or a request naming a call) whose creation differed;
- in one stream, every chunk out of order after the first, and the step and finish
  chunks after a root.

A turn is counted per chat: it starts with a ``POST /api/chat`` (or an AG-UI ``POST
/api/agui``, whose chat is its ``threadId``) whose last message is the user's (or a
regenerate) and runs until the next one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from parkway.transport.cassettes._diff import ABSENT, Difference

__all__ = ["Finding", "analyse", "exchange_ranges", "restart_mark"]

_CHAT = re.compile(r"^/api/chats?/([^/?]+)")
# AI SDK chunk types and AG-UI event types (upper case) alike
_CALL_CHUNKS = frozenset(
    {
        "tool-input-available",
        "tool-input-start",
        "tool-input-delta",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
    }
)
_DIVERGING_CHUNKS = _CALL_CHUNKS | {
    "tool-approval-request",
    "finish",
    "error",
    "RUN_FINISHED",
    "RUN_ERROR",
}
_STEP_CHUNKS = frozenset(
    {"start-step", "finish-step", "finish", "STEP_STARTED", "STEP_FINISHED", "RUN_FINISHED"}
)


class _Request(Protocol):
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def body(self) -> Any: ...


@dataclass(frozen=True)
class Finding:
    """A difference as a report reads it: ``follows`` is the index (in the report's
    differences) of the root it follows from, None for a root; ``cause`` is a root's
    likely cause, when one can be told."""

    difference: Difference
    follows: int | None
    cause: str | None


def _turns(requests: Sequence[_Request]) -> list[tuple[str, int] | None]:
    """For each exchange, (chat, turn number within the chat), or None outside a chat."""
    counts: dict[str, int] = {}
    out: list[tuple[str, int] | None] = []
    for request in requests:
        body = request.body if isinstance(request.body, dict) else {}
        route = request.path.split("?", 1)[0]
        match = _CHAT.match(request.path)
        chat = match.group(1) if match else body.get("threadId" if route == "/api/agui" else "id")
        if not isinstance(chat, str):
            out.append(None)
            continue
        if request.method == "POST" and route in ("/api/chat", "/api/agui"):
            messages = body.get("messages")
            last = messages[-1] if isinstance(messages, list) and messages else {}
            user = isinstance(last, dict) and last.get("role") == "user"
            if user or body.get("trigger") == "regenerate-message" or chat not in counts:
                counts[chat] = counts.get(chat, 0) + 1
        counts.setdefault(chat, 1)
        out.append((chat, counts[chat]))
    return out


def _diverges(d: Difference) -> bool:
    if d.kind in ("status", "body", "no answer", "missing", "unexpected") or d.what == "no answer":
        return True
    return d.chunk_type in _DIVERGING_CHUNKS


def analyse(
    differences: Sequence[Difference],
    requests: Sequence[_Request],
    restarts_after: Sequence[int] = (),
) -> list[Finding]:
    """Each difference with the root it follows from, or its likely cause (module doc)."""
    turns = _turns(requests)
    findings: list[Finding] = []
    status_root: dict[int, int] = {}  # exchange -> its status difference
    diverged: dict[tuple[str, int] | None, int] = {}  # turn -> its first diverging root
    created: dict[str, int] = {}  # call label -> the root of its creation's difference
    first_move: dict[int, int] = {}  # exchange -> its first moved chunk
    last_root: dict[int, int] = {}  # exchange -> its latest root
    for index, d in enumerate(differences):
        turn = turns[d.exchange] if d.exchange < len(turns) else None
        calls = [c for c in (d.call, *d.request_calls) if c is not None]
        creation = d.chunk_type in _CALL_CHUNKS and d.kind != "moved"
        follows: int | None = None
        if d.exchange in status_root:
            follows = status_root[d.exchange]
        elif turn in diverged and differences[diverged[turn]].exchange < d.exchange:
            follows = diverged[turn]
        elif any(c in created for c in calls):
            follows = next(created[c] for c in calls if c in created)
        elif d.kind == "moved" and d.exchange in first_move:
            follows = first_move[d.exchange]
        elif d.chunk_type in _STEP_CHUNKS and d.exchange in last_root:
            follows = last_root[d.exchange]
        root = index if follows is None else follows
        if follows is None:
            earlier = any(f.follows is None for f in findings)
            first_after_restart = d.exchange - 1 in restarts_after
            findings.append(Finding(d, None, _cause(d, earlier, first_after_restart)))
            last_root[d.exchange] = index
        else:
            findings.append(Finding(d, follows, None))
        if d.kind == "status":
            status_root.setdefault(d.exchange, root)
        if d.kind == "moved":
            first_move.setdefault(d.exchange, root)
        if creation and d.call is not None:
            created.setdefault(d.call, root)
        if turn is not None and _diverges(d):  # outside a chat nothing is a turn
            diverged.setdefault(turn, root)
    return findings


_STATUS_CAUSES = {
    401: "the session was refused (401)",
    403: "the request was forbidden (403)",
    404: "the server does not know what the request names (404): the replay has no such call or chat",  # noqa: E501
    409: "the call was already settled (409)",
    410: "the call is gone (410): it timed out or was cancelled",
    422: "the server refused the request's content (422): it does not fit the replayed call",
}


def _status_cause(d: Difference, earlier: bool) -> str:
    got = d.got if isinstance(d.got, int) else 0
    if got in _STATUS_CAUSES:
        cause = f"a different status: {_STATUS_CAUSES[got]}"
    elif got >= 500:
        cause = f"the server failed ({got}): its log names the error"
    elif got == 204:
        cause = "a different status: nothing to resume (204): the turn is not running or parked"
    else:
        cause = f"a different status: {d.expected} in the recording, {d.got} now"
    if earlier and 400 <= got < 500:
        cause += " — an earlier difference cascaded"
    return cause


def _chunk_cause(d: Difference) -> str | None:
    tool = f"`{d.tool}`" if d.tool else "a tool"
    kind = d.chunk_type or ""
    if kind in _CALL_CHUNKS:
        if d.kind == "moved":
            return "the model made the same calls in a different order"
        if d.kind == "missing":
            return f"the recorded call {tool} was not made (the model's script or the agent's tools changed)"  # noqa: E501
        if d.kind == "unexpected":
            return f"the replay made a call {tool} that the recording does not have"
        if d.path in ("toolName", "toolCallName"):
            return f"the model called `{d.got}` where the recording called `{d.expected}`"
        return f"the call {tool} was made with a different input"
    agui = _agui_cause(d, tool)
    if agui is not None:
        return agui
    if d.kind == "moved":
        return "the same chunks came in a different order"
    if kind == "tool-approval-request":
        if d.kind == "unexpected":
            return f"the replay asks to approve {tool}, the recording did not (needs_approval changed?)"  # noqa: E501
        return (
            f"the recording asked to approve {tool}, the replay did not (needs_approval changed?)"
        )
    if kind.startswith("text-"):
        return "the model's text differs from the recording"
    if kind.startswith("reasoning-"):
        return "the model's reasoning differs from the recording"
    if kind == "tool-output-available":
        return f"the tool {tool} returned another output (does it depend only on its input?)"
    if kind in ("tool-output-error", "tool-input-error"):
        return f"the call {tool} failed differently"
    if kind == "tool-output-denied":
        return f"the approval of {tool} was answered differently"
    if kind == "data-parkway-widget":
        where = d.path or "data"
        return (
            f"the widget of {tool} differs at {where}: did the tool's definition change? "
            f"(leave it out with the ignore path 'data-parkway-widget:{where}')"
        )
    if kind == "finish" and d.path == "finishReason":
        if d.expected == "tool-calls":
            return (
                "the turn finished where the recording parked it for a client tool or an approval"
            )
        if d.got == "tool-calls":
            return "the turn parked where the recording finished it"
    if kind == "error":
        text = d.got.get("errorText") if isinstance(d.got, dict) else None
        return f"the run failed: {text}" if text else "the run ended with an error"
    if kind == "start":
        return "the answer starts another message than the recording's"
    return None


def _outcome(value: Any) -> str:
    """An AG-UI run's outcome type, told."""
    if value == "interrupt":
        return "interrupted the run (an approval or a call to answer)"
    return "finished the run"


def _agui_cause(d: Difference, tool: str) -> str | None:
    """The likely cause of a difference in an AG-UI event (upper-case types)."""
    kind = d.chunk_type or ""
    if kind.startswith("TEXT_MESSAGE_"):
        return "the model's text differs from the recording"
    if kind.startswith("REASONING_"):
        return "the model's reasoning differs from the recording"
    if kind == "TOOL_CALL_RESULT":
        if d.kind == "unexpected":
            return f"the replay has a result of {tool} that the recording does not (an approval or a tool's policy changed?)"  # noqa: E501
        if d.kind == "missing":
            return f"the recorded result of {tool} did not come (an approval or a tool's policy changed?)"  # noqa: E501
        return f"the call {tool} has another result (its output, or how its approval was answered)"
    if kind == "RUN_FINISHED" and d.path == "outcome.type":
        return f"the replay {_outcome(d.got)} where the recording {_outcome(d.expected)}"
    if kind == "RUN_FINISHED" and d.path.startswith("outcome.pendingToolCallIds"):
        return "the run left other frontend tool calls pending than the recording"
    if kind == "RUN_FINISHED" and d.path.startswith("outcome.interrupts"):
        return f"the run's interrupt for {tool} differs from the recording"
    if kind == "RUN_ERROR":
        text = d.got.get("message") if isinstance(d.got, dict) else None
        if d.path == "message" and isinstance(d.got, str):
            text = d.got
        return f"the run failed: {text}" if text else "the run ended with an error"
    if kind == "MESSAGES_SNAPSHOT":
        return "the chat's messages differ from the recording"
    return None


def _cause(d: Difference, earlier: bool, first_after_restart: bool) -> str | None:
    if d.what == "no answer" or d.kind == "no answer":
        cause: str | None = "the server did not answer (it died or hung): its log says why"
    elif d.kind == "status":
        cause = _status_cause(d, earlier)
    elif d.kind == "body":
        cause = "the answer is another kind of body than the recording's"
    elif d.chunk_type is not None:
        cause = _chunk_cause(d)
    elif d.path.startswith("$"):
        cause = "a value in the JSON answer differs"
        if d.path.endswith((".status", ".outcome", ".state")):
            cause = "the state of a call or chat differs from the recording"
        if d.expected is ABSENT or d.got is ABSENT:
            cause = "the JSON answer has another shape than the recording's"
    else:
        cause = "the answer's text differs" if d.what == "text body" else None
    if first_after_restart and not earlier:
        note = "first request after a restart: does the chat depend on a process's memory?"
        cause = f"{cause} ({note})" if cause else note
    return cause


def exchange_ranges(exchanges: Sequence[int]) -> str:
    """``exchange 4`` or ``exchanges 1, 4-19``."""
    numbers = sorted(set(exchanges))
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ("exchange " if len(numbers) == 1 else "exchanges ") + ", ".join(spans)


def restart_mark(exchange: int, restarts_after: Sequence[int]) -> str:
    """`` [after restart 2]`` for an exchange a restarted server answered (``first
    request after restart 2`` for the first one), else ``""``."""
    count = sum(1 for r in restarts_after if r < exchange)
    if not count:
        return ""
    first = "first request " if exchange - 1 in restarts_after else ""
    return f" [{first}after restart {count}]"
