"""Agent templates: the agent's configuration, and the tool specs resolved from it.

A template is JSON: ``{llm, instructions, tools: [...], skills: [...], mcps: [...],
sandbox: {...}}``;
``llm`` names its model as an agent file's ``model`` does (:mod:`parkway.runner.llm.spec`).
Each tool entry is one of four kinds: a function tool (server-executed
Python callable), a client tool (fulfilled by the browser), a platform op (built-in
server tool), or an ``@ag.embed`` reference to a reserved workflow. The ``mcps`` entries
name MCP servers whose tools are offered beside them (:mod:`parkway.runner.agent.mcps`;
their tools are listed when a run starts, not at load). :func:`load_template`
validates the whole document up front, so a bad entry fails at load with a message that
names it (``tools[2] 'lookup': ref 'pkg.mod:fn' cannot be imported``) instead of in the
middle of a run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parkway.runner.agent.mcps import McpServer, parse_mcp_servers, server_of
from parkway.runner.agent.platform_ops import PLATFORM_OPS
from parkway.runner.agent.renders import render_mismatch
from parkway.runner.agent.workflows import RESERVED_WORKFLOWS
from parkway.runner.canonical import canonical_json
from parkway.runner.errors import NotPlainJSONError, TemplateError
from parkway.runner.llm import ModelSpec, parse_model_spec
from parkway.runner.validation import describe_first_error

__all__ = [
    "PER_CALL",
    "TOOL_BINDING",
    "TYPED_BINDERS",
    "AgentTemplate",
    "ToolBinding",
    "ToolSpec",
    "load_template",
    "load_template_json",
]

TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
ANY_OBJECT: dict[str, Any] = {"type": "object"}
# A role an approval may require (``"approvers": "approver"``): roles are plain names.
ROLE_NAME = r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$"

# "mcp": a tool of one of the template's MCP servers, made when the server's tools are
# listed (runner/mcp/listing.py), never from a ``tools`` entry.
ToolKind = Literal["function", "client", "platform", "mcp"]

# The approval policy of a tool whose Python definition decides per call
# (``@agent.tool(needs_approval=<function>)``): the function is found through the
# entry's ``ref``. A server that does not know the name asks every time (fail safe).
PER_CALL = "per_call"
# The attribute under which a function defined with ``@agent.tool`` carries its
# :class:`ToolBinding` (runner/agent/functions.py), found through the entry's ``ref``.
TOOL_BINDING = "__parkway_tool__"
# How a function entry whose ``arguments`` are ``"typed"`` is bound when nothing bound
# its function in this process (an exported agent file served on its own, its tools
# declared on an ``Agent`` in another module): runner/agent/functions.py puts its binder
# here when the package is imported (it imports this module, so it cannot be imported
# from here).
TYPED_BINDERS: list[Callable[[Callable[..., Any]], ToolBinding]] = []


class ToolBinding(Protocol):
    """What a function defined with ``@agent.tool`` brings to its template entry: how
    to call it with a JSON input, the schema of that input, the check pydantic makes of
    it, and (when its ``needs_approval`` is a function) the per-call decision."""

    @property
    def input_schema(self) -> Mapping[str, Any]: ...

    @property
    def description(self) -> str: ...

    @property
    def decides_approval(self) -> bool: ...

    def invoke(self, tool_input: Any, ctx: Any) -> Awaitable[Any]: ...

    def problem(self, tool_input: Any) -> str | None: ...

    def asks_approval(self, tool_input: Any, ctx: Any) -> bool: ...


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Render(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    kind: str = Field(min_length=1, max_length=64)


class FunctionToolEntry(_Entry):
    type: Literal["function"]
    name: str
    ref: str
    description: str = ""
    input_schema: dict[str, Any] | None = None
    needs_approval: bool | str = False
    approvers: str | None = Field(default=None, pattern=ROLE_NAME)
    self_approval: bool | None = None
    allow_edits: bool = False
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    deadline_s: float | None = Field(default=None, gt=0)
    # "input": the function takes the tool's input (and perhaps a ToolContext); "typed":
    # its own parameters, validated from its signature (an @agent.tool function)
    arguments: Literal["input", "typed"] = "input"


class ClientToolEntry(_Entry):
    type: Literal["client"]
    name: str
    description: str = ""
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    render: _Render | None = None
    deadline_s: float | None = Field(default=None, gt=0)


class PlatformToolEntry(_Entry):
    type: Literal["platform"]
    op: str
    needs_approval: bool | str | None = None
    approvers: str | None = Field(default=None, pattern=ROLE_NAME)
    self_approval: bool | None = None
    deadline_s: float | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the runner uses it, whatever kind of entry it came from."""

    name: str
    kind: ToolKind
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None = None
    needs_approval: bool = False
    approval_policy: str | None = None
    denied_by_policy: bool = False
    # Who answers its approval (runner/parking.py, may_answer): a role (``approvers``),
    # and whether the requester may (``self_approval``; None = not said: the default,
    # which ``others_approve`` turns off where the runner separates approvals).
    approvers: str | None = None
    self_approval: bool | None = None
    others_approve: bool = False
    allow_edits: bool = False
    render: Mapping[str, Any] | None = None
    ref: str | None = None
    timeout_s: float = 30.0
    deadline_s: float | None = None
    result_style: str | None = None
    source: str = ""
    func: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    # A tool defined in Python: the check its typed arguments make of an input beyond
    # the JSON Schema (None: valid), and its per-call approval decision (policy
    # ``per_call``: the input and a ToolContext in, whether to ask out).
    check_input: Callable[[Any], str | None] | None = field(default=None, compare=False, repr=False)
    approval_rule: Callable[[Any, Any], bool] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def parks(self) -> bool:
        """Whether a call of this tool may wait for the browser or a human (a tool
        whose approval is decided per call may)."""
        return self.kind == "client" or self.needs_approval

    def asks_approval(self, tool_input: Any, ctx: Any) -> bool:
        """Whether this call, with ``tool_input`` (already valid), waits for an
        approval: the tool's static ``needs_approval``, or its per-call rule's
        decision; ``ctx`` is the :class:`~parkway.runner.agent.tools.ToolContext` the
        rule is given."""
        if self.approval_rule is None:
            return self.needs_approval
        return self.approval_rule(tool_input, ctx)


