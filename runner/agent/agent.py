"""An agent defined in Python: :class:`Agent`, its tools declared by decorators.

An :class:`Agent` compiles to the agent template (:mod:`.template`), which stays what is
stored, versioned, overlaid and committed: a function tool becomes an entry whose ``ref``
names the decorated function (``module:qualname``), with the input schema and
description read from its signature and docstring (:mod:`.signatures`); a client tool
becomes a client entry with its input and output schemas; the switches for
``request_connection`` and the platform ops become the entries an agent file would have.
:meth:`Agent.agent_file` gives the :class:`~.agentfile.AgentFile` a server or a
runtime starts from.
"""

from __future__ import annotations

import contextlib
import json
import re
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal, TypeVar, overload

from parkway.runner.agent.agentfile import AgentFile, model_of
from parkway.runner.agent.functions import bind_function, ref_of
from parkway.runner.agent.platform_ops import PLATFORM_OPS
from parkway.runner.agent.renders import render_mismatch
from parkway.runner.agent.signatures import ToolSignature
from parkway.runner.agent.template import PER_CALL, TOOL_NAME, load_template
from parkway.runner.agent.workflows import REQUEST_CONNECTION
from parkway.runner.errors import TemplateError
from parkway.runner.llm import Model

__all__ = ["Agent", "AgentModel", "ApprovalDecision"]

F = TypeVar("F", bound=Callable[..., Any])

# What ``model=`` takes: "provider:model", {"name": ..., "settings": {...}} or
# {"scripted": {...}} as an agent file's ``model``, or a model object (any Model).
AgentModel = str | Mapping[str, Any] | Model
# ``needs_approval``: ask always (True), never (False), a named policy ("allow", "ask",
# "deny"), or a function of the tool's arguments deciding per call.
ApprovalDecision = bool | str | Callable[..., bool]

_AGENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
# The models :meth:`Agent.override` set in this context, by agent (its id: an agent
# outlives every block that overrides it).
_OVERRIDES: ContextVar[Mapping[int, AgentModel]] = ContextVar("parkway_agent_overrides")
_DEFAULT_TIMEOUT_S = 30.0


