"""The template's ``mcps`` section: the MCP servers whose tools the agent offers.

An entry connects one server, over streamable HTTP or stdio::

    {"name": "docs", "url": "https://mcp.example.com/mcp",
     "headers": {"Authorization": {"env": "DOCS_TOKEN", "prefix": "Bearer "}}}
    {"name": "files", "command": ["python", "-m", "files_server"], "env": {"ROOT": "/srv"}}

with, optionally, ``include`` / ``exclude`` (lists of the server's tool names),
``policy`` (``"allow"`` or ``"ask"`` for every tool of the server), ``tools`` (per-tool
settings: ``{"<tool>": {"policy": "allow" | "ask"}}``), ``timeout_s`` (one
``tools/call``, default 30), ``connect_timeout_s`` (default 10) and ``tools_ttl_s`` (how
long a worker trusts the server's tool list before listing again, default 300; a
``notifications/tools/list_changed`` refreshes it sooner) and ``live_input_s`` (how long
a call waits for the person when an older server asks a form question in the middle of
it, default 60, at most 600; 0: such questions are cancelled at once; docs/mcp.md).

:func:`parse_mcp_servers` validates the section when the template loads, so a bad entry
fails there with a message that names it (``mcps[1] 'files': ...``). The running side
(sessions, listings, calls) is :mod:`parkway.runner.mcp`; this module is only what the
template says, which the agent layer needs to load a template.

Names. A server's tool ``t`` is offered to the model as ``<server>__<t>``
(:func:`exposed_name`). Server names are a letter, then letters, digits, ``-`` and
single ``_`` (never ``__``, never a trailing ``_``), at most 32 characters, so the first
``__`` of an offered name always ends the server's name: :func:`server_of` reads it
back. A tool name with characters model APIs refuse, or too long for the 64 they accept,
is sanitized (every other character becomes ``_``) and cut, and then ends with ``_``
and eight hex digits of the SHA-256 of the tool's real name, so two tools never map to
one name by accident. The agent's own tools may not be named ``<server>__...`` for a
configured server: that is a load error naming both.

Secrets. A header's value comes only from an environment variable the entry names
(``{"env": "VAR"}``), read when the worker connects: a template is shown in the
playground, committed and stored with every chat, so it must never hold a credential.
A ``command`` (and its ``env``), and headers that read the environment, are the
operator's: only the agent file (or a Python agent) may add or change them
(:func:`parkway.runner.agent.revisions.check_mcp_servers`), since the one runs a program
on the server and the other sends a server-side secret to the URL beside it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from parkway.runner.canonical import canonical_json
from parkway.runner.errors import TemplateError
from parkway.runner.validation import describe_first_error

__all__ = [
    "MCP_NAME_MAX",
    "McpAuth",
    "McpPolicy",
    "McpServer",
    "SecretRef",
    "canonical_resource",
    "exposed_name",
    "operator_parts",
    "parse_mcp_servers",
    "server_of",
]

# What model APIs accept as a tool name (OpenAI's and Anthropic's rule, and Gemini's
# within it): letters, digits, '_' and '-', at most 64.
MCP_NAME_MAX = 64
SERVER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(?:_[A-Za-z0-9-]+)*$")
SERVER_NAME_MAX = 32
SEPARATOR = "__"
_TOOL_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
# An HTTP header's name: RFC 9110's token characters.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")

McpPolicy = Literal["allow", "ask"]


class SecretRef(BaseModel):
    """A value read from the server's environment when the worker connects."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    env: str = Field(pattern=_ENV_NAME)
    # Text put before the variable's value (``"Bearer "``): never a secret itself.
    prefix: str = Field(default="", max_length=64)


class _ToolSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: McpPolicy


