"""Code Mode: ``execute_code`` in a sandbox, reviewed by a human, and the agent's
function library (docs/code-mode.md).

- :mod:`parkway.runner.codemode.runtime`: :class:`CodeMode`, the sandbox as the runtime
  sees it (its probe, the limits policy, concurrency, the run's workspace);
- :mod:`parkway.runner.codemode.op`: the ``execute_code`` op and its tool broker;
- :mod:`parkway.runner.codemode.library`: ``save_function``, ``list_functions`` and the
  versioned library in Redis;
- :mod:`parkway.runner.codemode.prompt`: the tool's description for the model.

The sandbox itself (providers, the guest bootstrap and its ``pw`` helpers) is
:mod:`parkway.runner.sandbox`. Code mode sits above the agent (its ops are platform ops
and use the tools' broker); the agent's :class:`~parkway.runner.agent.tools.ToolContext`
carries it as an object the ``execute_code`` op checks, so the agent never imports it.
"""

from parkway.runner.codemode.library import (
    FUNCTION_NAME,
    LIST_FUNCTIONS,
    SAVE_FUNCTION,
    FunctionLibrary,
)
from parkway.runner.codemode.op import EXECUTE_CODE, input_artifact_ids
from parkway.runner.codemode.runtime import CodeMode

__all__ = [
    "EXECUTE_CODE",
    "FUNCTION_NAME",
    "LIST_FUNCTIONS",
    "SAVE_FUNCTION",
    "CodeMode",
    "FunctionLibrary",
    "input_artifact_ids",
]
