"""The entries this worker's runs appended to their chats' event logs, kept in memory a
short while, so followers on the same worker read them without a round trip.

A run's appends are adjacent in its chat's log: only the lease holder appends, a lease
once lost is never regained, and a run's appends go one at a time. So the batches a run
logged here, in order, from its first, are exactly the log's entries from ``run_start``
on, for as long as each of its appends is known to have landed. :class:`LocalLog` keeps
that sequence per chat (the current run's), and :func:`parkway.runner.eventlog.followers.follow`
takes entries from it when it follows that very run, reading Redis only for what the
sequence cannot vouch for: a run of another worker, a sequence broken by an append
whose outcome is unknown (it is dropped then), or one evicted to keep the memory bound.

Every append still goes to Redis and still publishes its wake-up; the message carries
the entry's id, so the log watch does not wake followers for an entry they can take
from here (:meth:`LocalLog.knows`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from parkway.runner.events import Event, events_from_json

__all__ = ["LocalLog", "id_before"]

# How much of the runs' batches a worker keeps, and for how many chats at most. A chat
# whose sequence is evicted is simply read from Redis.
MAX_BYTES = 4 * 2**20
MAX_CHATS = 2048


@dataclass
class _Sequence:
    """One run's entries, from its first: ids, batch JSON, and the decoded batches
    (decoded once, on the first follower's read)."""

    start: str
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    decoded: list[list[Event] | None] = field(default_factory=list)
    position: dict[str, int] = field(default_factory=dict)
    size: int = 0
    ended: bool = False  # its last entry (the one that ends the run) is in

    def add(self, entry_id: str, text: str) -> None:
        self.position[entry_id] = len(self.ids)
        self.ids.append(entry_id)
        self.texts.append(text)
        self.decoded.append(None)
        self.size += len(text) + 64

    def batch(self, index: int) -> list[Event]:
        events = self.decoded[index]
        if events is None:
            events = self.decoded[index] = events_from_json(self.texts[index])
        return events


class LocalLog:
    """Per chat wake-up channel, the entries its current run appended on this worker."""

    def __init__(self, *, max_bytes: int = MAX_BYTES, max_chats: int = MAX_CHATS) -> None:
        self.max_bytes = max_bytes
        self.max_chats = max_chats
        self._runs: OrderedDict[str, _Sequence] = OrderedDict()
        self._bytes = 0

    def appended(
        self, channel: str, entry_id: str, text: str, *, start: str, last: bool = False
    ) -> None:
        """A run of this worker, whose first entry is ``start``, appended ``text`` as
        ``entry_id`` (``start`` itself for its first; ``last``: the entry that ends the
        run). A later entry joins the run's sequence only if the sequence holds every
        entry of the run before it; one already there (a replayed append) is not added
        twice."""
        if entry_id == start:
            self._drop(channel)
            sequence = _Sequence(start)
            self._runs[channel] = sequence
        else:
            found = self._runs.get(channel)
            if found is None or found.start != start or entry_id in found.position:
                return
            sequence = found
            self._runs.move_to_end(channel)
        before = sequence.size
        sequence.add(entry_id, text)
        sequence.ended = sequence.ended or last
        self._bytes += sequence.size - before
        if sequence.size > self.max_bytes // 4:  # a run that big is read from Redis
            self._drop(channel)
        while self._runs and (self._bytes > self.max_bytes or len(self._runs) > self.max_chats):
            self._drop(next(iter(self._runs)))

    def broken(self, channel: str) -> None:
        """An append of the chat's run failed or its outcome is unknown: what follows
        may not be adjacent to what is kept, so nothing is kept for the chat."""
        self._drop(channel)

    def after(self, channel: str, start: str, after: str) -> list[tuple[str, list[Event]]] | None:
        """The entries after ``after`` of the run whose first entry is ``start``, when
        this worker's sequence of that run vouches for them ([] when ``after`` is its
        latest); None when it cannot (another run, an entry it does not hold)."""
        sequence = self._runs.get(channel)
        if sequence is None or sequence.start != start:
            return None
        index = sequence.position.get(after)
        if index is not None:
            begin = index + 1
        elif after == id_before(start):
            begin = 0
        else:
            return None
        return [(sequence.ids[i], sequence.batch(i)) for i in range(begin, len(sequence.ids))]

    def run_over(self, channel: str, start: str) -> None:
        """The run whose first entry is ``start`` appends nothing more."""
        sequence = self._runs.get(channel)
        if sequence is not None and sequence.start == start:
            sequence.ended = True

    def logging(self, channel: str) -> bool:
        """Whether a run of this worker is logging to the chat (its end not yet in)."""
        sequence = self._runs.get(channel)
        return sequence is not None and not sequence.ended

    def knows(self, channel: str, entry_id: str) -> bool:
        """Whether ``entry_id`` is in the chat's sequence (its followers take it here)."""
        sequence = self._runs.get(channel)
        return sequence is not None and entry_id in sequence.position

    def _drop(self, channel: str) -> None:
        sequence = self._runs.pop(channel, None)
        if sequence is not None:
            self._bytes -= sequence.size


def id_before(entry_id: str) -> str:
    """The stream id just before ``entry_id`` (XREAD reads after an id, exclusively)."""
    ms_text, _, seq_text = entry_id.partition("-")
    ms, seq = int(ms_text), int(seq_text or 0)
    if seq > 0:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{_MAX_SEQ}" if ms > 0 else "0-0"


_MAX_SEQ = 18446744073709551615