class McpAuth(BaseModel):
    """An HTTP server that needs OAuth (docs/mcp.md, "Servers that need OAuth"): the
    configured connect provider whose issuer must be among the server's authorization
    servers, and the scopes asked for (beyond the provider's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    provider: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    scopes: tuple[str, ...] = Field(default=(), max_length=50)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=SERVER_NAME_MAX)
    url: str | None = Field(default=None, max_length=2048)
    headers: dict[str, Any] = Field(default_factory=dict, max_length=32)
    command: list[str] | None = Field(default=None, min_length=1, max_length=64)
    env: dict[str, str | SecretRef] = Field(default_factory=dict, max_length=64)
    include: list[str] | None = Field(default=None, max_length=512)
    exclude: list[str] = Field(default_factory=list, max_length=512)
    policy: McpPolicy | None = None
    tools: dict[str, _ToolSettings] = Field(default_factory=dict, max_length=512)
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    connect_timeout_s: float = Field(default=10.0, gt=0, le=120)
    tools_ttl_s: float = Field(default=300.0, ge=0, le=86400)
    live_input_s: float = Field(default=60.0, ge=0, le=600)
    auth: McpAuth | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SERVER_NAME.match(value):
            raise ValueError(
                "an MCP server's name starts with a letter and uses letters, digits, '-' "
                "and single '_' (no '__', no '_' at the end: its tools are offered as "
                "'<name>__<tool>')"
            )
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value[0] or any("\0" in part for part in value)):
            raise ValueError("command is the program then its arguments, with no NUL bytes")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str | SecretRef]) -> dict[str, str | SecretRef]:
        for name in value:
            if not re.match(_ENV_NAME, name):
                raise ValueError(f"env: {name[:64]!r} is not an environment variable's name")
        return value


@dataclass(frozen=True)
class McpServer:
    """One validated ``mcps`` entry (see the module doc)."""

    name: str
    where: str  # ``mcps[1] 'files'``, for messages
    transport: Literal["http", "stdio"]
    url: str | None = None
    headers: tuple[tuple[str, SecretRef], ...] = ()
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str | SecretRef], ...] = ()
    include: frozenset[str] | None = None
    exclude: frozenset[str] = frozenset()
    policy: McpPolicy | None = None
    policies: tuple[tuple[str, McpPolicy], ...] = ()
    timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    tools_ttl_s: float = 300.0
    live_input_s: float = 60.0
    auth: McpAuth | None = None

    @property
    def resource(self) -> str | None:
        """The server's canonical URL (RFC 8707 resource indicator, MCP authorization):
        scheme and host lowercased, no fragment; None for a stdio server."""
        return None if self.url is None else canonical_resource(self.url)

    @property
    def connection_key(self) -> str:
        """What makes a session to this server: its address and credentials' sources
        (never their values). Entries of different templates with the same key share a
        worker's session; the policies and filters are each template's own."""
        parts = {
            "url": self.url,
            "headers": [[name, ref.model_dump()] for name, ref in self.headers],
            "command": list(self.command),
            "env": [[k, v if isinstance(v, str) else v.model_dump()] for k, v in self.env],
            "connect_timeout_s": self.connect_timeout_s,
            "auth": None if self.auth is None else self.auth.model_dump(mode="json"),
        }
        return hashlib.sha256(canonical_json(parts).encode()).hexdigest()

    def offers(self, tool: str) -> bool:
        """Whether the entry's ``include`` / ``exclude`` let the model see ``tool``."""
        return (self.include is None or tool in self.include) and tool not in self.exclude

    def policy_of(self, tool: str) -> McpPolicy | None:
        """The operator's policy for ``tool`` (its own, else the server's), or None: the
        tool's annotations decide (:mod:`parkway.runner.mcp.listing`)."""
        own = dict(self.policies).get(tool)
        return own or self.policy


def canonical_resource(url: str) -> str:
    """``url`` as a resource indicator: scheme and host lowercased, default port
    dropped, no fragment, no trailing ``/`` on an empty path."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    netloc = host if port is None or port == default else f"{host}:{port}"
    path = parts.path if parts.path != "/" else ""
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{netloc}{path}{query}"


def exposed_name(server: str, tool: str) -> str:
    """The name under which the model sees ``server``'s tool ``tool`` (module doc)."""
    plain = f"{server}{SEPARATOR}{tool}"
    if len(plain) <= MCP_NAME_MAX and not _TOOL_CHARS.search(tool):
        return plain
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    room = MCP_NAME_MAX - len(server) - len(SEPARATOR) - 9
    return f"{server}{SEPARATOR}{_TOOL_CHARS.sub('_', tool)[:room]}_{digest}"


def server_of(name: str) -> str | None:
    """The server whose tool the offered name ``name`` would be, or None."""
    server, sep, rest = name.partition(SEPARATOR)
    return server if sep and rest and SERVER_NAME.match(server) else None


