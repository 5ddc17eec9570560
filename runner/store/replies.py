"""What the chat store hands back: the records, claims and replies of its scripts.

:mod:`parkway.runner.store.chats` runs the scripts; this module holds the shapes their answers
take in Python and turns their raw replies into those (or into the domain error a
refusal stands for).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from parkway.runner.errors import (
    ChatBusyError,
    ChatNotFoundError,
    DuplicateMessageError,
    IncompatibleStateError,
    NothingToResumeError,
)
from parkway.runner.parking import ParkedCall, decode_call
from parkway.runner.store.client import as_text
from parkway.runner.store.history import ModelView

__all__ = [
    "SCHEMA_VERSION",
    "ChatRecord",
    "LogBatch",
    "ResumeClaim",
    "SettleReply",
    "SettleStatus",
    "TurnClaim",
    "commit_reply",
    "decode_pairs",
    "raise_for_claim",
    "settle_reply",
]

SCHEMA_VERSION = "1"

_s = as_text


def decode_pairs(flat: Sequence[Any]) -> list[ParkedCall]:
    """Calls from a flat list of (record JSON, outcome JSON or '') pairs."""
    return [decode_call(flat[i], flat[i + 1] or None) for i in range(0, len(flat), 2) if flat[i]]


@dataclass(frozen=True)
class LogBatch:
    """Events of a run for its chat's log: a JSON array (one stream entry), the batch's
    number in the run (from 1), and the run's finish reason if it ends the run."""

    batch: str
    seq: int
    finish: str = ""


@dataclass(frozen=True)
class ChatRecord:
    """Everything stored for one chat, read in one round trip."""

    meta: Mapping[str, str]
    entries: Sequence[Mapping[str, Any]]
    calls: Sequence[ParkedCall]

    @property
    def owner(self) -> str | None:
        return self.meta.get("owner")


@dataclass(frozen=True)
class TurnClaim:
    """What CLAIM_TURN hands a new turn: the chat's model call count, the parked ids of
    its last step, the template those calls were made under when it is not the turn's
    ('' otherwise), and the history."""

    model_calls: int
    parked_ids: list[str]
    previous_template: str
    entries: list[dict[str, Any]]
    view: ModelView = field(default_factory=ModelView)  # the model's view of ``entries``


@dataclass(frozen=True)
class ResumeClaim:
    """What CLAIM_RESUME hands a resume: the chat's model call count, the message it
    continues, the parked step's ids and calls (with their outcomes), the template
    snapshot of the run (JSON, '' if none) and the history."""

    model_calls: int
    message_id: str
    parked_ids: list[str]
    template_json: str
    calls: list[ParkedCall]
    entries: list[dict[str, Any]]
    view: ModelView = field(default_factory=ModelView)  # the model's view of ``entries``


SettleStatus = Literal["settled", "same", "conflict", "missing", "forbidden", "error"]


@dataclass(frozen=True)
class SettleReply:
    """What SETTLE answered for one call.

    ``settled``: this write recorded the outcome, and ``pending`` calls of the chat still
    wait; ``same``: the identical outcome was already there; ``conflict``: another
    outcome was (``existing``, its JSON); ``missing``: no such call; ``forbidden``: the
    chat is another principal's (nothing written). ``error`` (only from
    :meth:`DeadlineIndex.settle_many`): the script failed inside Redis, ``error`` says how.
    """

    status: SettleStatus
    pending: int = 0
    existing: str = ""
    error: str = ""


def settle_reply(raw: Sequence[Any]) -> SettleReply:
    status = _s(raw[0])
    if status == "settled":
        return SettleReply("settled", pending=int(raw[1]))
    if status == "same":
        return SettleReply("same", existing=_s(raw[1]))
    if status == "conflict":
        return SettleReply("conflict", existing=_s(raw[1]))
    if status in {"missing", "forbidden"}:
        return SettleReply(status)  # type: ignore[arg-type]
    return SettleReply("error", error=f"unexpected SETTLE reply {status!r}")


def commit_reply(reply: Sequence[Any]) -> str | None:
    """COMMIT's reply: the log entry's id ('' if no batch), None if the lease was lost."""
    if not int(reply[0]):
        return None
    return _s(reply[1]) if len(reply) > 1 else ""


def raise_for_claim(result: Sequence[str]) -> None:
    """Raise the domain error a refused CLAIM_TURN or CLAIM_RESUME reply stands for."""
    status = result[0]
    if status == "ok":
        return
    if status == "incompatible":
        raise IncompatibleStateError(
            f"this chat was stored with schema version {result[1]}; this Parkway reads "
            f"version {SCHEMA_VERSION}"
        )
    if status in {"forbidden", "missing"}:
        raise ChatNotFoundError("no such chat")
    if status == "busy":
        raise ChatBusyError("a run of this chat is in progress; try again when it ends")
    if status == "duplicate":
        raise DuplicateMessageError("this user message was already taken")
    if status == "not_parked":
        raise NothingToResumeError(f"the chat is {result[1]}, not waiting on any call")
    if status == "pending":
        raise NothingToResumeError(f"{result[1]} parked call(s) are still pending")
    raise ChatBusyError(f"unexpected claim result {status!r}")
