"""Lua scripts: every transition that can race is one of these, atomic inside Redis.

Each header documents KEYS, ARGV and the return value. All KEYS of a script belong to
one chat (same hash tag), so every script runs on one Redis Cluster slot.
"""

from __future__ import annotations

__all__ = ["CLAIM_RESUME", "CLAIM_TURN", "COMMIT", "SETTLE"]

# Start a new turn: take the chat's run lease, create the chat on first use, and settle
# every still-pending call of a parked step as superseded.
# KEYS: 1 meta, 2 pending, 3 outcomes, 4 history, 5 calls
# ARGV: 1 schema version, 2 principal, 3 lease token, 4 now (ms), 5 lease (ms),
#       6 user message id ('' if none), 7 superseding outcome JSON, 8 TTL (s),
#       9 new assistant message id, 10 template digest, 11 template JSON
# Returns: {'ok', model_calls, previous state, parked ids JSON}
#        | {'incompatible', version} | {'forbidden'} | {'busy'} | {'duplicate'}
CLAIM_TURN = """
local v = redis.call('HGET', KEYS[1], 'v')
if not v then
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 'owner', ARGV[2], 'state', 'idle',
             'model_calls', '0', 'created_at', ARGV[4])
elseif v ~= ARGV[1] then
  return {'incompatible', v}
end
local m = redis.call('HMGET', KEYS[1], 'owner', 'state', 'lease_until', 'last_uid',
                     'model_calls', 'parked_ids', 'template_digest')
if m[1] ~= ARGV[2] then return {'forbidden'} end
if m[2] == 'running' and tonumber(m[3] or '0') > tonumber(ARGV[4]) then return {'busy'} end
if ARGV[6] ~= '' and m[4] == ARGV[6] then return {'duplicate'} end
local parked = '[]'
if m[2] == 'parked' then
  parked = m[6] or '[]'
  local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
  for _, id in ipairs(ids) do
    redis.call('HSETNX', KEYS[3], id, ARGV[7])
  end
  redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[1], 'state', 'running', 'lease', ARGV[3],
           'lease_until', tonumber(ARGV[4]) + tonumber(ARGV[5]),
           'message_id', ARGV[9], 'parked_ids', '[]')
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'last_uid', ARGV[6]) end
if m[7] ~= ARGV[10] then
  redis.call('HSET', KEYS[1], 'template_digest', ARGV[10], 'template', ARGV[11])
end
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ARGV[8]) end
return {'ok', m[5] or '0', m[2] or 'idle', parked}
"""

# Resume a parked chat whose calls are all settled: exactly one caller wins the lease.
# KEYS: 1 meta, 2 pending
# ARGV: 1 schema version, 2 principal, 3 lease token, 4 now (ms), 5 lease (ms), 6 TTL (s)
# Returns: {'ok', model_calls, message id, parked ids JSON, template JSON}
#        | {'missing'} | {'incompatible', version} | {'forbidden'}
#        | {'not_parked', state} | {'pending', count}
CLAIM_RESUME = """
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return {'missing'} end
if v ~= ARGV[1] then return {'incompatible', v} end
local m = redis.call('HMGET', KEYS[1], 'owner', 'state', 'model_calls', 'message_id',
                     'parked_ids', 'template')
if m[1] ~= ARGV[2] then return {'forbidden'} end
if m[2] ~= 'parked' then return {'not_parked', m[2]} end
local n = redis.call('ZCARD', KEYS[2])
if n > 0 then return {'pending', n} end
redis.call('HSET', KEYS[1], 'state', 'running', 'lease', ARGV[3],
           'lease_until', tonumber(ARGV[4]) + tonumber(ARGV[5]))
redis.call('EXPIRE', KEYS[1], ARGV[6])
return {'ok', m[3], m[4], m[5], m[6]}
"""

# Persist one step (or the end of a run) if the caller still holds the lease: append
# history entries, write parked call records, move the chat to its next state.
# KEYS: 1 meta, 2 history, 3 calls, 4 pending, 5 outcomes
# ARGV: 1 lease token, 2 next state ('running' | 'parked' | 'idle'), 3 TTL (s),
#       4 model_calls, 5 now (ms), 6 lease (ms), 7 parked ids JSON ('' = unchanged),
#       8 number of history entries N, 9 number of calls C,
#       then N entry JSONs, then C triples (toolCallId, record JSON, park order)
# Returns: 1 on success, 0 when the lease was lost (nothing written).
COMMIT = """
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[8])
local c = tonumber(ARGV[9])
if n > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, 10, 9 + n))
end
for i = 0, c - 1 do
  local base = 10 + n + i * 3
  redis.call('HSET', KEYS[3], ARGV[base], ARGV[base + 1])
  redis.call('ZADD', KEYS[4], ARGV[base + 2], ARGV[base])
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'model_calls', ARGV[4], 'updated_at', ARGV[5])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'parked_ids', ARGV[7]) end
if ARGV[2] == 'running' then
  redis.call('HSET', KEYS[1], 'lease_until', tonumber(ARGV[5]) + tonumber(ARGV[6]))
else
  redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
end
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
return 1
"""

# Settle one parked call: the first writer wins; a repeat is compared with the winner.
# KEYS: 1 calls, 2 outcomes, 3 pending
# ARGV: 1 toolCallId, 2 canonical outcome JSON, 3 TTL (s)
# Returns: {'settled', pending count left} | {'same', outcome} | {'conflict', outcome}
#        | {'missing'}
SETTLE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {'missing'} end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then
  if cur == ARGV[2] then return {'same', cur} end
  return {'conflict', cur}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return {'settled', redis.call('ZCARD', KEYS[3])}
"""
