"""Identities a trusted reverse proxy vouches for, and the client address behind it.

With ``auth=header`` a proxy in front of Parkway (oauth2-proxy, an ingress with SSO)
authenticates the user and names them in a header (``auth_header``, e.g.
``X-Forwarded-User``), and optionally their roles in another (``auth_roles_header``).
Each must arrive at most once (the user header exactly once): a request carrying either
twice is refused (401).

Threat answered: anyone can send that header. It is believed only on a connection whose
peer address is one of ``trusted_proxies``; from any other address it is ignored and the
request has no identity (401). The peer is the TCP connection's own address
(``parkway serve`` turns off uvicorn's own ``X-Forwarded-For`` handling), so a client
cannot claim a proxy's address in a header either.

Threat answered by refusing repeats: a proxy that appends its header to the client's
instead of replacing it forwards both, and joining them would let the client name itself
or add roles of its choosing (``approver``) to the ones the proxy vouches for. Which of
two values the proxy meant cannot be told, so neither is believed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.requests import HTTPConnection

from parkway.transport.auth.identity import Identity, principal_from, roles_from

__all__ = ["HeaderAuthenticator", "TrustedProxies"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The addresses whose forwarding headers are believed."""

    def __init__(self, networks: Iterable[str]) -> None:
        self._networks: tuple[_Network, ...] = tuple(
            ipaddress.ip_network(name, strict=False) for name in networks
        )

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusts(self, address: str | None) -> bool:
        if address is None:
            return False
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self._networks)

    def client_of(self, conn: HTTPConnection) -> str:
        """The client's address: the peer's, unless the peer is a trusted proxy; then the
        right-most ``X-Forwarded-For`` entry that is not a trusted proxy (entries left of
        it were written by the client and prove nothing)."""
        peer = conn.client.host if conn.client is not None else "unknown"
        if not self.trusts(peer):
            return peer
        hops = [
            hop.strip()
            for line in conn.headers.getlist("x-forwarded-for")
            for hop in line.split(",")
        ]
        for hop in reversed([hop for hop in hops if hop]):
            if not self.trusts(hop):
                return hop
        return peer


class HeaderAuthenticator:
    """The user a trusted proxy names in ``header`` (and roles in ``roles_header``)."""

    def __init__(self, header: str, proxies: TrustedProxies, roles_header: str | None = None):
        self.header = header
        self.roles_header = roles_header
        self.proxies = proxies

    def authenticate(self, conn: HTTPConnection) -> Identity | None:
        if not self.proxies.trusts(conn.client.host if conn.client is not None else None):
            return None
        named = conn.headers.getlist(self.header)
        if len(named) != 1:  # none, or several: which one would the proxy mean?
            return None
        principal = principal_from(named[0].strip())
        if principal is None:
            return None
        roles = frozenset[str]()
        if self.roles_header is not None:
            listed = conn.headers.getlist(self.roles_header)
            if len(listed) > 1:  # several: one may be the client's own (see above)
                return None
            roles = roles_from(listed[0] if listed else "")
        return Identity(principal, roles)
