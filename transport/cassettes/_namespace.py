"""A per-run chat-id namespace for replays (private to :mod:`parkway.transport.cassettes`).

Two replays of one cassette on one shared Redis database (two CI jobs, pytest-xdist
workers) would otherwise write the same chats and race. Each run sends every chat id
of the cassette with a suffix of its own (``trip`` becomes ``trip.rp1a2b3c4d5e``) in
request paths and bodies, and maps the suffixed ids back in the answers before they are
compared, so the recorded ids still compare equal. An AG-UI run names its chat as the
input's ``threadId``, and its ``runId`` (and ``parentRunId``) get the same suffix and
are mapped back the same way.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Iterable
from typing import Any

from parkway.runner.store import MAX_CALL_ID
from parkway.transport.cassettes._format import RequestRecord, ResponseRecord, is_agui

__all__ = ["ChatNamespace"]

_MAX_CHAT_ID = 128  # runner/store/keys.py CHAT_ID: [A-Za-z0-9_.:-]{1,128}


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k): _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value


def _suffixed(value: str, suffix: str, limit: int) -> str:
    """``value`` with ``suffix``, within ``limit`` characters: an id too long for a
    suffix is replaced by its digest (still one id per value, still within the limit)."""
    room = limit - len(suffix)
    base = value if len(value) <= room else hashlib.sha256(value.encode()).hexdigest()
    return base[:room] + suffix


class ChatNamespace:
    """The chat ids of one replay run: ``chat`` -> ``chat`` plus this run's suffix; and
    the AG-UI run ids (``runs``), suffixed the same way."""

    def __init__(
        self, chats: Iterable[str], suffix: str | None = None, *, runs: Iterable[str] = ()
    ) -> None:
        self.suffix = suffix if suffix is not None else f".rp{secrets.token_hex(5)}"
        self.ids: dict[str, str] = {
            chat: _suffixed(chat, self.suffix, _MAX_CHAT_ID) for chat in chats
        }
        self.runs: dict[str, str] = {run: _suffixed(run, self.suffix, MAX_CALL_ID) for run in runs}
        self._back = {new: old for old, new in self.ids.items()}
        self._back.update({new: old for old, new in self.runs.items()})
        names = "|".join(re.escape(c) for c in sorted(self.ids, key=len, reverse=True))
        # A chat id inside a URL: a path segment of the chat routes, or a ?chat= query.
        self._in_urls = (
            re.compile(rf"(/api/chats?/|[?&]chat=)({names})(?=[/?&#]|$)") if names else None
        )
        olds = "|".join(re.escape(c) for c in sorted(self._back, key=len, reverse=True))
        self._replayed = re.compile(olds) if olds else None

    def _urls(self, text: str) -> str:
        if self._in_urls is None:
            return text
        return self._in_urls.sub(lambda m: m.group(1) + self.ids[m.group(2)], text)

    def path(self, path: str) -> str:
        """A request path with its chat id namespaced."""
        return self._urls(path)

    def body(self, path: str, body: Any) -> Any:
        """A request body with its chat ids namespaced: ``id`` of a ``/api/chat`` post,
        ``threadId`` (and ``runId``, ``parentRunId``) of an AG-UI input, any ``chatId``,
        and chat URLs inside strings. Other strings (a user's text that says "trip") are
        sent as recorded."""

        def walk(value: Any, key: str | None) -> Any:
            if isinstance(value, str):
                if key == "chatId" and value in self.ids:
                    return self.ids[value]
                return self._urls(value)
            if isinstance(value, dict):
                return {k: walk(v, k) for k, v in value.items()}
            if isinstance(value, list):
                return [walk(v, key) for v in value]
            return value

        out = walk(body, None)
        if not isinstance(out, dict):
            return out
        chat = out.get("id")
        if path.split("?", 1)[0] == "/api/chat" and isinstance(chat, str) and chat in self.ids:
            out["id"] = self.ids[chat]
        if is_agui(path):
            thread = out.get("threadId")
            if isinstance(thread, str) and thread in self.ids:
                out["threadId"] = self.ids[thread]
            for key in ("runId", "parentRunId"):
                run = out.get(key)
                if isinstance(run, str) and run in self.runs:
                    out[key] = self.runs[run]
        return out

    def _back_text(self, text: str) -> str:
        pattern = self._replayed
        return text if pattern is None else pattern.sub(lambda m: self._back[m.group(0)], text)

    def restore(self, record: ResponseRecord) -> ResponseRecord:
        """An answer with this run's chat ids mapped back to the recorded ones."""
        if self._replayed is None:
            return record
        return ResponseRecord.model_validate(_map_strings(record.document(), self._back_text))

    def restore_request(self, record: RequestRecord) -> RequestRecord:
        """A request as sent, with this run's chat ids mapped back to the recorded ones
        (for a cassette recorded again from a replay)."""
        document = {"method": record.method, "path": record.path, "json": record.body}
        return RequestRecord.model_validate(_map_strings(document, self._back_text))

    @property
    def served(self) -> dict[str, str]:
        """This run's chat ids, each mapped to the recorded one."""
        return {new: old for old, new in self.ids.items()}
