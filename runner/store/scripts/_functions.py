"""The Lua functions several scripts share: each script's source begins with those it calls.

- ``audit_append``, ``audit_settle``: an entry appended to an audit stream (the settles of
  CLAIM_TURN, SETTLE and ANSWER; AUDIT_APPEND; the agent's commit script);
- ``usage_prune``, ``usage_set``: a principal's storage use, rolled up (CLAIM_TURN, COMMIT,
  ARTIFACT_PUT, USAGE; the address quotas' scripts);
- ``log_append``: a batch of a run's events appended to the chat's event log (COMMIT,
  APPEND);
- ``claim_resume``: a resume's claim of the run lease (CLAIM_RESUME, ANSWER).
"""

from __future__ import annotations

__all__ = [
    "AUDIT_FUNCTION",
    "CLAIM_RESUME_FUNCTION",
    "LOG_APPEND_FUNCTION",
    "USAGE_FUNCTION",
    "USAGE_TOTAL",
]

# The audit trail (runner/store/audit.py): an entry appended to an audit stream, shared by
# SETTLE, ANSWER, AUDIT_APPEND and the agent's commit script (runner/agent/revisions.py). The
# entry's id is Redis's own clock (XADD '*'), one clock for every worker; entries older
# than ``keep`` seconds by that clock are trimmed on each append (exact MINID: an audit
# stream grows by decisions, a few per minute, so the trim removes one or none), and the
# stream's TTL is set to ``keep``, so an idle trail expires whole.
# audit_append(stream key, keep (s), {field, value, ...}) -> entry id
# audit_settle(stream key, meta key, calls key, toolCallId, owner (false = read it), who,
#              source, tool ('' = read from the call's record), input digest ('' = the
#              SHA-1 of the record's parkedCallKey), outcome kind, edits JSON ('' = none),
#              keep (s), reason (optional: why the server settled it)) -> entry id
# The record is read only when the caller does not know the call (the sweeper): every
# other settler passes what it already has, so the hot path adds one XADD and one EXPIRE.
AUDIT_FUNCTION = """
local function audit_append(stream, keep, fields)
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local oldest = string.format('%d', ms - tonumber(keep) * 1000)
  local id = redis.call('XADD', stream, 'MINID', oldest, '*', unpack(fields))
  redis.call('EXPIRE', stream, keep)
  return id
end
local function audit_settle(stream, meta, calls, id, owner, who, source, tool, digest, kind,
                            edits, keep, reason)
  if tool == '' or digest == '' then
    local rec = cjson.decode(redis.call('HGET', calls, id))
    if tool == '' then tool = tostring(rec['tool']) end
    if digest == '' then digest = 'sha1:' .. redis.sha1hex(tostring(rec['key'])) end
  end
  if not owner then owner = redis.call('HGET', meta, 'owner') or '' end
  local fields = {'who', who, 'owner', owner, 'call', id, 'tool', tool, 'input', digest,
                  'outcome', kind, 'source', source}
  if edits ~= '' then
    table.insert(fields, 'edits')
    table.insert(fields, edits)
  end
  if reason then
    table.insert(fields, 'reason')
    table.insert(fields, reason)
  end
  return audit_append(stream, keep, fields)
end
"""

# A principal's storage use (runner/store/usage.py): hash USAGE (chat id -> its stored
# bytes as last rolled up, USAGE_TOTAL -> their sum) and sorted set CHATS (chat id -> when
# its count lapses, epoch ms). Both keys get the chat TTL from each roll-up.
# usage_prune(usage key, chats key, now (ms)): drops the counts of chats past their time
#   (a few per call: they go as they lapse).
# usage_set(usage key, chats key, chat id, the chat's bytes, now (ms), TTL (s)) -> total:
#   the chat's count rolled up, its time renewed.
USAGE_TOTAL = "#total"  # (no chat id has a '#')

USAGE_FUNCTION = """
local function usage_prune(ub, uc, now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', uc, '-inf', now, 'LIMIT', 0, 16)) do
    redis.call('HINCRBY', ub, '#total', 0 - tonumber(redis.call('HGET', ub, gone) or '0'))
    redis.call('HDEL', ub, gone)
    redis.call('ZREM', uc, gone)
  end
end
local function usage_set(ub, uc, chat, bytes, now, ttl)
  local old = tonumber(redis.call('HGET', ub, chat) or '-1')
  local total
  if old == bytes then
    total = tonumber(redis.call('HGET', ub, '#total') or '0')
  else
    redis.call('HSET', ub, chat, bytes)
    total = redis.call('HINCRBY', ub, '#total', bytes - math.max(old, 0))
  end
  redis.call('ZADD', uc, tonumber(now) + tonumber(ttl) * 1000, chat)
  redis.call('EXPIRE', ub, ttl)
  redis.call('EXPIRE', uc, ttl)
  return total
end
"""

