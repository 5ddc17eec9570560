"""Who a request is: a principal and the roles its authenticator grants."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Identity", "identity_of", "principal_from", "roles_from"]

# A principal longer than this is refused outright (it names Redis keys and log lines).
MAX_PRINCIPAL = 256


@dataclass(frozen=True)
class Identity:
    """A request's principal id and its roles (``editor``, ``approver``; docs/security.md,
    "Identities"). An authenticator may answer one instead of a bare principal string."""

    principal: str
    roles: frozenset[str] = field(default_factory=frozenset)


def principal_from(value: object) -> str | None:
    """``value`` as a principal name, or None: a string of 1 to 256 printable characters,
    not blank, without surrounding whitespace. Every way a request names its principal
    (a proxy's header, a JWT claim, a host's authenticator) goes through this one check.

    Threats answered: a control character (a newline, an escape) in a name that log
    lines, audit entries and the approvals queue show would let its bearer forge or hide
    lines there; a blank name, or one padded with spaces, would be a second principal
    that reads like another (``" alice"`` and ``"alice"``), so neither is trimmed into
    the other: both are refused."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_PRINCIPAL:
        return None
    if not value.isprintable() or value.strip() != value:
        return None
    return value


def identity_of(found: str | Identity | None) -> Identity | None:
    """What an authenticator answered, as an :class:`Identity` (a bare principal string
    has no roles); None for no identity or a principal :func:`principal_from` refuses
    (empty, blank, too long, control characters)."""
    if found is None:
        return None
    identity = found if isinstance(found, Identity) else Identity(str(found))
    return identity if principal_from(identity.principal) is not None else None


def roles_from(value: object) -> frozenset[str]:
    """Roles as a claim or header carries them: a list of strings, or one string of
    names separated by spaces or commas. Anything else grants nothing."""
    if isinstance(value, str):
        return frozenset(value.replace(",", " ").split())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return frozenset(item.strip() for item in value if item.strip())
    return frozenset()
