"""The audit streams' own script: an entry that records a change which is not a settle.

A settle's entry is written by the script that settles (audit_settle,
:mod:`parkway.runner.store.scripts._functions`); this one appends the others (a
connection granted or revoked, runner/store/audit.py).
"""

from __future__ import annotations

from parkway.runner.store.scripts._functions import AUDIT_FUNCTION

__all__ = ["AUDIT_APPEND"]

# Append one entry to an audit stream (audit_append): a change that is not a settle
# (a connection granted or revoked), sent in the MULTI that makes the change.
# KEYS: 1 the audit stream
# ARGV: 1 keep (s), 2 the append's random id (stored as field ``op``), then field,
#       value, ...
# Returns: the entry's id.
# Replay: a transaction whose reply was lost is sent again whole; the stream's last
# entry then carries this very ``op`` and its id is answered, nothing appended.
AUDIT_APPEND = (
    AUDIT_FUNCTION
    + """
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if last then
  local f = last[2]
  for i = 1, #f, 2 do
    if f[i] == 'op' and f[i + 1] == ARGV[2] then return last[1] end
  end
end
return audit_append(KEYS[1], ARGV[1], {'op', ARGV[2], unpack(ARGV, 3)})
"""
)
