"""A demo OAuth 2.0 provider on authlib's server parts, so ``make run`` can finish a
connect flow with no external provider.

One confidential client; authorization code with PKCE (S256, required on every request);
refresh tokens issued with every code and rotated on every use, with reuse detection;
RFC 7009 revocation, RFC 8414 metadata, RFC 9207 ``iss`` on every authorization response.

authlib's server callbacks are synchronous: they run in ``asyncio.to_thread`` on a
synchronous Redis client, and the Starlette handlers hand them a request already read in
full. Redis keys hold SHA-256 digests of codes and tokens, never the values, so a leaked
keyspace yields nothing usable; every key expires.

- :mod:`parkway.widgets_api.demo_provider.provider`: :class:`DemoProvider`, its routes and
  endpoints;
- :mod:`parkway.widgets_api.demo_provider.server`: authlib's authorization server, grants and
  revocation endpoint, and the Starlette <-> authlib adapters;
- :mod:`parkway.widgets_api.demo_provider.records`: the client, codes and tokens;
- :mod:`parkway.widgets_api.demo_provider.storage`: the state in Redis and its Lua scripts;
- :mod:`parkway.widgets_api.demo_provider.pages`: the consent form and the refusal page.
"""

from parkway.widgets_api.demo_provider.provider import DemoProvider

__all__ = ["DemoProvider"]
