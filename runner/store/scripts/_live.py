"""The scripts of live questions (runner/store/live.py): a question's hash, answered once."""

from __future__ import annotations

__all__ = ["LIVE_ANSWER", "LIVE_CLOSE", "LIVE_POLL"]

# A person's answer to a live question (runner/store/live.py): the first one wins, and
# only while the wait is on (its deadline not passed, its worker seen recently).
# KEYS: 1 the question's hash
# ARGV: 1 principal, 2 toolCallId, 3 answer JSON, 4 now (ms), 5 how long a worker may go
#       unseen (ms)
# Returns: 'ok'; 'same' (this answer won already); 'missing' (no such question of this
#          principal and call); 'answered' (another answer won); 'expired' (the wait is
#          over, or its worker stopped looking).
# Replay: the second run finds its own answer recorded and returns 'same'.
LIVE_ANSWER = """
local q = redis.call('HMGET', KEYS[1], 'state', 'principal', 'call', 'deadline', 'seen', 'answer')
if not q[1] or q[2] ~= ARGV[1] or q[3] ~= ARGV[2] then return 'missing' end
if q[1] ~= 'open' then
  if q[1] == 'answered' and q[6] == ARGV[3] then return 'same' end
  return q[1]
end
local now = tonumber(ARGV[4])
if now > tonumber(q[4]) or now - tonumber(q[5]) > tonumber(ARGV[5]) then return 'expired' end
redis.call('HSET', KEYS[1], 'state', 'answered', 'answer', ARGV[3])
return 'ok'
"""

# The asking worker looks for an answer, and says it is still waiting.
# KEYS: 1 the question's hash
# ARGV: 1 now (ms)
# Returns: {state, answer JSON or ''} ({'', ''}: the question is gone).
# Replay: 'seen' is written again.
LIVE_POLL = """
local q = redis.call('HMGET', KEYS[1], 'state', 'answer')
if not q[1] then return {'', ''} end
if q[1] == 'open' then redis.call('HSET', KEYS[1], 'seen', ARGV[1]) end
return {q[1], q[2] or ''}
"""

# The asking worker ends the wait: an open question expires; an answered one is read.
# KEYS: 1 the question's hash
# ARGV: none
# Returns: the answer JSON when an answer won, else ''.
# Replay: the state is already final, and the same reply is read.
LIVE_CLOSE = """
local q = redis.call('HMGET', KEYS[1], 'state', 'answer')
if q[1] == 'open' then redis.call('HSET', KEYS[1], 'state', 'expired') return '' end
if q[1] == 'answered' then return q[2] or '' end
return ''
"""
