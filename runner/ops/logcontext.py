"""What a log line is about: the chat, run, call and principal of the work in progress.

The runner and the transport bind these as they learn them (a request learns its
principal, a run its chat and run id, a settle its call); every log record made inside
reads them through :func:`current`, so a JSON log line names them without each call
site passing them. Context variables follow asyncio tasks: a run's task, started while
a request had its principal bound, keeps that binding, and nothing leaks between tasks.

The principal is never logged as such: :func:`principal_hash` gives a short digest that
tells principals apart and joins a principal's lines, without putting the identifier
that owns their chats into the log.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Final

__all__ = ["FIELDS", "bind", "bound", "current", "principal_hash"]

# the fields, in the order a log line shows them
FIELDS: Final = ("chat_id", "run_id", "call_id", "principal")

_context: ContextVar[dict[str, str] | None] = ContextVar("parkway_log_context", default=None)


def principal_hash(principal: str) -> str:
    """A short, stable digest of ``principal`` for logs (12 hex digits)."""
    return hashlib.blake2b(
        principal.encode("utf-8"), digest_size=6, person=b"parkway-log"
    ).hexdigest()


def current() -> dict[str, str]:
    """The bound fields (a copy; empty when nothing is bound)."""
    found = _context.get()
    return dict(found) if found else {}


def bind(
    *,
    chat_id: str | None = None,
    run_id: str | None = None,
    call_id: str | None = None,
    principal: str | None = None,
) -> None:
    """Bind fields for the rest of the current task (and the tasks it starts). A
    ``principal`` is bound as its :func:`principal_hash`."""
    fields = _fields(chat_id, run_id, call_id, principal)
    if fields:
        _context.set({**(_context.get() or {}), **fields})


@contextlib.contextmanager
def bound(
    *,
    chat_id: str | None = None,
    run_id: str | None = None,
    call_id: str | None = None,
    principal: str | None = None,
) -> Iterator[None]:
    """Bind fields for the ``with`` block only."""
    fields = _fields(chat_id, run_id, call_id, principal)
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def _fields(
    chat_id: str | None, run_id: str | None, call_id: str | None, principal: str | None
) -> dict[str, str]:
    fields: dict[str, str] = {}
    if chat_id is not None:
        fields["chat_id"] = chat_id
    if run_id is not None:
        fields["run_id"] = run_id
    if call_id is not None:
        fields["call_id"] = call_id
    if principal is not None:
        fields["principal"] = principal_hash(principal)
    return fields
