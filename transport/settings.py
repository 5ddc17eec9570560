"""Settings: one object, read from command-line flags and ``PARKWAY_*`` variables.

Flags win over the environment. Everything is validated at startup; the secret key is
redacted in the repr. Nothing reads the environment at import time.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from runner.connection import parse_redis_url
from runner.errors import CallerError, TemplateError
from runner.llm.spec import ModelSpec, parse_model_spec
from widgets_api.tokens import TokenCipher, TokenKeyError, generate_token_key

__all__ = ["Secret", "Settings", "SettingsError"]


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names it and the fix."""


class Secret:
    """A string that never shows itself in a repr or a log line."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and secrets.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(Secret)


def _origin(value: str, what: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in {"http", "https"} or not parts.netloc or parts.path not in {"", "/"}:
        raise SettingsError(f"{what}: {value!r} is not an origin like https://app.example.com")
    return f"{parts.scheme}://{parts.netloc}".lower()


@dataclass(frozen=True, repr=False)
class Settings:
    """Everything Parkway can be configured with. See docs/operations.md."""

    host: str = "127.0.0.1"
    port: int = 8000
    redis_url: str | None = None
    data_dir: Path = Path(".parkway")
    agent_file: Path | None = None
    secret_key: Secret | None = None
    allowed_origins: tuple[str, ...] = ()
    public_url: str | None = None
    max_body_bytes: int = 1024 * 1024
    max_output_bytes: int = 256 * 1024
    chat_ttl_s: int = 7 * 24 * 3600
    lease_s: float = 60.0
    sweep_interval_s: float = 0.25
    stream_grace_s: float = 300.0
    cookie_secure: bool = False
    log_level: str = "info"
    oauth_providers: str | None = None
    token_key: Secret | None = None
    demo_oauth: bool | None = None
    agent_editing: bool | None = None
    connect_flow_ttl_s: int = 600
    connection_ttl_s: int = 180 * 24 * 3600
    oauth_http_timeout_s: float = 10.0
    model: str | None = None
    model_connect_timeout_s: float = 10.0
    model_read_timeout_s: float = 120.0
    model_retries: int = 2
    model_retry_max_wait_s: float = 20.0
    # -- Redis connection budget (docs/operations.md, "Limits")
    redis_max_connections: int = 32
    redis_pool_timeout_s: float = 5.0
    # -- admission control: concurrent runs and streams, per principal and per worker
    max_runs_per_principal: int = 8
    max_streams_per_principal: int = 32
    max_runs_per_worker: int = 256
    max_streams_per_worker: int = 12000
    # -- request reading: nesting depth of JSON bodies, slow-client timeouts
    max_json_depth: int = 64
    header_read_timeout_s: float = 10.0
    body_read_timeout_s: float = 30.0
    # -- agent editors: principals named by the operator, or holders of the editor token
    editors: tuple[str, ...] = ()
    editor_token: Secret | None = None

    @classmethod
    def from_sources(
        cls, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Build settings from flags (``None`` values ignored) over ``PARKWAY_*`` vars."""
        env = dict(os.environ if environ is None else environ)
        given = {k: v for k, v in (flags or {}).items() if v is not None}
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in given:
                values[f.name] = given[f.name]
            elif f"PARKWAY_{f.name.upper()}" in env:
                values[f.name] = env[f"PARKWAY_{f.name.upper()}"]
        return cls.validated(values)

    @classmethod
    def validated(cls, values: Mapping[str, Any]) -> Settings:
        out: dict[str, Any] = {}
        for name, raw in values.items():
            out[name] = cls._convert(name, raw)
        settings = cls(**out)
        if settings.public_url is not None:
            _origin(settings.public_url, "public_url")
        return settings

    @staticmethod
    def _convert(name: str, raw: Any) -> Any:
        try:
            if name in {
                "port",
                "max_body_bytes",
                "max_output_bytes",
                "chat_ttl_s",
                "connect_flow_ttl_s",
                "connection_ttl_s",
                "redis_max_connections",
                "max_runs_per_principal",
                "max_streams_per_principal",
                "max_runs_per_worker",
                "max_streams_per_worker",
                "max_json_depth",
            }:
                value = int(raw)
                low = 0 if name == "port" else 1
                if value < low or (name == "port" and value > 65535):
                    raise ValueError
                return value
            if name == "stream_grace_s":
                grace = float(raw)
                if not 0 <= grace <= 86400:
                    raise ValueError
                return grace
            if name == "sweep_interval_s":
                interval = float(raw)
                if not 0 < interval < math.inf:
                    raise ValueError
                return interval
            if name == "lease_s":
                lease = float(raw)
                if not 1 <= lease <= 3600:
                    raise ValueError
                return lease
            if name in {
                "oauth_http_timeout_s",
                "model_connect_timeout_s",
                "redis_pool_timeout_s",
                "header_read_timeout_s",
                "body_read_timeout_s",
            }:
                timeout = float(raw)
                if not 0 < timeout <= 120:
                    raise ValueError
                return timeout
            if name in {"model_read_timeout_s", "model_retry_max_wait_s"}:
                seconds = float(raw)
                if not 0 < seconds <= 3600:
                    raise ValueError
                return seconds
            if name == "model_retries":
                retries = int(raw)
                if not 0 <= retries <= 10:
                    raise ValueError
                return retries
            if name == "model":
                try:
                    parse_model_spec(str(raw), "--model")
                except TemplateError as exc:
                    raise SettingsError(f"model (--model, PARKWAY_MODEL): {exc}") from None
                return str(raw).strip()
            if name in {"cookie_secure", "demo_oauth", "agent_editing"}:
                if isinstance(raw, bool):
                    return raw
                text_value = str(raw).lower()
                if text_value not in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
                    raise ValueError
                return text_value in {"1", "true", "yes", "on"}
            if name == "token_key":
                key_text = raw.get() if isinstance(raw, Secret) else str(raw)
                try:
                    TokenCipher.from_setting(key_text)
                except TokenKeyError as exc:
                    raise SettingsError(f"token_key (PARKWAY_TOKEN_KEY): {exc}") from None
                return Secret(key_text)
            if name == "oauth_providers":
                return None if raw is None else str(raw)
            if name in {"data_dir", "agent_file"}:
                return Path(raw)
            if name == "editors":
                names = raw if isinstance(raw, list | tuple) else str(raw).split(",")
                return tuple(str(n).strip() for n in names if str(n).strip())
            if name == "editor_token":
                token_text = raw.get() if isinstance(raw, Secret) else str(raw)
                if len(token_text) < 32:
                    raise SettingsError(
                        "editor_token (PARKWAY_EDITOR_TOKEN) must be at least 32 characters"
                    )
                return Secret(token_text)
            if name == "secret_key":
                text = raw.get() if isinstance(raw, Secret) else str(raw)
                if len(text) < 32:
                    raise SettingsError(
                        "secret_key (PARKWAY_SECRET_KEY) must be at least 32 characters"
                    )
                return Secret(text)
            if name == "allowed_origins":
                items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
                return tuple(_origin(o, "allowed_origins") for o in items if str(o).strip())
            if name == "redis_url":
                url = str(raw)
                try:  # one server, Sentinel or Cluster: runner.connection reads the URL
                    parse_redis_url(url)
                except CallerError as exc:
                    raise SettingsError(
                        f"redis_url (--redis-url, PARKWAY_REDIS_URL): {exc}"
                    ) from None
                return url
            if name == "log_level":
                level = str(raw).lower()
                if level not in {"debug", "info", "warning", "error"}:
                    raise ValueError
                return level
            return raw
        except SettingsError:
            raise
        except (TypeError, ValueError):
            raise SettingsError(
                f"setting {name} (PARKWAY_{name.upper()}) has an invalid value {raw!r}"
            ) from None

    @property
    def base_url(self) -> str:
        """Where browsers reach this server: ``public_url``, else ``http://host:port``.
        OAuth redirect URIs are built from it, never from a request's Host header."""
        if self.public_url is not None:
            return _origin(self.public_url, "public_url")
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
        every user, and with the default authenticator anyone can get a session)."""
        return self.embedded if self.agent_editing is None else self.agent_editing

    def resolve_token_key(self) -> Secret:
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
        return Secret(self._persisted_key("token.key", generate_token_key))

    def _persisted_key(self, name: str, make: Callable[[], str]) -> str:
        path = self.data_dir / name
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            # Write the whole key to a private temporary file, then publish it with a
            # hard link, which fails if another process published first: nobody ever
            # reads a half-written key, and both processes end up with the same one.
            tmp = path.with_name(f".{name}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(make())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        return path.read_text().strip()

    @property
    def embedded(self) -> bool:
        """True when Parkway runs its own Redis (no ``redis_url`` given)."""
        return self.redis_url is None

    def resolve_secret(self) -> Secret:
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
        key = self._persisted_key("secret.key", lambda: secrets.token_urlsafe(48))
        if len(key) < 32:
            raise SettingsError(
                f"{self.data_dir / 'secret.key'} holds no usable key; delete it to make a new one"
            )
        return Secret(key)

    def __repr__(self) -> str:
        shown = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "redis_url" and value is not None:
                value = self.redacted_redis_url()
            if f.name == "oauth_providers" and value and not value.startswith("@"):
                value = "<inline JSON, not shown: it may hold client secrets>"
            shown.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(shown)})"

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
