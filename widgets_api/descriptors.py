"""Widget descriptors: what a playground needs to render a parked call.

A descriptor rides the stream as a ``data-parkway-widget`` part keyed by the toolCallId,
and is served again by ``GET /api/chats/{id}``. It carries what the widget needs that is
not in the tool call's input: the kind of widget, the tool, the deadline, the approval id,
the URL to watch the call's status on the server, and how a client tool's card shapes
its answer (:mod:`parkway.widgets_api.answers`). A connect widget's ``startUrl``
carries a fresh one-time start token each time it is described (a reloaded page gets a
new one; see :mod:`parkway.widgets_api.connect.start_tokens`); its ``ticketUrl`` is where
a page holding a bearer token instead of a cookie asks for a start link.

A code review's program is drawn highlighted, which is nearly all the work of describing
it; the highlighted lines are kept a while (:class:`CodeLines`), since every follower of
the run that parked the call and every ``GET`` of its call or chat describes it again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from parkway.runner.agent import REQUEST_CONNECTION
from parkway.runner.codemode import CodeMode
from parkway.runner.parking import ParkedCall
from parkway.widgets_api.answers import answer_fields
from parkway.widgets_api.highlight import highlight_lines

__all__ = ["CodeLines", "StartToken", "describe_call"]

# The platform op by which an agent changes its own template (runner/agent/commits.py): its
# approval is drawn as a diff of the template, so its widget kind is ``agent_change``.
_AGENT_CHANGE_TOOL = "commit_config"

# Code review (runner/codemode/): execute_code approvals are drawn as code with line numbers,
# its arguments, inputs, limits and the sandbox's isolation; save_function approvals as
# the function's code beside its current version.
_CODE_TOOL = "execute_code"
_LIBRARY_TOOL = "save_function"

# (provider, chat id, call id) -> a one-time token for the connect widget's start link
StartToken = Callable[[str, str, str], str]


class CodeLines:
    """The highlighted lines of the programs of code reviews described lately, least
    recently used first, within ``max_entries`` programs and ``max_chars`` characters.

    Highlighting a page of code (pygments) takes milliseconds, and the same call is
    described again for every follower of its run and every ``GET`` of the call or its
    chat. What is kept is only the highlighting, a function of the program's text alone,
    under the call's identity (chat id, call id) and the SHA-256 of the very text shown:
    a hit is what highlighting that text now would give, whoever asks, so nothing kept
    can be stale (a call id reused with other code is another key) or another
    principal's (the routes check who may read the chat before describing its calls,
    and the key's chat keeps one chat's reviews from answering, or timing, another's).
    The rest of a descriptor is built per request, as it must be: a connect widget's
    one-time start token is minted for each descriptor, the sandbox's status and the
    limits a run would get are the server's as they are now, the URLs carry the prefix
    of the app that asks. The call's status and outcome are not in a descriptor at all
    (the routes add them from the stored call), so a settle changes nothing kept here.
    """

    def __init__(self, *, max_entries: int = 256, max_chars: int = 8 * 2**20) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.chars = 0
        self._kept: OrderedDict[tuple[str, str, bytes], tuple[tuple[str, ...], int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def lines(self, chat_id: str, call_id: str, code: str) -> list[str]:
        """``code`` highlighted (:func:`highlight_lines`), as a list of the caller's own."""
        digest = hashlib.sha256(code.encode("utf-8", "surrogatepass")).digest()
        key = (chat_id, call_id, digest)
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
            return list(found[0])
        lines = highlight_lines(code)
        size = sum(map(len, lines))
        if size <= self.max_chars // 4:  # a program that big is highlighted each time
            self._kept[key] = (tuple(lines), size)
            self.chars += size
            while len(self._kept) > self.max_entries or self.chars > self.max_chars:
                _, (_, dropped) = self._kept.popitem(last=False)
                self.chars -= dropped
        return lines


# One per process: what it keeps depends on no server's settings (see CodeLines).
_CODE_LINES = CodeLines()


