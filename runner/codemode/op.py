"""``execute_code``: the platform op that runs a short Python program in the sandbox.

The program is reviewed first (policy ``ask`` by default): the human sees the code, its
arguments and inputs, the limits and the isolation, and may approve, edit (the edited
code is what runs) or deny. It then runs in a fresh sandbox (:mod:`parkway.runner.sandbox`)
with the run's limits (:meth:`CodeMode.limits_for`), the artifacts it names mounted
read-only, the agent's library importable, and brokered tool calls: ``tools.call(name,
input)`` inside runs one of the agent's server tools whose policy is ``allow``, here on
the host, with the chat's context; anything else is refused. Each brokered call is
published on the stream (``data-code-tool-call``) under the code run's call.

The model gets ``{status, stdout, stderr, result, wall_ms}``, with ``message`` when the
status is not ``ok``; stdout past the inline size becomes an artifact (``stdout_artifact``)
and the model sees its beginning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from parkway.runner.agent import PlatformOp, ToolContext, execute_tool, input_problem
from parkway.runner.canonical import canonical_json
from parkway.runner.codemode.library import FunctionLibrary
from parkway.runner.codemode.prompt import DESCRIPTION
from parkway.runner.codemode.runtime import CodeMode, Workspace, workspace
from parkway.runner.errors import QuotaExceededError, ToolError
from parkway.runner.ops import SANDBOX_RUNS
from parkway.runner.sandbox import BrokerError, Limits, RunRequest, RunResult
from parkway.runner.store import ARTIFACT_ID

__all__ = ["CODE_TOOL_CALL", "EXECUTE_CODE", "execute_code", "input_artifact_ids"]

CODE_TOOL_CALL = "code-tool-call"
# What a code-tool-call part shows of an input or output, at most (bytes of JSON).
SHOWN_BYTES = 1024
# stdout the model sees inline; the rest is in the artifact.
INLINE_STDOUT_CHARS = 16 * 1024
MAX_INPUTS = 16
INPUT_NAME = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "minLength": 1, "maxLength": 256 * 1024},
        "args": {"description": "JSON the code reads as `args`"},
        "inputs": {
            "description": "artifact ids to mount read-only: a list, or an object name -> id",
            "anyOf": [
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": ARTIFACT_ID.pattern},
                    "maxItems": MAX_INPUTS,
                },
                {
                    "type": "object",
                    "propertyNames": {"pattern": INPUT_NAME},
                    "additionalProperties": {"type": "string", "pattern": ARTIFACT_ID.pattern},
                    "maxProperties": MAX_INPUTS,
                },
            ],
        },
        "limits": {
            "type": "object",
            "properties": {
                "timeout_s": {"type": "number", "exclusiveMinimum": 0},
                "cpu_s": {"type": "integer", "minimum": 1},
                "memory_mb": {"type": "integer", "minimum": 32},
            },
            "additionalProperties": False,
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


def _named_inputs(inputs: Any) -> dict[str, str]:
    """name -> artifact id (a list mounts each artifact under its own id)."""
    if inputs is None:
        return {}
    if isinstance(inputs, list):
        return {artifact_id: artifact_id for artifact_id in inputs}
    return dict(inputs)


def input_artifact_ids(tool_name: str, tool_input: Any) -> frozenset[str]:
    """The artifact ids an ``execute_code`` call's input mounts (nothing for any other
    tool, or an input of another shape): exactly what a reviewer of the call may read
    of its chat (docs/security.md, "Approvals by others")."""
    if tool_name != EXECUTE_CODE.name or not isinstance(tool_input, Mapping):
        return frozenset()
    inputs = tool_input.get("inputs")
    if isinstance(inputs, list):
        ids: list[Any] = inputs
    elif isinstance(inputs, Mapping):
        ids = list(inputs.values())
    else:
        return frozenset()
    return frozenset(i for i in ids if isinstance(i, str) and ARTIFACT_ID.match(i))


async def _prepare(
    ctx: ToolContext, space: Workspace, tool_input: Mapping[str, Any]
) -> dict[str, Any]:
    """Write the inputs and the library into the workspace; the request's file parts."""
    if ctx.artifacts is None and tool_input.get("inputs"):
        raise ToolError("this server keeps no artifacts")
    inputs = {}
    for name, artifact_id in _named_inputs(tool_input.get("inputs")).items():
        found = None if ctx.artifacts is None else await ctx.artifacts.get(ctx.chat_id, artifact_id)
        if found is None:
            raise ToolError(f"input {name!r}: this chat has no artifact {artifact_id!r}")
        inputs[name] = await asyncio.to_thread(space.add_input, name, found[1])
    modules = {} if ctx.agents is None else await FunctionLibrary.of(ctx.agents).modules()
    return {"inputs": inputs, "library": await asyncio.to_thread(space.library_package, modules)}


