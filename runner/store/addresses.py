"""Address quotas: what all the principals of one address may store together.

Threat answered: anyone can mint anonymous sessions, and each is a principal with quotas
of its own (:mod:`parkway.runner.store.usage`); the session throttle only slows the
minting, so one client address could hold about 1,200 sessions after an hour, each with
its own 256 MiB. The transport maps each anonymous principal to the address that minted
it (transport/api/sessions.py); the runner sees an opaque name (:attr:`AddressQuotas.of`)
and counts the chats of all the principals of one address in one more pair of usage keys
(:func:`~parkway.runner.store.keys.address_usage_keys`), as it counts a principal's:
each chat's stored bytes as last rolled up, their total, and when each count lapses.
A principal with no address (a JWT's subject, a proxy's user) is not counted here.

The rule is the principal quotas': a turn is refused once the address's total is at its
quota, a new chat once the address has as many live chats as it may, and an artifact
unless it fits; a run that has started stores what it produces, and when it parks, ends
or fails its chat's count is rolled up into the address's, so the next turn finds the
quota used up.

Atomicity. The address's keys are in a slot of their own (on a Cluster: one slot for the
principals of an address, whose chats are in every slot), so the address's check is an
atomic step of its own before the claim or the artifact it guards, and it takes what it
allows: a new chat is counted by its check, an artifact's size is added by its check.
Checks racing from many sessions of one address therefore never take more than the
address may have. When the write the check guarded then does not happen (the
principal's own quota refused it, another request took the chat), what the check took
is given back (:meth:`Taken.give_back`); a worker that dies in between leaves it counted
until it lapses, so the address can lose room that way, never gain it. On one Redis the
chat's meta is read inside the check's script (one round trip); on a Cluster it lives in
the chat's slot and is read first (two).

Convergence: a roll-up sets a chat's count from the chat's own ``bytes`` (it never adds),
and a count lapses a chat TTL after its last roll-up, as the chat's keys expire a chat TTL
after its last write; so the total follows the chats, and what a race made wrong (a
give-back after another request took the chat) is set right by the chat's next roll-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parkway.runner.errors import QuotaExceededError
from parkway.runner.store.client import RedisClient, as_text
from parkway.runner.store.keys import ChatKeys, UsageKeys, address_usage_keys
from parkway.runner.store.scripts import USAGE_FUNCTION

__all__ = ["AddressQuotas", "AddressUsage", "Taken", "address_quota_error"]

log = logging.getLogger(__name__)

GIB = 1024 * 1024 * 1024

# Check a turn against its address's quotas, rolling the chat's count up, and count a
# new chat (its place among the address's live chats is taken here, not by the claim).
# KEYS: 1, 2 the address's usage keys (usage_set), 3 the chat's meta (one Redis only: on
#       a Cluster it is in another slot, and ARGV[7], ARGV[8] say what the caller read)
# ARGV: 1 chat id, 2 principal, 3 now (ms), 4 chat TTL (s), 5 stored-bytes quota,
#       6 live-chats quota, 7 the chat's owner ('' = no such chat), 8 its bytes
# Returns: {'ok', '1'} (a new chat, counted here: given back if the claim changes nothing)
#        | {'ok', '0'} (nothing to give back) | {'quota', name} (nothing counted)
# Replay: the chat is counted by the first run, so the second answers {'ok', '0'}: a claim
# then refused leaves it counted (at 0 bytes) until it lapses.
ADDRESS_TURN = (
    USAGE_FUNCTION
    + """
usage_prune(KEYS[1], KEYS[2], ARGV[3])
local owner, bytes = ARGV[7], ARGV[8]
if KEYS[3] then
  local m = redis.call('HMGET', KEYS[3], 'owner', 'bytes')
  owner, bytes = m[1] or '', m[2] or '0'
end
if owner == '' then
  local counted = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
  if not counted and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) then
    return {'quota', 'live_chats'}
  end
  if tonumber(redis.call('HGET', KEYS[1], '#total') or '0') >= tonumber(ARGV[5]) then
    return {'quota', 'stored_bytes'}
  end
  if counted then return {'ok', '0'} end
  usage_set(KEYS[1], KEYS[2], ARGV[1], 0, ARGV[3], ARGV[4])
  return {'ok', '1'}
end
-- another principal's chat: its claim is refused, and nothing is counted
if owner ~= ARGV[2] then return {'ok', '0'} end
if usage_set(KEYS[1], KEYS[2], ARGV[1], tonumber(bytes), ARGV[3], ARGV[4])
   >= tonumber(ARGV[5]) then
  return {'quota', 'stored_bytes'}