@dataclass(frozen=True)
class AgentTemplate:
    """A validated template: the raw document (snapshotted with each run) and its tools."""

    raw: Mapping[str, Any]
    instructions: str
    tools: Mapping[str, ToolSpec]
    digest: str
    canonical: str = field(repr=False, default="")
    # "client": the next client request resumes a settled chat; "auto": a worker resumes
    # it in the background as soon as its last parked call settles.
    resume_policy: Literal["client", "auto"] = "client"
    # The model the template asks for (its ``llm``), or None: the agent file's model.
    llm: ModelSpec | None = None
    # The MCP servers whose tools it offers (its ``mcps``), validated.
    mcps: tuple[McpServer, ...] = ()

    def tool(self, name: str) -> ToolSpec | None:
        return self.tools.get(name)


# Before Parkway installed under one `parkway` namespace, its packages were top-level, so
# agent files and cassettes written then name e.g. "runner.demo:get_weather". Such a ref
# still means Parkway's module when it has one by that name.
_FORMER_TOP_LEVEL = frozenset({"runner", "transport", "widgets_api"})


def _module_name(name: str) -> str:
    if name.partition(".")[0] not in _FORMER_TOP_LEVEL:
        return name
    try:
        found = importlib.util.find_spec(f"parkway.{name}")
    except ImportError:
        found = None
    return f"parkway.{name}" if found is not None else name


def _import_ref(ref: str) -> Callable[..., Any]:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError("must look like 'package.module:callable'")
    try:
        target: Any = importlib.import_module(_module_name(module_name))
    except ImportError as exc:
        raise ValueError(f"module {module_name!r} cannot be imported ({exc})") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{ref!r} is not callable")
    return target  # type: ignore[no-any-return]


def _policy(needs_approval: bool | str) -> str | None:
    """The approval policy's name. Any named policy requires approval (fail safe); an
    empty name is a mistake, not a way to turn approval off."""
    if isinstance(needs_approval, str):
        if not needs_approval.strip():
            raise ValueError("needs_approval must be true, false or a policy name, not ''")
        return needs_approval
    return None


def _approval(needs_approval: bool | str) -> tuple[bool, str | None, bool]:
    """(asks, policy name, denied) for a tool's ``needs_approval``: the policies
    ``allow`` (runs without asking), ``ask`` (parks an approval), ``deny`` (refused
    without asking) and ``per_call`` (the tool's Python definition decides each call, so
    it may ask); ``true``/``false`` mean ask/allow; any other name asks (fail safe)."""
    policy = _policy(needs_approval)
    if policy == "allow":
        return False, policy, False
    if policy == "deny":
        return False, policy, True
    return bool(needs_approval), policy, False