def _shown(value: Any) -> Any:
    """``value`` as a brokered call's part shows it: itself, or past :data:`SHOWN_BYTES`
    of JSON its size and beginning (the parts are kept with the chat's history)."""
    try:
        text = canonical_json(value)
    except Exception:  # not plain JSON: the tool's own check reports it
        return {"truncated": True, "bytes": None, "preview": repr(value)[:200]}
    if len(text) <= SHOWN_BYTES:
        return value
    return {"truncated": True, "bytes": len(text.encode()), "preview": text[: SHOWN_BYTES // 2]}


def _broker(ctx: ToolContext, limits: Limits) -> Any:
    """The host side of ``tools.call``: only the agent's server tools that run without
    asking (policy allow), never a platform op (no code starting code)."""
    template = ctx.template

    async def call(name: str, tool_input: Any) -> Any:
        report = {"toolCallId": ctx.tool_call_id, "name": name, "input": _shown(tool_input)}
        try:
            output = await _run(name, tool_input)
        except BrokerError as exc:
            ctx.publish(CODE_TOOL_CALL, {**report, "error": str(exc)[:SHOWN_BYTES]})
            raise
        ctx.publish(CODE_TOOL_CALL, {**report, "output": _shown(output)})
        return output

    async def _run(name: str, tool_input: Any) -> Any:
        spec = None if template is None else template.tool(name)
        if spec is None or spec.kind != "function" or spec.func is None:
            raise BrokerError(f"{name!r} is not a server tool of this agent")
        if spec.denied_by_policy or (spec.needs_approval and spec.approval_rule is None):
            raise BrokerError(f"{name!r} asks a human first (or is denied), so code cannot call it")
        if not isinstance(tool_input, dict):
            raise BrokerError("a tool's input is a JSON object")
        problem = input_problem(spec, tool_input)
        if problem is not None:
            raise BrokerError(problem)
        sub = ToolContext(
            ctx.chat_id,
            ctx.principal,
            ctx.tool_call_id,
            name,
            ctx.credentials,
            ctx.agents,
            template=template,
        )
        # A tool deciding approval per call (needs_approval "per_call"): code may call
        # it only with an input its rule lets through without a human.
        if spec.asks_approval(tool_input, sub):
            raise BrokerError(f"{name!r} asks a human first for this input, so code cannot call it")
        run = await execute_tool(spec, tool_input, sub, max_bytes=limits.result_bytes)
        if run.error is not None:
            raise BrokerError(run.error)
        return run.output

    return call


async def _model_result(ctx: ToolContext, result: RunResult) -> dict[str, Any]:
    stdout = result.stdout.decode("utf-8", errors="replace")
    output: dict[str, Any] = {
        "status": result.status,
        "stdout": stdout,
        "stderr": result.stderr.decode("utf-8", errors="replace"),
        "result": result.result,
        "wall_ms": round(result.wall_ms, 1),
    }
    if result.status != "ok":
        output["message"] = result.message
    if result.tool_calls:
        output["tool_calls"] = result.tool_calls
    whole = None
    if result.stdout_spill is not None:
        whole = await asyncio.to_thread(result.stdout_spill.read_bytes)
    elif len(stdout) > INLINE_STDOUT_CHARS:
        whole = result.stdout
    if whole is not None and ctx.artifacts is not None:
        output["stdout"] = stdout[:INLINE_STDOUT_CHARS]
        try:
            artifact = await ctx.artifacts.put(
                ctx.chat_id,
                whole,
                media_type="text/plain; charset=utf-8",
                source="execute_code",
                tool_call_id=ctx.tool_call_id,
                principal=ctx.principal,
            )
        except QuotaExceededError as exc:  # the first characters stay; the rest is gone
            output["stdout_note"] = f"the whole output was not kept: {exc}"
        else:
            ref = artifact.reference() | {"total_bytes": result.stdout_total}
            output["stdout_artifact"] = ref
    return output


async def execute_code(tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    code_mode = ctx.code if isinstance(ctx.code, CodeMode) else None
    if code_mode is None or not code_mode.available or code_mode.provider is None:
        reason = "code execution is not configured" if code_mode is None else code_mode.reason
        SANDBOX_RUNS.labels("unavailable").inc()
        return {
            "status": "unavailable",
            "stdout": "",
            "stderr": "",
            "result": None,
            "wall_ms": 0,
            "message": reason or "the sandbox is unavailable",
        }
    sandbox = None if ctx.template is None else ctx.template.raw.get("sandbox")
    limits = code_mode.limits_for(sandbox, tool_input.get("limits"))
    provider = code_mode.provider
    async with workspace() as space:
        files = await _prepare(ctx, space, tool_input)
        request = RunRequest(
            code=str(tool_input["code"]),
            args=tool_input.get("args"),
            inputs=files["inputs"],
            library=files["library"],
            limits=limits,
            broker=_broker(ctx, limits),
            spill_dir=space.spill_dir,
        )
        async with code_mode.slots():
            result = await provider.run(request)
        SANDBOX_RUNS.labels(result.status).inc()
        return await _model_result(ctx, result)


def _template_sandbox(template: Mapping[str, Any]) -> Mapping[str, Any]:
    """What a parked execute_code call keeps of its template: the sandbox section, from
    which its review card shows the run's own limits (:meth:`CodeMode.limits_for`)."""
    sandbox = template.get("sandbox")
    return {"sandbox": dict(sandbox) if isinstance(sandbox, Mapping) else {}}


EXECUTE_CODE = PlatformOp(
    name="execute_code",
    description=DESCRIPTION,
    input_schema=INPUT_SCHEMA,
    func=execute_code,
    needs_approval="ask",
    allow_edits=True,
    render=_template_sandbox,
    # code written by a model: on a shared server, a second human approves it
    others_approve=True,
    # the wall clock tops out at 60 s; the rest is the human-free part of the call
    timeout_s=90.0,
)
