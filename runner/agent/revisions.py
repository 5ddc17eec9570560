"""Agent revisions: the agent's template, versioned in Redis.

Every commit (the ``commit_config`` platform op, or ``POST /api/agent/commit``) adds a
revision with the next version number, atomically and only on top of the version the
committer read (a stale commit is refused with the current version, never merged
silently). New turns run the head revision; a run keeps the template snapshot it
started with, so a commit never changes a run midway.

The agent file seeds version 1. A later deploy with a different agent file commits that
file as a new revision (its digest differs from the one recorded), so editing the file
still takes effect; a restart with the same file changes nothing, and :meth:`AgentStore
.drift` says how the head differs from the file (``parkway agent reset`` commits the
file's version again, as a new revision: history is kept).

Each commit appends who made it, when and from where to the agent's audit trail
(runner/store/audit.py), in the same script that writes the revision.

The agent is shared by every user of the server, so only editors commit
(:class:`Editors`; the HTTP route also accepts the operator's editor token). Anyone else
may run a working copy of their own, within what :func:`check_working_copy` allows.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from parkway.runner.agent.mcps import operator_parts
from parkway.runner.agent.template import AgentTemplate, load_template
from parkway.runner.canonical import canonical_json
from parkway.runner.errors import ConflictError, EditingDisabledError, TemplateError
from parkway.runner.store import (
    AUDIT_FUNCTION,
    AUDIT_KEEP_S,
    AgentKeys,
    AuditPage,
    CommitEntry,
    RedisClient,
    as_text,
    read_page,
)

__all__ = [
    "AgentDrift",
    "AgentRevision",
    "AgentStore",
    "Editors",
    "NotAnEditorError",
    "RevisionConflictError",
    "check_function_tools",
    "check_mcp_servers",
    "check_working_copy",
]

# Commit a revision on top of an expected version, and append its entry to the agent's
# audit trail (audit_append, runner/store/scripts/_functions.py) in the same atomic step.
# KEYS: 1 head (hash), 2 revisions (hash version -> record JSON), 3 audit (stream)
# ARGV: 1 expected version ('' = any), 2 record JSON without version, 3 template digest,
#       4 seed digest ('' = not a seed), 5 revision id, 6 '1' = commit a seed even when
#       its digest is recorded (a reset to the agent file), else ''; for the audit:
#       7 who (principal, '' for the agent file), 8 committed by (user, agent,
#       agent-file), 9 source, 10 summary, 11 how long the audit keeps an entry (s)
# Returns: {'ok', version} | {'conflict', current version} | {'same', version} (a seed
#          whose digest is already recorded)
_COMMIT = (
    AUDIT_FUNCTION
    + """
local head = redis.call('HMGET', KEYS[1], 'version', 'seed_digest')
local current = tonumber(head[1] or '0')
if ARGV[4] ~= '' and ARGV[6] ~= '1' and head[2] == ARGV[4] then return {'same', current} end
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= current then return {'conflict', current} end
local version = current + 1
redis.call('HSET', KEYS[2], tostring(version), ARGV[2])
redis.call('HSET', KEYS[1], 'version', version, 'revision_id', ARGV[5], 'record', ARGV[2],
           'digest', ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'seed_digest', ARGV[4]) end
audit_append(KEYS[3], ARGV[11], {'who', ARGV[7], 'by', ARGV[8], 'source', ARGV[9],
             'version', tostring(version), 'previous', tostring(current),
             'revision', ARGV[5], 'digest', ARGV[3], 'summary', ARGV[10]})
return {'ok', version}
"""
)


def _function_entries(tools: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in tools if isinstance(tools, list) else []:
        if isinstance(entry, Mapping) and entry.get("type") == "function":
            # everything but the description: the code, its approval policy, edits,
            # timeouts and schema are the operator's, not the playground's, to change
            found[str(entry.get("name"))] = canonical_json(
                {k: v for k, v in entry.items() if k != "description"}
            )
    return found


def check_function_tools(document: Mapping[str, Any], *trusted: Mapping[str, Any]) -> None:
    """Refuse a template bringing a function tool that no ``trusted`` template (the
    committed one, and the agent file, which seeded it) has exactly (only its description
    may differ): a function tool names server code to import and carries the operator's
    approval policy, so only the agent file may add or change one. A commit or a
    playground working copy may keep, drop or reorder them, and bring back one of the
    agent file's. Raises :class:`TemplateError`."""
    allowed: dict[str, set[str]] = {}
    for source in trusted:
        for name, identity in _function_entries(source.get("tools")).items():
            allowed.setdefault(name, set()).add(identity)
    for name, identity in _function_entries(document.get("tools")).items():
        if identity not in allowed.get(name, set()):
            raise TemplateError(
                f"function tool {name!r} differs from the committed agent's: function tools "
                "name server code and carry the operator's approval policy, so only the "
                "agent file can add or change one"
            )


