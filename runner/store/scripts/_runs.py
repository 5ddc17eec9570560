"""The scripts of a chat's runs: the run lease and what a run writes.

A turn's or a resume's claim of the lease, a step's commit (history, call records, the
event log), the event log's appends, and the lease renewed, released, given up on a
failure or asked to stop. They serve the chat's meta, history, calls, pending, outcomes
and events keys (and, for a claim or a commit on a single Redis, the owner's usage keys
and the deadline and approvals indexes).
"""

from __future__ import annotations

from parkway.runner.store.scripts._functions import (
    AUDIT_FUNCTION,
    CLAIM_RESUME_FUNCTION,
    LOG_APPEND_FUNCTION,
    USAGE_FUNCTION,
)

__all__ = ["APPEND", "CLAIM_RESUME", "CLAIM_TURN", "COMMIT", "FAIL", "RELEASE", "RENEW", "STOP"]

# Start a new turn: take the run lease (creating the chat on first use), and settle
# every still-pending call as superseded. Returns the history in the same round trip.
# Each call superseded gets its audit entry (the principal's, from the browser, outcome
# cancelled, reason superseded_by_user_message).
# KEYS: 1 meta, 2 pending, 3 outcomes, 4 history, 5 calls, 6 events, 7 artifacts,
#       8 artifact data, 9 the chat's audit stream (its own TTL: audit_append)
# ARGV: 1 schema version, 2 principal, 3 lease token, 4 now (ms), 5 lease (ms),
#       6 user message id ('' if none), 7 superseding outcome JSON, 8 TTL (s),
#       9 new assistant message id, 10 template digest, 11 template JSON,
#       12 how long the audit keeps an entry (s), 13 '1' when the new message comes with
#       answers to tool calls, which must settle what they answer before anything is
#       superseded ('' otherwise), 14 the agent's head version the template is ('' when
#       nothing is to be checked; then there is no agent head key), 15 the chat id
#       when the owner's quotas are checked here ('' otherwise: a Cluster, where the
#       usage keys are in another slot and runner/store/usage.py checks them first),
#       16 the owner's stored-bytes quota, 17 its live-chats quota, 18 the artifacts' TTL,
#       19 the turn's user message as its history entry (JSON), kept in ``turn_user``
#       until the run ends: readers show it before the run's first commit stores it
# KEYS[10], KEYS[11] (with ARGV[15]): the owner's usage keys (usage_set)
# KEYS[12] (KEYS[10] without ARGV[15]) (with ARGV[14], on a single Redis only: another
# slot): the agent's head hash
# Returns: {'ok', model_calls, parked ids JSON, previous template JSON ('' if the same),
#          history entry, ...}
#        | {'incompatible', version} | {'forbidden'} | {'busy'} | {'duplicate'}
#        | {'answers_first'} (ARGV[13] set and calls pending: nothing was changed)
#        | {'agent_moved'} (the head is no longer ARGV[14]: nothing was changed)
#        | {'quota', name} (the owner is at its quota ``name``: no chat created, no
#          message taken; the chat's count is rolled up into the owner's)
# Replay: the lease token is new for every claim, so a chat running under this very
# token was claimed by the lost first run; the same 'ok' reply is built again (the
# previous template it handed out is kept in ``claim_prev`` for this).
CLAIM_TURN = (
    AUDIT_FUNCTION
    + USAGE_FUNCTION
    + """
local quotas = ARGV[15] ~= ''
-- The template is the agent's head as this worker last read it: unless this is the
-- replay of this very claim (the chat runs under its token), check it still is.
if ARGV[14] ~= '' and redis.call('HGET', KEYS[quotas and 12 or 10], 'version') ~= ARGV[14]
   and redis.call('HGET', KEYS[1], 'lease') ~= ARGV[3] then
  return {'agent_moved'}
end
local v = redis.call('HGET', KEYS[1], 'v')
if not v then
  if quotas then
    usage_prune(KEYS[10], KEYS[11], ARGV[4])
    if redis.call('ZCARD', KEYS[11]) >= tonumber(ARGV[17]) then return {'quota', 'live_chats'} end
    if tonumber(redis.call('HGET', KEYS[10], '#total') or '0') >= tonumber(ARGV[16]) then
      return {'quota', 'stored_bytes'}
    end
    usage_set(KEYS[10], KEYS[11], ARGV[15], 0, ARGV[4], ARGV[8])
  end
  -- A new chat: nothing of an expired chat with the same id may leak into it.
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 'owner', ARGV[2], 'state', 'idle',
             'model_calls', '0', 'parked_ids', '[]', 'created_at', ARGV[4])
elseif v ~= ARGV[1] then
  return {'incompatible', v}
end
local m = redis.call('HMGET', KEYS[1], 'owner', 'state', 'lease_until', 'last_uid',
                     'model_calls', 'parked_ids', 'template_digest', 'template', 'lease',
                     'claim_prev')
if m[1] ~= ARGV[2] then return {'forbidden'} end
local function with_history(out)
  for _, e in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do table.insert(out, e) end
  return out
end
if m[2] == 'running' and m[9] == ARGV[3] then
  return with_history({'ok', m[5] or '0', m[6] or '[]', m[10] or ''})
end
if m[2] == 'running' and tonumber(m[3] or '0') > tonumber(ARGV[4]) then return {'busy'} end
if ARGV[6] ~= '' and m[4] == ARGV[6] then return {'duplicate'} end
if ARGV[13] == '1' and redis.call('ZCARD', KEYS[2]) > 0 then return {'answers_first'} end
if quotas then
  usage_prune(KEYS[10], KEYS[11], ARGV[4])
  local mine = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
  if usage_set(KEYS[10], KEYS[11], ARGV[15], mine, ARGV[4], ARGV[8]) >= tonumber(ARGV[16]) then
    return {'quota', 'stored_bytes'}
  end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('HSETNX', KEYS[3], id, ARGV[7]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'bytes', #ARGV[7])
    audit_settle(KEYS[9], KEYS[1], KEYS[5], id, ARGV[2], ARGV[2], 'browser', '', '',
                 'cancelled', '', ARGV[12], 'superseded_by_user_message')
  end
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'state', 'running', 'lease', ARGV[3],
           'lease_until', tonumber(ARGV[4]) + tonumber(ARGV[5]), 'message_id', ARGV[9],
           'run', 'turn', 'run_committed', '0', 'run_token', ARGV[3],
           'run_hist', redis.call('LLEN', KEYS[4]), 'run_commits', '0', 'log_seq', '0',
           'turn_user', ARGV[19])
local ran = redis.call('HGET', KEYS[1], 'run_start')
if ran then redis.call('HSET', KEYS[1], 'prev_start', ran) end
redis.call('HDEL', KEYS[1], 'run_start', 'stop_for', 'claim_prev', 'log_last')
-- Calls of the previous step are finished with the template they were made under.
local previous = ''
if m[7] ~= ARGV[10] then
  if (m[6] or '[]') ~= '[]' then previous = m[8] or '' end
  redis.call('HSET', KEYS[1], 'template_digest', ARGV[10], 'template', ARGV[11])
  if previous ~= '' then redis.call('HSET', KEYS[1], 'claim_prev', previous) end
end
for i = 1, 6 do redis.call('EXPIRE', KEYS[i], ARGV[8]) end
for i = 7, 8 do redis.call('EXPIRE', KEYS[i], ARGV[18] ~= '' and ARGV[18] or ARGV[8]) end
return with_history({'ok', m[5] or '0', m[6] or '[]', previous})
"""
)

