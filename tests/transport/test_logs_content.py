"""What a log never carries, at any level: a real ``parkway serve --log-level debug``
taken through the demo agent's whole tour over HTTP (a chat turn, a client tool's
answer, a server tool's input and output, the OAuth connect flow, an approval with
edited input, a self-approved ``execute_code`` whose program prints), and its log
searched for every value the tour put through it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis

from tests.helpers.connect_rig import TOKEN_KEY, Browser, connection_key, stored_tokens
from tests.helpers.log_rig import Served, consent, tool_call
from tests.helpers.support import sse_chunks, user_message

CHAT = "content-1"


def marker(what: str) -> str:
    """A value found nowhere but where the tour puts it."""
    return f"{what}-{secrets.token_hex(8)}"


@pytest.fixture
def debug_served(tmp_path: Path) -> Iterator[Served]:
    # unconfined: the program runs on any host, bubblewrap or not; the log is the same
    server = Served(tmp_path, log_level="debug", environ={"PARKWAY_SANDBOX": "unconfined"})
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_a_debug_log_of_the_whole_tour_carries_no_content_and_no_credential(
    debug_served: Served,
) -> None:
    """Operators turn on debug to chase a problem and ship the lines to a store many
    people read. Whatever the level, a line may say what happened (which route, which
    chat, which call, how it ended), never what was said, sent or returned: no message
    text, tool input or output, program output, session token or cookie, bearer token,
    OAuth code, state or token, nor a key."""
    served = debug_served
    said = {
        "user text": marker("user-words"),
        "client tool output, then a server tool's input and output": marker("city"),
        "edited approval input, then the tool's output": marker("report-title"),
        "edited approval body": marker("report-body"),
        "program stdout": marker("printed"),
        "program result": marker("returned"),
        "forged bearer token": marker("forged-bearer"),
    }
    program = f'print("{said["program stdout"]}")\nresult({{"seen": "{said["program result"]}"}})\n'
    browser = Browser(served.base_url)
    try:
        session = browser.post("/api/sessions")
        assert session.status_code == 201, session.text
        principal = session.json()["principal"]
        said["session token"] = session.json()["token"]
        [cookie] = browser.http.cookies.values()
        said["session cookie"] = cookie

        # 1. a chat turn: it parks choose_option
        body = {
            "id": CHAT,
            "messages": [user_message(said["user text"])],
            "trigger": "submit-message",
        }
        first = browser.post("/api/chat", json=body)
        assert first.status_code == 200, first.text
        choose = tool_call(sse_chunks(first.text), "choose_option")

        # 2. the client tool's output becomes get_weather's input and output
        city = said["client tool output, then a server tool's input and output"]
        settled = browser.post(
            f"/api/chats/{CHAT}/calls/{choose}",
            json={"outcome": "output", "output": {"choice": city}},
        )
        assert settled.status_code == 200, settled.text
        resumed = browser.post(f"/api/chats/{CHAT}/resume")
        assert resumed.status_code == 200, resumed.text
        weather = [
            c["output"]
            for c in sse_chunks(resumed.text)
            if c["type"] == "tool-output-available" and c["output"].get("city") == city
        ]
        assert weather, resumed.text  # the value went through the tool, and the stream
        connect = tool_call(sse_chunks(resumed.text), "request_connection")

        # 3. the demo OAuth connect flow, through its callback
        start_url = browser.call(CHAT, connect)["widget"]["startUrl"]
        said["connect start token"] = parse_qs(urlsplit(start_url).query)["token"][0]
        start = browser.get(start_url)
        assert start.status_code == 303, start.text
        callback_url, said["consent id"] = consent(browser, start.headers["location"])
        query = parse_qs(urlsplit(callback_url).query)
        said["OAuth code"], said["OAuth state"] = query["code"][0], query["state"][0]
        assert browser.get(callback_url).status_code == 200
        outcome = browser.call(CHAT, connect)["outcome"]
        assert outcome["output"]["connected"] is True, outcome

        # 4. the report's approval, with edited input; the tool echoes its title
        connected = browser.post(f"/api/chats/{CHAT}/resume")
        assert connected.status_code == 200, connected.text
        report = tool_call(sse_chunks(connected.text), "publish_report")
        edited = {
            "title": said["edited approval input, then the tool's output"],
            "body": said["edited approval body"],
        }
        approved = browser.post(
            f"/api/chats/{CHAT}/calls/{report}", json={"outcome": "approved", "input": edited}
        )
        assert approved.status_code == 200, approved.text

        # 5. published; get_sales, then execute_code, approved by the requester with
        # a program of the test's own
        published = browser.post(f"/api/chats/{CHAT}/resume")
        assert published.status_code == 200, published.text
        assert edited["title"] in published.text
        code = tool_call(sse_chunks(published.text), "execute_code")
        approved = browser.post(
            f"/api/chats/{CHAT}/calls/{code}",
            json={"outcome": "approved", "input": {"code": program}},
        )
        assert approved.status_code == 200, approved.text
        ran = browser.post(f"/api/chats/{CHAT}/resume")
        assert ran.status_code == 200, ran.text
        [run] = [
            c["output"]
            for c in sse_chunks(ran.text)
            if c["type"] == "tool-output-available" and c["toolCallId"] == code
        ]
        assert run["status"] == "ok", run
        assert said["program stdout"] in run["stdout"]
        assert run["result"] == {"seen": said["program result"]}

        # 6. the chat read back with the session as a bearer token, a forged one refused,
        # the stream resumed (nothing to resume)
        bearer = {"authorization": f"Bearer {said['session token']}"}
        view = httpx.get(f"{served.base_url}/api/chats/{CHAT}", headers=bearer)
        assert view.status_code == 200 and said["program stdout"] in view.text
        forged = {"authorization": f"Bearer {said['forged bearer token']}"}
        assert httpx.get(f"{served.base_url}/api/chats/{CHAT}", headers=forged).status_code == 401
        assert browser.get(f"/api/chat/{CHAT}/stream").status_code in {200, 204}

        # the tokens the connection stored, read from the server's own Redis
        store = redis.Redis.from_url(f"unix://{served.folder / 'data' / 'redis.sock'}")
        try:
            connection_id = outcome["output"]["connection_id"]
            raw = store.hgetall(connection_key(principal, connection_id))
        finally:
            store.close()
        tokens = stored_tokens(raw, principal, connection_id)
        said["access token"] = tokens["access_token"]
        said["refresh token"] = tokens["refresh_token"]
    finally:
        browser.close()
        served.stop()
    said["session secret"] = (served.folder / "data" / "secret.key").read_text().strip()
    said["token key"] = TOKEN_KEY

    log = served.stderr.read_text() + served.stdout.read_text()
    entries = [json.loads(line) for line in served.stderr.read_text().splitlines()]
    # the level took: Parkway's own debug lines are there (the demo provider's)
    assert [e for e in entries if e["level"] == "debug" and e["logger"].startswith("parkway.")]
    # every value, as written and as the JSON lines decode
    decoded = "\n".join(json.dumps(e, ensure_ascii=False) for e in entries)
    found = [what for what, value in said.items() if value in log or value in decoded]
    assert not found, f"the log carries: {', '.join(found)}"
