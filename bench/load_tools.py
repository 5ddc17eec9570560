"""The load benchmark's server function tool: holds a run open until the benchmark lets go.

``make load`` needs runs that stay *running* for the whole measurement, so that every
``GET /api/chat/{id}/stream`` follower is a live follower of an unfinished run. The
scripted model of :mod:`bench.load` calls :func:`hold`, which waits until the benchmark
creates the gate file named in its input (then every held run finishes at once, and each
follower must see its ``finish`` chunk), or until ``max_s`` has passed: a benchmark that
dies never leaves a run waiting for ever.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

__all__ = ["POLL_S", "hold"]

# How often a held run looks at the gate. 200 held runs polling 4 times a second are
# 800 ``stat`` calls a second in the worker: small next to what is measured.
POLL_S = 0.25


async def hold(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Wait until the file ``tool_input["gate"]`` exists, ``tool_input["max_s"]`` at most
    (default 600 s). Returns whether the gate opened and how long the run was held."""
    gate = Path(str(tool_input["gate"]))
    max_s = float(tool_input.get("max_s", 600))
    started = time.monotonic()
    # A stat on a local file takes microseconds: cheaper than a thread hop per poll.
    while not gate.exists():  # noqa: ASYNC240 - see above
        if time.monotonic() - started >= max_s:
            return {"released": False, "held_s": round(time.monotonic() - started, 3)}
        await asyncio.sleep(POLL_S)
    return {"released": True, "held_s": round(time.monotonic() - started, 3)}
