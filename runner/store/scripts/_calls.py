"""The scripts of a chat's parked calls: read the pending ones, settle one, answer a step.

They serve the chat's calls, pending and outcomes keys, each settle with its audit entry
(and, on a single Redis, the deadline and approvals indexes, which a settled call leaves).
"""

from __future__ import annotations

from parkway.runner.store.scripts._functions import AUDIT_FUNCTION, CLAIM_RESUME_FUNCTION

__all__ = ["ANSWER", "PENDING", "SETTLE"]

# Read a chat's owner and its pending calls (records and outcomes), in park order.
# KEYS: 1 meta, 2 pending, 3 calls, 4 outcomes
# ARGV: none
# Returns: {owner or '', C, C pairs (call record JSON, outcome JSON or '')}
# Replay: it only reads.
PENDING = """
local owner = redis.call('HGET', KEYS[1], 'owner') or ''
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local out = {owner, tostring(#ids)}
if #ids > 0 then
  local recs = redis.call('HMGET', KEYS[3], unpack(ids))
  local outs = redis.call('HMGET', KEYS[4], unpack(ids))
  for i = 1, #ids do
    table.insert(out, recs[i] or '')
    table.insert(out, outs[i] or '')
  end
end
return out
"""

# Settle one parked call: the first writer wins; a repeat is compared with the winner.
# The winner also appends the call's audit entry (audit_settle), in this same run: a
# settle is never recorded without its entry, and a repeat or a loser writes none.
# KEYS: 1 calls, 2 outcomes, 3 pending, 4 meta, 5 history (the last two to keep the
#       whole chat alive together), 6 the call's settle-attempt key, 7 the chat's audit
#       stream, and on a single Redis (not a Cluster) 8 the deadline index and
#       9 the approvals index
# ARGV: 1 toolCallId, 2 canonical outcome JSON, 3 TTL (s), 4 the attempt's nonce,
#       5 the principal the chat must belong to ('' = not checked: the server's own, or
#       an approver the call's record admits), 6 the call's member in the deadline and
#       approvals indexes (with KEYS[8], KEYS[9]): once a call has an outcome, settled
#       now or earlier, it has nothing left to time out or to answer; for the audit
#       entry: 7 who (the principal, '' for the server), 8 source, 9 tool ('' = read
#       from the record), 10 input digest ('' = from the record), 11 outcome kind,
#       12 edits JSON or '', 13 how long the audit keeps an entry (s)
# Returns: {'settled', pending count left} | {'same', outcome} | {'conflict', outcome}
#        | {'missing'} | {'forbidden'} (the chat is another principal's)
# Replay: the winner's nonce is kept for a minute (KEYS[6], far longer than the client
# retries); the same attempt sent again finds its own nonce and answers 'settled' as the
# first run did (writing no second audit entry), so the caller still tells the listeners
# and resumes. Any other identical settle answers 'same'.
SETTLE = (
    AUDIT_FUNCTION
    + """
local owner = false
if ARGV[5] ~= '' then
  owner = redis.call('HGET', KEYS[4], 'owner')
  if owner ~= ARGV[5] then return {'forbidden'} end
end
if KEYS[8] then redis.call('ZREM', KEYS[8], ARGV[6]) end
if KEYS[9] then redis.call('ZREM', KEYS[9], ARGV[6]) end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {'missing'} end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then
  if cur == ARGV[2] then
    if redis.call('GET', KEYS[6]) == ARGV[4] then
      return {'settled', redis.call('ZCARD', KEYS[3])}
    end
    return {'same', cur}
  end
  return {'conflict', cur}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[4], 'bytes', #ARGV[2])
redis.call('SET', KEYS[6], ARGV[4], 'EX', 60)
redis.call('ZREM', KEYS[3], ARGV[1])
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
audit_settle(KEYS[7], KEYS[4], KEYS[1], ARGV[1], owner, ARGV[7], ARGV[8], ARGV[9], ARGV[10],
             ARGV[11], ARGV[12], ARGV[13])
return {'settled', redis.call('ZCARD', KEYS[3])}
"""
)

