"""The runtime: chats run, parked, answered and resumed from Python, with no HTTP.

- :mod:`~parkway.runner.runtime.runtime`: :class:`Runtime` (Redis, the model, the runner
  and the deadline sweeper, for a script, a worker or a test);
- :mod:`~parkway.runner.runtime.results`: what it hands back (:class:`TurnResult`,
  :class:`CallSummary`, :class:`ChatView`).

The top of the runner with the demo: it imports the engine, and nothing in the runner
imports it.
"""

from parkway.runner.runtime.results import CallSummary, ChatView, TurnResult
from parkway.runner.runtime.runtime import DEFAULT_PRINCIPAL, AgentSource, Runtime

__all__ = ["DEFAULT_PRINCIPAL", "AgentSource", "CallSummary", "ChatView", "Runtime", "TurnResult"]
