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

A batch is kept as the events the run logged, handed to followers as they are, when
each of them holds only strings (text, reasoning and tool-input deltas, starts and ends:
most of a run's batches). Frozen and made of strings, such an event cannot change, and
the log writes and reads it back as an equal one, so a follower here yields exactly
what a follower reading Redis yields, without the trip through JSON. A batch with any
other value in it (a tool's input or output, a data part, the message's metadata, a
parked call) is kept as the JSON the log holds and decoded on the first follower's
read: those are dicts and lists the run's code may still hold and change after they
were logged (a tool that edits its input or a dict it returned, a data part published
again), and a follower must yield what the log holds, not what the value became.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from parkway.runner.events import Event, events_from_json

__all__ = ["LocalLog", "id_before"]

# How much of the runs' batches a worker keeps, and for how many chats at most. A chat
# whose sequence is evicted is simply read from Redis.
MAX_BYTES = 4 * 2**20
MAX_CHATS = 2048


@dataclass
class _Sequence:
    """One run's entries, from its first: ids and batches, each batch the run's own
    events or, until a follower reads it, its JSON (see the module docstring)."""

    start: str
    ids: list[str] = field(default_factory=list)
    batches: list[list[Event] | str] = field(default_factory=list)
    position: dict[str, int] = field(default_factory=dict)
    size: int = 0  # what the batches weigh as logged (their JSON), whatever is kept
    ended: bool = False  # its last entry (the one that ends the run) is in

    def add(self, entry_id: str, text: str, events: Sequence[Event] | None) -> None:
        self.position[entry_id] = len(self.ids)
        self.ids.append(entry_id)
        if events is not None and all(map(_unchanging, events)):
            self.batches.append(list(events))
        else:
            self.batches.append(text)
        self.size += len(text) + 64

    def batch(self, index: int) -> list[Event]:
        kept = self.batches[index]
        if isinstance(kept, str):
            kept = self.batches[index] = events_from_json(kept)
        return kept


def _unchanging(event: Event) -> bool:
    """Whether ``event`` holds nothing but strings (and None): it cannot change, and the
    log reads it back equal (an exact ``str``: a subclass would come back a plain one)."""
    return all(type(value) is str or value is None for value in vars(event).values())


class LocalLog:
    """Per chat wake-up channel, the entries its current run appended on this worker."""

    def __init__(self, *, max_bytes: int = MAX_BYTES, max_chats: int = MAX_CHATS) -> None:
        self.max_bytes = max_bytes
        self.max_chats = max_chats
        self._runs: OrderedDict[str, _Sequence] = OrderedDict()
        self._bytes = 0

    def appended(
        self,
        channel: str,
        entry_id: str,
        text: str,
        *,
        start: str,
        last: bool = False,
        events: Sequence[Event] | None = None,
    ) -> None:
        """A run of this worker, whose first entry is ``start``, appended ``text`` as
        ``entry_id`` (``start`` itself for its first; ``last``: the entry that ends the
        run); ``events``, when given, are the events ``text`` was made of, in its order.
        A later entry joins the run's sequence only if the sequence holds every entry of
        the run before it; one already there (a replayed append) is not added twice."""
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
        sequence.add(entry_id, text, events)
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