def _type_name(annotation: Any) -> str:
    """A return annotation as its author wrote it: ``int``, ``Project``, ``list[str]``
    (without the modules that ``repr`` names: ``typing.``, ``__main__.``)."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", str(annotation))


def _checked_model(model: Any) -> AgentModel | None:
    if model is None or isinstance(model, str | Mapping):
        return model
    if callable(getattr(model, "stream", None)):
        return model  # type: ignore[no-any-return]
    raise TypeError(
        f"model must be 'provider:model', an agent file's model document or a model object "
        f"(with the model interface's stream()), not {type(model).__name__}"
    )


class Agent:
    """An agent: instructions, a model and tools, compiled to an agent template.

    ``model`` is ``"provider:model"`` (``"anthropic:claude-sonnet-4-6"``: built with its
    key from the environment when served), an agent file's model document, or a model
    object (the scripted model, a test model: anything with the model interface's
    ``stream``). ``request_connection=True`` adds the reserved ``request_connection``
    client tool; ``commit_config``, ``execute_code``, ``save_function`` and
    ``list_functions`` add those platform ops with their default policies (the
    ``use_*`` methods take options). ``sandbox``, ``resume_policy`` and ``suggestions``
    are the template's and agent file's keys of those names; ``mcps`` the template's MCP
    servers (entries as in an agent file, docs/mcp.md: a Python agent is the operator's,
    so it may run stdio servers).
    """

    def __init__(
        self,
        name: str,
        *,
        instructions: str = "",
        model: AgentModel | None = None,
        request_connection: bool = False,
        commit_config: bool = False,
        execute_code: bool = False,
        save_function: bool = False,
        list_functions: bool = False,
        sandbox: Mapping[str, Any] | None = None,
        resume_policy: Literal["client", "auto"] = "client",
        suggestions: Sequence[str] = (),
        mcps: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        if not _AGENT_NAME.match(name):
            raise ValueError(
                f"agent name {name!r} must start with a letter and use only letters, digits, "
                "'_', '.' and '-' (at most 64)"
            )
        self.name = name
        self.instructions = instructions
        self._model = _checked_model(model)
        self._entries: list[tuple[str, Callable[[], dict[str, Any]]]] = []
        self.sandbox = dict(sandbox or {})
        self.mcps = [dict(entry) for entry in mcps]
        self.resume_policy = resume_policy
        self.suggestions = tuple(suggestions)
        if request_connection:
            self.use_request_connection()
        for op, on in (
            ("commit_config", commit_config),
            ("execute_code", execute_code),
            ("save_function", save_function),
            ("list_functions", list_functions),
        ):
            if on:
                self.use_platform_op(op)

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, tools={self.tool_names()!r})"

    @property
    def model(self) -> AgentModel | None:
        """The model runs use: the one :meth:`override` set for this context, else the
        agent's own."""
        return _OVERRIDES.get({}).get(id(self), self._model)

    def tool_names(self) -> list[str]:
        """The names of the agent's tools, in the template's order."""
        return [name for name, _ in self._entries]

    # -- tools ---------------------------------------------------------------------------

    def _add(self, name: str, entry: Callable[[], dict[str, Any]]) -> None:
        if not TOOL_NAME.match(name):
            raise ValueError(
                f"tool name {name!r} must start with a letter and use only letters, digits, "
                "'_' and '-' (at most 64)"
            )
        if name in self.tool_names():
            raise ValueError(f"agent {self.name!r} already has a tool named {name!r}")
        self._entries.append((name, entry))

    @overload
    def tool(self, func: F, /) -> F: ...

    @overload
    def tool(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        needs_approval: ApprovalDecision = False,
        allow_edits: bool = False,
        approvers: str | None = None,
        self_approval: bool | None = None,
        timeout_s: float = _DEFAULT_TIMEOUT_S,
        deadline_s: float | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        func: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        needs_approval: ApprovalDecision = False,
        allow_edits: bool = False,
        approvers: str | None = None,
        self_approval: bool | None = None,
        timeout_s: float = _DEFAULT_TIMEOUT_S,
        deadline_s: float | None = None,
    ) -> F | Callable[[F], F]:
        """Declare a server tool: ``@agent.tool`` or ``@agent.tool(...)`` on a function
        (sync or async) defined at the top of a module. Returns the function unchanged.

        Its parameters are the tool's input (schema from the type annotations, each
        parameter's description from the docstring); an optional first parameter
        ``ctx: ToolContext`` receives the call's context. ``needs_approval`` is True,
        False, a policy name, or a function of the tool's arguments (by name, and
        optionally ``ctx`` first) returning whether this call needs a human;
        ``allow_edits`` lets the approver edit the input; ``approvers`` and
        ``self_approval`` say who may approve (docs/security.md); ``timeout_s`` bounds
        a run of the tool; ``deadline_s`` an approval's wait.
        """

        def decorate(fn: F) -> F:
            if isinstance(needs_approval, bool | str):
                rule, policy = None, needs_approval
            else:
                rule, policy = needs_approval, PER_CALL
            binding = bind_function(fn, rule)
            tool_name = name or fn.__name__

            def entry() -> dict[str, Any]:
                compiled: dict[str, Any] = {
                    "type": "function",
                    "name": tool_name,
                    "ref": ref_of(fn),
                    "description": description or binding.description,
                    "input_schema": dict(binding.input_schema),
                    "arguments": "typed",
                }
                if policy is not False:
                    compiled["needs_approval"] = policy
                optional = {
                    "approvers": approvers,
                    "self_approval": self_approval,
                    "allow_edits": allow_edits or None,
                    "timeout_s": None if timeout_s == _DEFAULT_TIMEOUT_S else timeout_s,
                    "deadline_s": deadline_s,
                }
                compiled.update({k: v for k, v in optional.items() if v is not None})
                return compiled

            self._add(tool_name, entry)
            return fn

        return decorate(func) if func is not None else decorate

    @overload
    def client_tool(self, func: F, /) -> F: ...

    @overload
    def client_tool(
        self,
        func: None = None,
        /,
        *,
        render: str | Mapping[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        deadline_s: float | None = None,
    ) -> Callable[[F], F]: ...

    def client_tool(
        self,
        func: F | None = None,
        /,
        *,
        render: str | Mapping[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        deadline_s: float | None = None,
    ) -> F | Callable[[F], F]:
        """Declare a client tool, fulfilled by the browser: the decorated function's
        body never runs (write ``...``). Its parameters are the input schema, its return
        annotation the output schema the browser's answer is validated against (no
        annotation: any answer). ``render`` is the widget's kind (``"choice"``), or a
        ``{"kind": ..., ...}`` object with more keys for the widget. Raises
        :class:`ValueError` when a built-in kind cannot answer the return type (a
        ``"choice"`` returning ``int``: :mod:`~parkway.runner.agent.renders`)."""

        def decorate(fn: F) -> F:
            signature = ToolSignature.of(fn, allow_context=False)
            tool_name = name or fn.__name__
            shown = {"kind": render} if isinstance(render, str) else render
            if shown is not None and not isinstance(shown.get("kind"), str):
                raise ValueError("render is a widget kind, or an object with a string 'kind'")
            compiled: dict[str, Any] = {
                "type": "client",
                "name": tool_name,
                "description": description or signature.description,
                "input_schema": dict(signature.input_schema),
            }
            output_schema = signature.output_schema()
            mismatch = render_mismatch(shown, output_schema)
            if mismatch is not None:
                raise ValueError(mismatch.for_python(tool_name, _type_name(signature.returns)))
            if output_schema is not None:
                compiled["output_schema"] = output_schema
            if shown is not None:
                compiled["render"] = dict(shown)
            if deadline_s is not None:
                compiled["deadline_s"] = deadline_s
            self._add(tool_name, lambda: dict(compiled))
            return fn

        return decorate(func) if func is not None else decorate

    def use_request_connection(self) -> None:
        """Add ``request_connection``: the model asks the user to connect an account
        (the OAuth connect card); the result names the connection, never a secret."""
        slug = f"__ag__{REQUEST_CONNECTION}"  # the reserved workflow (runner/agent/workflows.py)
        embed = {"@ag.embed": {"@ag.references": {"workflow": {"slug": slug}}}}
        self._add(REQUEST_CONNECTION, lambda: json.loads(json.dumps(embed)))

    def use_platform_op(
        self,
        op: str,
        *,
        needs_approval: bool | str | None = None,
        approvers: str | None = None,
        self_approval: bool | None = None,
        deadline_s: float | None = None,
    ) -> None:
        """Add the platform op ``op`` (``commit_config``, ``execute_code``,
        ``save_function``, ``list_functions``): ``needs_approval`` None keeps the op's
        own policy; the other options are the template entry's (docs/protocol.md)."""
        if op not in PLATFORM_OPS:
            known = ", ".join(sorted(PLATFORM_OPS)) or "none are registered"
            raise ValueError(f"unknown platform op {op!r} (known: {known})")
        options = {
            "needs_approval": needs_approval,
            "approvers": approvers,
            "self_approval": self_approval,
            "deadline_s": deadline_s,
        }
        compiled: dict[str, Any] = {"type": "platform", "op": op}
        compiled.update({k: v for k, v in options.items() if v is not None})
        self._add(op, lambda: dict(compiled))

    def use_commit_config(self, **options: Any) -> None:
        """:meth:`use_platform_op` for ``commit_config`` (the agent edits its template)."""
        self.use_platform_op("commit_config", **options)

    def use_execute_code(self, **options: Any) -> None:
        """:meth:`use_platform_op` for ``execute_code`` (code mode, sandboxed)."""
        self.use_platform_op("execute_code", **options)

    def use_save_function(self, **options: Any) -> None:
        """:meth:`use_platform_op` for ``save_function`` (the code mode library)."""
        self.use_platform_op("save_function", **options)

    def use_list_functions(self, **options: Any) -> None:
        """:meth:`use_platform_op` for ``list_functions`` (the code mode library)."""
        self.use_platform_op("list_functions", **options)

    # -- compiling -----------------------------------------------------------------------

    def to_template(self) -> dict[str, Any]:
        """The agent template (plain JSON) this agent compiles to. Raises
        :class:`~parkway.runner.errors.TemplateError` when a tool cannot be named by a
        ``ref`` every worker imports, or the template does not validate."""
        try:
            tools = [entry() for _, entry in self._entries]
        except TypeError as exc:
            raise TemplateError(f"agent {self.name!r}: {exc}") from None
        document: dict[str, Any] = {"instructions": self.instructions, "tools": tools}
        if self.sandbox:
            document["sandbox"] = json.loads(json.dumps(self.sandbox))
        if self.mcps:
            document["mcps"] = json.loads(json.dumps(self.mcps))
        if self.resume_policy != "client":
            document["resume_policy"] = self.resume_policy
        load_template(document)  # validated as a stored template would be
        return document

    def template_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_template` as JSON text (what ``parkway agent export`` prints)."""
        return json.dumps(self.to_template(), indent=indent, ensure_ascii=False)

    def agent_file(self) -> AgentFile:
        """The :class:`~parkway.runner.agent.agentfile.AgentFile` a server or runtime
        starts from: the compiled template, and the model (an object as given, a named
        model as its spec, built where the environment is known)."""
        model = self.model
        if model is None:
            raise TemplateError(
                f"agent {self.name!r} has no model: give Agent(model=...), or use "
                "agent.override(model=...)"
            )
        template = load_template(self.to_template())
        if not isinstance(model, str | Mapping):
            return AgentFile(
                template=template, model=model, suggestions=self.suggestions, name=self.name
            )
        built, spec = model_of(model)
        return AgentFile(
            template=template, model=built, spec=spec, suggestions=self.suggestions, name=self.name
        )

    def agent_file_document(self) -> dict[str, Any]:
        """The agent file (``{"template", "model", "suggestions"?}``) of this agent, for a
        model given by name or document; a model object has no JSON form."""
        model = self.model
        if model is None or not isinstance(model, str | Mapping):
            raise TemplateError(
                f"agent {self.name!r}: only a model given by name (or as an agent file's "
                "model document) can be written to an agent file"
            )
        model_of(model)  # checked as the agent file's reader will
        document: dict[str, Any] = {"template": self.to_template(), "model": model}
        if self.suggestions:
            document["suggestions"] = list(self.suggestions)
        return json.loads(json.dumps(document))  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def override(self, *, model: AgentModel) -> Iterator[Agent]:
        """Within the block (this context: the task or thread, and what it starts), the
        agent runs on ``model``; for tests: ``with agent.override(model=TestModel()):``.
        Yields the agent itself."""
        _checked_model(model)
        token = _OVERRIDES.set({**_OVERRIDES.get({}), id(self): model})
        try:
            yield self
        finally:
            _OVERRIDES.reset(token)
