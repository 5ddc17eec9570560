"""Each chat's history as this worker last decoded it, so a resume does not decode and
convert the whole history again.

A claim (a new turn, a resume, an answer that resumes) brings the chat's whole stored
history in its reply, and the run needs it twice: as entries (dicts) and as the model's
view of them (:class:`~parkway.runner.store.history.ModelView`). At 200 messages, decoding
costs about 0.1 ms and the conversion about 0.3 ms, for every operation on the chat.

:class:`HistoryCache` keeps, per chat, the raw entries as Redis returned them, their
decoded form and a view over them. A claim whose reply starts with exactly the raw
entries kept (bytes compared, which costs a few microseconds) decodes only what
follows and hands the run a copy of the view, which converts only the new entries. The
stored history is the truth: any other reply (a history rewritten or cut, another
chat's copy) is decoded from scratch and replaces what was kept. A chat's entries are
read-only to everything that gets them (a run appends to its own copy of the list).

Chats are kept least recently used first out, up to :data:`MAX_BYTES` of raw entries
per worker: about 140 chats of 200 messages (60 KB each), many more short ones. What is
kept costs about 4.6 times its raw size in the worker's memory (the bytes, the decoded
entries and the view: 275 KB for a 200-message chat), so about 40 MB at most. A worker
that never saw the chat, or has let it go, decodes as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parkway.runner.store.history import ModelView, decode_entries

__all__ = ["MAX_BYTES", "HistoryCache"]

MAX_BYTES = 8 * 2**20


@dataclass
class _Kept:
    raw: list[bytes]
    entries: list[dict[str, Any]]
    view: ModelView
    size: int


class HistoryCache:
    """Decoded histories by chat id, checked against the stored bytes on every use."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._chats: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0
        self.hits = 0  # claims that reused kept entries (for tests and the benchmark)

    def decode(
        self, chat_id: str, raw: Sequence[bytes | str]
    ) -> tuple[list[dict[str, Any]], ModelView]:
        """The entries of ``raw`` (a claim's history, as Redis returned it) and a view
        over them that is the run's own."""
        kept = self._drop(chat_id)
        if not all(isinstance(item, bytes) for item in raw):
            return decode_entries(raw), ModelView()
        blobs: list[bytes] = list(raw)  # type: ignore[arg-type]
        count = len(kept.raw) if kept is not None else 0
        if kept is not None and count <= len(blobs) and blobs[:count] == kept.raw:
            self.hits += count > 0
            entries = kept.entries + decode_entries(blobs[count:])
            view = kept.view
        else:
            entries = decode_entries(blobs)
            view = ModelView()
        view.update(entries)
        size = sum(len(blob) for blob in blobs)
        if size <= self.max_bytes:
            self._chats[chat_id] = _Kept(blobs, entries, view, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._chats)))
        return list(entries), view.copy()

    def forget(self, chat_id: str) -> None:
        """Let go of a chat (a test or benchmark playing a worker that never saw it)."""
        self._drop(chat_id)

    def _drop(self, chat_id: str) -> _Kept | None:
        kept = self._chats.pop(chat_id, None)
        if kept is not None:
            self._bytes -= kept.size
        return kept

    def __len__(self) -> int:
        return len(self._chats)
