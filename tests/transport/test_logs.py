"""Structured logs: the JSON and text formatters, the ``log_format`` setting, and a real
``parkway serve --log-format json`` whose every log line is JSON and names no secret."""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis

from parkway.runner.ops.logcontext import bound, principal_hash
from parkway.transport.logs import (
    QUIET_LOGGERS,
    JsonFormatter,
    TextFormatter,
    logging_config,
    resolve_format,
)
from parkway.transport.settings import Settings, SettingsError
from tests.helpers.connect_rig import TOKEN_KEY, Browser, connection_key, stored_tokens
from tests.helpers.log_rig import Served, consent, tool_call
from tests.helpers.support import sse_chunks, user_message

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def record(
    message: Any,
    *args: Any,
    name: str = "parkway.test",
    level: int = logging.INFO,
    exc_info: Any = None,
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 42, message, args or None, exc_info)


def as_json(line: str) -> dict[str, Any]:
    assert "\n" not in line, line
    entry = json.loads(line)
    assert isinstance(entry, dict)
    return entry


# -- the formatters ---------------------------------------------------------------------


def test_a_json_line_has_the_fields_and_the_bound_context() -> None:
    """A log collector indexes lines by these fields; the principal shows only as its
    hash, so the log joins a principal's lines without naming who owns the chats."""
    with bound(chat_id="c-1", run_id="r-1", call_id="call-1", principal="usr_alice"):
        line = JsonFormatter().format(record("parked %d call(s)", 2))
    entry = as_json(line)
    assert TS.fullmatch(entry["ts"]), entry
    assert entry["level"] == "info"
    assert entry["logger"] == "parkway.test"
    assert entry["message"] == "parked 2 call(s)"
    assert entry["chat_id"] == "c-1" and entry["run_id"] == "r-1" and entry["call_id"] == "call-1"
    assert entry["principal"] == principal_hash("usr_alice")
    assert "usr_alice" not in line
    assert "exc" not in entry


def test_a_json_line_without_context_has_no_context_fields() -> None:
    entry = as_json(JsonFormatter().format(record("hello")))
    assert not {"chat_id", "run_id", "call_id", "principal"} & entry.keys()


def test_the_timestamp_is_utc_with_milliseconds() -> None:
    """RFC 3339 in UTC, whatever the machine's zone: lines from several hosts sort."""
    made = record("x")
    made.created = 1_700_000_000.25
    made.msecs = 250.0
    assert as_json(JsonFormatter().format(made))["ts"] == "2023-11-14T22:13:20.250Z"


def test_an_error_carries_its_traceback_in_exc_on_one_line() -> None:
    """A traceback spread over lines would break a line-per-record reader."""
    said = "".join(["bo", "om"])  # the message's text is nowhere in the source lines
    try:
        raise ValueError(said)
    except ValueError:
        made = record("run failed (ref %s)", "ab12", level=logging.ERROR, exc_info=sys.exc_info())
    line = JsonFormatter().format(made)
    entry = as_json(line)
    assert entry["level"] == "error"
    assert entry["message"] == "run failed (ref ab12)"
    assert entry["exc"].startswith("Traceback (most recent call last):")
    assert entry["exc"].rstrip().endswith("ValueError: [message withheld]")
    assert said not in line


def test_a_traceback_withholds_every_message_and_keeps_the_frames() -> None:
    """An exception's message may hold what the code was handling: a tool's input, a
    model's text, pydantic's ``input_value``. A traceback keeps where it happened and
    what kind of error it was, for the cause and the context, and inside a group."""

    def tool(city: str) -> None:
        raise ValueError(f"no forecast for {city}")

    # values made at run time: the source lines a traceback shows do not hold them
    city, key = (f"secret-{secrets.token_hex(6)}" for _ in range(2))
    try:
        try:
            tool(city)
        except ValueError as exc:
            raise RuntimeError(f"while handling {city}") from exc
    except RuntimeError as exc:
        group = ExceptionGroup(f"in a group: {city}", [exc, KeyError(key)])
    try:
        raise group
    except ExceptionGroup:
        made = record("tool failed", level=logging.ERROR, exc_info=sys.exc_info())
    for text in (JsonFormatter().format(made), TextFormatter().format(made)):
        assert city not in text and key not in text
    made.exc_text = None
    text = TextFormatter().format(made)
    assert "ValueError: [message withheld]" in text
    assert "RuntimeError: [message withheld]" in text
    assert "KeyError: [message withheld]" in text
    assert "ExceptionGroup: [message withheld]" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert 'raise ValueError(f"no forecast for {city}")' in text  # the frames' source lines
    assert "in tool" in text


