"""Settings: one object, read from command-line flags and ``PARKWAY_*`` variables.

A pydantic-settings model (:mod:`._model`): each field is a setting, its environment
variable is ``PARKWAY_<NAME>``, and its range is a field constraint. Flags win over the
environment. Everything is validated when the object is built (at startup), and an
invalid value is a :class:`SettingsError` naming the setting, its flag and variable, and
what is wrong. Secrets are :class:`pydantic.SecretStr` values, and the repr hides them,
the Redis password and inline OAuth provider JSON.

Nothing reads the environment at import time, nor when ``Settings(...)`` is called with
keyword values: only :meth:`Settings.from_sources` reads variables, from the mapping it
is given (``os.environ`` by default).

- :mod:`._model`: the settings, their checks, and what is derived from them;
- :mod:`._sources`: flags and variables, unknown variables, errors one line a setting;
- :mod:`._values`: the kinds of value (switches, names, origins, timeouts, keys);
- :mod:`._keys`: the keys the embedded default makes and keeps in its data folder.
"""

from parkway.transport.settings._model import Settings
from parkway.transport.settings._sources import (
    ENV_PREFIX,
    NON_SETTING_VARIABLES,
    flag_and_variable,
)
from parkway.transport.settings._values import JWT_ALGORITHMS, AuthMode, SettingsError

__all__ = [
    "ENV_PREFIX",
    "JWT_ALGORITHMS",
    "NON_SETTING_VARIABLES",
    "AuthMode",
    "Settings",
    "SettingsError",
    "flag_and_variable",
]
