"""Where settings come from: flags, ``PARKWAY_*`` variables, and how a bad one is told.

The model (:mod:`._model`) names the settings; this module knows their flags and
variables, reads a given environment (never ``os.environ`` behind the caller's back),
refuses an unknown ``PARKWAY_*`` variable, and turns pydantic's errors into one line per
setting naming how to set it.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping

from pydantic import ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

__all__ = [
    "ENV_PREFIX",
    "NON_SETTING_VARIABLES",
    "Environ",
    "describe",
    "flag_and_variable",
    "unknown_variables",
]

ENV_PREFIX = "PARKWAY_"

# The command-line flag of each setting that has one (the others come only from the
# environment: secrets never go in a flag, where the process list would show them).
_FLAGS = {
    "host": "--host",
    "port": "--port",
    "redis_url": "--redis-url",
    "data_dir": "--data-dir",
    "agent_file": "--agent",
    "model": "--model",
    "log_level": "--log-level",
    "log_format": "--log-format",
    "public_url": "--public-url",
    "oauth_providers": "--oauth-providers",
    "editors": "--editors",
    "approvers": "--approvers",
    "metrics": "--metrics",
    "metrics_port": "--metrics-port",
    "tracing": "--tracing",
    "record": "--record",
    "record_mode": "--record-mode",
    "auth": "--auth",
}
# Settings whose value an error message never repeats: secrets, a Redis URL (it may
# carry a password) and provider JSON (it may carry client secrets).
_NOT_ECHOED = {"secret_key", "token_key", "editor_token", "redis_url", "oauth_providers"}


# ``PARKWAY_*`` variables that are not settings, and that :meth:`Settings.from_sources`
# therefore lets through; every other unknown ``PARKWAY_*`` variable is a typo and stops
# startup. All of them steer the test suite (tests/README.md), never the server.
NON_SETTING_VARIABLES = frozenset(
    {
        "PARKWAY_TEST_REDIS_URL",  # the Redis the tests use instead of an embedded one
        "PARKWAY_REQUIRE_BROWSER",  # browser tests fail, not skip, without chromium
        "PARKWAY_REQUIRE_SANDBOX",  # sandbox tests fail, not skip, without bubblewrap
        "PARKWAY_SCREENSHOTS",  # where browser tests save their screenshots
        "PARKWAY_SANDBOX_TEST_SECRET",  # a value the sandbox escape tests must not see
    }
)


def flag_and_variable(name: str) -> str:
    """How an operator sets ``name``: its flag, if any, and its environment variable."""
    variable = f"{ENV_PREFIX}{name.upper()}"
    return f"{_FLAGS[name]}, {variable}" if name in _FLAGS else variable


def unknown_variables(environ: Mapping[str, str], names: Collection[str]) -> str | None:
    """One line naming the first ``PARKWAY_*`` variable that is no setting (nor in
    :data:`NON_SETTING_VARIABLES`), with the closest setting's variable, or None.
    Without it a typo (``PARKWAY_AUHT=jwt``) would start a server that silently ignores
    what the operator asked for."""
    known = {f"{ENV_PREFIX}{name.upper()}" for name in names}
    for variable in sorted(environ):
        if (
            not variable.startswith(ENV_PREFIX)
            or variable != variable.upper()  # lower-case names are never read
            or variable in known
            or variable in NON_SETTING_VARIABLES
        ):
            continue
        close = difflib.get_close_matches(variable, sorted(known), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"{variable} is not a Parkway setting{hint}; see docs/operations.md"
    return None


class Environ(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of
    ``os.environ`` (its ``.env`` source overrides the same hook), reading only
    upper-case ``PARKWAY_*`` names, as documented."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = {k: v for k, v in environ.items() if k == k.upper()}
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


def describe(error: ValidationError, names: Collection[str]) -> str:
    """One line per invalid setting: the setting, how to set it, and what is wrong."""
    problems = []
    for detail in error.errors():
        name = str(detail["loc"][0]) if detail["loc"] else "settings"
        if detail["type"] == "value_error":  # our own checks: their message says it all
            reason = str(detail.get("ctx", {}).get("error", detail["msg"]))
        elif detail["type"] == "extra_forbidden":
            reason = "there is no such setting"
        elif detail["type"] == "too_short":
            reason = f"must be at least {detail.get('ctx', {}).get('min_length')} characters"
        else:
            reason = detail["msg"][0].lower() + detail["msg"][1:]
            if name not in _NOT_ECHOED and "input" in detail:
                reason = f"{detail['input']!r} is invalid: {reason}"
        if name in names:
            problems.append(f"{name} ({flag_and_variable(name)}): {reason}")
        else:  # a keyword that is no setting
            problems.append(f"{name}: {reason}")
    return "; ".join(problems)
