"""What ``make load`` sends: its scale, its agents, and its requests.

Two agents with scripted models: :func:`holding_agent`, whose runs stay running until
the benchmark lets go (its tool is :func:`bench.load_tools.hold`), for the followers;
and :func:`replying_agent`, which answers a new turn with one sentence, for the
concurrent turns. Requests are what an AI SDK ``useChat`` client sends.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load_client import Connection, HttpFailure

__all__ = [
    "HOLD_MAX_S",
    "HOLD_TOOL",
    "LoadConfig",
    "Log",
    "chat_body",
    "holding_agent",
    "new_session",
    "replying_agent",
    "worker_env",
]

HOLD_TOOL = "hold"
HOLD_MAX_S = 3000.0  # a held run lets go on its own after this, should the benchmark die
Log = Callable[[str], None]


@dataclass(frozen=True)
class LoadConfig:
    """The scale and pacing of one run."""

    followers: int = 10_000
    chats: int = 200
    turns: int = 300
    hold_s: float = 30.0
    batch: int = 500
    timeout_s: float = 60.0  # connecting plus a response's status and headers
    drain_s: float = 60.0  # after the runs are let go, for every follower to end
    healthz_every_s: float = 0.05
    sample_every_s: float = 1.0
    start_concurrency: int = 16


def worker_env() -> dict[str, str]:
    """The settings every benchmark worker gets: the session key an external Redis
    requires, anonymous sessions (chosen: an external Redis is no local playground)
    minted without a pace limit (the workload mints one per simulated user), and the
    demo OAuth provider off (it would need ``PARKWAY_TOKEN_KEY``). It gets no other
    ``PARKWAY_*`` variable from the caller's shell (see :class:`bench.load_server.Worker`)."""
    return {
        "PARKWAY_SECRET_KEY": secrets.token_urlsafe(48),
        "PARKWAY_AUTH": "anonymous",
        "PARKWAY_SESSIONS_PER_MINUTE": "0",
        "PARKWAY_DEMO_OAUTH": "0",
    }


def chat_body(chat_id: str, text: str) -> bytes:
    """The ``POST /api/chat`` body of a new chat's first user message, as ``useChat``
    sends it."""
    user = {"id": f"u-{chat_id}", "role": "user", "parts": [{"type": "text", "text": text}]}
    body = {"id": chat_id, "messages": [user], "trigger": "submit-message"}
    return json.dumps(body, separators=(",", ":")).encode()


def _agent(turns: list[list[dict[str, Any]]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "template": {"instructions": "Parkway load benchmark agent.", "tools": tools},
        "model": {"scripted": {"turns": turns}},
    }


def holding_agent(gate: Path) -> dict[str, Any]:
    """An agent whose every chat runs until ``gate`` exists: a sentence, then the
    ``hold`` tool; after it, one more sentence."""
    tool = {
        "type": "function",
        "name": HOLD_TOOL,
        "ref": "bench.load_tools:hold",
        "description": "Waits until the benchmark lets go.",
        "timeout_s": HOLD_MAX_S + 60,
    }
    call = {"tool_call": {"name": HOLD_TOOL, "input": {"gate": str(gate), "max_s": HOLD_MAX_S}}}
    return _agent([[{"text": "Holding this run open."}, call], [{"text": "Released."}]], [tool])


def replying_agent() -> dict[str, Any]:
    """An agent that answers every new turn with one short sentence."""
    return _agent([[{"text": "A short scripted reply to a new turn."}]], [])


async def new_session(conn: Connection) -> str:
    """A new principal's bearer token (``POST /api/sessions``)."""
    reply = await conn.request("POST", "/api/sessions")
    if reply.status != 201:
        raise HttpFailure("session", f"POST /api/sessions: {reply.status} {reply.body[:200]!r}")
    return str(reply.json()["token"])
