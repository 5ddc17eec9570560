"""The Redis store: every key, script and record the runner keeps, and the clients that reach it.

- :mod:`~parkway.runner.store.chats`: :class:`ChatStore`, a chat's state (meta, history,
  parked calls, the event log's writes) through atomic Lua scripts;
- :mod:`~parkway.runner.store.scripts`: those scripts, one place for every Lua source (a
  module for each family of keys);
- :mod:`~parkway.runner.store.replies`: what the scripts hand back, decoded;
- :mod:`~parkway.runner.store.keys`: every key name, its type, contents and lifetime;
- :mod:`~parkway.runner.store.client`: Redis clients (URL parsing, retries, outages);
- :mod:`~parkway.runner.store.breaker`: each client's circuit breaker (fail fast while
  Redis is unreachable, probe, recover);
- :mod:`~parkway.runner.store.embedded`: the embedded Redis of a local server;
- :mod:`~parkway.runner.store.history`: the chat history's entries;
- :mod:`~parkway.runner.store.histcache`: each chat's history as this worker last decoded it;
- :mod:`~parkway.runner.store.deadlines`: the deadline index the sweeper reads;
- :mod:`~parkway.runner.store.approvals`: the approvals index an approver's queue reads;
- :mod:`~parkway.runner.store.audit`: the audit trails (settles, commits, connections);
- :mod:`~parkway.runner.store.artifacts`: large tool results kept as a chat's artifacts;
- :mod:`~parkway.runner.store.links`: the links MCP servers asked people to open, by
  the server's elicitation id;
- :mod:`~parkway.runner.store.live`: the questions running calls put to a chat's person
  and wait for (live questions);
- :mod:`~parkway.runner.store.usage`: a principal's quotas, counted by the scripts that
  write; :mod:`~parkway.runner.store.addresses`: what the principals of one address
  (anonymous sessions) may store together.

It imports the runner's vocabulary (errors, parked calls) and the model's message types,
never the engine, the agent or the event log's followers.
"""

from parkway.runner.store.addresses import AddressQuotas, address_quota_error
from parkway.runner.store.approvals import MAX_APPROVALS_PAGE, Approval, ApprovalPage
from parkway.runner.store.artifacts import ARTIFACT_ID, Artifact, ArtifactStore
from parkway.runner.store.audit import (
    AUDIT_KEEP_S,
    MAX_PAGE,
    AuditPage,
    AuditSource,
    CommitEntry,
    ConnectionEntry,
    SettleEntry,
    chat_audit,
    read_page,
    settle_audit,
)
from parkway.runner.store.breaker import (
    COOL_DOWN_S,
    PROBE_TIMEOUT_S,
    Breaker,
    BreakerState,
    RedisUnavailableError,
)
from parkway.runner.store.chats import SCHEMA_VERSION, ChatRecord, ChatStore, LogBatch, ResumeClaim
from parkway.runner.store.client import (
    RedisClient,
    as_text,
    breaker_of,
    connect,
    is_redis_outage,
    parse_redis_url,
)
from parkway.runner.store.embedded import EmbeddedRedis
from parkway.runner.store.history import (
    UNKNOWN_RESULT,
    ModelView,
    assistant_entry,
    call_entry,
    is_retry,
    message_metadata,
    messages_metadata,
    part_ids,
    result_entry,
    stored_messages,
    user_entry,
)
from parkway.runner.store.keys import (
    CHAT_ID,
    LOGWATCH_CHANNEL,
    MAX_CALL_ID,
    AgentKeys,
    ChatKeys,
    address_usage_keys,
    chat_keys,
    check_call_id,
    check_chat_id,
    parse_deadline_member,
    usage_keys,
)
from parkway.runner.store.links import McpLink, McpLinks
from parkway.runner.store.live import LIVE_UNSEEN_MS, LiveRecord, LiveStore
from parkway.runner.store.replies import TurnClaim
from parkway.runner.store.scripts import AUDIT_APPEND, AUDIT_FUNCTION
from parkway.runner.store.usage import Quotas

__all__ = [
    "ARTIFACT_ID",
    "AUDIT_APPEND",
    "AUDIT_FUNCTION",
    "AUDIT_KEEP_S",
    "CHAT_ID",
    "COOL_DOWN_S",
    "LIVE_UNSEEN_MS",
    "LOGWATCH_CHANNEL",
    "MAX_APPROVALS_PAGE",
    "MAX_CALL_ID",
    "MAX_PAGE",
    "PROBE_TIMEOUT_S",
    "SCHEMA_VERSION",
    "UNKNOWN_RESULT",
    "AddressQuotas",
    "AgentKeys",
    "Approval",
    "ApprovalPage",
    "Artifact",
    "ArtifactStore",
    "AuditPage",
    "AuditSource",
    "Breaker",
    "BreakerState",
    "ChatKeys",
    "ChatRecord",
    "ChatStore",
    "CommitEntry",
    "ConnectionEntry",
    "EmbeddedRedis",
    "LiveRecord",
    "LiveStore",
    "LogBatch",
    "McpLink",
    "McpLinks",
    "ModelView",
    "Quotas",
    "RedisClient",
    "RedisUnavailableError",
    "ResumeClaim",
    "SettleEntry",
    "TurnClaim",
    "address_quota_error",
    "address_usage_keys",
    "as_text",
    "assistant_entry",
    "breaker_of",
    "call_entry",
    "chat_audit",
    "chat_keys",
    "check_call_id",
    "check_chat_id",
    "connect",
    "is_redis_outage",
    "is_retry",
    "message_metadata",
    "messages_metadata",
    "parse_deadline_member",
    "parse_redis_url",
    "part_ids",
    "read_page",
    "result_entry",
    "settle_audit",
    "stored_messages",
    "usage_keys",
    "user_entry",
]