# Resume a chat (claim_resume).
# KEYS: 1 meta, 2 pending, 3 history, 4 calls, 5 outcomes
# ARGV: 1 schema version, 2 principal, 3 lease token, 4 now (ms), 5 lease (ms), 6 TTL (s)
# Returns and Replay: as claim_resume.
CLAIM_RESUME = (
    CLAIM_RESUME_FUNCTION
    + """
return claim_resume(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3],
                    ARGV[4], ARGV[5], ARGV[6])
"""
)

# Persist one step (or the end of a run) if the caller still holds the lease: append
# history entries, write parked call records, move the chat to its next state, and
# append the run's events not yet logged (those that follow the step included) to the
# event log, so a step and the events that announce it are stored in one atomic step.
# KEYS: 1 meta, 2 history, 3 calls, 4 pending, 5 outcomes, 6 events, and on a single
#       Redis (not a Cluster, where they live in other slots) 7 the deadline index,
#       8 the approvals index and, when the run parks or ends, 9, 10 the owner's usage
#       keys: the chat's count is rolled up into the owner's (usage_set)
# ARGV: 1 lease token, 2 next state ('running' | 'parked' | 'idle'), 3 TTL (s),
#       4 model_calls, 5 now (ms), 6 lease (ms), 7 parked ids JSON ('' = unchanged),
#       8 last user message id ('' = unchanged, '-' = forgotten: the turn failed, so
#       its message may be sent again as its retry), 9 number of history entries N,
#       10 number of calls C, 11 chat id, 12 the commit's number in its run (1, 2, ...),
#       13 the events' batch JSON ('' = none), 14 the batch's number, 15 its finish
#       reason ('' if the run goes on), 16 the log's approximate max length, 17 the
#       chat's wake-up channel, 18 how long the log of an ended run is kept (s), then
#       N entry JSONs, then C quintuples (toolCallId, record JSON, park order, deadline
#       in ms or '', its score in the approvals index or '' when someone other than
#       the chat's owner does not answer it); a call written is pending: an outcome it
#       had (an approval of a tool that then asked a person for input and parks again
#       under the same id) is dropped
# Returns: {1, the batch's entry id or ''} on success, {0} when the lease was lost
#          (nothing written).
# Replay: each commit of a run carries the next number, recorded in ``run_commits``
# with the commit; a commit whose number the current run (same token) has already
# recorded was applied, so it answers as it did and writes nothing (no history entry
# twice); its batch, if any, was appended with it (log_append).
COMMIT = (
    LOG_APPEND_FUNCTION
    + USAGE_FUNCTION
    + """
local cur = redis.call('HMGET', KEYS[1], 'lease', 'run_token', 'run_commits', 'log_seq',
                       'log_last')
local function logged()
  if ARGV[13] ~= '' and tonumber(cur[4] or '0') >= tonumber(ARGV[14]) then
    return cur[5] or ''
  end
  return ''
end
if cur[2] == ARGV[1] and tonumber(cur[3] or '0') >= tonumber(ARGV[12]) then
  return {1, logged()}
end
if cur[1] ~= ARGV[1] then return {0} end
local n = tonumber(ARGV[9])
local c = tonumber(ARGV[10])
local first = 19
local stored = 0
if n > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, first, first - 1 + n))
  for i = first, first - 1 + n do stored = stored + #ARGV[i] end
end
for i = 0, c - 1 do
  local base = first + n + i * 5
  redis.call('HSET', KEYS[3], ARGV[base], ARGV[base + 1])
  redis.call('HDEL', KEYS[5], ARGV[base])
  stored = stored + #ARGV[base + 1]
  redis.call('ZADD', KEYS[4], ARGV[base + 2], ARGV[base])
  if KEYS[7] and ARGV[base + 3] ~= '' then
    redis.call('ZADD', KEYS[7], ARGV[base + 3], ARGV[11] .. ' ' .. ARGV[base])
  end
  if KEYS[8] and ARGV[base + 4] ~= '' then
    redis.call('ZADD', KEYS[8], ARGV[base + 4], ARGV[11] .. ' ' .. ARGV[base])
  end
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'model_calls', ARGV[4], 'updated_at', ARGV[5],
           'run_committed', '1', 'run_commits', ARGV[12])
local mine = redis.call('HINCRBY', KEYS[1], 'bytes', stored)
if KEYS[9] then usage_set(KEYS[9], KEYS[10], ARGV[11], mine, ARGV[5], ARGV[3]) end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'parked_ids', ARGV[7]) end
if ARGV[8] == '-' then
  redis.call('HDEL', KEYS[1], 'last_uid')
elseif ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'last_uid', ARGV[8])
end
if ARGV[2] == 'running' then
  redis.call('HSET', KEYS[1], 'lease_until', tonumber(ARGV[5]) + tonumber(ARGV[6]))
else
  redis.call('HDEL', KEYS[1], 'lease', 'lease_until', 'turn_user')
end
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
local id = ''
if ARGV[13] ~= '' then
  id = log_append(KEYS[6], KEYS[1], ARGV[13], ARGV[14], ARGV[16], ARGV[15], ARGV[5], ARGV[17],
                  ARGV[3], ARGV[18])
end
return {1, id}
"""
)