def test_non_ascii_text_round_trips_on_an_ascii_line() -> None:
    """Escaped, the line is valid on any stream encoding; a reader gets the text back,
    lone surrogates (undecodable file names) included."""
    text = "café ☂ 東京 \udcff"
    line = JsonFormatter().format(record("city %s", text))
    assert line.isascii()
    assert as_json(line)["message"] == f"city {text}"


def test_a_record_whose_args_do_not_fit_still_makes_one_line() -> None:
    """``logging`` would print its own traceback on stderr: no JSON reader expects it."""
    for made in (record("%d calls", "many"), record("%s and %s", "one"), record("{}", 1)):
        entry = as_json(JsonFormatter().format(made))
        assert entry["message"] == made.msg
        assert entry["format_error"].startswith("TypeError")
        assert __file__ in entry["format_error"]
        text = TextFormatter().format(made)
        assert made.msg in text and "TypeError" in text


def test_an_unformattable_record_through_a_handler_writes_no_logging_error() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("parkway.test.unformattable")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("%d", "x")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    [line] = stream.getvalue().splitlines()
    assert as_json(line)["message"] == "%d"


def test_a_message_that_is_not_a_string_is_printed() -> None:
    assert as_json(JsonFormatter().format(record({"k": 1})))["message"] == "{'k': 1}"


def access(path: str, status: int = 200) -> logging.LogRecord:
    args = ("127.0.0.1:5000", "GET", path, "1.1", status)
    return record('%s - "%s %s HTTP/%s" %d', *args, name="uvicorn.access")


def test_an_access_line_drops_the_query_in_json_and_redacts_it_in_text() -> None:
    """A connect callback's query holds the authorization code and state; the demo
    provider's authorize link its state; a start link its one-time token."""
    path = "/connect/demo/callback?code=SECRET-CODE&state=SECRET-STATE"
    made = access(path)
    made.duration_ms = 3.5
    entry = as_json(JsonFormatter().format(made))
    assert entry["method"] == "GET"
    assert entry["path"] == "/connect/demo/callback"
    assert entry["status"] == 200
    assert entry["client"] == "127.0.0.1:5000"
    assert entry["duration_ms"] == 3.5
    assert entry["message"] == "GET /connect/demo/callback 200"
    text = TextFormatter().format(access(path))
    assert text.endswith('127.0.0.1:5000 - "GET /connect/demo/callback?[redacted] HTTP/1.1" 200')
    for formatted in (json.dumps(entry), text):
        assert "SECRET" not in formatted


def test_an_access_line_keeps_a_path_without_query() -> None:
    text = TextFormatter().format(access("/api/chats/c-1", 404))
    assert text.endswith('"GET /api/chats/c-1 HTTP/1.1" 404')
    assert (
        as_json(JsonFormatter().format(access("/api/chats/c-1", 404)))["path"] == "/api/chats/c-1"
    )


def test_text_is_todays_format_with_the_bound_fields_appended() -> None:
    plain = TextFormatter().format(record("hello %s", "there"))
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO parkway\.test: hello there", plain
    )
    with bound(chat_id="c-1", principal="usr_bob"):
        line = TextFormatter().format(record("hello"))
    assert line.endswith(f"parkway.test: hello chat_id=c-1 principal={principal_hash('usr_bob')}")
    assert "usr_bob" not in line


def test_text_puts_the_traceback_below_the_line() -> None:
    try:
        raise KeyError("k")
    except KeyError:
        made = record("failed", level=logging.ERROR, exc_info=sys.exc_info())
    with bound(run_id="r-9"):
        first, *rest = TextFormatter().format(made).splitlines()
    assert first.endswith("ERROR parkway.test: failed run_id=r-9")
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "KeyError: [message withheld]"


# -- the setting and the configuration -------------------------------------------------


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_auto_is_text_on_a_terminal_and_json_otherwise() -> None:
    assert resolve_format("auto", Stream(tty=True)) == "text"
    assert resolve_format("auto", Stream(tty=False)) == "json"
    assert resolve_format("json", Stream(tty=True)) == "json"
    assert resolve_format("text", Stream(tty=False)) == "text"


