"""Artifacts: large tool results and code output, kept with their chat.

A tool result over the artifact threshold (settings ``artifact_threshold_bytes``, 32 KiB
by default) is not put in the history the model reads. It is stored here, and the model
sees a reference instead: ``{"artifact_id", "bytes", "media_type", "preview"}``. Code run
by ``execute_code`` reads an artifact whole (``artifacts.get(id)``, mounted read-only in
its sandbox), and the chat's owner downloads it from
``GET /api/chats/{id}/artifacts/{artifact_id}``. Whoever may answer an ``execute_code``
approval reads exactly the artifacts that call mounts, through the call
(``GET /api/chats/{id}/calls/{call}/artifacts``), and nothing else of the chat.

An artifact belongs to its chat: its keys carry the chat's hash tag
(:class:`~parkway.runner.store.keys.ChatKeys`), so only the chat's owner reaches it (the
routes check ownership before they read). It lives ``artifact_ttl_s`` (settings; at
most, and by default, the chat's TTL) from the artifact's write or the chat's last turn,
whichever is later, and goes with the chat at the latest. It is written once and never
changed, within the chat's artifact quota, its owner's stored bytes
(runner/store/usage.py) and those of its owner's address (runner/store/addresses.py):
past any of them nothing is written and the caller gets
:class:`~parkway.runner.errors.QuotaExceededError`.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from parkway.runner.canonical import canonical_json
from parkway.runner.errors import ArtifactNotFoundError, ChatNotFoundError
from parkway.runner.store.addresses import AddressUsage
from parkway.runner.store.client import RedisClient, as_text
from parkway.runner.store.keys import chat_keys, usage_keys
from parkway.runner.store.scripts import ARTIFACT_PUT
from parkway.runner.store.usage import Quotas, UsageGate, quota_error

__all__ = [
    "ARTIFACT_ID",
    "Artifact",
    "ArtifactStore",
    "is_reference",
    "preview_of",
]

ARTIFACT_ID = re.compile(r"^art_[A-Za-z0-9_-]{16}$")
_UNLIMITED = Quotas(stored_bytes=2**62, live_chats=2**62, artifacts_per_chat=2**62)
# What a reference shows of the artifact: enough to decide whether to read it.
PREVIEW_CHARS = 1000


@dataclass(frozen=True)
class Artifact:
    """One stored artifact's record (its bytes are kept apart)."""

    artifact_id: str
    bytes: int
    media_type: str
    source: str  # the tool that produced it ("execute_code" for code output)
    tool_call_id: str
    created_at: int  # epoch ms
    preview: str

    def reference(self) -> dict[str, Any]:
        """What the model and the page see in place of the content."""
        return {
            "artifact_id": self.artifact_id,
            "bytes": self.bytes,
            "media_type": self.media_type,
            "preview": self.preview,
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def preview_of(data: bytes, limit: int = PREVIEW_CHARS) -> str:
    """The first ``limit`` characters of ``data`` as text, marked when cut."""
    text = data[: limit * 4].decode("utf-8", errors="replace")
    if len(text) > limit or len(data) > limit * 4:
        return text[:limit] + "…"
    return text


def is_reference(value: Any) -> bool:
    """True for a tool output that is an artifact reference."""
    return isinstance(value, dict) and isinstance(value.get("artifact_id"), str)


class ArtifactStore:
    """Artifacts of chats in Redis (keys ``artifacts`` and ``artifact_data`` of
    :class:`~parkway.runner.store.keys.ChatKeys`)."""

    def __init__(
        self,
        redis: RedisClient,
        ttl_s: int,
        *,
        threshold_bytes: int = 32 * 1024,
        clock: Callable[[], float] = time.time,
        quotas: Quotas | None = None,
        chat_ttl_s: int | None = None,
        cluster: bool = False,
        addresses: AddressUsage | None = None,
    ) -> None:
        self.redis = redis
        self.ttl_s = ttl_s  # the artifacts' own
        self.chat_ttl_s = chat_ttl_s or ttl_s
        self.threshold_bytes = threshold_bytes
        self.clock = clock
        # None: no quotas (a runner built without them), so nothing is counted but bytes
        self.quotas = quotas
        # On a Cluster the owner's usage keys are in another slot: checked first.
        self.cluster = cluster
        self._gate = UsageGate(redis, quotas, self.chat_ttl_s) if cluster and quotas else None
        # The owners' addresses' stored bytes (the chat store's checks), if counted.
        self.addresses = addresses
        self._put = redis.register_script(ARTIFACT_PUT)

    async def put(
        self,
        chat_id: str,
        data: bytes,
        *,
        media_type: str,
        source: str,
        tool_call_id: str,
        principal: str | None = None,
    ) -> Artifact:
        """Store ``data`` as a new artifact of the chat (one round trip; two on a
        Cluster), counted against ``principal``'s stored bytes (the chat's owner; None:
        only the chat's artifact count is checked), or raise
        :class:`~parkway.runner.errors.QuotaExceededError` with nothing stored."""
        artifact = Artifact(
            artifact_id=f"art_{secrets.token_urlsafe(12)}",
            bytes=len(data),
            media_type=media_type,
            source=source,
            tool_call_id=tool_call_id,
            created_at=int(self.clock() * 1000),
            preview=preview_of(data),
        )
        keys = chat_keys(chat_id)
        record = json.dumps(artifact.as_dict())
        now_ms = artifact.created_at
        script_keys = [keys.meta, keys.artifacts, keys.artifact_data]
        checked = ""
        quotas = self.quotas or _UNLIMITED
        if self.quotas is None:
            principal = None
        if principal is not None and self._gate is not None:
            stored = await self.redis.hget(keys.meta, "bytes")
            mine = int(as_text(stored)) if stored is not None else 0
            await self._gate.check_artifact(keys, principal, now_ms, mine, len(record) + len(data))
        elif principal is not None:
            usage = usage_keys(principal)
            script_keys.extend((usage.bytes, usage.chats))
            checked = chat_id
        taken = None  # (counted first, in its own slot; given back if nothing is stored)
        if principal is not None and self.addresses is not None:
            size = len(record) + len(data)
            taken = await self.addresses.take_bytes(keys, principal, now_ms, size)
        reply = await self._put(
            keys=script_keys,
            args=[artifact.artifact_id, record, data, self.ttl_s,
                  quotas.artifacts_per_chat, now_ms, checked, quotas.stored_bytes,
                  self.chat_ttl_s],
        )  # fmt: skip
        if as_text(reply[0]) == "quota":
            if taken is not None:
                await taken.give_back()
            raise quota_error(as_text(reply[1]), quotas)
        return artifact

    async def keep_if_large(
        self,
        chat_id: str,
        output: Any,
        *,
        source: str,
        tool_call_id: str,
        encoded: bytes | None = None,
        principal: str | None = None,
    ) -> Any:
        """``output`` itself, or, when its JSON (``encoded``, if the caller has it) is over
        the threshold, a reference to the artifact that now holds it (counted against
        ``principal``'s quota: :meth:`put`)."""
        if is_reference(output):
            return output
        data = canonical_json(output).encode() if encoded is None else encoded
        if len(data) <= self.threshold_bytes:
            return output
        artifact = await self.put(
            chat_id,
            data,
            media_type="application/json",
            source=source,
            tool_call_id=tool_call_id,
            principal=principal,
        )
        return artifact.reference()

    async def for_owner(
        self, chat_id: str, principal: str, artifact_id: str
    ) -> tuple[Artifact, bytes]:
        """The artifact and its bytes for the chat's owner (one round trip); another
        principal's chat, or an unknown artifact, reads as missing."""
        keys = chat_keys(chat_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.meta, "owner")
            pipe.hget(keys.artifacts, artifact_id)
            pipe.hget(keys.artifact_data, artifact_id)
            owner, raw, data = await pipe.execute()
        if owner is None or as_text(owner) != principal:
            raise ChatNotFoundError("no such chat")
        if not ARTIFACT_ID.match(artifact_id) or raw is None or data is None:
            raise ArtifactNotFoundError("this chat has no such artifact")
        return _decode(raw), bytes(data)

    async def list_for_owner(self, chat_id: str, principal: str) -> list[Artifact]:
        """The chat's artifacts for its owner, oldest first."""
        keys = chat_keys(chat_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.meta, "owner")
            pipe.hvals(keys.artifacts)
            owner, records = await pipe.execute()
        if owner is None or as_text(owner) != principal:
            raise ChatNotFoundError("no such chat")
        return _oldest_first(records)

    async def get(self, chat_id: str, artifact_id: str) -> tuple[Artifact, bytes] | None:
        """The artifact and its bytes, or None when the chat has no such artifact."""
        if not ARTIFACT_ID.match(artifact_id):
            return None
        keys = chat_keys(chat_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.artifacts, artifact_id)
            pipe.hget(keys.artifact_data, artifact_id)
            raw, data = await pipe.execute()
        if raw is None or data is None:
            return None
        return _decode(raw), bytes(data)

    async def records(self, chat_id: str, artifact_ids: Iterable[str]) -> list[Artifact]:
        """The records of those of ``artifact_ids`` the chat has, oldest first (one
        round trip; no bytes)."""
        wanted = sorted(i for i in set(artifact_ids) if ARTIFACT_ID.match(i))
        if not wanted:
            return []
        found = await self.redis.hmget(chat_keys(chat_id).artifacts, wanted)
        return _oldest_first([raw for raw in found if raw is not None])

    async def list(self, chat_id: str) -> list[Artifact]:
        """The chat's artifacts, oldest first."""
        return _oldest_first(await self.redis.hvals(chat_keys(chat_id).artifacts))


def _decode(raw: Any) -> Artifact:
    return Artifact(**json.loads(raw))


def _oldest_first(records: list[Any]) -> list[Artifact]:
    return sorted((_decode(raw) for raw in records), key=lambda a: (a.created_at, a.artifact_id))
