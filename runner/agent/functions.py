"""Server tools defined in Python: what ``@agent.tool`` attaches to the function it decorates.

The decorator returns the function itself, unchanged for callers and type checkers, with
a :class:`FunctionTool` under the attribute :data:`~parkway.runner.agent.template.TOOL_BINDING`.
The template names the function by ``ref`` (``module:qualname``); when a worker loads the
template it imports the function and finds the binding there, so every worker calls the
tool the same way: the JSON input validated into typed arguments, the function called
(sync functions in a worker thread), its result dumped to JSON. A ``needs_approval``
function travels the same way: the template says ``"needs_approval": "per_call"`` and
triage asks the binding, per call, whether this input needs a human.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from parkway.runner.agent.signatures import ToolSignature, wants_context
from parkway.runner.agent.template import TOOL_BINDING, TYPED_BINDERS
from parkway.runner.agent.tools import ToolContext
from parkway.runner.errors import ToolError
from parkway.runner.validation import describe_first_error

__all__ = ["ApprovalRule", "FunctionTool", "bind_function", "ref_of"]

log = logging.getLogger(__name__)


class ApprovalRule:
    """A ``needs_approval`` function, called with the validated arguments it names (a
    subset of the tool's parameters, by name) and, if it takes one, the call's
    :class:`ToolContext` first. Decided on the server when the step's calls are sorted;
    it must be a plain (not async) function that returns quickly."""

    def __init__(self, predicate: Callable[..., Any], signature: ToolSignature) -> None:
        if inspect.iscoroutinefunction(predicate):
            raise TypeError(
                "needs_approval must be a plain function of the arguments, not async: it "
                "is decided while the model's step is being sorted"
            )
        try:
            params = list(inspect.signature(predicate).parameters.values())
        except (TypeError, ValueError) as exc:
            raise TypeError(f"needs_approval's signature cannot be read ({exc})") from None
        try:
            hints = typing.get_type_hints(predicate)
        except Exception:  # an annotation it cannot resolve: judged by name alone
            hints = {}
        known = set(signature.arguments.model_fields)
        self.takes_context = bool(params) and wants_context(
            params[0], hints.get(params[0].name, Any)
        )
        names = [p.name for p in params[1 if self.takes_context else 0 :]]
        unknown = [n for n in names if n not in known]
        if unknown or any(p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) for p in params[1:]):
            raise TypeError(
                f"needs_approval takes the tool's own parameters by name (and optionally "
                f"ctx first); {', '.join(map(repr, unknown)) or 'a positional-only one'} is "
                f"not one of {sorted(known)}"
            )
        self.predicate = predicate
        self.names = tuple(n for n in names if n in known)
        self.takes_all = any(p.kind is p.VAR_KEYWORD for p in params)

    def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        chosen = dict(arguments) if self.takes_all else {n: arguments[n] for n in self.names}
        args = (ctx,) if self.takes_context else ()
        return bool(self.predicate(*args, **chosen))


@dataclass(frozen=True)
class FunctionTool:
    """The binding of a function defined with ``@agent.tool`` (see the module doc)."""

    signature: ToolSignature
    approval: ApprovalRule | None = None

    @property
    def input_schema(self) -> Mapping[str, Any]:
        return self.signature.input_schema

    @property
    def description(self) -> str:
        return self.signature.description

    @property
    def decides_approval(self) -> bool:
        return self.approval is not None

    def problem(self, tool_input: Any) -> str | None:
        return self.signature.problem(tool_input)

    def asks_approval(self, tool_input: Any, ctx: Any) -> bool:
        """The rule's decision for this input. A rule that fails (or an input it cannot
        be given) asks: when in doubt, a human decides."""
        if self.approval is None:
            return True
        try:
            return self.approval(self.signature.validate(tool_input), ctx)
        except Exception:
            log.exception("needs_approval of %s failed; asking for approval", self._label)
            return True

    async def invoke(self, tool_input: Any, ctx: ToolContext) -> Any:
        """Call the function with ``tool_input`` validated into its typed arguments,
        and return its result as plain JSON. An input the arguments refuse (an approved
        edit, say) and a result that does not serialise are :class:`ToolError`\\ s."""
        try:
            arguments = self.signature.validate(tool_input)
        except ValidationError as exc:
            raise ToolError(
                f"invalid input for tool {ctx.tool_name!r} at "
                f"{describe_first_error(exc, root='(root)')}"
            ) from None
        args, kwargs = self.signature.bind(arguments, ctx)
        func = self.signature.func
        if inspect.iscoroutinefunction(func):
            output = await func(*args, **kwargs)
        else:
            output = await asyncio.to_thread(func, *args, **kwargs)
        try:
            return self.signature.dump(output)
        except Exception:
            log.exception("the result of %s does not serialise to JSON", self._label)
            raise ToolError(
                f"tool {ctx.tool_name!r} returned a value that does not serialise to JSON"
            ) from None

    @property
    def _label(self) -> str:
        func = self.signature.func
        return f"{func.__module__}:{func.__qualname__}"


def bind_function(
    func: Callable[..., Any], needs_approval: Callable[..., Any] | None
) -> FunctionTool:
    """Read ``func`` as a tool and attach its binding to it (the same function may back
    several tools, as long as they agree on its ``needs_approval`` function)."""
    check_ref_shape(func)
    signature = ToolSignature.of(func)
    rule = None if needs_approval is None else ApprovalRule(needs_approval, signature)
    existing: FunctionTool | None = getattr(func, TOOL_BINDING, None)
    if existing is not None:
        if rule is None or existing.approval is None:
            rule = rule or existing.approval
        elif existing.approval.predicate is not needs_approval:
            raise TypeError(
                f"{func.__module__}:{func.__qualname__} is already a tool with another "
                "needs_approval function; one function has one per-call rule"
            )
    binding = FunctionTool(signature, rule)
    setattr(func, TOOL_BINDING, binding)
    return binding


def check_ref_shape(func: Callable[..., Any]) -> None:
    """Refuse what a worker could never import by name: lambdas, functions defined
    inside functions, callables with no module or qualified name."""
    qualname = getattr(func, "__qualname__", None)
    module = getattr(func, "__module__", None)
    if not inspect.isfunction(func) or not qualname or not module:
        raise TypeError(
            f"{func!r}: a tool is a function defined with def at the top of a module (or "
            "in a class), which every worker imports by name"
        )
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(
            f"{module}:{qualname}: a tool must be importable by name on every worker; define "
            "it at the top of a module, not as a lambda or inside a function"
        )


def ref_of(func: Callable[..., Any]) -> str:
    """``module:qualname`` of ``func``, checked to import back to ``func`` itself. A
    function of the script being run (``__main__``) is named by the module ``python -m``
    ran, and refused when the script was run by its path (no worker can import it)."""
    check_ref_shape(func)
    module, qualname = func.__module__, func.__qualname__
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        name = getattr(spec, "name", None)
        if not name or name == "__main__":
            raise TypeError(
                f"__main__:{qualname}: a tool defined in the script being run cannot be "
                "imported by other workers; define it in a module (e.g. expenses/tools.py) "
                "and import it"
            )
        return f"{name}:{qualname}"  # re-imported under its name, it is bound again
    target: Any = sys.modules.get(module)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if target is not func:
        raise TypeError(
            f"{module}:{qualname} does not name this function (it was redefined, or "
            "wrapped by a decorator applied after @agent.tool); keep @agent.tool the "
            "outermost decorator"
        )
    return f"{module}:{qualname}"


def _bind_typed(func: Callable[..., Any]) -> FunctionTool:
    """A typed function named by a template entry that nothing bound in this process."""
    return bind_function(func, None)


TYPED_BINDERS.append(_bind_typed)
