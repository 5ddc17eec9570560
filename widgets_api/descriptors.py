"""Widget descriptors: what a playground needs to render a parked call.

A descriptor rides the stream as a ``data-parkway-widget`` part keyed by the toolCallId,
and is served again by ``GET /api/chats/{id}``. It carries what the widget needs that is
not in the tool call's input: the kind of widget, the tool, the deadline, the approval id,
and the URL to watch the call's status on the server. A connect widget's ``startUrl``
carries a fresh one-time start token each time it is described (a reloaded page gets a
new one; see :mod:`parkway.widgets_api.connect.start_tokens`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from parkway.runner.agent import REQUEST_CONNECTION
from parkway.runner.codemode import CodeMode
from parkway.runner.parking import ParkedCall
from parkway.widgets_api.highlight import highlight_lines

__all__ = ["StartToken", "describe_call"]

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
    if call.kind == "approval":
        descriptor["approvalId"] = call.approval_id
        descriptor["allowEdits"] = call.allow_edits
    if kind == "connect" and call.tool_name == REQUEST_CONNECTION and isinstance(call.input, dict):
        provider = str(call.input.get("provider") or "")
        descriptor["provider"] = provider
        descriptor["scopes"] = list(call.input.get("scopes") or [])
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
        descriptor["connectionsUrl"] = (
            f"{prefix}/api/connections?provider={quote(provider, safe='')}"
        )
    if kind in ("code", "library_change") and isinstance(call.input, dict):
        _describe_code(descriptor, chat_id, call, code, prefix)
        render.pop("sandbox", None)
    if render:
        descriptor["render"] = render
    return descriptor


def _describe_code(
    descriptor: dict[str, Any],
    chat_id: str,
    call: ParkedCall,
    code: CodeMode | None,
    prefix: str,
) -> None:
    tool_input: Mapping[str, Any] = call.input if isinstance(call.input, dict) else {}
    source = tool_input.get("code")
    descriptor["codeLines"] = highlight_lines(source) if isinstance(source, str) else []
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
        descriptor["artifactsUrl"] = f"{prefix}/api/chats/{quote(chat_id, safe='')}/artifacts"
    else:
        name = str(tool_input.get("name") or "")
        descriptor["libraryUrl"] = f"{prefix}/api/agent/library/{quote(name, safe='')}"
