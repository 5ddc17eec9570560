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
"""

from __future__ import annotations

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
#       16 the owner's stored-bytes quota, 17 its live-chats quota, 18 the artifacts' TTL
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
           'run_hist', redis.call('LLEN', KEYS[4]), 'run_commits', '0', 'log_seq', '0')
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
_CLAIM_RESUME = """
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

# Resume a chat (claim_resume).
# KEYS: 1 meta, 2 pending, 3 history, 4 calls, 5 outcomes
# ARGV: 1 schema version, 2 principal, 3 lease token, 4 now (ms), 5 lease (ms), 6 TTL (s)
# Returns and Replay: as claim_resume.
CLAIM_RESUME = (
    _CLAIM_RESUME
    + """
return claim_resume(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3],
                    ARGV[4], ARGV[5], ARGV[6])
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
    _CLAIM_RESUME
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
_LOG_APPEND = """
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
    _LOG_APPEND
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
  redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
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
    _LOG_APPEND
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
redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
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


# Store one artifact (runner/store/artifacts.py), within the chat's artifact count and its
# owner's stored bytes, or not at all.
# KEYS: 1 meta, 2 artifacts, 3 artifact data, and with ARGV[7] (a single Redis: on a
#       Cluster runner/store/usage.py checks the owner's bytes first, in another slot)
#       4, 5 the owner's usage keys (usage_set)
# ARGV: 1 artifact id, 2 record JSON, 3 the bytes, 4 the artifacts' TTL (s), 5 the chat's
#       artifact quota, 6 now (ms), 7 the chat id ('' = the owner's bytes are not checked
#       here), 8 the owner's stored-bytes quota, 9 the chat TTL (s)
# Returns: {'ok'} | {'quota', name} (nothing written)
# Replay: the artifact id is new for every put; one already stored was stored by the
# lost first run, which answered 'ok'.
ARTIFACT_PUT = (
    USAGE_FUNCTION
    + """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {'ok'} end
if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[5]) then return {'quota', 'artifacts_per_chat'} end
local size = #ARGV[2] + #ARGV[3]
local mine = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
if ARGV[7] ~= '' then
  usage_prune(KEYS[4], KEYS[5], ARGV[6])
  local total = usage_set(KEYS[4], KEYS[5], ARGV[7], mine, ARGV[6], ARGV[9])
  if total + size > tonumber(ARGV[8]) then return {'quota', 'stored_bytes'} end
  usage_set(KEYS[4], KEYS[5], ARGV[7], mine + size, ARGV[6], ARGV[9])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[4])
redis.call('HINCRBY', KEYS[1], 'bytes', size)
return {'ok'}
"""
)

# A principal's usage, checked (and this chat's count rolled up) apart from the write
# it guards: a Cluster's way (the usage keys are in another slot than the chat's), one
# round trip before the claim or the artifact it guards.
# KEYS: 1, 2 the principal's usage keys (usage_set)
# ARGV: 1 chat id, 2 the chat's bytes ('' = unknown: a new chat, or not the
#       principal's), 3 now (ms), 4 chat TTL (s), 5 bytes about to be stored (1 for a
#       turn: refused once the total is at the quota),
#       6 stored-bytes quota, 7 live-chats quota ('' = not checked: not a new chat)
# Returns: {'ok'} | {'quota', name}
# Replay: rolling a count up twice sets it twice.
USAGE = (
    USAGE_FUNCTION
    + """
usage_prune(KEYS[1], KEYS[2], ARGV[3])
local total
if ARGV[2] == '' then
  total = tonumber(redis.call('HGET', KEYS[1], '#total') or '0')
else
  total = usage_set(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4])
end
if ARGV[7] ~= '' and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[7]) then
  return {'quota', 'live_chats'}
end
if total + tonumber(ARGV[5]) > tonumber(ARGV[6]) then
  return {'quota', 'stored_bytes'}
end
if ARGV[2] == '' and ARGV[7] ~= '' then
  usage_set(KEYS[1], KEYS[2], ARGV[1], 0, ARGV[3], ARGV[4])
end
return {'ok'}
"""
)
