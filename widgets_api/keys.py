"""Every Redis key widgets_api uses, in one place: the connect flow, its start tokens,
connections, and the built-in demo OAuth provider.

The runner's keys (chats, the deadline index, agent revisions) are in
:mod:`parkway.runner.store.keys`; the two modules are the only ones that spell key names. The keys
of one parked call (the flow pointer, spent start tokens) carry the chat's hash tag
``{<chat id>}``, those of one principal's connections the tag ``{c:<digest>}``, so each
multi-key script or transaction stays on one Redis Cluster slot; the demo provider's
keys have no common tag (it runs on one Redis node). Every key here has a TTL.
"""

from __future__ import annotations

from parkway.runner.store import check_chat_id

__all__ = [
    "DEMO_OAUTH_PREFIX",
    "ConnectionKeys",
    "demo_oauth_key",
    "flow_key",
    "flow_pointer_key",
    "start_token_key",
]


# -- the connect flow (widgets_api/connect/) -------------------------------------------


def flow_key(state_digest: str) -> str:
    """string: one OAuth flow's record (JSON: chat, call, principal, provider, issuer,
    PKCE verifier, per-flow cookie hash, playground origin), keyed by the SHA-256 of its
    ``state``. Written by ``start``, taken once (GETDEL) by the callback, deleted early
    by a second ``start`` for the same call or by the user's cancel. TTL: the flow TTL
    (10 minutes by default)."""
    return f"pw:flow:{{{state_digest}}}"


def flow_pointer_key(chat_id: str, tool_call_id: str) -> str:
    """string: the state digest of the current flow of one parked call, so a second
    ``start`` or a cancel can invalidate the earlier flow. Same TTL as the flow."""
    return f"pw:{{{check_chat_id(chat_id)}}}:flow:{tool_call_id}"


def start_token_key(chat_id: str, tool_call_id: str, nonce: str) -> str:
    """string "1": a spent connect start token of one parked call, named by the random
    nonce sealed inside it, so a token starts one flow only. Written once (SET NX) by
    ``start``; TTL: what was left of the token's lifetime; expires only."""
    return f"pw:{{{check_chat_id(chat_id)}}}:start:{tool_call_id}:{nonce}"


# -- connections (widgets_api/connect/connections.py) ------------------------------------------


class ConnectionKeys:
    """The keys of one principal's connections (widgets_api/connect/connections.py), all under
    the tag ``{c:<digest of the principal>}``. TTL: the connection TTL (default 180
    days), refreshed whenever a connection is stored, used or refreshed; a DELETE of the
    connection removes its keys at once."""

    __slots__ = ("audit", "by_subject", "index", "tag")

    def __init__(self, principal_digest: str) -> None:
        self.tag = f"pw:{{c:{principal_digest}}}"
        # set of the principal's connection ids.
        self.index = f"{self.tag}:index"
        # hash "<provider> <subject>" -> connection id: reconnecting the same account
        # updates its connection instead of adding another.
        self.by_subject = f"{self.tag}:subjects"
        # stream: the principal's connection audit trail (grants and revocations: who,
        # when, provider, connection id; never a token), appended in the same MULTI as
        # the change. Kept apart from the connection TTL: trimmed by age and its TTL set
        # to audit_keep_s on every append; a DELETE of a connection appends to it.
        self.audit = f"{self.tag}:audit"

    def connection(self, connection_id: str) -> str:
        """hash: provider, account, subject, scopes, status, times, and the tokens
        encrypted (AES-GCM, bound to this principal and connection id)."""
        return f"{self.tag}:conn:{connection_id}"

    def refresh_lock(self, connection_id: str) -> str:
        """string: the token of the redis-py ``Lock`` held by the one refresh allowed at
        a time for a connection. Released by its holder (the lock's compare-and-delete),
        deleted with the connection. TTL: the lock timeout (30 s by default)."""
        return f"{self.tag}:lock:{connection_id}"


# -- the built-in demo OAuth provider (widgets_api/demo_provider/) ---------------------

# The provider's Redis keys, "pw:demo-oauth:<kind>:<id>"; <digest> is the hex SHA-256 of
# the secret. The scripts span several keys, so the provider runs on one Redis node.
#   consent:<digest of form id>  string, JSON of the validated authorization request;
#                                TTL CONSENT_TTL_S; GETDEL by the form post
#   code:<digest>                string, JSON of the code record, then "spent:<grant id>"
#                                once redeemed, "revoked" after a replay; TTL CODE_TTL_S,
#                                then SPENT_CODE_TTL_S; expires only
#   grant:<grant id>             hash client_id, account, scope, refresh (digest of the
#                                current refresh token); TTL GRANT_TTL_S from the last
#                                rotation; deleted by revocation or refresh-token reuse
#   refresh:<digest>             string, grant id; TTL GRANT_TTL_S; kept after rotation
#                                (it is how reuse is detected); expires only
#   access:<digest>              string, JSON of the access record; TTL the access token
#                                lifetime; deleted by revocation
# (The TTL constants are in widgets_api/demo_provider/storage.py.)
DEMO_OAUTH_PREFIX = "pw:demo-oauth:"


def demo_oauth_key(kind: str, ident: str) -> str:
    return f"{DEMO_OAUTH_PREFIX}{kind}:{ident}"
