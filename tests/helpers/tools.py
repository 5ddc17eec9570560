"""Function tools used by the tests' agents. Each records its executions in Redis-free
process memory only for in-thread servers; cross-process checks use the history."""

from __future__ import annotations

from typing import Any

from parkway.runner.agent.tools import ToolContext

EXECUTIONS: list[dict[str, Any]] = []


def publish(tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    EXECUTIONS.append({"chat": ctx.chat_id, "call": ctx.tool_call_id, "input": tool_input})
    return {"published": tool_input["title"]}


def hang(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Notes each start in a file, then blocks: for killing a worker mid-tool."""
    import time
    from pathlib import Path

    with Path(tool_input["marker"]).open("a") as marker:
        marker.write("started\n")
    time.sleep(float(tool_input.get("seconds", 25)))
    return {"finished": True}


GATE = __import__("threading").Event()


def gated(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Blocks until the test opens the gate (in-process servers only)."""
    if not GATE.wait(30):
        raise TimeoutError("gate never opened")
    return {"passed": True}


async def wait_for_file(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Waits (bounded) until the test creates a file: holds a run in another process."""
    import asyncio
    from pathlib import Path

    path = Path(tool_input["path"])
    for _ in range(3000):
        if path.exists():
            return {"seen": path.name}
        await asyncio.sleep(0.01)
    raise TimeoutError("the file never appeared")


async def whoami(tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Calls a provider's userinfo endpoint with the connection's token, which the tool
    gets by reference (``ctx.access_token``) and never returns."""
    import httpx2

    token = await ctx.access_token(tool_input["connection_id"], scopes=tool_input.get("scopes", ()))
    async with httpx2.AsyncClient(timeout=10) as client:
        response = await client.get(
            tool_input["userinfo"], headers={"authorization": f"Bearer {token}"}
        )
    if response.status_code != 200:
        return {"ok": False, "status": response.status_code}
    info = response.json()
    return {"ok": True, "sub": info.get("sub")}


def note(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Appends a line to a file: lets sandboxed code tell the test it got somewhere (the
    sandbox itself cannot write to the host)."""
    from pathlib import Path

    with Path(tool_input["path"]).open("a") as out:
        out.write(f"{tool_input['line']}\n")
    return {"noted": True}


def typed_add(a: int, b: int = 1) -> int:
    """Add two numbers (a typed function no decorator bound: an exported agent file's
    ``"arguments": "typed"`` entry binds it from its signature)."""
    return a + b


async def ask_city(tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Asks the person live which city, waiting up to ``wait_s``; returns the answer."""
    from parkway.runner.agent import LiveQuestion

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    question = LiveQuestion("Which city?", schema, {"tool": "ask_city"}, tool_input["wait_s"])
    return dict(await ctx.ask_live(question))


async def bulk_after_file(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Waits (bounded) until the test creates a file, then answers ``bytes`` characters:
    runs held together, then storing large outputs (artifacts) at once."""
    data = await wait_for_file(tool_input)
    return {**data, "bulk": "x" * int(tool_input["bytes"])}
