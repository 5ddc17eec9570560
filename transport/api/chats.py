"""The HTTP routes of the chat API.

Routes validate size, shape and ownership, call the runner, and hand runner events to
the encoder; SSE framing happens in :mod:`parkway.transport.aisdk.streaming` alone.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parkway.runner.canonical import parked_call_key
from parkway.runner.engine import AnswerReport, Run, Runner
from parkway.runner.errors import NothingToResumeError, NotPlainJSONError
from parkway.runner.eventlog import INTERRUPTED
from parkway.runner.parking import ParkedCall
from parkway.runner.store import MAX_CALL_ID, ChatRecord, chat_keys, check_call_id, check_chat_id
from parkway.transport.aisdk import (
    ChatPost,
    Describer,
    ErrorChunk,
    chat_messages,
    follow_response,
    parse_chat_post,
    replay_message,
    replay_response,
    stream_response,
)
from parkway.transport.api.admission import Admission, AdmittedStream
from parkway.transport.api.agent import is_editor, working_template
from parkway.transport.api.audit import get_chat_audit, get_connection_audit
from parkway.transport.api.requests import (
    chat_id_of,
    principal_of,
    read_json,
    roles_of,
    runner_of,
)
from parkway.transport.api.sessions import SessionAuthenticator
from parkway.transport.api.throttle import SessionThrottle
from parkway.transport.auth import TrustedProxies
from parkway.transport.errors import HTTPError, invalid_body
from parkway.transport.settings import Settings

__all__ = ["api_routes", "call_view", "client_of", "run_start", "run_streamed", "streamed"]


# A live question's answer is a small form's content (the runner allows 64 KiB of it).
_LIVE_BODY_MAX = 128 * 1024


def _call_id(request: Request) -> str:
    return check_call_id(str(request.path_params["call_id"]))


def _check_body_ids(post: ChatPost, body: Any) -> None:
    """Ids in a body are bounded like ids in a path: a huge one is refused here rather
    than stored, or quoted back in an error message (an answer mismatch names ids)."""
    for answer in post.answers:
        check_call_id(answer.tool_call_id)
        if answer.approval_id is not None and len(answer.approval_id) > MAX_CALL_ID:
            raise HTTPError(400, "invalid_request", f"approval ids are 1-{MAX_CALL_ID} characters")
    message_id = body.get("messageId") if isinstance(body, dict) else None
    if isinstance(message_id, str) and len(message_id) > MAX_CALL_ID:
        raise HTTPError(400, "invalid_request", f"messageId is 1-{MAX_CALL_ID} characters")


def _describer(request: Request) -> Describer:
    describer: Describer = request.app.state.describe
    return describer


def _current_key(call: ParkedCall) -> str:
    """The call's parkedCallKey as it is made now (RFC 8785); a call parked before keys
    were made that way keeps its stored key only if its input has no such form."""
    try:
        return parked_call_key(call.tool_name, call.input)
    except NotPlainJSONError:
        return call.key


def call_view(chat_id: str, call: ParkedCall, describer: Describer) -> dict[str, Any]:
    view: dict[str, Any] = {
        "toolCallId": call.tool_call_id,
        "toolName": call.tool_name,
        "kind": call.kind,
        "status": call.status,
        "input": call.input,
        "parkedCallKey": _current_key(call),
        "messageId": call.message_id,
        "widget": describer(chat_id, call),
    }
    if call.approval_id is not None:
        view["approvalId"] = call.approval_id
    if call.deadline is not None:
        view["deadline"] = int(call.deadline * 1000)
    if call.outcome is not None:
        view["outcome"] = dict(call.outcome)
    if call.for_others:  # who answers it (docs/security.md, "Approvals by others")
        view["approvers"] = call.approvers
        view["selfApproval"] = call.self_approval
        if call.requester is not None:
            view["requestedBy"] = call.requester
    return view


def client_of(request: Request, principal: str) -> str:
    """Who a request counts as for admission's reserve (transport/api/admission.py): its
    principal, or, for an anonymous session (anyone can mint many), its client address."""
    if isinstance(request.app.state.authenticator, SessionAuthenticator):
        proxies: TrustedProxies = request.app.state.proxies
        return "address " + proxies.client_of(request)
    return principal


def streamed(request: Request, principal: str, response: Response) -> Response:
    """``response`` (an SSE stream) if this worker admits one more stream, else 429."""
    admission: Admission = request.app.state.admission
    client = client_of(request, principal)
    return AdmittedStream(response, admission.admit("stream", principal, client))


async def run_streamed(
    request: Request,
    principal: str,
    chat_id: str,
    start: Callable[[], Awaitable[Run]],
    respond: Callable[[Run], Response] | None = None,
) -> Response:
    """Start a run (``start``: a turn or a resume) and stream it (``respond``: the wire's
    response for the run; the AI SDK stream by default), if this worker admits one more
    run and one more stream for ``principal``; else 429, with nothing started."""
    admission: Admission = request.app.state.admission
    client = client_of(request, principal)
    release_run = admission.admit("run", principal, client)
    try:
        release_stream = admission.admit("stream", principal, client)
    except HTTPError:
        release_run()
        raise
    try:
        run = await start()
    except BaseException:
        release_run()
        release_stream()
        raise
    if run.task is None:
        release_run()
    else:
        run.task.add_done_callback(lambda _: release_run())
    response: Response
    if respond is None:
        response = stream_response(chat_id, runner_of(request), run, _describer(request))
    else:
        response = respond(run)
    return AdmittedStream(response, release_stream)


async def post_chat(request: Request) -> Response:
    """AI SDK chat endpoint: a new user message starts a turn; answers settle parked
    calls and, once all are settled, resume the run in the same response."""
    principal = principal_of(request)
    body = await read_json(request)
    post = parse_chat_post(body)
    check_chat_id(post.chat_id)
    _check_body_ids(post, body)
    runner = runner_of(request)
    if post.user_text is None:
        return await _answer_and_resume(request, principal, post)
    template = None
    if isinstance(body, dict) and body.get("agentTemplate") is not None:
        # the playground's working copy (build kit on, or edits not yet committed)
        agents = getattr(request.app.state, "agents", None)
        if agents is None or not agents.editable:
            raise HTTPError(
                403, "agent_editing_off", "agent editing (and working copies) is off here"
            )
        # anyone may run one in their own chats; only an editor's may reach further
        # on the server than the committed agent (transport/api/agent.py)
        committed = await agents.current_template()
        template = working_template(
            body["agentTemplate"],
            committed,
            editor=is_editor(request, principal),
            seed=agents.seed,
        )
    user_text = post.user_text
    return await run_streamed(
        request,
        principal,
        post.chat_id,
        lambda: runner.start_turn(
            post.chat_id,
            principal,
            user_text,
            user_message_id=post.user_message_id,
            template=template,
            # answers that come with a new message settle what they answer; the turn
            # supersedes what is still pending
            answers=post.answers,
            roles=roles_of(request),
        ),
    )


class _StillPending(Exception):
    """Answers left calls of the chat pending: there is no run to stream."""

    def __init__(self, report: AnswerReport) -> None:
        self.report = report


async def _answer_and_resume(request: Request, principal: str, post: ChatPost) -> Response:
    """Answers alone: settle what they answer and, once every parked call is settled (by
    these answers, or earlier: the settle endpoint, the server itself), stream the
    resumed run, which continues with the stored outcomes."""
    runner = runner_of(request)

    async def start() -> Run:
        report, run = await runner.answer_and_resume(
            post.chat_id, principal, post.answers, roles=roles_of(request)
        )
        if run is None:
            raise _StillPending(report)
        return run

    try:
        return await run_streamed(request, principal, post.chat_id, start)
    except _StillPending as still:
        settled, pending = still.report.settled, still.report.pending
    except NothingToResumeError as exc:
        raise HTTPError(409, "nothing_to_resume", str(exc)) from None
    if not settled:
        raise HTTPError(
            409,
            "no_pending_call_answered",
            "none of the answers matches a call this chat has pending; nothing was changed",
        )
    return JSONResponse({"settled": list(settled), "pending": pending}, status_code=202)


async def get_chat(request: Request) -> Response:
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    record = await runner_of(request).chat(chat_id, principal)
    calls = [call_view(chat_id, c, _describer(request)) for c in record.calls]
    return JSONResponse(
        {
            "id": chat_id,
            "state": record.meta.get("state", "idle"),
            "messageId": record.meta.get("message_id"),
            "messages": chat_messages(record, lambda c: _describer(request)(chat_id, c)),
            "calls": calls,
        }
    )


def _message_of(
    record: ChatRecord, chat_id: str, message_id: str, describer: Describer
) -> dict[str, Any] | None:
    messages = chat_messages(record, lambda c: describer(chat_id, c))
    return next((m for m in reversed(messages) if m["id"] == message_id), None)


async def resume_stream(request: Request) -> Response:
    """AI SDK ``resumeStream()``: the current assistant message from its start, then live.

    - A run in progress: the parts of its message stored before the run began are
      rebuilt, then the run is followed in the event log from its first entry (also
      when another worker runs it).
    - A parked chat: its message is rebuilt, with the pending calls and their widgets,
      and stays replayable until the answer arrives.
    - A run whose worker died: what was stored, then an error saying it was interrupted.
    - A finished message: replayable for ``stream_grace_s``; after that, 204.
    """
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    runner = runner_of(request)
    settings: Settings = request.app.state.settings
    record = await runner.chat(chat_id, principal)
    meta = record.meta
    message_id = meta.get("message_id")
    if not message_id:
        return Response(status_code=204)
    state = meta.get("state")
    now_ms = runner.clock() * 1000
    if state == "running" and float(meta.get("lease_until", "0")) >= now_ms:
        start_id = meta.get("run_start") or await run_start(runner, chat_id)
        if start_id is not None:
            stored = int(meta.get("run_hist", len(record.entries)))
            earlier = ChatRecord(meta=meta, entries=record.entries[:stored], calls=record.calls)
            message = _message_of(earlier, chat_id, message_id, _describer(request))
            # A new message: the run's own start opens it. Else its earlier parts are
            # rebuilt and the run's own start is skipped.
            prefix = [] if message is None else replay_message(message, None, rerun=rerun(earlier))
            return streamed(
                request,
                principal,
                follow_response(
                    chat_id,
                    runner,
                    prefix,
                    start_id,
                    skip_start=message is not None,
                    describer=_describer(request),
                ),
            )
    message = _message_of(record, chat_id, message_id, _describer(request))
    if message is None:
        return Response(status_code=204)
    if state == "parked":
        return replay_response(replay_message(message, "tool-calls"))
    if state == "running":  # its worker died, or the run has not logged anything yet
        chunks = [*replay_message(message, None), ErrorChunk(error_text=INTERRUPTED).to_dict()]
        return replay_response(chunks)
    finished_at = float(meta.get("finished_at", "0"))
    if now_ms - finished_at <= settings.stream_grace_s * 1000:
        return replay_response(replay_message(message, meta.get("last_finish") or "stop"))
    return Response(status_code=204)


def rerun(record: ChatRecord) -> frozenset[str]:
    """The calls of ``record`` the run that follows it sends an output for, though their
    parts hold an answer: tools that parked asking for input (an MCP form), settled and
    not yet run again. Their answer is the person's, not the call's output."""
    done = {e["id"] for e in record.entries if e["t"] == "result"}
    return frozenset(
        c.tool_call_id
        for c in record.calls
        if c.continuation is not None and c.outcome is not None and c.tool_call_id not in done
    )


async def run_start(runner: Runner, chat_id: str) -> str | None:
    """A run that has just been claimed logs its first event within milliseconds."""
    for _ in range(40):
        info = await runner.store.run_info(chat_keys(chat_id))
        if info.get("state") != "running":
            return None
        if "run_start" in info:
            return info["run_start"]
        await asyncio.sleep(0.025)
    return None


async def stop_chat(request: Request) -> Response:
    """Stop the chat's running run. It keeps the partial answer and finishes cleanly;
    unlike a disconnect, which never stops a run."""
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    if not await runner_of(request).stop(chat_id, principal):
        raise HTTPError(409, "not_running", "no run of this chat is running")
    return JSONResponse({"stopping": True}, status_code=202)


async def get_call(request: Request) -> Response:
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    # an approver reads an approval it may answer, as its owner does; the chat stays
    # the owner's alone (GET /api/chats/{chat} is 404 to anyone else)
    call = await runner_of(request).call(
        chat_id, principal, _call_id(request), roles=roles_of(request)
    )
    return JSONResponse(call_view(chat_id, call, _describer(request)))


class SessionRequest(BaseModel):
    """No body, or an empty JSON object (``POST /api/sessions`` validates with it)."""

    model_config = ConfigDict(extra="forbid")


class SettleBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    outcome: str
    output: Any = None
    message: str | None = None
    reason: str | None = None
    input: Any = None


async def settle_call(request: Request) -> Response:
    """Settle one parked call without resuming. 200 with the recorded outcome (also for
    an identical repeat); 409 with the winner's outcome when it differs. An approval
    left to someone else is answered by a principal its policy admits (an approver),
    and refused to its requester (403 ``approval_by_others``)."""
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    call_id = _call_id(request)
    raw = await read_json(request)
    try:
        SettleBody.model_validate(raw)
    except ValidationError as exc:
        raise invalid_body(exc) from None
    result = await runner_of(request).settle(
        chat_id, principal, call_id, raw, by="client", roles=roles_of(request)
    )
    body = call_view(chat_id, result.call, _describer(request))
    body["fresh"] = result.fresh
    if result.pending is not None:
        body["pendingInChat"] = result.pending
    return JSONResponse(body)


async def answer_live(request: Request) -> Response:
    """Answer a live question a running call put to the chat's person (an older MCP
    server's form during the call; runner/engine/live.py). 200 with the answer recorded
    (also for the same answer again); 404 for no such question of this user and call;
    422 for an answer that is not one (its content checked against the form); 409 once
    another answer won or the wait is over."""
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    call_id = _call_id(request)
    live_id = str(request.path_params["live_id"])
    raw = await read_json(request, limit=_LIVE_BODY_MAX)
    answer = await runner_of(request).answer_live(chat_id, principal, call_id, live_id, raw)
    return JSONResponse({"liveId": live_id, "toolCallId": call_id, "answer": dict(answer)})


async def resume_chat(request: Request) -> Response:
    """Resume a chat whose parked calls are all settled; the response is the stream."""
    principal = principal_of(request)
    chat_id = chat_id_of(request)
    runner = runner_of(request)
    return await run_streamed(
        request, principal, chat_id, lambda: runner.resume(chat_id, principal)
    )


async def create_session(request: Request) -> Response:
    """Issue a session: a signed token, as a cookie and in the body (for bearer use).
    A request that already carries a valid session keeps its principal."""
    authenticator = request.app.state.authenticator
    settings: Settings = request.app.state.settings
    if not isinstance(authenticator, SessionAuthenticator):
        raise HTTPError(
            404,
            "not_found",
            "this server does not issue sessions: it authenticates requests another way "
            "(auth setting: a bearer JWT or a proxy's header; docs/security.md)",
        )
    throttle: SessionThrottle | None = request.app.state.session_throttle
    if throttle is not None:
        wait = throttle.take(request.app.state.proxies.client_of(request))
        if wait > 0:
            raise HTTPError(
                429,
                "too_many_sessions",
                "too many sessions from this address; try again later",
                headers={"retry-after": str(max(1, math.ceil(wait)))},
            )
    if request.headers.get("content-length") not in (None, "0"):
        try:
            SessionRequest.model_validate(await read_json(request))
        except ValidationError:
            raise HTTPError(422, "invalid_body", "send an empty JSON object or no body") from None
    current = authenticator.authenticate(request)
    address = request.app.state.proxies.client_of(request)  # (as the throttle's)
    principal, token = authenticator.issue(current, address=address)
    response = JSONResponse(
        {"principal": principal, "token": token, "expiresIn": authenticator.max_age_s},
        status_code=201,
    )
    response.set_cookie(
        authenticator.cookie_name,
        token,
        max_age=authenticator.max_age_s,
        httponly=True,
        samesite="lax",
        secure=settings.cookie_secure,
        # the app's own path: "/", or the prefix a host application mounts it at
        path=request.scope.get("root_path", "").rstrip("/") or "/",
    )
    return response


def api_routes() -> list[Route]:
    return [
        Route("/api/chat", post_chat, methods=["POST"]),
        Route("/api/chat/{chat_id}/stream", resume_stream, methods=["GET"]),
        Route("/api/chats/{chat_id}", get_chat, methods=["GET"]),
        Route("/api/chats/{chat_id}/calls/{call_id}", get_call, methods=["GET"]),
        Route("/api/chats/{chat_id}/calls/{call_id}", settle_call, methods=["POST"]),
        Route("/api/chats/{chat_id}/calls/{call_id}/live/{live_id}", answer_live, methods=["POST"]),
        Route("/api/chats/{chat_id}/resume", resume_chat, methods=["POST"]),
        Route("/api/chats/{chat_id}/stop", stop_chat, methods=["POST"]),
        # the audit trails (transport/api/audit.py)
        Route("/api/chats/{chat_id}/audit", get_chat_audit, methods=["GET"]),
        Route("/api/connections/audit", get_connection_audit, methods=["GET"]),
        Route("/api/sessions", create_session, methods=["POST"]),
    ]
