"""Lua scripts: every transition that can race is one of these, atomic inside Redis.

Each header documents KEYS, ARGV and the return value. All KEYS of a script belong to
one chat (same hash tag), so every script runs on one Redis Cluster slot.

Two meta fields carry the crash-safety invariants:

- ``lease`` / ``lease_until``: the run lease. A chat in state ``running`` whose lease
  has lapsed belonged to a worker that died; a new turn or a resume may take it over.
- ``run_token`` / ``run_start`` / ``run_hist``: the current run (its lease token, the
  event-log id of its first event, the history length when it began). A claim starts a
  new run; only that run may append to the chat's event log, so a worker that lost the
  chat can no longer write events a reader would take for the current run's.
- ``parked_ids``: the calls of the last parked step whose results are not yet in the
  history. A claim hands them to the new run; the run's first commit clears them, in
  the same atomic step that appends their results. So a crash between claim and commit
  loses nothing: the next claim hands them out again.
- ``bytes``: what the chat stores for its owner's quota (runner/store/usage.py): the
  history entries, call records and outcomes, and artifacts, each counted by the script
  that writes it (COMMIT, SETTLE, ANSWER, ARTIFACT_PUT). A turn's claim rolls it up into
  the owner's total (USAGE_FUNCTION), and refuses the turn past the owner's quota.

Replays. The Redis client sends a command again when its connection failed or timed out
(:mod:`parkway.runner.store.client`), so a script whose reply was lost may run twice. Each script
says under "Replay" why a second run with the same arguments changes nothing and
answers what the first run answered (or, for a first-writer-wins script, an answer the
caller reads the same way).

The scripts, by the family of keys they serve:

- :mod:`~parkway.runner.store.scripts._runs`: a chat's runs (the run lease, the history,
  the event log): CLAIM_TURN, CLAIM_RESUME, COMMIT, APPEND, RELEASE, FAIL, STOP, RENEW;
- :mod:`~parkway.runner.store.scripts._calls`: its parked calls and their outcomes:
  PENDING, SETTLE, ANSWER;
- :mod:`~parkway.runner.store.scripts._live`: live questions: LIVE_ANSWER, LIVE_POLL,
  LIVE_CLOSE;
- :mod:`~parkway.runner.store.scripts._usage`: a principal's usage and a chat's
  artifacts: USAGE, ARTIFACT_PUT;
- :mod:`~parkway.runner.store.scripts._audit`: the audit streams: AUDIT_APPEND;
- :mod:`~parkway.runner.store.scripts._functions`: the Lua functions several of them
  share (audit_append and audit_settle, usage_prune and usage_set, log_append,
  claim_resume), AUDIT_FUNCTION and USAGE_FUNCTION also for scripts kept elsewhere.
"""

from parkway.runner.store.scripts._audit import AUDIT_APPEND
from parkway.runner.store.scripts._calls import ANSWER, PENDING, SETTLE
from parkway.runner.store.scripts._functions import AUDIT_FUNCTION, USAGE_FUNCTION, USAGE_TOTAL
from parkway.runner.store.scripts._live import LIVE_ANSWER, LIVE_CLOSE, LIVE_POLL
from parkway.runner.store.scripts._runs import (
    APPEND,
    CLAIM_RESUME,
    CLAIM_TURN,
    COMMIT,
    FAIL,
    RELEASE,
    RENEW,
    STOP,
)
from parkway.runner.store.scripts._usage import ARTIFACT_PUT, USAGE

__all__ = [
    "ANSWER",
    "APPEND",
    "ARTIFACT_PUT",
    "AUDIT_APPEND",
    "AUDIT_FUNCTION",
    "CLAIM_RESUME",
    "CLAIM_TURN",
    "COMMIT",
    "FAIL",
    "LIVE_ANSWER",
    "LIVE_CLOSE",
    "LIVE_POLL",
    "PENDING",
    "RELEASE",
    "RENEW",
    "SETTLE",
    "STOP",
    "USAGE",
    "USAGE_FUNCTION",
    "USAGE_TOTAL",
]
