"""The run engine: turns, model steps, tool calls, parking, settling and resuming.

- :mod:`~parkway.runner.engine.runner`: :class:`Runner`, the entry point (start a turn,
  settle, resume, follow, stop); behind it, private, ``_launcher``: the claims that start
  a run (a turn's, a resume's) and each run's task;
- :mod:`~parkway.runner.engine.run`: a run and its settings (:class:`RunnerConfig`);
- :mod:`~parkway.runner.engine.driver`: driving a run's model steps and their tool calls;
- :mod:`~parkway.runner.engine.step`: one model step, streamed into run events;
- :mod:`~parkway.runner.engine.triage`: each tool call refused, run now, or parked;
- :mod:`~parkway.runner.engine.execution`: running server tools, recording results;
- :mod:`~parkway.runner.engine.supervisor`: a run's lease, its writer, cancellation;
- :mod:`~parkway.runner.engine.settling`: recording outcomes, matching a client's answers;
- :mod:`~parkway.runner.engine.sweeper`: the deadlines: every parked call ends.

The top of the runner: it imports every other part, and none imports it.
"""

from parkway.runner.engine.runner import Answer, AnswerReport, Run, Runner, RunnerConfig
from parkway.runner.engine.settling import Settled, SettleListener, SettleResult
from parkway.runner.engine.sweeper import Sweeper, SweepReport

__all__ = [
    "Answer",
    "AnswerReport",
    "Run",
    "Runner",
    "RunnerConfig",
    "SettleListener",
    "SettleResult",
    "Settled",
    "SweepReport",
    "Sweeper",
]
