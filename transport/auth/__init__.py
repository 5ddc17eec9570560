"""Identities: who a request is, by a bearer JWT or a trusted proxy's header.

- :mod:`~parkway.transport.auth.identity`: :class:`Identity` (a principal and roles),
  and the one check of a principal's name every authenticator shares;
- :mod:`~parkway.transport.auth.jwt`: bearer JWTs checked against a JWKS or a public key;
- :mod:`~parkway.transport.auth.jwks`: those keys, and how a JWKS fetch is paced and
  bounded;
- :mod:`~parkway.transport.auth.proxy`: a trusted reverse proxy's user header, and the
  client address behind trusted proxies;
- :mod:`~parkway.transport.auth.preparing`: awaiting an authenticator's I/O (key
  fetches) before the route runs.

Anonymous signed sessions and the :class:`~parkway.transport.api.Authenticator` hook
live in :mod:`parkway.transport.api.sessions`; the app chooses among them by the ``auth``
setting (docs/security.md, "Identities").
"""

from parkway.transport.auth.identity import Identity, identity_of, principal_from, roles_from
from parkway.transport.auth.jwks import KeySource, load_public_key
from parkway.transport.auth.jwt import JwtAuthenticator
from parkway.transport.auth.preparing import PrepareIdentity, Preparing
from parkway.transport.auth.proxy import HeaderAuthenticator, TrustedProxies

__all__ = [
    "HeaderAuthenticator",
    "Identity",
    "JwtAuthenticator",
    "KeySource",
    "PrepareIdentity",
    "Preparing",
    "TrustedProxies",
    "identity_of",
    "load_public_key",
    "principal_from",
    "roles_from",
]