def test_log_format_is_read_from_the_flag_and_the_environment() -> None:
    assert Settings().log_format == "auto"
    assert Settings.from_sources(environ={"PARKWAY_LOG_FORMAT": "JSON"}).log_format == "json"
    flags = {"log_format": "text"}
    assert Settings.from_sources(flags, {"PARKWAY_LOG_FORMAT": "json"}).log_format == "text"
    with pytest.raises(SettingsError, match=r"log_format \(--log-format, PARKWAY_LOG_FORMAT\)"):
        Settings.from_sources(environ={"PARKWAY_LOG_FORMAT": "xml"})


def test_the_config_sends_uvicorn_to_the_one_handler_and_quiets_payload_loggers() -> None:
    """uvicorn's own handlers would print its colourised format on another stream. The
    libraries that echo payloads stay at WARNING at every level, debug included:
    sse-starlette logs each chunk of a stream, the HTTP clients full URLs (a key in a
    query) and headers, the demo OAuth server issued tokens, the model SDKs the
    conversation."""
    config = logging_config("json", "info")
    assert config["root"] == {"level": "INFO", "handlers": ["stderr"]}
    assert config["formatters"]["parkway"]["()"] == "parkway.transport.logs.JsonFormatter"
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        assert config["loggers"][name]["handlers"] == []
        assert config["loggers"][name]["propagate"] is True
    assert config["disable_existing_loggers"] is False
    payload_loggers = {"sse_starlette", "httpx", "httpx2", "httpcore", "httpcore2", "authlib"}
    assert payload_loggers | {"anthropic", "openai", "google_genai"} <= set(QUIET_LOGGERS)
    for level in ("debug", "info", "warning"):
        loggers = logging_config("text", level)["loggers"]
        assert {loggers[name]["level"] for name in QUIET_LOGGERS} == {"WARNING"}, level
    assert logging_config("text", "error")["loggers"]["sse_starlette"]["level"] == "ERROR"


def test_debug_is_parkways_own_and_no_library_logs_below_info() -> None:
    """``--log-level debug`` shows Parkway's and uvicorn's debug lines; a library's
    DEBUG lines, where payloads get dumped, stay off whichever library it is."""
    config = logging_config("json", "debug")
    assert config["root"]["level"] == "INFO"
    assert config["loggers"]["parkway"]["level"] == "DEBUG"
    assert config["loggers"]["uvicorn"]["level"] == "DEBUG"
    assert logging_config("json", "warning")["root"]["level"] == "WARNING"


