"""The host side of ``tools.call``: brokered tool calls from a sandboxed program.

The guest writes one JSON line per call (``{name, input}``) and blocks until the host
answers one line (``{ok: true, output}`` or ``{ok: false, error}``). The host hands
each call to the request's broker, counts them, refuses past ``max_tool_calls``
without asking the broker, and bounds both a request line and an answer by
``request_bytes``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from parkway.runner.sandbox._outcome import size_text
from parkway.runner.sandbox.provider import Broker, BrokerError, Limits, Status

__all__ = ["ToolServer"]

logger = logging.getLogger(__name__)


class ToolServer:
    """Answers one run's tool calls through ``broker``; ``kill`` ends the run when the
    program breaks the protocol's bounds."""

    def __init__(self, limits: Limits, broker: Broker, kill: Callable[[Status, str], None]):
        self.limits = limits
        self.broker = broker
        self.kill = kill
        self.calls = 0  # handed to the broker

    async def serve(self, reader: asyncio.StreamReader, answers: asyncio.WriteTransport) -> None:
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                return
            except asyncio.LimitOverrunError:
                cap = size_text(self.limits.request_bytes)
                self.kill("output_limit", f"a tool call's request passed its cap of {cap}")
                return
            answer = await self.answer(line)
            if answers.is_closing():
                return
            answers.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")

    async def answer(self, line: bytes) -> dict[str, Any]:
        try:
            call = json.loads(line)
            name, tool_input = call["name"], call.get("input")
            if not isinstance(name, str):
                raise TypeError(name)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return {"ok": False, "error": "a malformed tool call"}
        most = self.limits.max_tool_calls
        if self.calls >= most:
            return {"ok": False, "error": f"tool call limit reached: at most {most} per run"}
        self.calls += 1
        try:
            output = await self.broker(name, tool_input)
            encoded = json.dumps(output, allow_nan=False)
        except BrokerError as exc:
            return {"ok": False, "error": str(exc) or f"the tool {name!r} failed"}
        except (TypeError, ValueError, RecursionError):
            return {"ok": False, "error": f"the tool {name!r} gave an output that is not JSON"}
        except Exception:
            # A failing broker is the host's bug, not the program's: log it, tell little.
            logger.exception("the sandbox's tool broker failed on %r", name)
            return {"ok": False, "error": f"the tool {name!r} failed"}
        if len(encoded) > self.limits.request_bytes:
            cap = size_text(self.limits.request_bytes)
            return {"ok": False, "error": f"the tool {name!r} gave more than {cap} of output"}
        return {"ok": True, "output": output}