def _answerers(
    asks: bool, approvers: str | None, self_approval: bool | None
) -> tuple[str | None, bool | None]:
    """A tool entry's ``approvers`` and ``self_approval``, which only a tool that asks
    for approval may have (on any other they would silently mean nothing)."""
    if not asks and (approvers is not None or self_approval is not None):
        raise ValueError(
            "approvers and self_approval apply only to a tool that needs approval "
            "(needs_approval true or 'ask')"
        )
    return approvers, self_approval


def _check_schema(schema: Mapping[str, Any], what: str) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"{what} is not a valid JSON Schema: {exc.message}") from None


def _spec_from_entry(entry: Mapping[str, Any], where: str, *, stored: bool) -> ToolSpec:
    kind = entry.get("type")
    if kind == "function":
        fn_entry = FunctionToolEntry.model_validate(entry)
        func = _import_ref(fn_entry.ref)
        binding: ToolBinding | None = getattr(func, TOOL_BINDING, None)
        if binding is None and fn_entry.arguments == "typed" and TYPED_BINDERS:
            binding = TYPED_BINDERS[0](func)
        default_schema = binding.input_schema if binding is not None else None
        schema = (
            fn_entry.input_schema
            or default_schema
            or getattr(func, "input_schema", None)
            or ANY_OBJECT
        )
        _check_schema(schema, "input_schema")
        asks, policy, denied = _approval(fn_entry.needs_approval)
        approvers, self_approval = _answerers(asks, fn_entry.approvers, fn_entry.self_approval)
        rule = None
        if policy == PER_CALL:
            if binding is None or not binding.decides_approval:
                raise ValueError(
                    f"needs_approval {PER_CALL!r} needs a function defined with "
                    "@agent.tool(needs_approval=<function>); "
                    f"{fn_entry.ref!r} has no such decision"
                )
            rule = binding.asks_approval
        described = binding.description if binding is not None else None
        if described is None:
            described = (func.__doc__ or "").strip().split("\n")[0]
        return ToolSpec(
            name=fn_entry.name,
            kind="function",
            description=fn_entry.description or described,
            input_schema=schema,
            needs_approval=asks,
            approval_policy=policy,
            denied_by_policy=denied,
            approvers=approvers,
            self_approval=self_approval,
            allow_edits=fn_entry.allow_edits,
            ref=fn_entry.ref,
            timeout_s=fn_entry.timeout_s,
            deadline_s=fn_entry.deadline_s,
            source=where,
            func=binding.invoke if binding is not None else func,
            check_input=binding.problem if binding is not None else None,
            approval_rule=rule,
        )
    if kind == "client":
        cl_entry = ClientToolEntry.model_validate(entry)
        _check_schema(cl_entry.input_schema, "input_schema")
        if cl_entry.output_schema is not None:
            _check_schema(cl_entry.output_schema, "output_schema")
        render = cl_entry.render.model_dump() if cl_entry.render else None
        mismatch = None if stored else render_mismatch(render, cl_entry.output_schema)
        if mismatch is not None:
            raise ValueError(mismatch.for_template())
        return ToolSpec(
            name=cl_entry.name,
            kind="client",
            description=cl_entry.description,
            input_schema=cl_entry.input_schema,
            output_schema=cl_entry.output_schema,
            render=render,
            deadline_s=cl_entry.deadline_s,
            result_style="connection" if render and render.get("kind") == "connect" else None,
            source=where,
        )
    if kind == "platform":
        pl_entry = PlatformToolEntry.model_validate(entry)
        op = PLATFORM_OPS.get(pl_entry.op)
        if op is None:
            known = ", ".join(sorted(PLATFORM_OPS)) or "none are registered"
            raise ValueError(f"unknown platform op {pl_entry.op!r} (known: {known})")
        approval = op.needs_approval if pl_entry.needs_approval is None else pl_entry.needs_approval
        asks, policy, denied = _approval(approval)
        if policy == PER_CALL:
            raise ValueError(f"needs_approval {PER_CALL!r} is for function tools defined in Python")
        approvers, self_approval = _answerers(asks, pl_entry.approvers, pl_entry.self_approval)
        return ToolSpec(
            name=op.name,
            kind="platform",
            description=op.description,
            input_schema=op.input_schema,
            needs_approval=asks,
            approval_policy=policy,
            denied_by_policy=denied,
            approvers=approvers,
            self_approval=self_approval,
            others_approve=op.others_approve,
            deadline_s=pl_entry.deadline_s,
            timeout_s=op.timeout_s,
            allow_edits=op.allow_edits,
            source=where,
            func=op.func,
        )
    raise ValueError(f"unknown tool type {kind!r} (expected function, client or platform)")