# Answers and the resume they allow, in one step (the AI SDK path: a client sends the
# outputs of a parked step's calls and expects the run to go on in the same response).
# Settles the answered calls of the chat's parked step; if that leaves none pending,
# claims the resume (claim_resume). The caller matched the answers against the parked
# step it knows of (the one its worker parked), taking its calls for pending; if the
# chat has moved on since (another step, or an answered call no longer pending),
# nothing is written and the caller takes the general path (read the pending calls,
# SETTLE each, CLAIM_RESUME), which decides what such answers mean.
# Each settled call gets its audit entry (audit_settle: who is the principal, the
# source ARGV 9), written with the outcome by this same run, so none is lost or doubled.
# KEYS: 1 meta, 2 pending, 3 history, 4 calls, 5 outcomes, 6 the deadline index (one
#       Redis only: on a Cluster it is in another slot, and the general path is taken),
#       7 the settle-attempt key of the first answered call, 8 the chat's audit stream
# ARGV: 1 schema version, 2 principal, 3 lease token, 4 now (ms), 5 lease (ms),
#       6 TTL (s), 7 the parked ids JSON the answers were matched against, 8 K,
#       9 the audit source, 10 how long the audit keeps an entry (s), then K groups of 7
#       (toolCallId, canonical outcome JSON, its deadline member, tool, input digest,
#       outcome kind, edits JSON or '': the last four for the audit, see audit_settle)
# Returns: claim_resume's 'ok' reply | {'settled', pending count left}
#        | {'stale'} (nothing written) | {'missing'} | {'incompatible', version}
#        | {'forbidden'}
# Replay: a chat running under this very lease token was claimed by the lost first run:
# claim_resume answers again. A first run that settled and left calls pending kept its
# lease token in KEYS[7] (for a minute, as SETTLE keeps its nonce): it answers the same.
# Either way nothing is settled or audited again.
ANSWER = (
    CLAIM_RESUME_FUNCTION
    + AUDIT_FUNCTION
    + """
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return {'missing'} end
if v ~= ARGV[1] then return {'incompatible', v} end
local m = redis.call('HMGET', KEYS[1], 'owner', 'state', 'lease', 'parked_ids')
if m[1] ~= ARGV[2] then return {'forbidden'} end
local function claim()
  return claim_resume(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2],
                      ARGV[3], ARGV[4], ARGV[5], ARGV[6])
end
if m[2] == 'running' and m[3] == ARGV[3] then return claim() end
if redis.call('GET', KEYS[7]) == ARGV[3] then return {'settled', redis.call('ZCARD', KEYS[2])} end
if m[2] ~= 'parked' or (m[4] or '[]') ~= ARGV[7] then return {'stale'} end
local k = tonumber(ARGV[8])
for i = 0, k - 1 do
  if not redis.call('ZSCORE', KEYS[2], ARGV[11 + i * 7]) then return {'stale'} end
end
for i = 0, k - 1 do
  local at = 11 + i * 7
  local id = ARGV[at]
  redis.call('HSET', KEYS[5], id, ARGV[at + 1])
  redis.call('HINCRBY', KEYS[1], 'bytes', #ARGV[at + 1])
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[6], ARGV[at + 2])
  audit_settle(KEYS[8], KEYS[1], KEYS[4], id, m[1], ARGV[2], ARGV[9], ARGV[at + 3],
               ARGV[at + 4], ARGV[at + 5], ARGV[at + 6], ARGV[10])
end
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[6]) end
local left = redis.call('ZCARD', KEYS[2])
if left > 0 then
  redis.call('SET', KEYS[7], ARGV[3], 'EX', 60)
  return {'settled', left}
end
return claim()
"""
)
