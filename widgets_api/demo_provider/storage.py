"""The demo provider's state in Redis, on a synchronous client: authlib's server
callbacks run in worker threads.

Keys hold SHA-256 digests of consent ids, codes and tokens, never the values, so a
leaked keyspace yields nothing usable; every key expires. The steps that span several
keys (redeem a code, issue its grant, rotate a refresh token) are Lua scripts, each
header giving KEYS, ARGV and the return value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, cast

import redis

from parkway.widgets_api.demo_provider.records import Code, Token
from parkway.widgets_api.keys import demo_oauth_key

__all__ = [
    "CODE_TTL_S",
    "CONSENT_TTL_S",
    "GRANT_TTL_S",
    "SPENT_CODE_TTL_S",
    "Store",
    "digest_of",
]

CONSENT_TTL_S = 600  # a consent form works once, within 10 minutes
CODE_TTL_S = 60  # RFC 9700 §4.5: codes are short-lived and single-use
SPENT_CODE_TTL_S = 600  # a redeemed code is remembered this long, to catch a replay
GRANT_TTL_S = 30 * 86400  # a grant lives 30 days from its last refresh

_Args = list[str | float]  # a script's ARGV


def _key(kind: str, ident: str) -> str:
    return demo_oauth_key(kind, ident)


def digest_of(secret: str) -> str:
    """The SHA-256 of a consent id, code or token: what the keys and records hold."""
    return hashlib.sha256(secret.encode()).hexdigest()


# Redeem a code once. KEYS: 1 code. ARGV: 1 TTL (s) of the spent marker.
# Returns {'fresh', record JSON} on first use; {'replay', grant id or ''} on a later
# one, after marking the code revoked; false for an unknown or expired code.
CONSUME_CODE = """
local v = redis.call('GET', KEYS[1])
if not v then return false end
if string.sub(v, 1, 1) == '{' then
  redis.call('SET', KEYS[1], 'spent:' .. cjson.decode(v)['grant_id'], 'EX', ARGV[1])
  return {'fresh', v}
end
redis.call('SET', KEYS[1], 'revoked', 'KEEPTTL')
if v == 'revoked' then return {'replay', ''} end
return {'replay', string.sub(v, 7)}
"""

# Start the grant of a redeemed code, unless a replay revoked the code meanwhile.
# KEYS: 1 code, 2 grant, 3 refresh, 4 access. ARGV: 1 grant id, 2 client id, 3 account,
# 4 scope, 5 refresh digest, 6 grant TTL, 7 access JSON, 8 access TTL. Returns 1 | 0.
ISSUE = """
if redis.call('GET', KEYS[1]) ~= 'spent:' .. ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'client_id', ARGV[2], 'account', ARGV[3], 'scope', ARGV[4],
           'refresh', ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[6])
redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[6])
redis.call('SET', KEYS[4], ARGV[7], 'EX', ARGV[8])
return 1
"""

# Rotate a refresh token: compare-and-set the grant's current refresh digest.
# KEYS: 1 grant, 2 new refresh, 3 new access. ARGV: 1 presented digest, 2 new digest,
# 3 grant id, 4 grant TTL, 5 access JSON, 6 access TTL.
# Returns 1 rotated | 0 no such grant | -1 the presented token was already rotated: the
# grant is deleted (RFC 9700 §4.14 reuse detection), and its access tokens die with it.
ROTATE = """
local current = redis.call('HGET', KEYS[1], 'refresh')
if not current then return 0 end
if current ~= ARGV[1] then redis.call('DEL', KEYS[1]) return -1 end
redis.call('HSET', KEYS[1], 'refresh', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
redis.call('SET', KEYS[3], ARGV[5], 'EX', ARGV[6])
return 1
"""


class Store:
    """The provider's Redis state, on a synchronous client (called from worker threads)."""

    def __init__(self, redis_url: str, clock: Callable[[], float], access_ttl_s: int) -> None:
        self.redis = redis.Redis.from_url(
            redis_url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5
        )
        self.clock = clock
        self.access_ttl_s = access_ttl_s
        self._consume = self.redis.register_script(CONSUME_CODE)
        self._issue = self.redis.register_script(ISSUE)
        self._rotate = self.redis.register_script(ROTATE)

    def put(self, kind: str, secret: str, record: dict[str, Any], ttl_s: int) -> None:
        self.redis.set(_key(kind, digest_of(secret)), json.dumps(record), ex=ttl_s)

    def take_consent(self, consent_id: str) -> dict[str, Any] | None:
        raw = cast(str | None, self.redis.getdel(_key("consent", digest_of(consent_id))))
        record: dict[str, Any] | None = json.loads(raw) if raw else None
        return record if record and record["expires_at"] > self.clock() else None

    def consume_code(self, code: str) -> Code | None:
        digest = digest_of(code)
        result = self._consume(keys=[_key("code", digest)], args=[SPENT_CODE_TTL_S])
        if not result:
            return None
        if result[0] == "replay":  # RFC 6749 §4.1.2: revoke what the first use issued
            if result[1]:
                self.redis.delete(_key("grant", result[1]))
            return None
        found = Code(**json.loads(result[1]), digest=digest)
        return found if found.expires_at > self.clock() else None

    def issue(self, code: Code, refresh_token: str, access: Token) -> bool:
        refresh = digest_of(refresh_token)
        keys = [_key("code", code.digest), _key("grant", code.grant_id),
                _key("refresh", refresh), _key("access", access.digest)]  # fmt: skip
        args: _Args = [code.grant_id, code.client_id, code.account, code.scope, refresh,
                       GRANT_TTL_S, access.record(), self.access_ttl_s]  # fmt: skip
        return bool(self._issue(keys=keys, args=args))

    def rotate(self, old: Token, refresh_token: str, access: Token) -> int:
        new = digest_of(refresh_token)
        keys = [_key("grant", old.grant_id), _key("refresh", new), _key("access", access.digest)]
        args: _Args = [old.digest, new, old.grant_id, GRANT_TTL_S, access.record(),
                       self.access_ttl_s]  # fmt: skip
        return int(self._rotate(keys=keys, args=args))

    def find_refresh(self, refresh_token: str) -> Token | None:
        """The grant a refresh token belongs to, also when it was rotated since: that is
        reuse, which ``rotate`` answers by revoking the grant."""
        digest = digest_of(refresh_token)
        grant_id = cast(str | None, self.redis.get(_key("refresh", digest)))
        grant = cast(dict[str, str], self.redis.hgetall(_key("grant", grant_id or "-")))
        if not grant_id or not grant:
            return None
        return Token("refresh_token", digest, grant_id, grant["client_id"],
                      grant["account"], grant["scope"])  # fmt: skip

    def find_access(self, access_token: str) -> Token | None:
        digest = digest_of(access_token)
        raw = cast(str | None, self.redis.get(_key("access", digest)))
        if not raw:
            return None
        record = json.loads(raw)
        if not self.redis.exists(_key("grant", record["grant_id"])):
            return None  # its grant was revoked
        expired = record["expires_at"] <= self.clock()
        return Token("access_token", digest, expired=expired, **record)

    def revoke(self, token: Token) -> None:
        if token.kind == "access_token":
            self.redis.delete(_key("access", token.digest))
        else:  # a refresh token takes its grant, and so every token of it, along
            self.redis.delete(_key("grant", token.grant_id))