def describe_call(
    chat_id: str,
    call: ParkedCall,
    providers: Mapping[str, str] | None = None,
    start_token: StartToken | None = None,
    *,
    code: CodeMode | None = None,
    prefix: str = "",
) -> dict[str, Any]:
    """The widget descriptor of ``call`` in chat ``chat_id``. ``providers`` maps the
    configured OAuth providers' names to display names (for connect widgets);
    ``start_token`` issues the token a configured provider's start link needs; ``code``
    is the server's code sandbox, whose status and the run's limits code approvals show.
    ``prefix`` is the path a host application mounts the app at (``/pw``): the
    descriptor's URLs begin with it."""
    render = dict(call.render or {})
    kind = "approval" if call.kind == "approval" else str(render.pop("kind", "client"))
    if call.kind == "approval" and call.tool_name == _AGENT_CHANGE_TOOL:
        kind = "agent_change"
    if call.kind == "approval" and call.tool_name in (_CODE_TOOL, _LIBRARY_TOOL):
        kind = "code" if call.tool_name == _CODE_TOOL else "library_change"
    render.pop("kind", None)
    descriptor: dict[str, Any] = {
        "kind": kind,
        "tool": call.tool_name,
        "toolCallId": call.tool_call_id,
        "callKind": call.kind,
        "statusUrl": (
            f"{prefix}/api/chats/{quote(chat_id, safe='')}/calls/"
            f"{quote(call.tool_call_id, safe='')}"
        ),
    }
    if call.description:
        descriptor["description"] = call.description
    if call.deadline is not None:
        descriptor["deadline"] = int(call.deadline * 1000)
    if call.kind == "client":
        descriptor.update(answer_fields(kind, call.output_schema))
    if call.kind == "approval":
        descriptor["approvalId"] = call.approval_id
        descriptor["allowEdits"] = call.allow_edits
    if call.for_others:
        # who answers it (docs/security.md, "Approvals by others"): a playground shows
        # the requester "waiting for an approver" rather than buttons it would refuse
        descriptor["approvers"] = call.approvers
        descriptor["selfApproval"] = call.self_approval
    connect = _connect_of(kind, call, render, descriptor)
    if connect is not None:
        provider, requested = connect
        descriptor["provider"] = provider
        descriptor["scopes"] = requested
        names = providers or {}
        descriptor["providerName"] = names.get(provider, provider)
        descriptor["configured"] = provider in names
        descriptor["startUrl"] = (
            f"{prefix}/connect/{quote(provider, safe='')}/start?chat={quote(chat_id, safe='')}"
            f"&call={quote(call.tool_call_id, safe='')}"
        )
        if start_token is not None and provider in names:
            token = start_token(provider, chat_id, call.tool_call_id)
            descriptor["startUrl"] += f"&token={quote(token, safe='')}"
        descriptor["useUrl"] = f"{prefix}/connect/{quote(provider, safe='')}/use"
        if provider in names:
            # a page with a bearer token and no cookie asks here for a start link its
            # popup can open (start_tokens.py, "Tickets")
            descriptor["ticketUrl"] = f"{prefix}/connect/{quote(provider, safe='')}/ticket"
        descriptor["connectionsUrl"] = (
            f"{prefix}/api/connections?provider={quote(provider, safe='')}"
        )
    if kind in ("code", "library_change") and isinstance(call.input, dict):
        _describe_code(descriptor, chat_id, call, code, prefix)
        render.pop("sandbox", None)
    mcp = render.pop("mcp", None)
    if isinstance(mcp, Mapping):
        descriptor["mcp"] = _describe_mcp(mcp)
    if render:
        descriptor["render"] = render
    return descriptor


def _connect_of(
    kind: str, call: ParkedCall, render: dict[str, Any], descriptor: dict[str, Any]
) -> tuple[str, list[Any]] | None:
    """The provider and scopes of a connect card: a ``request_connection`` call's
    input, or (taken out of ``render``) those of an MCP tool call parked because its
    server needs OAuth (runner/mcp/oauth.py), whose card also names the server and its
    host (``mcpServer``)."""
    if kind != "connect":
        return None
    if call.tool_name == REQUEST_CONNECTION and isinstance(call.input, dict):
        return str(call.input.get("provider") or ""), list(call.input.get("scopes") or [])
    if call.result_style != "connection":
        return None
    server = render.pop("mcpServer", None)
    if isinstance(server, Mapping):
        descriptor["mcpServer"] = {
            k: str(server[k]) for k in ("server", "host", "tool") if k in server
        }
    scopes = render.pop("scopes", None)
    return str(render.pop("provider", "")), list(scopes or [])


def _describe_mcp(card: Mapping[str, Any]) -> dict[str, Any]:
    """An MCP tool's approval card (runner/mcp/listing.py made it when the tool was
    listed): the server's name in the template, the tool's name on the server, and the
    tool's annotations as the server's ``hints``, which ``hintsVerified: false`` says
    nobody checked (a server may claim a tool only reads and be wrong or lying)."""
    described: dict[str, Any] = {
        "server": str(card.get("server", "")),
        "tool": str(card.get("tool", "")),
        "hints": dict(card.get("annotations") or {}),
        "hintsVerified": False,
    }
    if card.get("title"):
        described["title"] = str(card["title"])
    return described


def _describe_code(
    descriptor: dict[str, Any],
    chat_id: str,
    call: ParkedCall,
    code: CodeMode | None,
    prefix: str,
) -> None:
    tool_input: Mapping[str, Any] = call.input if isinstance(call.input, dict) else {}
    source = tool_input.get("code")
    descriptor["codeLines"] = (
        _CODE_LINES.lines(chat_id, call.tool_call_id, source) if isinstance(source, str) else []
    )
    if descriptor["kind"] == "code":
        if code is None:
            descriptor["sandbox"] = {"available": False, "reason": "not configured"}
        else:
            # the limits this call would run with: its template's and its own requests
            sandbox = (call.render or {}).get("sandbox")
            requested = tool_input.get("limits")
            limits = code.limits_for(
                sandbox if isinstance(sandbox, Mapping) else None,
                requested if isinstance(requested, Mapping) else None,
            )
            status = code.status()
            # the server's own limits too, so the card can say which ones were raised
            descriptor["sandbox"] = {
                **status,
                "limits": limits.as_dict(),
                "serverLimits": status["limits"],
            }
        # the artifacts this call mounts, readable by whoever may read the call (an
        # approver too), never the rest of the chat's
        descriptor["artifactsUrl"] = (
            f"{prefix}/api/chats/{quote(chat_id, safe='')}/calls/"
            f"{quote(call.tool_call_id, safe='')}/artifacts"
        )
    else:
        name = str(tool_input.get("name") or "")
        descriptor["libraryUrl"] = f"{prefix}/api/agent/library/{quote(name, safe='')}"
