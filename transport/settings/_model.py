"""The settings model: every setting Parkway has, its range, its checks, and the values
derived from them (docs/operations.md lists them all)."""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError

from parkway.runner.errors import CallerError, TemplateError
from parkway.runner.llm import ModelSpec, parse_model_spec
from parkway.runner.store import parse_redis_url
from parkway.transport.settings._keys import persisted_key
from parkway.transport.settings._sources import (
    ENV_PREFIX,
    Environ,
    describe,
    flag_and_variable,
    unknown_variables,
)
from parkway.transport.settings._values import (
    JWT_ALGORITHMS,
    AuthMode,
    Count,
    LongWait,
    Names,
    SecretSetting,
    SettingsError,
    Switch,
    Timeout,
    TokenKey,
    loopback,
    origin,
)
from parkway.widgets_api.connect import generate_token_key

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Everything Parkway can be configured with. See docs/operations.md."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    redis_url: str | None = None
    data_dir: Path = Path(".parkway")
    agent_file: Path | None = None
    secret_key: SecretSetting | None = None
    allowed_origins: Names = ()
    public_url: str | None = None
    max_body_bytes: Count = 1024 * 1024
    max_output_bytes: Count = 256 * 1024
    chat_ttl_s: Count = 7 * 24 * 3600
    lease_s: float = Field(60.0, ge=1, le=3600)
    sweep_interval_s: float = Field(0.25, gt=0, allow_inf_nan=False)
    stream_grace_s: float = Field(300.0, ge=0, le=86400)
    # how long the event log keeps a run that ended (runner/store/scripts/_functions.py, log_append)
    log_keep_s: int = Field(600, ge=1, le=86400)
    # how long the audit trail keeps an entry (runner/store/audit.py): at least an hour, at
    # most ten years, and no shorter than chat_ttl_s, so a chat never outlives its audit
    audit_keep_s: int = Field(90 * 24 * 3600, ge=3600, le=10 * 365 * 24 * 3600)
    cookie_secure: Switch = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # json, text, or auto: text when stderr is a terminal (transport/logs.py)
    log_format: Literal["auto", "json", "text"] = "auto"
    oauth_providers: str | None = None
    token_key: TokenKey | None = None
    demo_oauth: Switch | None = None
    agent_editing: Switch | None = None
    connect_flow_ttl_s: Count = 600
    connection_ttl_s: Count = 180 * 24 * 3600
    oauth_http_timeout_s: Timeout = 10.0
    model: str | None = None
    model_connect_timeout_s: Timeout = 10.0
    model_read_timeout_s: LongWait = 120.0
    model_retries: int = Field(2, ge=0, le=10)
    model_retry_max_wait_s: LongWait = 20.0
    # a folder holding a cassette's model tape (docs/cassettes.md): set by `parkway replay`
    # for the server it starts, so recorded model steps are served offline
    model_tape: str | None = None
    # -- Redis connection budget (docs/operations.md, "Limits")
    redis_max_connections: Count = 32
    redis_pool_timeout_s: Timeout = 5.0
    # -- admission control: concurrent runs and streams, per principal and per worker
    max_runs_per_principal: Count = 8
    max_streams_per_principal: Count = 32
    max_runs_per_worker: Count = 256
    max_streams_per_worker: Count = 12000
    # the share of a worker's slots kept for clients holding few (transport/api/admission.py)
    admission_reserve: float = Field(0.25, ge=0, le=0.9)
    # -- request reading: nesting depth of JSON bodies, slow-client timeouts
    max_json_depth: Count = 64
    header_read_timeout_s: Timeout = 10.0
    body_read_timeout_s: Timeout = 30.0
    # -- agent editors: principals named by the operator, or holders of the editor token
    editors: Names = ()
    editor_token: SecretSetting | None = None
    # -- approvals by someone other than the requester (docs/security.md): principals
    # holding the "approver" role; whether execute_code and save_function may be approved
    # by their requester (unset: only on a local playground)
    approvers: Names = ()
    code_self_approval: Switch | None = None
    # -- code mode (docs/code-mode.md): the sandbox of execute_code, artifacts
    sandbox: Literal["bwrap", "unconfined", "off"] = "bwrap"
    sandbox_bwrap: str = "bwrap"
    sandbox_python: str = "/usr/bin/python3"
    sandbox_uid: int = Field(65534, ge=1)
    sandbox_concurrency: Count = 2
    sandbox_timeout_s: float = Field(10.0, gt=0, le=60)
    sandbox_memory_mb: int = Field(512, ge=32, le=2048)
    # the memory of all of a run's processes together, and their number (docs/security.md,
    # "Code execution"): a cgroup's memory.max and pids.max where one is delegated, else
    # rlimits whose product stays within the total
    sandbox_total_memory_mb: int = Field(512, ge=32, le=16384)
    sandbox_processes: int = Field(16, ge=1, le=1024)
    # where runs get a cgroup of their own: auto (v2, else v1), off, or a delegated v2 folder
    sandbox_cgroup: str = Field("auto", min_length=1)
    sandbox_allow_raise: Switch = False
    artifact_threshold_bytes: Count = 32 * 1024
    # how long an artifact lives after its write or its chat's last turn (unset: as long
    # as the chat; at most chat_ttl_s)
    artifact_ttl_s: Count | None = None
    # -- quotas per principal (runner/store/usage.py; docs/operations.md, "Quotas")
    quota_stored_bytes: Count = 256 * 1024 * 1024
    quota_live_chats: Count = 1000
    quota_artifacts_per_chat: Count = 256
    # ... and per client address, shared by its anonymous sessions (runner/store/addresses.py)
    quota_address_stored_bytes: Count = 1024 * 1024 * 1024
    quota_address_live_chats: Count = 2000
    # -- telemetry (docs/operations.md): Prometheus metrics at /metrics on the public
    # port (off unless switched on), or on a port of their own; OpenTelemetry spans
    metrics: Switch = False
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"
    tracing: Literal["off", "otlp", "console"] = "off"
    # -- recording (docs/cassettes.md, "Recording"): the cassette every chat exchange is
    # written to, and whether an existing one is refused (once) or replaced (all)
    record: Path | None = None
    record_mode: Literal["once", "all"] = "once"
    # -- identities (docs/security.md, "Identities"): how a request names its principal.
    # None means anonymous on a local playground and a startup error anywhere else.
    auth: AuthMode | None = None
    # anonymous: sessions minted per client address, a token bucket (0: no limit)
    session_burst: Count = 20
    sessions_per_minute: int = Field(20, ge=0, le=100_000)
    # jwt: bearer JWTs checked against a JWKS URL or one public key (PEM or a path)
    jwt_jwks_url: str | None = None
    jwt_public_key: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_algorithms: Names = ("RS256", "ES256", "Ed25519")
    jwt_leeway_s: int = Field(30, ge=0, le=300)
    jwt_principal_claim: str = Field("sub", min_length=1)
    jwt_roles_claim: str = Field("roles", min_length=1)
    jwt_jwks_ttl_s: Count = 300
    # the deadline of a whole JWKS fetch: connecting, the headers and the body together
    jwt_jwks_timeout_s: Timeout = 5.0
    # the least time between two fetches of the JWKS (an unknown kid asks for one)
    jwt_jwks_refetch_s: float = Field(30.0, ge=0, le=3600)
    # a cookie the host application sets holding the user's JWT (the playground page)
    jwt_cookie: str | None = None
    # the longest exp - iat a token may claim (iat then required; none: not checked), and
    # the typ its header must carry ("at+jwt", "JWT"; none: not checked)
    jwt_max_lifetime_s: Count | None = None
    jwt_typ: str | None = Field(None, min_length=1)
    # header: a header a trusted reverse proxy sets, from the proxies' addresses only
    auth_header: str | None = None
    auth_roles_header: str | None = None
    trusted_proxies: Names = ()

    def __init__(self, **values: Any) -> None:
        """Settings from keyword values only (no environment: see :meth:`from_sources`);
        an invalid value raises :class:`SettingsError`."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(describe(exc, type(self).model_fields)) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword values only: tests and embedders build settings without the process
        # environment leaking in; `from_sources` reads the environment it is given.
        return (init_settings,)

    @classmethod
    def from_sources(
        cls, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Build settings from flags (``None`` values ignored) over ``PARKWAY_*`` vars."""
        try:
            env = Environ(cls, os.environ if environ is None else environ)()
        except SourceError as exc:
            raise SettingsError(str(exc)) from None
        unknown = unknown_variables(os.environ if environ is None else environ, cls.model_fields)
        if unknown is not None:
            raise SettingsError(unknown)
        given = {k: v for k, v in (flags or {}).items() if v is not None}
        return cls(**{**env, **given})

    # -- checks that a field constraint cannot say

    @field_validator("redis_url")
    @classmethod
    def _known_redis_url(cls, url: str | None) -> str | None:
        if url is not None:
            try:  # one server, Sentinel or Cluster: runner.connection reads the URL
                parse_redis_url(url)
            except CallerError as exc:
                raise ValueError(str(exc)) from None
        return url

    @field_validator("sandbox_cgroup")
    @classmethod
    def _cgroup_word_or_path(cls, value: str) -> str:
        if value not in ("auto", "off") and not value.startswith("/"):
            raise ValueError("use auto, off, or the absolute path of a delegated cgroup v2 folder")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url_is_an_origin(cls, url: str | None) -> str | None:
        if url is not None:
            origin(url)
        return url

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, origins: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(origin(value) for value in origins if value.strip())

    @field_validator("editors", "approvers")
    @classmethod
    def _editor_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name.strip() for name in names if name.strip())

    @field_validator("audit_keep_s")
    @classmethod
    def _audit_outlives_chats(cls, keep: int, info: ValidationInfo) -> int:
        chat_ttl = info.data.get("chat_ttl_s")
        if chat_ttl is not None and keep < chat_ttl:
            raise ValueError(
                f"must be at least chat_ttl_s ({chat_ttl} s): the audit trail of a chat "
                "must outlive the chat"
            )
        return keep

    @field_validator("artifact_ttl_s")
    @classmethod
    def _artifacts_within_chats(cls, ttl: int | None, info: ValidationInfo) -> int | None:
        chat_ttl = info.data.get("chat_ttl_s")
        if ttl is not None and chat_ttl is not None and ttl > chat_ttl:
            raise ValueError(
                f"must be at most chat_ttl_s ({chat_ttl} s): an artifact goes with its chat"
            )
        return ttl

    @field_validator("jwt_algorithms")
    @classmethod
    def _asymmetric_algorithms(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        chosen = tuple(name.strip() for name in names if name.strip())
        refused = [name for name in chosen if name not in JWT_ALGORITHMS]
        if refused or not chosen:
            raise ValueError(
                f"{', '.join(refused) or 'nothing'} is not allowed: choose among "
                f"{', '.join(sorted(JWT_ALGORITHMS))} (never none, never HMAC)"
            )
        return chosen

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        chosen = tuple(name.strip() for name in names if name.strip())
        for name in chosen:
            try:
                ipaddress.ip_network(name, strict=False)
            except ValueError:
                raise ValueError(f"{name!r} is not an IP address or CIDR block") from None
        return chosen

    @field_validator("jwt_jwks_url")
    @classmethod
    def _jwks_url(cls, url: str | None) -> str | None:
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in {"http", "https"} or not parts.netloc:
                raise ValueError(f"{url!r} is not an http(s) URL")
        return url

    @model_validator(mode="after")
    def _auth_complete(self) -> Settings:
        """What each ``auth`` mode needs, named setting by setting."""
        missing = []
        if self.auth == "jwt":
            if (self.jwt_jwks_url is None) == (self.jwt_public_key is None):
                missing.append(
                    "give exactly one of jwt_jwks_url (PARKWAY_JWT_JWKS_URL) and "
                    "jwt_public_key (PARKWAY_JWT_PUBLIC_KEY)"
                )
            for name in ("jwt_issuer", "jwt_audience"):
                if not getattr(self, name):
                    missing.append(f"{name} ({flag_and_variable(name)}) is required")
        elif self.auth == "header":
            if not self.auth_header:
                missing.append("auth_header (PARKWAY_AUTH_HEADER) is required")
            if not self.trusted_proxies:
                missing.append(
                    "trusted_proxies (PARKWAY_TRUSTED_PROXIES) is required: the header "
                    "is believed from those addresses only"
                )
        if missing:
            raise ValueError(f"auth={self.auth}: {'; '.join(missing)}")
        return self

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, level: Any) -> Any:
        return level.lower() if isinstance(level, str) else level

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str | None) -> str | None:
        if model is None:
            return None
        try:
            parse_model_spec(model, "--model")
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        return model.strip()

    # -- derived values

    @property
    def base_url(self) -> str:
        """Where browsers reach this server: ``public_url``, else ``http://host:port``.
        OAuth redirect URIs are built from it, never from a request's Host header."""
        if self.public_url is not None:
            return origin(self.public_url)
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::", ""} else self.host  # noqa: S104
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def model_spec(self) -> ModelSpec | None:
        """The model ``--model`` names (overrides the agent's), or None."""
        return None if self.model is None else parse_model_spec(self.model, "--model")

    @property
    def demo_oauth_enabled(self) -> bool:
        """The built-in demo OAuth provider: on by default with the embedded Redis."""
        return self.embedded if self.demo_oauth is None else self.demo_oauth

    @property
    def agent_editing_enabled(self) -> bool:
        """Whether users may commit the agent and run working copies: on by default with
        the embedded Redis (a local playground), off otherwise (the agent is shared by
        every user, and with the default authenticator anyone can get a session), and
        off by default while recording a cassette (a turn on a working copy would not
        be the agent file the cassette names, and its replay refuses it)."""
        if self.agent_editing is not None:
            return self.agent_editing
        return self.embedded and self.record is None

    @property
    def local(self) -> bool:
        """A local playground: the embedded Redis, a loopback bind, no ``public_url``
        (which says browsers come from elsewhere)."""
        return self.embedded and loopback(self.host) and self.public_url is None

    def resolve_auth(self) -> AuthMode:
        """The identity mode: the configured one; ``anonymous`` on a local playground
        only. Anywhere else anyone who reaches the server could mint sessions, so the
        operator must say that is what they want."""
        if self.auth is not None:
            return self.auth
        if self.local:
            return "anonymous"
        raise SettingsError(
            "auth (--auth, PARKWAY_AUTH) is required when the server is not a local "
            "playground (an external Redis, a non-loopback host or a public_url): choose "
            "jwt, header, or anonymous (anyone who reaches the server gets a session)"
        )

    @property
    def embedded(self) -> bool:
        """True when Parkway runs its own Redis (no ``redis_url`` given)."""
        return self.redis_url is None

    def resolve_token_key(self) -> SecretStr:
        """The key that encrypts OAuth tokens at rest: the configured one; for the
        embedded default a generated key persisted in the data folder. With an external
        Redis (production) it is required: a generated key would differ per worker."""
        if self.token_key is not None:
            return self.token_key
        if not self.embedded:
            raise SettingsError(
                "PARKWAY_TOKEN_KEY is required with an external Redis when OAuth providers "
                "or the demo provider are configured: every worker must decrypt the same "
                "tokens (make one with "
                "`python -c 'import secrets,base64;"
                "print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())'`)"
            )
        return SecretStr(persisted_key(self.data_dir, "token.key", generate_token_key))

    def resolve_secret(self) -> SecretStr:
        """The session-signing key: the configured one; for the embedded default a
        generated key persisted in the data folder. An external Redis means several
        workers, which must share one key, so there it is required."""
        if self.secret_key is not None:
            return self.secret_key
        if not self.embedded:
            raise SettingsError(
                "PARKWAY_SECRET_KEY is required with an external Redis: every worker must "
                "sign sessions with the same key (at least 32 random characters)"
            )
        key = persisted_key(self.data_dir, "secret.key", lambda: secrets.token_urlsafe(48))
        if len(key) < 32:
            raise SettingsError(
                f"{self.data_dir / 'secret.key'} holds no usable key; delete it to make a new one"
            )
        return SecretStr(key)

    # -- what may be shown

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """What ``repr`` and ``str`` show: secrets masked (``SecretStr``), the Redis URL's
        passwords hidden, inline provider JSON (it may hold client secrets) left out."""
        for name, value in super().__repr_args__():
            if name == "redis_url" and value is not None:
                yield name, self.redacted_redis_url()
            elif name == "oauth_providers" and value and not value.startswith("@"):
                yield name, "<inline JSON, not shown: it may hold client secrets>"
            else:
                yield name, value

    def redacted_redis_url(self) -> str:
        if self.redis_url is None:
            return f"embedded ({self.data_dir})"
        parts = urlsplit(self.redis_url)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            parts = parts._replace(netloc=netloc)
        if "password" in parts.query:  # e.g. a Sentinel URL's ?sentinel_password=
            query = [
                (k, "***" if k.endswith("password") else v)
                for k, v in parse_qsl(parts.query, keep_blank_values=True)
            ]
            parts = parts._replace(query=urlencode(query, safe="*"))
        return parts.geturl()
