"""Outcomes of parked calls: which ones a caller may record, and what the model sees.

A client-tool outcome is ``output`` (validated against the tool's ``output_schema``),
``error``, ``declined``, ``cancelled`` or ``timeout``; an approval outcome is ``approved``
(optionally with edited input, where the tool allows edits) or ``denied``; either kind
may end ``cancelled`` (superseded by a new user message) or ``timeout`` (server
deadline). Every outcome maps to a definite tool result for the model.

Who may record what: the browser may settle a client tool with any outcome its schema
allows, except that for a connection (``result_style == "connection"``) it may only say
it did not connect, because a successful connection is recorded by the server's OAuth
callback alone. ``timeout`` is recorded only by the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from jsonschema import Draft202012Validator

from parkway.runner.canonical import canonical_json, is_plain_json
from parkway.runner.errors import InvalidOutcomeError, OutcomeNotAllowedError
from parkway.runner.parking import ParkedCall

__all__ = [
    "CONNECTION_RETRYABLE",
    "SUPERSEDED",
    "ResultStatus",
    "model_result",
    "normalize_outcome",
]

Settler = Literal["client", "server"]
ResultStatus = Literal["ok", "error", "denied"]

_CLIENT_OUTCOMES = {"output", "error", "declined", "cancelled", "timeout"}
_APPROVAL_OUTCOMES = {"approved", "denied", "cancelled", "timeout"}
_SERVER_ONLY = {"timeout"}
_CONNECTION_FAILURES = {"declined", "cancelled", "error"}
# What the server's OAuth callback may record besides: the provider refused
# (``access_denied``).
_SERVER_CONNECTION_FAILURES = _CONNECTION_FAILURES | {"denied"}
# Whether the model may offer the connection again at once. "declined" (the user said
# "not now") and "denied" (the user refused at the provider) are the user's answer;
# cancelled, error and timeout ended the attempt, not the wish.
CONNECTION_RETRYABLE = {
    "declined": False,
    "denied": False,
    "cancelled": True,
    "error": True,
    "timeout": True,
}
_MAX_TEXT = 2000
# The outcome of a call a new user message left pending (the turn's claim records it;
# a call read without an outcome is taken as this one).
SUPERSEDED = {"outcome": "cancelled", "reason": "superseded_by_user_message"}


def _text(raw: Mapping[str, Any], field: str, *, required: bool) -> str | None:
    value = raw.get(field)
    if value is None:
        if required:
            raise InvalidOutcomeError(f"outcome {raw.get('outcome')!r} needs a {field!r} string")
        return None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise InvalidOutcomeError(f"{field!r} must be a string of at most {_MAX_TEXT} characters")
    return value


def _only(raw: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(raw) - allowed - {"outcome"})
    if extra:
        raise InvalidOutcomeError(f"unexpected field(s) {', '.join(extra)} for this outcome")


def _schema_errors(schema: Mapping[str, Any], value: Any) -> str | None:
    error = next(iter(Draft202012Validator(schema).iter_errors(value)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"at {where}: {error.message}"


def _connection_output(output: Any, by: Settler) -> dict[str, Any]:
    if not isinstance(output, dict) or not isinstance(output.get("connected"), bool):
        raise InvalidOutcomeError("a connection result must be an object with 'connected'")
    if output["connected"]:
        if by == "client":
            raise OutcomeNotAllowedError(
                "a client cannot report a successful connection; the server's OAuth "
                "callback records it"
            )
        return {"outcome": "output", "output": output}
    reason = output.get("reason")
    allowed = _CONNECTION_FAILURES if by == "client" else _SERVER_CONNECTION_FAILURES
    if reason not in allowed:
        raise InvalidOutcomeError(
            f"a failed connection needs 'reason' of {', '.join(sorted(allowed))}"
        )
    settled: dict[str, Any] = {"outcome": reason}
    if reason == "error":
        settled["message"] = _text(output, "message", required=False) or "connection failed"
    return settled


def normalize_outcome(call: ParkedCall, raw: Any, *, by: Settler, max_bytes: int) -> dict[str, Any]:
    """Check ``raw`` against what ``call`` accepts from ``by`` and return its stored form.

    Raises :class:`InvalidOutcomeError` (the value is wrong) or
    :class:`OutcomeNotAllowedError` (this settler may not record it).
    """
    if not isinstance(raw, Mapping) or not isinstance(raw.get("outcome"), str):
        raise InvalidOutcomeError("an outcome is an object with an 'outcome' name")
    name = raw["outcome"]
    allowed = _CLIENT_OUTCOMES if call.kind == "client" else _APPROVAL_OUTCOMES
    if name not in allowed:
        raise InvalidOutcomeError(
            f"outcome {name!r} does not apply to a {call.kind} call "
            f"(use one of {', '.join(sorted(allowed))})"
        )
    if by == "client" and name in _SERVER_ONLY:
        raise OutcomeNotAllowedError(f"only the server records {name!r}")
    result: dict[str, Any] = {"outcome": name}
    if name == "output":
        _only(raw, {"output"})
        if "output" not in raw:
            raise InvalidOutcomeError("outcome 'output' needs an 'output' value")
        output = raw["output"]
        if not is_plain_json(output):
            raise InvalidOutcomeError("'output' must be plain JSON")
        if len(canonical_json(output).encode()) > max_bytes:
            raise InvalidOutcomeError(f"'output' is larger than {max_bytes} bytes")
        if call.result_style == "connection":
            return _connection_output(output, by)
        if call.output_schema is not None:
            problem = _schema_errors(call.output_schema, output)
            if problem:
                raise InvalidOutcomeError(
                    f"output does not match the tool's output_schema {problem}"
                )
        result["output"] = output
    elif name == "error":
        _only(raw, {"message"})
        result["message"] = _text(raw, "message", required=True)
    elif name in {"declined", "cancelled", "denied"}:
        _only(raw, {"reason"})
        reason = _text(raw, "reason", required=False)
        if reason is not None:
            result["reason"] = reason
    elif name == "approved":
        _only(raw, {"input"})
        if "input" in raw:
            edited = raw["input"]
            if not is_plain_json(edited):
                raise InvalidOutcomeError("'input' must be plain JSON")
            if canonical_json(edited) != canonical_json(call.input):
                if not call.allow_edits:
                    raise OutcomeNotAllowedError(
                        f"tool {call.tool_name!r} does not allow edits: approve the input as shown"
                    )
                if call.edit_schema is not None:
                    problem = _schema_errors(call.edit_schema, edited)
                    if problem:
                        raise InvalidOutcomeError(f"edited input is invalid {problem}")
                result["input"] = edited
    else:  # timeout
        _only(raw, set())
    return result


def model_result(call: ParkedCall, outcome: Mapping[str, Any]) -> tuple[Any, ResultStatus]:
    """The tool result the model sees for a settled client call or a refused approval.

    An approved approval has no result here: the runner executes the tool and its output
    is the result.
    """
    name = outcome["outcome"]
    reason = outcome.get("reason")
    if call.kind == "approval":
        return {"approved": False, "reason": reason or name}, "denied"
    if call.result_style == "connection":
        if name == "output":
            return outcome["output"], "ok"
        result: dict[str, Any] = {
            "connected": False,
            "reason": name,
            "retryable": CONNECTION_RETRYABLE.get(name, True),
        }
        if name == "error" and outcome.get("message"):
            result["message"] = outcome["message"]
        return result, "ok"
    if name == "output":
        return outcome["output"], "ok"
    if name == "error":
        return {"error": outcome["message"]}, "error"
    status_result: dict[str, Any] = {"status": name}
    if reason:
        status_result["reason"] = reason
    return status_result, "ok"