def _header_ref(name: str, value: Any) -> SecretRef:
    if not _HEADER_NAME.match(name):
        raise ValueError(f"headers: {name[:64]!r} is not an HTTP header's name")
    if not isinstance(value, Mapping):
        raise ValueError(
            f"headers[{name!r}] must be {{'env': 'VARIABLE'}} (optionally with a "
            "'prefix' such as 'Bearer '): a template never holds a secret; name the "
            "environment variable that does"
        )
    try:
        return SecretRef.model_validate(value)
    except ValidationError as exc:
        raise ValueError(f"headers[{name!r}]: {describe_first_error(exc)}") from None


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url must be an http:// or https:// address with a host")
    if parts.username or parts.password:
        raise ValueError(
            "url must not carry credentials: put them in a header read from the "
            "environment ({'env': 'VARIABLE'})"
        )


def _server(entry: _Entry, where: str) -> McpServer:
    if (entry.url is None) == (entry.command is None):
        raise ValueError("an MCP server has either a url (streamable HTTP) or a command (stdio)")
    if entry.url is not None:
        if entry.env:
            raise ValueError("env is for a stdio server (command); an HTTP server has headers")
        _check_url(entry.url)
    elif entry.headers:
        raise ValueError("headers are for an HTTP server (url); a stdio server has env")
    elif entry.auth is not None:
        raise ValueError("auth is for an HTTP server (url); a stdio server has none")
    if entry.auth is not None and any(n.lower() == "authorization" for n in entry.headers):
        raise ValueError("auth and an Authorization header exclude each other")
    headers = tuple((name, _header_ref(name, value)) for name, value in entry.headers.items())
    lowered = [name.lower() for name, _ in headers]
    if len(set(lowered)) != len(lowered):
        raise ValueError("headers name one header twice (header names ignore case)")
    return McpServer(
        name=entry.name,
        where=where,
        transport="http" if entry.url is not None else "stdio",
        url=entry.url,
        headers=headers,
        command=tuple(entry.command or ()),
        env=tuple(entry.env.items()),
        include=None if entry.include is None else frozenset(entry.include),
        exclude=frozenset(entry.exclude),
        policy=entry.policy,
        policies=tuple((tool, settings.policy) for tool, settings in entry.tools.items()),
        timeout_s=entry.timeout_s,
        connect_timeout_s=entry.connect_timeout_s,
        tools_ttl_s=entry.tools_ttl_s,
        live_input_s=entry.live_input_s,
        auth=entry.auth,
    )


def _describe(index: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"mcps[{index}]" + (f" {str(name)[:64]!r}" if isinstance(name, str) and name else "")


def parse_mcp_servers(entries: Sequence[Any]) -> tuple[McpServer, ...]:
    """Validate a template's ``mcps`` entries. Raises :class:`TemplateError` naming the
    first bad entry."""
    servers: list[McpServer] = []
    for index, entry in enumerate(entries):
        where = _describe(index, entry)
        try:
            if not isinstance(entry, Mapping):
                raise ValueError("must be a JSON object")
            server = _server(_Entry.model_validate(entry), where)
        except ValidationError as exc:
            raise TemplateError(f"{where}: {describe_first_error(exc, root='entry')}") from None
        except ValueError as exc:
            raise TemplateError(f"{where}: {exc}") from None
        if any(other.name == server.name for other in servers):
            raise TemplateError(f"{where}: duplicate MCP server name {server.name!r}")
        servers.append(server)
    return tuple(servers)


def operator_parts(entry: Any) -> str | None:
    """The part of an ``mcps`` entry only the operator may write, as canonical JSON: a
    stdio server's ``command`` and ``env``; an HTTP server's ``url`` with its
    ``headers`` when it has any (they send a server-side secret to that url). None when
    the entry has neither (an HTTP server without headers is the editors' to add). An
    ``auth`` is the operator's too, with its ``url``: it sends the user's token for that
    provider to that address."""
    if not isinstance(entry, Mapping):
        return None
    if entry.get("command") is not None:
        return canonical_json({"command": entry.get("command"), "env": entry.get("env") or {}})
    if entry.get("headers") or entry.get("auth") is not None:
        parts = {"url": entry.get("url"), "headers": entry.get("headers") or {}}
        if entry.get("auth") is not None:
            parts["auth"] = entry.get("auth")
        return canonical_json(parts)
    return None
