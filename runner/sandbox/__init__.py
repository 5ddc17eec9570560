"""The code sandbox: run a short Python program in isolation, with limits.

- :mod:`parkway.runner.sandbox.provider`: the interface (:class:`SandboxProvider`,
  :class:`RunRequest`, :class:`RunResult`, :class:`Limits`, :class:`Isolation`);
- :mod:`parkway.runner.sandbox.bwrap`: :class:`BwrapProvider`, the default (bubblewrap);
- :mod:`parkway.runner.sandbox.local`: :class:`UnconfinedProvider`, unsafe local mode,
  only when the operator asks for it;
- ``guest/``: what runs inside: ``bootstrap.py`` (the trusted start of every run) and
  ``pw.py`` (the helpers a program gets as ``pw``). They are files, not modules the
  server imports: they run on the sandbox's interpreter.

When the sandbox uid cannot read ``guest/`` where Parkway is installed, the provider
copies the files to the temporary folder; :func:`remove_stale_guests` removes the copies
of processes that are gone.
"""

from parkway.runner.sandbox._host import remove_stale_guests
from parkway.runner.sandbox.bwrap import BwrapProvider
from parkway.runner.sandbox.local import UnconfinedProvider
from parkway.runner.sandbox.provider import (
    Broker,
    BrokerError,
    Isolation,
    Limits,
    RunRequest,
    RunResult,
    SandboxProvider,
    SandboxUnavailable,
    Status,
)

__all__ = [
    "Broker",
    "BrokerError",
    "BwrapProvider",
    "Isolation",
    "Limits",
    "RunRequest",
    "RunResult",
    "SandboxProvider",
    "SandboxUnavailable",
    "Status",
    "UnconfinedProvider",
    "remove_stale_guests",
]
