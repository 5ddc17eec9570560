"""An agent defined in Python, and a second process that resumes its chats: for the
cold-resume test of the runtime (tests/runner/test_runtime.py).

``python -m tests.helpers.runtime_worker REDIS_URL CHAT_ID CHOICE``: opens a
:class:`Runtime` on the same agent and Redis, answers the chat's parked ``pick`` call with
``{"choice": CHOICE}`` and resumes it, and prints one JSON line: this process's id, the
resumed turn's text and finish reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence

from parkway.runner import (
    AgentFile,
    FunctionInfo,
    FunctionModel,
    ModelMessage,
    Reply,
    Runtime,
    ToolCall,
    load_template,
)
from tests.helpers.support import PICK_TOOL, PUBLISH_TOOL, WEATHER_TOOL

TEMPLATE = load_template(
    {"instructions": "pick, then say", "tools": [WEATHER_TOOL, PICK_TOOL, PUBLISH_TOOL]}
)


def picker(messages: Sequence[ModelMessage], info: FunctionInfo) -> Reply:
    """Asks the browser to pick, then says what came back (the answer is read from the
    conversation, which is all a resumed run in another process has)."""
    results = info.results_since_user()
    if not results:
        return ["Let me ask. ", ToolCall("pick", {"q": info.last_user_text})]
    return f"You picked {results[-1].result}."


AGENT = AgentFile(TEMPLATE, model=FunctionModel(picker))


async def answer_and_resume(url: str, chat_id: str, choice: str) -> dict[str, object]:
    async with Runtime(AGENT, redis_url=url, sweep_interval_s=None) as rt:
        view = await rt.chat(chat_id)
        (pending,) = view.pending
        result = await rt.answer(chat_id, pending.id, {"choice": choice}, resume=True)
        return {"pid": os.getpid(), "text": result.text, "finish": result.finish_reason}


if __name__ == "__main__":
    url, chat, picked = sys.argv[1:4]
    print(json.dumps(asyncio.run(answer_and_resume(url, chat, picked))), flush=True)