# Appending a batch of a run's events to the chat's event log (a Redis Stream), shared
# by APPEND and COMMIT: the run's first entry records where it starts (``run_start``); a
# batch that ends the run records how it finished, and when. Every append publishes on
# the chat's wake-up channel, so followers on any worker read the log again
# (runner/eventlog/watch.py); the message is the new entry's id (a worker whose own run
# appended it has woken its followers already: runner/eventlog/local.py). The number of the run's
# last batch and its entry id are kept in ``log_seq`` and ``log_last``: a batch whose number
# is not above ``log_seq`` was appended (a replay) and answers that id, unwritten.
# What the log keeps: the current (or last) run and the one before it (``prev_start``,
# recorded by the claims). A run that ended is replayable from the history and only a
# follower still catching up reads its entries, so a run's end drops the entries of
# every run before the previous one and lets the log expire after ``keep`` seconds; a
# run that goes on keeps the log for the chat's TTL.
# log_append(events key, meta key, batch JSON, batch number, approximate max length,
#            finish reason or '', now (ms), wake-up channel, TTL (s), keep (s))
#   -> entry id
LOG_APPEND_FUNCTION = """
local function log_append(events, meta, batch, seq, maxlen, finish, now, wake, ttl, keep)
  local m = redis.call('HMGET', meta, 'log_seq', 'log_last', 'run_start', 'prev_start')
  if tonumber(m[1] or '0') >= tonumber(seq) then return m[2] or '' end
  local id = redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'b', batch)
  redis.call('HSET', meta, 'log_seq', seq, 'log_last', id)
  if not m[3] then redis.call('HSET', meta, 'run_start', id) end
  redis.call('PUBLISH', wake, id)
  if finish == '' then
    redis.call('EXPIRE', events, ttl)
  else
    redis.call('HSET', meta, 'last_finish', finish, 'finished_at', now)
    if m[4] then redis.call('XTRIM', events, 'MINID', m[4]) end
    redis.call('EXPIRE', events, keep)
  end
  return id
end
"""

# Resume a chat whose parked calls are all settled, or take over one whose worker died
# (state running, lease lapsed): exactly one caller wins the lease. Shared by
# CLAIM_RESUME and ANSWER.
# claim_resume(meta, pending, history, calls, outcomes keys, schema version, principal,
#              lease token, now (ms), lease (ms), TTL (s))
# Returns: {'ok', model_calls, message id, parked ids JSON, template JSON, C,
#           C pairs (call record JSON, outcome JSON or ''), history entry, ...}
#        | {'missing'} | {'incompatible', version} | {'forbidden'} | {'busy'}
#        | {'not_parked', state} | {'pending', count}
# Replay: a chat running under this very (new) lease token was claimed by the lost first
# run, which wrote nothing else (its caller never had the reply); the checks are skipped
# and the same fields are written and returned again.
CLAIM_RESUME_FUNCTION = """
local function claim_resume(meta, pending, history, calls, outcomes, version, principal,
                            token, now, lease, ttl)
  local v = redis.call('HGET', meta, 'v')
  if not v then return {'missing'} end
  if v ~= version then return {'incompatible', v} end
  local m = redis.call('HMGET', meta, 'owner', 'state', 'model_calls', 'message_id',
                       'parked_ids', 'template', 'lease_until', 'run', 'run_committed',
                       'lease')
  if m[1] ~= principal then return {'forbidden'} end
  local replay = m[2] == 'running' and m[10] == token
  if replay then
    -- (checked and claimed by the first run)
  elseif m[2] == 'running' then
    if tonumber(m[7] or '0') > tonumber(now) then return {'busy'} end
    -- A dead turn that stored nothing has nothing to continue: its message must be
    -- sent again. A dead resume, or a run that stored a step, continues from what is
    -- stored.
    if m[8] ~= 'resume' and m[9] ~= '1' then return {'not_parked', 'interrupted'} end
  elseif m[2] ~= 'parked' then
    return {'not_parked', m[2]}
  end
  local n = redis.call('ZCARD', pending)
  if n > 0 and not replay then return {'pending', n} end
  redis.call('HSET', meta, 'state', 'running', 'lease', token,
             'lease_until', tonumber(now) + tonumber(lease), 'run', 'resume',
             'run_token', token, 'run_hist', redis.call('LLEN', history),
             'run_commits', '0', 'log_seq', '0')
  local ran = redis.call('HGET', meta, 'run_start')
  if ran then redis.call('HSET', meta, 'prev_start', ran) end
  redis.call('HDEL', meta, 'run_start', 'stop_for', 'log_last')
  redis.call('EXPIRE', meta, ttl)
  local out = {'ok', m[3], m[4] or '', m[5] or '[]', m[6] or ''}
  -- The parked step's records and outcomes come along: resuming is one round trip.
  local ids = cjson.decode(m[5] or '[]')
  table.insert(out, tostring(#ids))
  if #ids > 0 then
    local recs = redis.call('HMGET', calls, unpack(ids))
    local outs = redis.call('HMGET', outcomes, unpack(ids))
    for i = 1, #ids do
      table.insert(out, recs[i] or '')
      table.insert(out, outs[i] or '')
    end
  end
  for _, entry in ipairs(redis.call('LRANGE', history, 0, -1)) do table.insert(out, entry) end
  return out
end
"""
