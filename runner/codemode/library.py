"""An agent's function library: code the agent saved (``save_function``), versioned.

Each function is a module of the package ``library`` that ``execute_code`` can import
(``from library import summarize``); the sandbox mounts the package read-only, and only
the agent's own. A save makes a new version (who, when, the code and its description);
every version is kept (keys ``functions`` and ``function_versions`` of
:class:`~parkway.runner.store.keys.AgentKeys`, no TTL, like the agent's revisions).

``save_function`` asks the human by default (policy ``ask``) and, like ``commit_config``,
needs the agent to be editable and the principal an editor: the library is shared by
every chat of the agent. ``list_functions`` only reads.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parkway.runner.agent import AgentStore, PlatformOp, ToolContext
from parkway.runner.errors import ToolError
from parkway.runner.store import AgentKeys, RedisClient, as_text

__all__ = [
    "LIST_FUNCTIONS",
    "SAVE_FUNCTION",
    "FunctionLibrary",
    "SavedFunction",
    "check_function",
]

FUNCTION_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
MAX_CODE_BYTES = 64 * 1024
# Every version is kept, and only the agent's editors save (each save approved): this
# bounds what an agent's library may hold whatever they do (with MAX_CODE_BYTES, 128 MiB).
MAX_VERSIONS = 2000

# KEYS: 1 functions, 2 function versions. ARGV: 1 name, 2 record JSON without a version,
# 3 the most versions the library may hold.
# Returns the new version, or 0 when the library holds as many versions as it may
# (nothing saved). The version comes from the head, so two saves of one name get two
# versions, never one.
_SAVE = """
if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[3]) then return 0 end
local head = redis.call('HGET', KEYS[1], ARGV[1])
local version = 1
if head then version = cjson.decode(head)['version'] + 1 end
local record = cjson.decode(ARGV[2])
record['version'] = version
local encoded = cjson.encode(record)
redis.call('HSET', KEYS[1], ARGV[1], encoded)
redis.call('HSET', KEYS[2], ARGV[1] .. '@' .. version, encoded)
return version
"""


@dataclass(frozen=True)
class SavedFunction:
    name: str
    version: int
    code: str
    description: str
    by: str
    at: int  # epoch ms

    def summary(self) -> dict[str, Any]:
        """What ``list_functions`` and the agent panel show without the code."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "signature": signature(self.code, self.name),
            "by": self.by,
            "at": self.at,
        }


def check_function(name: str, code: str) -> None:
    """Refuse a name that is no plain identifier, or code that does not parse or does
    not define ``name`` at its top level (``ValueError`` with the reason)."""
    if not FUNCTION_NAME.match(name) or keyword.iskeyword(name):
        raise ValueError("a function name is a lower-case Python identifier of 1-64 characters")
    if len(code.encode()) > MAX_CODE_BYTES:
        raise ValueError(f"the code is over {MAX_CODE_BYTES // 1024} KiB")
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise ValueError(f"the code does not parse: {exc.msg} (line {exc.lineno})") from None
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    if name not in defined:
        raise ValueError(f"the code must define a function named {name!r} at its top level")


def signature(code: str, name: str) -> str:
    """``name(args)`` as the code defines it, for a listing."""
    try:
        for node in ast.parse(code).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                return f"{name}({ast.unparse(node.args)})"
    except SyntaxError:
        pass
    return name


class FunctionLibrary:
    """One agent's saved functions in Redis."""

    def __init__(
        self, redis: RedisClient, agent_id: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.redis = redis
        self.keys = AgentKeys(agent_id)
        self.clock = clock
        self._save = redis.register_script(_SAVE)

    @classmethod
    def of(cls, agents: AgentStore) -> FunctionLibrary:
        return cls(agents.redis, agents.agent_id, clock=agents.clock)

    async def save(self, name: str, code: str, description: str, *, by: str) -> SavedFunction:
        check_function(name, code)
        record = {
            "name": name,
            "code": code,
            "description": description,
            "by": by,
            "at": int(self.clock() * 1000),
        }
        version = await self._save(
            keys=[self.keys.functions, self.keys.function_versions],
            args=[name, json.dumps(record), MAX_VERSIONS],
        )
        if int(version) == 0:
            raise ValueError(
                f"the library holds {MAX_VERSIONS} function versions, as many as it may"
            )
        return SavedFunction(version=int(version), **record)  # type: ignore[arg-type]

    async def heads(self) -> list[SavedFunction]:
        """The latest version of each function, by name."""
        raw = await self.redis.hvals(self.keys.functions)
        return sorted((_decode(item) for item in raw), key=lambda f: f.name)

    async def head(self, name: str) -> SavedFunction | None:
        raw = await self.redis.hget(self.keys.functions, name)
        return None if raw is None else _decode(raw)

    async def versions(self, name: str) -> list[SavedFunction]:
        """Every version of ``name``, oldest first."""
        head = await self.head(name)
        if head is None:
            return []
        fields = [f"{name}@{v}" for v in range(1, head.version + 1)]
        raw = await self.redis.hmget(self.keys.function_versions, fields)
        return [_decode(item) for item in raw if item is not None]

    async def modules(self) -> dict[str, str]:
        """name -> code of the latest versions: what a sandbox run mounts."""
        return {f.name: f.code for f in await self.heads()}


def _decode(raw: Any) -> SavedFunction:
    data = json.loads(as_text(raw))
    return SavedFunction(
        name=data["name"],
        version=int(data["version"]),
        code=data["code"],
        description=data.get("description", ""),
        by=data.get("by", ""),
        at=int(data.get("at", 0)),
    )


def _library(ctx: ToolContext) -> FunctionLibrary:
    if ctx.agents is None:
        raise ToolError("this server keeps no agent library")
    return FunctionLibrary.of(ctx.agents)


async def save_function(tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    agents = ctx.agents
    if agents is None:
        raise ToolError("this server keeps no agent library")
    if not agents.editable:
        raise ToolError("this server does not allow changes to the agent")
    if not agents.editors.includes(ctx.principal):
        raise ToolError("only the agent's editors may change its library")
    try:
        saved = await _library(ctx).save(
            str(tool_input["name"]),
            str(tool_input["code"]),
            str(tool_input.get("description", "")),
            by=f"agent:{ctx.principal}",
        )
    except ValueError as exc:
        raise ToolError(f"the function was not saved: {exc}") from None
    return {"saved": True, "name": saved.name, "version": saved.version}


async def list_functions(tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    del tool_input
    heads = await _library(ctx).heads()
    return {"functions": [f.summary() for f in heads]}


SAVE_FUNCTION = PlatformOp(
    name="save_function",
    description=(
        "Save a Python function to this agent's library so later execute_code runs can "
        "import it (`from library import <name>`). Give the name, the code (which must "
        "define a top-level function of that name, using only the Python standard "
        "library and `pw`) and a one-line description. Saving a name again makes a new "
        "version. The user approves each save."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": FUNCTION_NAME.pattern},
            "code": {"type": "string", "minLength": 1, "maxLength": MAX_CODE_BYTES},
            "description": {"type": "string", "maxLength": 500},
        },
        "required": ["name", "code", "description"],
        "additionalProperties": False,
    },
    func=save_function,
    needs_approval="ask",
    # saved code runs in later execute_code calls: approved like code (platform_ops.py)
    others_approve=True,
    allow_edits=True,
)

LIST_FUNCTIONS = PlatformOp(
    name="list_functions",
    description=(
        "List the functions in this agent's library (name, signature, description, "
        "version). Import one in execute_code with `from library import <name>`."
    ),
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    func=list_functions,
)