def _operator_servers(mcps: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in mcps if isinstance(mcps, list) else []:
        parts = operator_parts(entry)
        if parts is not None:
            found[str(entry.get("name"))] = parts
    return found


def check_mcp_servers(document: Mapping[str, Any], *trusted: Mapping[str, Any]) -> None:
    """Refuse a template bringing an MCP server whose operator's part no ``trusted``
    template (the committed one, and the agent file) has exactly, under the same name: a
    stdio server's ``command`` and ``env`` (a program the server runs), or an HTTP
    server's ``url`` with its ``headers`` read from the environment (a server-side secret
    sent to that url) or its ``auth`` (a user's token for a provider sent to that url).
    Only the agent file, or a Python agent, may add or change those;
    a commit, ``commit_config`` or a playground working copy may keep, drop or reorder
    them, change their tool filters and policies, and add HTTP servers without headers.
    Raises :class:`TemplateError`."""
    allowed: dict[str, set[str]] = {}
    for source in trusted:
        for name, trusted_parts in _operator_servers(source.get("mcps")).items():
            allowed.setdefault(name, set()).add(trusted_parts)
    mcps = document.get("mcps")
    for entry in mcps if isinstance(mcps, list) else []:
        parts = operator_parts(entry)
        if parts is None or parts in allowed.get(str(entry.get("name")), set()):
            continue
        what = "command" if entry.get("command") is not None else "url and headers"
        if entry.get("command") is None and entry.get("auth") is not None:
            what = "url and auth" if not entry.get("headers") else "url, headers and auth"
        raise TemplateError(
            f"MCP server {str(entry.get('name'))[:64]!r}: its {what} differ from the "
            "committed agent's: a stdio command runs a program on the server, and headers "
            "and auth send the server's secrets or a user's token, so only the agent file "
            "can add or change them"
        )


class NotAnEditorError(EditingDisabledError):
    """The caller may not change the shared agent (403): they are not one of the
    editors, or their working copy reaches further on the server than the committed
    agent does."""

    code = "not_an_editor"


@dataclass(frozen=True)
class Editors:
    """Who may commit the shared agent: every principal (a local playground, where the
    one user is the operator), or the principals the operator named."""

    everyone: bool = False
    principals: frozenset[str] = frozenset()

    def includes(self, principal: str | None) -> bool:
        return principal is not None and (self.everyone or principal in self.principals)


# Sections whose effect reaches past the user's own run: the model (spent on the
# operator's account), MCP servers and the code sandbox's permissions.
_SERVER_SECTIONS = ("llm", "mcps", "sandbox")


def _section(document: Mapping[str, Any], name: str) -> str:
    return canonical_json(document.get(name) or None)  # absent, null and empty alike


def check_working_copy(document: Mapping[str, Any], trusted: Mapping[str, Any]) -> None:
    """Refuse a working copy of someone who is not an editor when it reaches further on
    the server than ``trusted`` (the committed template): a platform op the committed
    agent lacks or has with another approval policy or deadline, or another model, MCP
    servers or sandbox. Instructions, descriptions, skills and browser-side tools (client
    tools, connection requests) are theirs to try in their own runs; function tools are
    :func:`check_function_tools`'s. Raises :class:`NotAnEditorError`."""
    for name in _SERVER_SECTIONS:
        if _section(document, name) != _section(trusted, name):
            raise NotAnEditorError(
                f"only an editor of the agent may change its {name!r}, even in a working copy"
            )
    tools = trusted.get("tools")
    allowed = {
        canonical_json(entry)
        for entry in (tools if isinstance(tools, list) else [])
        if isinstance(entry, Mapping) and entry.get("type") == "platform"
    }
    tools = document.get("tools")
    for entry in tools if isinstance(tools, list) else []:
        is_platform = isinstance(entry, Mapping) and entry.get("type") == "platform"
        if is_platform and canonical_json(entry) not in allowed:
            raise NotAnEditorError(
                f"platform op {entry.get('op')!r} is not the committed agent's: only an "
                "editor of the agent may add one or change its approval policy"
            )


@dataclass(frozen=True)
class AgentDrift:
    """How the head revision differs from the agent file: the template's top-level keys
    whose values differ."""

    version: int
    revision_id: str
    keys: tuple[str, ...]


def _drift_keys(head: Mapping[str, Any], seed: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(
        sorted(
            key
            for key in {*head, *seed}
            if canonical_json(head.get(key)) != canonical_json(seed.get(key))
        )
    )


class RevisionConflictError(ConflictError):
    """The agent changed since the committer read it."""

    code = "revision_conflict"

    def __init__(self, message: str, current: int) -> None:
        super().__init__(message)
        self.current = current


@dataclass(frozen=True)
class AgentRevision:
    agent_id: str
    revision_id: str
    version: int
    template: Mapping[str, Any]
    committed_at: float
    committed_by: str
    summary: str

    def public(self, viewer: str | None = None) -> dict[str, Any]:
        """The revision as any user may see it: who committed it only as ``user``,
        ``agent`` or ``agent-file`` (never another user's principal id), and whether it
        was ``viewer`` (directly or through the agent in one of their chats)."""
        kind, _, who = self.committed_by.partition(":")
        return {
            "agentId": self.agent_id,
            "revisionId": self.revision_id,
            "version": self.version,
            "template": dict(self.template),
            "committedAt": int(self.committed_at * 1000),
            "committedBy": kind,
            "committedByYou": viewer is not None and who == viewer,
            "summary": self.summary,
        }


def _decode(agent_id: str, version: int, text: bytes | str) -> AgentRevision:
    record = json.loads(text)
    return AgentRevision(
        agent_id=agent_id,
        revision_id=record["revision_id"],
        version=version,
        template=record["template"],
        committed_at=float(record["committed_at"]),
        committed_by=record["committed_by"],
        summary=record["summary"],
    )


class AgentStore:
    """One agent's revisions (keys in :class:`parkway.runner.store.keys.AgentKeys`)."""

    def __init__(
        self,
        redis: RedisClient,
        agent_id: str,
        seed: Mapping[str, Any],
        *,
        clock: Callable[[], float] = time.time,
        editable: bool = True,
        editors: Editors = Editors(everyone=True),
        audit_keep_s: int = AUDIT_KEEP_S,
        origin: str = "the agent file",
    ) -> None:
        self.redis = redis
        self.agent_id = agent_id
        # Where the seed came from, in words for its revisions' summaries ("from the
        # Python agent trips:agent"; parkway.runner.agent.agent_origin).
        self.origin = origin
        # Whether commits (and playground working copies) are allowed at all: the agent
        # is shared by every user of the server.
        self.editable = editable
        # Who may commit when editing is on (the server passes the operator's choice).
        self.editors = editors
        # How long the agent's audit trail keeps an entry (a commit's who and when).
        self.audit_keep_s = audit_keep_s
        self.keys = AgentKeys(agent_id)
        self.seed = seed
        self.clock = clock
        self._commit = redis.register_script(_COMMIT)
        self._cached: tuple[int, AgentTemplate] | None = None

    async def ensure_seeded(self) -> AgentRevision:
        """Commit the agent file as a revision unless that very file already is one."""
        template = load_template(self.seed)
        await self._write(
            template, expected=None, by="agent-file", summary=f"from {self.origin}",
            seed_digest=template.digest,
        )  # fmt: skip
        version, record = await self.redis.hmget(self.keys.head, ["version", "record"])
        if version is None or record is None:
            raise ConflictError("the agent's head revision could not be written")
        return _decode(self.agent_id, int(version), record)

    async def head(self) -> AgentRevision:
        version, record = await self.redis.hmget(self.keys.head, ["version", "record"])
        if record is None or version is None:
            return await self.ensure_seeded()
        return _decode(self.agent_id, int(version), record)

    def last_head(self) -> tuple[int, AgentTemplate] | None:
        """The head revision's version and template as this worker last read them
        (:meth:`current_template`), without asking Redis: a turn's claim that carries
        the version checks it is still the head."""
        return self._cached

    async def current_template(self) -> AgentTemplate:
        """The head revision's template, parsed once per version (one round trip)."""
        version_raw = await self.redis.hget(self.keys.head, "version")
        if version_raw is None:
            await self.ensure_seeded()
            version_raw = await self.redis.hget(self.keys.head, "version")
        version = int(version_raw or 0)
        if self._cached is not None and self._cached[0] == version:
            return self._cached[1]
        revision = await self.get(version)
        if revision is None:  # moved on meanwhile: take the head as it is now
            revision = await self.head()
        template = load_template(revision.template, stored=True)  # checked at its commit
        self._cached = (revision.version, template)
        return template

    async def get(self, version: int) -> AgentRevision | None:
        record = await self.redis.hget(self.keys.revisions, str(version))
        return None if record is None else _decode(self.agent_id, version, record)

    async def history(self, limit: int = 20) -> list[AgentRevision]:
        head = await self.head()
        versions = list(range(head.version, max(0, head.version - limit), -1))
        records = await self.redis.hmget(self.keys.revisions, [str(v) for v in versions])
        return [_decode(self.agent_id, v, r) for v, r in zip(versions, records, strict=True) if r]

    async def commit(
        self,
        document: Mapping[str, Any],
        *,
        expected_version: int | None,
        by: str,
        summary: str,
        editor: bool | None = None,
    ) -> AgentRevision:
        """Commit ``document`` as the next revision. ``by`` is ``user:<principal>`` or
        ``agent:<principal>`` (``commit_config`` in that principal's chat); ``editor``
        says whether the committer is an editor when the caller has decided it (the HTTP
        route also accepts the editor token), else :attr:`editors` decides by principal.

        Raises :class:`EditingDisabledError` when editing is off,
        :class:`NotAnEditorError` for someone else, :class:`TemplateError` for an invalid
        template and :class:`RevisionConflictError` when ``expected_version`` is not the
        head any more."""
        if not self.editable:
            raise EditingDisabledError(
                "agent editing is off on this server (setting agent_editing)"
            )
        if editor is None:
            editor = self.editors.includes(by.partition(":")[2] or None)
        if not editor:
            raise NotAnEditorError(
                "only the agent's editors may commit it (settings editors, editor_token); "
                "your changes can run as a working copy in your own chats"
            )
        head = await self.head()
        check_function_tools(document, head.template, self.seed)
        check_mcp_servers(document, head.template, self.seed)
        template = load_template(document)
        version = await self._write(
            template, expected=expected_version, by=by, summary=summary, seed_digest=None
        )
        revision = await self.get(version)
        assert revision is not None
        return revision

    async def audit(
        self, *, before: str | None = None, after: str | None = None, limit: int = 50
    ) -> AuditPage[CommitEntry]:
        """A page of the agent's audit trail: who committed which revision, when."""
        return await read_page(
            self.redis, self.keys.audit, CommitEntry, before=before, after=after, limit=limit
        )

    async def drift(self) -> AgentDrift | None:
        """How the head differs from the agent file (commits since it was seeded), or
        None when the head is the file's template."""
        head = await self.head()
        keys = _drift_keys(head.template, self.seed)
        return AgentDrift(head.version, head.revision_id, keys) if keys else None

    async def reset_to_file(self) -> AgentRevision | None:
        """Commit the agent file's template as a new revision on top of the head (the
        operator's ``parkway agent reset``: no editor check, history kept). None when the
        head already is the file's template."""
        if await self.drift() is None:
            return None
        template = load_template(self.seed)
        version = await self._write(
            template, expected=None, by="agent-file", summary=f"reset to {self.origin}",
            seed_digest=template.digest, reset=True,
        )  # fmt: skip
        revision = await self.get(version)
        assert revision is not None
        return revision

    async def _write(
        self,
        template: AgentTemplate,
        *,
        expected: int | None,
        by: str,
        summary: str,
        seed_digest: str | None,
        reset: bool = False,
    ) -> int:
        if len(summary) > 500:
            raise TemplateError("a commit summary has at most 500 characters")
        revision_id = f"rev_{secrets.token_urlsafe(9)}"
        record = {
            "revision_id": revision_id,
            "template": dict(template.raw),  # as written: the editor keeps its key order
            "committed_at": self.clock(),
            "committed_by": by,
            "summary": summary,
        }
        kind, _, who = by.partition(":")
        status, version = await self._commit(
            keys=[self.keys.head, self.keys.revisions, self.keys.audit],
            args=[
                "" if expected is None else str(expected),
                json.dumps(record),
                template.digest,
                seed_digest or "",
                revision_id,
                "1" if reset else "",
                who,
                kind,
                # a user commits from a client (POST /api/agent/commit); the agent's
                # commit_config and the agent file are the server's own
                "browser" if kind == "user" else "server",
                summary,
                self.audit_keep_s,
            ],
        )
        status = as_text(status)
        if status == "conflict":
            raise RevisionConflictError(
                f"the agent is at version {int(version)} now, not {expected}: reload and "
                "commit again",
                int(version),
            )
        return int(version)