# Append a batch of a run's events to the chat's log (see log_append), if the run is
# still the chat's current run.
# KEYS: 1 events, 2 meta
# ARGV: 1 run token, 2 approximate max length, 3 TTL (s), 4 finish reason ('' if the
#       run goes on), 5 now (ms), 6 the batch: a JSON array of events (one entry),
#       7 the batch's number in its run (1, 2, ...), 8 the chat's wake-up channel,
#       9 how long the log of an ended run is kept (s)
# Returns: the batch's entry id, or '' when the run is no longer current (nothing
#          written).
# Replay: see log_append.
APPEND = (
    LOG_APPEND_FUNCTION
    + """
if redis.call('HGET', KEYS[2], 'run_token') ~= ARGV[1] then return '' end
return log_append(KEYS[1], KEYS[2], ARGV[6], ARGV[7], ARGV[2], ARGV[4], ARGV[5], ARGV[8],
                  ARGV[3], ARGV[9])
"""
)

# Give up the run lease at once (a worker shutting down hands the chat over): the chat
# stays running, but its lease has lapsed, so a resume or a new turn may take it over.
# KEYS: 1 meta
# ARGV: 1 lease token
# Returns: 1 if released, 0 if the lease was not the caller's.
# Replay: setting ``lease_until`` to 0 twice is setting it once.
RELEASE = """
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', '0')
return 1
"""

