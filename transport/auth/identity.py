"""Who a request is: a principal and the roles its authenticator grants."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Identity", "identity_of"]


@dataclass(frozen=True)
class Identity:
    """A request's principal id and its roles (``editor``, ``approver``; docs/security.md,
    "Identities"). An authenticator may answer one instead of a bare principal string."""

    principal: str
    roles: frozenset[str] = field(default_factory=frozenset)


def identity_of(found: str | Identity | None) -> Identity | None:
    """What an authenticator answered, as an :class:`Identity` (a bare principal string
    has no roles); None for no identity or an empty principal."""
    if found is None:
        return None
    identity = found if isinstance(found, Identity) else Identity(str(found))
    return identity if identity.principal else None


def roles_from(value: object) -> frozenset[str]:
    """Roles as a claim or header carries them: a list of strings, or one string of
    names separated by spaces or commas. Anything else grants nothing."""
    if isinstance(value, str):
        return frozenset(value.replace(",", " ").split())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return frozenset(item.strip() for item in value if item.strip())
    return frozenset()
