"""What a connection change's audit entry records (runner/store/audit.py has the trail itself).

A grant made by the connect flow and a revocation (a DELETE) are appended to the
principal's connection audit trail (``ConnectionKeys.audit``) by the AUDIT_APPEND script,
queued in the same transaction as the change
(:class:`parkway.widgets_api.connect.connections.ConnectionStore`): who, when (Redis's clock),
from where, the provider, connection id, account and scopes, and the chat and call a
grant was made for. Never a token: the store hands over only these fields.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from parkway.runner.store import AuditSource

__all__ = ["AuditNote", "audit_args"]

_MAX_ACCOUNT = 200
_MAX_SCOPES = 64


@dataclass(frozen=True)
class AuditNote:
    """Where a connection change came from: ``source`` (``callback`` for the OAuth
    callback, ``browser`` for a client's DELETE) and, for a grant made for a parked call,
    the chat and call."""

    source: AuditSource
    chat_id: str = ""
    tool_call_id: str = ""


def audit_args(
    note: AuditNote,
    *,
    principal: str,
    action: Literal["granted", "revoked"],
    provider: str,
    connection_id: str,
    account: str,
    scopes: Sequence[str],
    keep_s: int,
) -> list[Any]:
    """AUDIT_APPEND's ARGV (runner/store/scripts/_audit.py): the retention, a random id for the
    append (a replayed transaction appends once), then the entry's fields, bounded."""
    fields = {
        "who": principal,
        "source": note.source,
        "action": action,
        "provider": provider,
        "connection": connection_id,
        "account": account[:_MAX_ACCOUNT],
        "scopes": json.dumps([s[:200] for s in scopes[:_MAX_SCOPES]]),
        "chat": note.chat_id,
        "call": note.tool_call_id,
    }
    return [keep_s, secrets.token_hex(8), *(item for pair in fields.items() for item in pair)]