end
return {'ok', '0'}
"""
)

# Check an artifact against its address's stored bytes, and count its size if it fits.
# A chat's count may be above the chat's own bytes while sizes checked here are being
# stored: the higher one is kept.
# KEYS: 1, 2 the address's usage keys, 3 the chat's meta (one Redis only; else ARGV[6])
# ARGV: 1 chat id, 2 now (ms), 3 chat TTL (s), 4 the artifact's size, 5 stored-bytes quota,
#       6 the chat's bytes as the caller read them
# Returns: {'ok', the chat's count now} | {'quota', 'stored_bytes'} (the chat's count
#          rolled up, nothing added)
# Replay: the size is added again, until the chat's next roll-up (its run's end) sets the
# count from the chat's: the address loses room for a while, never gains it.
ADDRESS_STORE = (
    USAGE_FUNCTION
    + """
usage_prune(KEYS[1], KEYS[2], ARGV[2])
local mine = tonumber(ARGV[6])
if KEYS[3] then mine = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0') end
local base = math.max(mine, tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0'))
local total = usage_set(KEYS[1], KEYS[2], ARGV[1], base, ARGV[2], ARGV[3])
if total + tonumber(ARGV[4]) > tonumber(ARGV[5]) then return {'quota', 'stored_bytes'} end
local count = base + tonumber(ARGV[4])
usage_set(KEYS[1], KEYS[2], ARGV[1], count, ARGV[2], ARGV[3])
return {'ok', tostring(count)}
"""
)

# Give back what a check took for a write that did not happen.
# KEYS: 1, 2 the address's usage keys, 3 the chat's meta (one Redis only)
# ARGV: 1 chat id, 2 the size to give back ('' = the chat's own count, taken by
#       ADDRESS_TURN for a new chat: dropped while it is 0 and, on one Redis, the chat
#       does not exist, so a chat another request created stays counted), 3 the count
#       ADDRESS_STORE left (with a size: given back only while the count is that)
# Returns: 1 when something was given back, else 0
# Replay: the count has changed, so the second run gives back nothing.
ADDRESS_GIVE_BACK = """
local counted = redis.call('HGET', KEYS[1], ARGV[1])
if not counted then return 0 end
if ARGV[2] == '' then
  if counted ~= '0' or (KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1) then return 0 end
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 1
end
if counted ~= ARGV[3] then return 0 end
local left = math.max(0, tonumber(counted) - tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], ARGV[1], left)
redis.call('HINCRBY', KEYS[1], '#total', left - tonumber(counted))
return 1
"""

# Roll a chat's count up into its address's (its run parked, ended or failed).
# KEYS: 1, 2 the address's usage keys, 3 the chat's meta (one Redis only; else ARGV[4])
# ARGV: 1 chat id, 2 now (ms), 3 chat TTL (s), 4 the chat's bytes as the caller read them
# Returns: the address's total
# Replay: the count is set, not added: the same again.
ADDRESS_ROLL_UP = (
    USAGE_FUNCTION
    + """