# End a run that failed (its step could not be committed, or it raised): if the caller
# still holds the lease, the chat leaves 'running' without anything the run had not
# committed — 'parked' when it holds parked calls (a resume continues from what is
# stored; a server tool that may have run reads "result unknown"), else 'idle' (the
# user's message, if never committed, can be sent again).
# KEYS: 1 meta
# ARGV: 1 lease token, 2 now (ms)
# Returns: the state left ('parked' | 'idle'), or '' when the lease was not the
#          caller's (a commit that ended the run landed, or another run took over).
# Replay: the first run dropped the lease, so a second finds it gone and answers ''.
FAIL = """
local m = redis.call('HMGET', KEYS[1], 'lease', 'parked_ids')
if m[1] ~= ARGV[1] then return '' end
local state = 'idle'
if m[2] and m[2] ~= '[]' then state = 'parked' end
redis.call('HSET', KEYS[1], 'state', state, 'updated_at', ARGV[2])
redis.call('HDEL', KEYS[1], 'lease', 'lease_until', 'turn_user')
return state
"""

# Ask the chat's running run to stop (its worker watches for this).
# KEYS: 1 meta
# ARGV: none
# Returns: 1 if a run was asked to stop, 0 if no run is running.
# Replay: it writes the same run token again.
STOP = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'stop_for', redis.call('HGET', KEYS[1], 'run_token'))
return 1
"""

# Extend the run lease while a long step runs, if the caller still holds it.
# KEYS: 1 meta
# ARGV: 1 lease token, 2 now (ms), 3 lease (ms)
# Returns: 1 if extended, 0 if the lease is no longer the caller's.
# Replay: the same deadline is written again.
RENEW = """
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', tonumber(ARGV[2]) + tonumber(ARGV[3]))
return 1
"""