def _resolve_embed(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    if set(entry) != {"@ag.embed"}:
        raise ValueError("an @ag.embed entry has no other keys")
    try:
        slug = entry["@ag.embed"]["@ag.references"]["workflow"]["slug"]
    except (KeyError, TypeError):
        raise ValueError(
            "an @ag.embed entry must be {'@ag.embed': {'@ag.references': "
            "{'workflow': {'slug': ...}}}}"
        ) from None
    workflow = RESERVED_WORKFLOWS.get(slug) if isinstance(slug, str) else None
    if workflow is None:
        raise ValueError(f"unknown reserved workflow {slug!r}")
    return workflow()


def _describe(index: int, entry: Any) -> str:
    label = ""
    if isinstance(entry, Mapping):
        label = str(entry.get("name") or entry.get("op") or "")
    return f"tools[{index}]" + (f" {label!r}" if label else "")


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    llm: Any = None
    instructions: str = ""
    tools: list[Any] = Field(default_factory=list)
    skills: list[Any] = Field(default_factory=list)
    mcps: list[Any] = Field(default_factory=list)
    sandbox: dict[str, Any] = Field(default_factory=dict)
    resume_policy: Literal["client", "auto"] = "client"


def load_template(document: Any, *, stored: bool = False) -> AgentTemplate:
    """Validate an agent template document and resolve its tools.

    Raises :class:`TemplateError` naming the first bad entry. ``stored``: the template
    was accepted when it was written (a chat's snapshot, a committed revision), and is
    read back: checks added since, which it may not pass, are not made again (a client
    tool's render kind against its output schema), so an upgrade never strands a parked
    run or an agent's head. Authoring (an agent file, a commit, ``Agent``) checks all.
    """
    try:
        text = canonical_json(document)
    except NotPlainJSONError as exc:
        raise TemplateError(f"agent template is not plain JSON: {exc}") from None
    return _load_cached(text, stored)


@functools.lru_cache(maxsize=256)
def load_template_json(text: str, *, stored: bool = False) -> AgentTemplate:
    """:func:`load_template` of a JSON text, such as a chat's stored template snapshot,
    remembered by the text itself: a resume finds its template without parsing and
    canonicalising the snapshot again (a template is immutable, so runs share it)."""
    return load_template(json.loads(text), stored=stored)


@functools.lru_cache(maxsize=256)
def _load_cached(text: str, stored: bool) -> AgentTemplate:
    document = json.loads(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    if not isinstance(document, dict):
        raise TemplateError("agent template must be a JSON object")
    try:
        doc = _Document.model_validate(document)
    except ValidationError as exc:
        raise TemplateError(f"agent template: {describe_first_error(exc)}") from None
    mcps = parse_mcp_servers(doc.mcps)
    servers = {server.name: server for server in mcps}
    tools: dict[str, ToolSpec] = {}
    for index, entry in enumerate(doc.tools):
        where = _describe(index, entry)
        try:
            if not isinstance(entry, Mapping):
                raise ValueError("must be a JSON object")
            resolved = _resolve_embed(entry) if "@ag.embed" in entry else entry
            spec = _spec_from_entry(resolved, where, stored=stored)
        except ValidationError as exc:
            raise TemplateError(f"{where}: {describe_first_error(exc, root='entry')}") from None
        except ValueError as exc:
            raise TemplateError(f"{where}: {exc}") from None
        if not TOOL_NAME.match(spec.name):
            raise TemplateError(
                f"{where}: tool name {spec.name!r} must start with a letter and use only "
                "letters, digits, '_' and '-' (at most 64)"
            )
        if spec.name in tools:
            raise TemplateError(f"{where}: duplicate tool name {spec.name!r}")
        server = servers.get(server_of(spec.name) or "")
        if server is not None:
            raise TemplateError(
                f"{where}: tool name {spec.name!r} collides with the tools of MCP server "
                f"{server.where}, which are offered as '{server.name}__<tool>'; rename one"
            )
        op = PLATFORM_OPS.get(spec.name) if spec.kind == "platform" else None
        if op is not None and op.render is not None:
            spec = dataclasses.replace(spec, render=dict(op.render(document)))
        tools[spec.name] = spec
    llm = None if doc.llm is None else parse_model_spec(doc.llm, "llm")
    return AgentTemplate(
        raw=document,
        instructions=doc.instructions,
        tools=tools,
        digest=digest,
        canonical=text,
        resume_policy=doc.resume_policy,
        llm=llm,
        mcps=mcps,
    )