usage_prune(KEYS[1], KEYS[2], ARGV[2])
local mine = tonumber(ARGV[4])
if KEYS[3] then mine = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0') end
return usage_set(KEYS[1], KEYS[2], ARGV[1], mine, ARGV[2], ARGV[3])
"""
)


@dataclass(frozen=True)
class AddressQuotas:
    """What the principals of one address may store together (settings
    ``quota_address_stored_bytes``, ``quota_address_live_chats``; docs/operations.md,
    "Quotas and fair admission"), and the address of a principal (``of``: None for a
    principal counted alone)."""

    of: Callable[[str], str | None]
    stored_bytes: int = GIB
    live_chats: int = 2000


_TEXT = {
    "stored_bytes": "the sessions of your address have used their shared storage quota "
    "({limit} bytes); nothing was stored. Chats expire on their own after their time to live",
    "live_chats": "the sessions of your address have as many chats as they may keep "
    "({limit}); older ones expire on their own after their time to live",
}


def address_quota_error(name: str, quotas: AddressQuotas) -> QuotaExceededError:
    """The error for an address script's ``{'quota', name}`` refusal: the quota is named
    ``address_<name>`` (``address_stored_bytes``, ``address_live_chats``)."""
    limit = int(getattr(quotas, name))
    return QuotaExceededError(f"address_{name}", limit, _TEXT[name].format(limit=limit))


@dataclass(frozen=True)
class Taken:
    """What a check took for a write that may still not happen: a new chat's place
    (``size`` None), or an artifact's size, which left the chat's count at ``count``."""

    usage: AddressUsage
    keys: ChatKeys
    address: str
    size: int | None = None
    count: str = ""

    async def give_back(self) -> None:
        """The write did not happen: give back what its check took (one round trip)."""
        await self.usage.give_back(self)


class AddressUsage:
    """The address checks of one store: each a round trip of its own (two on a Cluster)
    before or after the chat's script, only for principals that have an address."""

    def __init__(self, redis: RedisClient, quotas: AddressQuotas, ttl_s: int, *,
                 cluster: bool) -> None:  # fmt: skip
        self.redis = redis
        self.quotas = quotas
        self.ttl_s = ttl_s
        self.cluster = cluster
        self._turn = redis.register_script(ADDRESS_TURN)
        self._store = redis.register_script(ADDRESS_STORE)
        self._give_back = redis.register_script(ADDRESS_GIVE_BACK)
        self._roll_up = redis.register_script(ADDRESS_ROLL_UP)

    def _keys(self, usage: UsageKeys, keys: ChatKeys) -> list[str]:
        """The script's keys: the chat's meta too where it shares a server with them."""
        return [usage.bytes, usage.chats, *(() if self.cluster else (keys.meta,))]

    async def _meta(self, keys: ChatKeys, *fields: str) -> list[str]:
        """On a Cluster, the chat's fields the script cannot read (another slot)."""
        if not self.cluster:
            return ["" for _ in fields]
        values = await self.redis.hmget(keys.meta, list(fields))
        return ["" if value is None else as_text(value) for value in values]

    async def take_turn(self, keys: ChatKeys, principal: str, now_ms: int) -> Taken | None:
        """Check a turn of ``principal`` in the chat against its address's quotas (none:
        None), or raise :class:`QuotaExceededError`; what was taken for a new chat comes
        back, to give back if the claim changes nothing."""
        address = self.quotas.of(principal)
        if address is None:
            return None
        owner, stored = await self._meta(keys, "owner", "bytes")
        reply = await self._turn(
            keys=self._keys(address_usage_keys(address), keys),
            args=[keys.chat_id, principal, now_ms, self.ttl_s, self.quotas.stored_bytes,
                  self.quotas.live_chats, owner, stored or "0"],
        )  # fmt: skip
        self._raise_for(reply)
        return Taken(self, keys, address) if as_text(reply[1]) == "1" else None

    async def take_bytes(
        self, keys: ChatKeys, principal: str, now_ms: int, size: int
    ) -> Taken | None:
        """Check ``size`` more bytes of the chat (an artifact) against its address's
        quota and count them (no address: None), or raise :class:`QuotaExceededError`."""
        address = self.quotas.of(principal)
        if address is None:
            return None
        (stored,) = await self._meta(keys, "bytes")
        reply = await self._store(
            keys=self._keys(address_usage_keys(address), keys),
            args=[keys.chat_id, now_ms, self.ttl_s, size, self.quotas.stored_bytes,
                  stored or "0"],
        )  # fmt: skip
        self._raise_for(reply)
        return Taken(self, keys, address, size=size, count=as_text(reply[1]))

    async def give_back(self, taken: Taken) -> None:
        """Give back what ``taken``'s check took. It follows a write that did not happen,
        whose caller is told why: a failure here is logged, not raised, and leaves it
        counted until it lapses (the address loses room, never gains it)."""
        usage = address_usage_keys(taken.address)
        size = "" if taken.size is None else taken.size
        try:
            await self._give_back(
                keys=self._keys(usage, taken.keys), args=[taken.keys.chat_id, size, taken.count]
            )
        except Exception as exc:
            log.warning(
                "chat %s: its address's count was not given back: %r", taken.keys.chat_id, exc
            )

    async def roll_up(self, keys: ChatKeys, principal: str | None, now_ms: int) -> None:
        """Roll the chat's count up into its owner's address (a run parked, ended or
        failed); nothing for a principal without an address. It follows a write that
        happened: a failure here is logged, not raised, and the chat's next turn rolls it
        up again."""
        address = None if principal is None else self.quotas.of(principal)
        if address is None:
            return
        try:
            (stored,) = await self._meta(keys, "bytes")
            await self._roll_up(
                keys=self._keys(address_usage_keys(address), keys),
                args=[keys.chat_id, now_ms, self.ttl_s, stored or "0"],
            )
        except Exception as exc:
            log.warning("chat %s: not rolled up into its address's count: %r", keys.chat_id, exc)

    def _raise_for(self, reply: Any) -> None:
        if as_text(reply[0]) == "quota":
            raise address_quota_error(as_text(reply[1]), self.quotas)