# -- a real server ------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served(tmp_path)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def invalid_http_request(port: int) -> None:
    """Bytes that are no HTTP request: uvicorn answers 400 and logs a warning."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"NOT HTTP AT ALL\x00\r\n\r\n")
        conn.recv(1024)


@pytest.mark.slow
def test_serve_logs_json_lines_with_no_secret_in_them(served: Served) -> None:
    """An operator ships these lines to a log store that many people read: every line
    must parse, requests must be traceable (access lines, the principal's hash), and no
    session token, key, OAuth code, state or token, message text or tool output may be
    in them at INFO."""
    message_text = "my private words: orchid-lantern-5521"
    choice = "Zanzibar-quartz-7730"
    browser = Browser(served.base_url)
    secrets: dict[str, str] = {"message text": message_text, "tool output": choice}
    try:
        session = browser.post("/api/sessions")
        assert session.status_code == 201, session.text
        principal = session.json()["principal"]
        secrets["session token"] = session.json()["token"]
        secrets["principal"] = principal

        # a turn that parks (choose_option), settled with a distinctive output, resumed
        # into the next park (request_connection)
        body = {
            "id": "logs-1",
            "messages": [user_message(message_text)],
            "trigger": "submit-message",
        }
        first = browser.post("/api/chat", json=body)
        assert first.status_code == 200, first.text
        choose = tool_call(sse_chunks(first.text), "choose_option")
        settled = browser.post(
            f"/api/chats/logs-1/calls/{choose}",
            json={"outcome": "output", "output": {"choice": choice}},
        )
        assert settled.status_code == 200, settled.text
        resumed = browser.post("/api/chats/logs-1/resume")
        assert resumed.status_code == 200, resumed.text
        assert choice in resumed.text  # the output reached the model, and so the stream
        connect = tool_call(sse_chunks(resumed.text), "request_connection")

        # the demo OAuth connect flow, through its callback
        start_url = browser.call("logs-1", connect)["widget"]["startUrl"]
        secrets["start token"] = parse_qs(urlsplit(start_url).query)["token"][0]
        start = browser.get(start_url)
        assert start.status_code == 303, start.text
        callback_url, consent_id = consent(browser, start.headers["location"])
        secrets["consent id"] = consent_id
        query = parse_qs(urlsplit(callback_url).query)
        secrets["code"], secrets["state"] = query["code"][0], query["state"][0]
        assert browser.get(callback_url).status_code == 200
        outcome = browser.call("logs-1", connect)["outcome"]
        assert outcome["output"]["connected"] is True, outcome

        # the stored tokens, read from the server's own Redis
        store = redis.Redis.from_url(f"unix://{served.folder / 'data' / 'redis.sock'}")
        try:
            connection_id = outcome["output"]["connection_id"]
            raw = store.hgetall(connection_key(principal, connection_id))
        finally:
            store.close()
        tokens = stored_tokens(raw, principal, connection_id)
        secrets["access token"] = tokens["access_token"]
        secrets["refresh token"] = tokens["refresh_token"]

        # errors: a chat that does not exist, a forged bearer token, a request that is
        # no HTTP
        assert browser.get("/api/chats/no-such-chat").status_code == 404
        forged = httpx.get(
            f"{served.base_url}/api/chats/logs-1",
            headers={"authorization": "Bearer forged-token-value-9931"},
        )
        assert forged.status_code == 401
        secrets["forged token"] = "forged-token-value-9931"
        invalid_http_request(served.port)
    finally:
        browser.close()
        served.stop()
    secrets["session secret"] = (served.folder / "data" / "secret.key").read_text().strip()
    secrets["token key"] = TOKEN_KEY

    out = served.stdout.read_text()
    err = served.stderr.read_text()
    # stdout: the startup line only (scripts wait for it); the log is stderr
    assert out.splitlines() == [
        f"Parkway is serving the built-in demo agent at {served.base_url}/ (Redis: embedded (data))"
    ]
    entries = [as_json(line) for line in err.splitlines()]
    for entry in entries:
        assert TS.fullmatch(entry["ts"]) and entry["level"] and entry["logger"], entry
        assert isinstance(entry["message"], str), entry
    # every secret, in the text as written and in the decoded values
    decoded = "\n".join(json.dumps(e, ensure_ascii=False) for e in entries)
    for what, value in secrets.items():
        assert value not in err and value not in decoded and value not in out, what

    lines = {
        (e["method"], e["path"], e["status"]): e for e in entries if e["logger"] == "uvicorn.access"
    }
    for key in [
        ("POST", "/api/sessions", 201),
        ("POST", "/api/chat", 200),
        ("POST", f"/api/chats/logs-1/calls/{choose}", 200),
        ("POST", "/api/chats/logs-1/resume", 200),
        ("GET", "/connect/demo/start", 303),
        ("GET", "/connect/demo/callback", 200),
        ("POST", "/demo-oauth/token", 200),  # Parkway's own token exchange
        ("GET", "/api/chats/no-such-chat", 404),
        ("GET", "/api/chats/logs-1", 401),
    ]:
        assert key in lines, (key, sorted(lines))
        assert lines[key]["client"].startswith("127.0.0.1:")
        assert lines[key]["duration_ms"] >= 0
    # the principal, as its hash, on the lines of the requests it authenticated
    for key in [("POST", "/api/chat", 200), ("GET", "/api/chats/no-such-chat", 404)]:
        assert lines[key].get("principal") == principal_hash(principal)
    assert "principal" not in lines[("GET", "/api/chats/logs-1", 401)]
    # the HTTP clients' request lines name full URLs: not at INFO
    assert not [e for e in entries if e["logger"].startswith(("httpx", "httpcore"))]
    # uvicorn's own lines, in the same format
    uvicorn_lines = [e["message"] for e in entries if e["logger"] == "uvicorn.error"]
    assert any(m.startswith("Started server process") for m in uvicorn_lines), uvicorn_lines
    assert "Invalid HTTP request received." in uvicorn_lines
