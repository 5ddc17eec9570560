"""Settling a call parked on an MCP server's link when the server says it was completed.

A call parked on a URL elicitation (an older server's -32042, runner/mcp/input.py) waits
for a person to say they finished. A 2025-11-25 server may say so itself:
``notifications/elicitation/complete`` with the elicitation's id, on the session that
made the call. The worker holding that session hears it (:class:`~parkway.runner.mcp.
McpTools` ``on_link_done``), finds the call in the link index
(:class:`~parkway.runner.store.McpLinks`) and settles it as the person would have,
``accept`` for each of its links, through the usual one-winner settle (the server's
decision in the audit trail). A person who answered first wins; a call that timed out
stays so. Once nothing of its step is pending, the run is resumed in the background,
whatever the agent's resume policy: nobody else is going to act. The notification is a
hint: when no worker has the session open (the worker that made the call died or closed
it), nobody hears it, and the person says they finished, as without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from parkway.runner.engine.settling import Settling
from parkway.runner.errors import CallNotFoundError, ChatNotFoundError, SettleConflictError
from parkway.runner.ops import logcontext
from parkway.runner.store import McpLinks

__all__ = ["LinkSettler"]

log = logging.getLogger(__name__)


class LinkSettler:
    """The runner's ``on_link_done`` (see the module doc): ``start_resume(chat_id)``
    resumes a chat in the background."""

    def __init__(
        self, links: McpLinks, settling: Settling, start_resume: Callable[[str], None]
    ) -> None:
        self.links = links
        self.settling = settling
        self.start_resume = start_resume

    async def __call__(self, scope: str, elicitation_id: str) -> None:
        try:
            await self._settle(scope, elicitation_id)
        except Exception:
            log.warning("an MCP link completion was not applied", exc_info=True)

    async def _settle(self, scope: str, elicitation_id: str) -> None:
        link = await self.links.complete(scope, elicitation_id)
        if link is None:
            return  # no call waits for it (settled already, or not one of ours)
        output = {"responses": {key: {"action": "accept"} for key in link.keys}}
        with logcontext.bound(chat_id=link.chat_id, call_id=link.tool_call_id):
            try:
                result = await self.settling.settle(
                    link.chat_id, link.principal, link.tool_call_id,
                    {"outcome": "output", "output": output}, by="server", source="server",
                )  # fmt: skip
            except (SettleConflictError, ChatNotFoundError, CallNotFoundError):
                await self.links.forget(scope, link)
                return  # someone decided first, or the chat moved on
            await self.links.forget(scope, link)
            log.info("an MCP server completed the link of a parked call")
            if result.fresh and result.pending == 0 and not result.call.auto_resume:
                self.start_resume(link.chat_id)  # (auto_resume: the settle started it)
