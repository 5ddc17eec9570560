"""The scripts of what an owner stores: its usage checked against its quotas, and artifacts.

They serve a principal's usage keys (runner/store/usage.py) and a chat's artifacts
(runner/store/artifacts.py), which count toward them.
"""

from __future__ import annotations

from parkway.runner.store.scripts._functions import USAGE_FUNCTION

__all__ = ["ARTIFACT_PUT", "USAGE"]

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
