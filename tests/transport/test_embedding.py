"""Parkway mounted in a host application, as docs/embedding.md shows it.

The examples are the page's own code blocks, run as written (each block whose first line
names a host module) and driven over HTTP: through real uvicorn where a turn streams or
the OAuth flow calls back into the server, in process where only the start matters. A
plain mount runs no lifespan of Parkway's, so these tests check that the first request
starts it (once, also under concurrent first requests), that the lifespan hook starts
and stops it instead, and that everything under the prefix (the page, its assets,
cookies, OAuth URLs, the OpenAPI servers entry) carries the prefix.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
import uvicorn
from openapi_spec_validator import validate as validate_openapi
from playwright.sync_api import Browser, expect
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import parkway.transport.startup as startup_module
from parkway.transport import Settings, create_app, parkway_lifespan
from parkway.transport.settings import SettingsError
from parkway.transport.sse import sse_chunks
from tests.helpers.browser import Tab
from tests.helpers.connect_rig import TOKEN_KEY
from tests.helpers.support import ROOT, TEST_SECRET, answered, free_port, user_message

DOC = ROOT / "docs" / "embedding.md"
PREFIX = "/pw"
# An absolute URL of the app's own in a page or script would escape the prefix.
ABSOLUTE = re.compile(r"""["'`(=]\s*/(?:static|api|healthz|favicon|connect)\b""")


def blocks() -> list[str]:
    """The Python code blocks of docs/embedding.md."""
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)


def example(name: str) -> str:
    """The code block of docs/embedding.md whose first line is ``# {name}: ...``."""
    [found] = [b for b in blocks() if b.startswith(f"# {name}:")]
    return found


def run_example(name: str) -> dict[str, Any]:
    """Run the block as a module would run, and return its globals."""
    namespace: dict[str, Any] = {"__name__": name.removesuffix(".py")}
    exec(compile(example(name), f"docs/embedding.md ({name})", "exec"), namespace)
    return namespace


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> int:
    """The ``PARKWAY_*`` settings the examples read, the demo OAuth provider on; returns
    the port a host serves on (the OAuth callback URLs name it)."""
    port = free_port()
    for name, value in {
        "PARKWAY_REDIS_URL": redis_url,
        "PARKWAY_SECRET_KEY": TEST_SECRET,
        "PARKWAY_AUTH": "anonymous",  # an external Redis is no local playground
        "PARKWAY_PORT": str(port),
        "PARKWAY_DEMO_OAUTH": "true",
        "PARKWAY_TOKEN_KEY": TOKEN_KEY,
        "HOST_SESSION_SECRET": "host-session-secret-" + "h" * 32,
    }.items():
        monkeypatch.setenv(name, value)
    return port


class StopsParkwayLast:
    """Passes everything to the host; when uvicorn shuts the host down, which it does
    once every connection has ended, stops a lazily started Parkway on the serving loop,
    as the end of the process would (nothing else stops a plain mount). A host whose
    lifespan hook stopped Parkway already makes this a no-op."""

    def __init__(self, app: ASGIApp, pw: Starlette) -> None:
        self.app = app
        self.pw = pw

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.pw.state.lifecycle.stop()
            await send(message)

        await self.app(scope, receive, sending)


class HostServer:
    """A host application on real uvicorn, in a thread."""

    def __init__(self, host: ASGIApp, pw: Starlette, port: int) -> None:
        self.pw = pw
        # lifespan on: the host's own (if any), and Parkway's stop after the connections
        config = uvicorn.Config(
            StopsParkwayLast(host, pw),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.origin = f"http://127.0.0.1:{port}"

    def __enter__(self) -> HostServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "host did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive(), "the host did not shut down"
        assert not self.pw.state.lifecycle.started


def turn(http: httpx.Client, chat_id: str, *, messages: Any = None, **extra: Any) -> list[Any]:
    body = {
        "id": chat_id,
        "messages": messages or [user_message("Plan my weather report")],
        "trigger": "submit-message",
        **extra,
    }
    response = http.post(f"{PREFIX}/api/chat", json=body)
    assert response.status_code == 200, response.text
    return sse_chunks(response.text)


def widget(chunks: list[Any], tool_call_id: str) -> dict[str, Any]:
    [data] = [c["data"] for c in chunks if c["type"] == "data-parkway-widget" and c["id"] == tool_call_id]  # fmt: skip
    return dict(data)


def parked(chunks: list[Any], tool: str) -> dict[str, Any]:
    [call] = [c for c in chunks if c["type"] == "tool-input-available" and c["toolName"] == tool]
    return dict(call)


def test_every_code_block_of_the_page_is_an_example_these_tests_run() -> None:
    """A block added to docs/embedding.md without a test here would go stale unseen."""
    names = sorted(block.split(":", 1)[0] for block in blocks())
    assert names == ["# host_fastapi.py", "# host_own_lifespan.py", "# host_starlette.py"]


def test_the_page_names_every_variable_its_examples_read() -> None:
    """The FastAPI example read ``HOST_SESSION_SECRET`` without the page saying so: a
    reader's first run stopped on a KeyError. Every variable an example reads (and every
    setting the examples need, which the ``environ`` fixture sets) is named in the
    page's text, outside the code."""
    page = DOC.read_text()
    prose = re.sub(r"^```.*?^```", "", page, flags=re.S | re.M)
    read = set(re.findall(r"os\.environ\[\s*[\"']([A-Z0-9_]+)[\"']", "".join(blocks())))
    read |= set(re.findall(r"(?:os\.getenv|os\.environ\.get)\(\s*[\"']([A-Z0-9_]+)", page))
    assert "HOST_SESSION_SECRET" in read  # the pattern finds what the examples read
    needed = read | {"PARKWAY_REDIS_URL", "PARKWAY_SECRET_KEY", "PARKWAY_AUTH"}
    unnamed = sorted(name for name in needed if f"`{name}`" not in prose)
    assert not unnamed, f"docs/embedding.md reads but never names {unnamed}"


# -- a plain mount: started by its first request --------------------------------------


@pytest.fixture
def plain(environ: int, redis: Redis) -> Iterator[HostServer]:
    """docs/embedding.md's Starlette host (a plain mount, no lifespan hook) on uvicorn."""
    del redis
    namespace = run_example("host_starlette.py")
    with HostServer(namespace["app"], namespace["pw"], environ) as server:
        yield server


def test_a_plain_mount_starts_on_its_first_request_and_a_turn_parks_and_resumes(
    plain: HostServer,
) -> None:
    """Starlette runs no lifespan of a mounted app: before this, a plain mount answered
    500 to every API request. Now the first request starts Parkway, and the demo's first
    turn parks on its choice; the answer resumes the run under the prefix."""
    assert not plain.pw.state.lifecycle.started
    with httpx.Client(base_url=plain.origin, timeout=30) as http:
        session = http.post(f"{PREFIX}/api/sessions")
        assert session.status_code == 201, session.text
        assert plain.pw.state.lifecycle.started
        first = turn(http, "embed-1")
        choice = parked(first, "choose_option")
        status_url = widget(first, choice["toolCallId"])["statusUrl"]
        assert status_url.startswith(f"{PREFIX}/api/chats/embed-1/calls/")
        assert http.get(status_url).json()["status"] == "pending"
        history = answered(first, {"choice": "Oslo"}, tool="choose_option", user="Plan my weather report")  # fmt: skip
        second = turn(http, "embed-1", messages=history, messageId=first[0]["messageId"])
        said = "".join(c.get("delta", "") for c in second if c["type"] == "text-delta")
        assert "You picked Oslo, so the report will cover Oslo." in said
        assert http.get(status_url).json()["outcome"]["output"] == {"choice": "Oslo"}


def test_under_the_prefix_cookies_openapi_and_the_demo_oauth_flow_carry_it(
    plain: HostServer,
) -> None:
    """Cookies scoped to ``/`` would reach the host's other pages; OAuth URLs without
    the prefix would send the provider's answer to the host's 404. The session and flow
    cookies carry ``Path=/pw``, the connect widget's ``startUrl``, the demo provider's
    issuer and the callback URL carry ``/pw``, and a whole connect completes."""
    with httpx.Client(base_url=plain.origin, timeout=30) as http:
        session = http.post(f"{PREFIX}/api/sessions")
        assert "Path=/pw;" in session.headers["set-cookie"] + ";"
        document = http.get(f"{PREFIX}/openapi.json").json()
        assert document["servers"] == [{"url": PREFIX}]
        validate_openapi(document)
        assert "/api/chat" in document["paths"]
        first = turn(http, "embed-2")
        history = answered(first, {"choice": "Oslo"}, tool="choose_option", user="Plan my weather report")  # fmt: skip
        second = turn(http, "embed-2", messages=history, messageId=first[0]["messageId"])
        connect = parked(second, "request_connection")
        start_url = widget(second, connect["toolCallId"])["startUrl"]
        assert start_url.startswith(f"{PREFIX}/connect/demo/start?")
        start = http.get(start_url)
        assert start.status_code == 303, start.text
        issuer = f"{plain.origin}{PREFIX}/demo-oauth"
        assert start.headers["location"].startswith(f"{issuer}/authorize?")
        assert "Path=/pw/connect/demo/callback" in start.headers["set-cookie"]
        page = http.get(start.headers["location"])
        assert page.status_code == 200, page.text
        assert f'action="{PREFIX}/demo-oauth/authorize"' in page.text
        consent = re.search(r'name="consent" value="([^"]+)"', page.text)
        assert consent, page.text
        answer = http.post(
            f"{issuer}/authorize",
            data={"consent": consent.group(1), "account": "demo-user", "decision": "allow"},
        )
        assert answer.status_code == 303, answer.text
        callback = answer.headers["location"]
        assert callback.startswith(f"{plain.origin}{PREFIX}/connect/demo/callback?")
        assert parse_qs(urlsplit(callback).query)["iss"] == [issuer]
        assert http.get(callback).status_code == 200
        view = http.get(f"{PREFIX}/api/chats/embed-2/calls/{connect['toolCallId']}").json()
        assert view["outcome"]["output"]["account"] == "demo-user"


# -- in process: the start itself ------------------------------------------------------


async def test_concurrent_first_requests_start_parkway_once(
    environ: int, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty requests reach a plain mount before it has started: the start is held
    until all of them are in, and it runs once; every request is answered after it."""
    del environ, redis
    count = 20
    starts: list[int] = []
    arrived: list[int] = []
    all_in = asyncio.Event()
    real = startup_module._start_serving

    async def held_start(*args: Any, **kwargs: Any) -> Any:
        starts.append(1)
        await asyncio.wait_for(all_in.wait(), 30)
        return await real(*args, **kwargs)

    monkeypatch.setattr(startup_module, "_start_serving", held_start)
    namespace = run_example("host_starlette.py")
    pw, inner = namespace["pw"], namespace["app"]

    async def host(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            arrived.append(1)
            if len(arrived) == count:
                all_in.set()
        await inner(scope, receive, send)

    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
        try:
            answers = await asyncio.gather(*(client.get(f"{PREFIX}/healthz") for _ in range(count)))
        finally:
            await pw.state.lifecycle.stop()
    assert [a.status_code for a in answers] == [200] * count
    assert len(starts) == 1


async def test_a_failed_start_answers_503_and_the_next_request_starts_it(
    environ: int, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis away at the first request: the request gets a JSON 503 saying to retry,
    not a 500 naming an attribute; the next request starts Parkway."""
    del environ, redis
    real = startup_module.reach_redis
    failures = [SettingsError("redis_url: cannot reach Redis")]

    async def reach_once_away(*args: Any) -> None:
        if failures:
            raise failures.pop()
        await real(*args)

    monkeypatch.setattr(startup_module, "reach_redis", reach_once_away)
    pw = create_app(Settings.from_sources())
    host = Starlette(routes=[Mount(PREFIX, app=pw)])
    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
        try:
            failed = await client.post(f"{PREFIX}/api/sessions")
            assert failed.status_code == 503
            assert failed.json()["error"]["code"] == "not_started"
            assert failed.headers["retry-after"] == "1"
            assert not pw.state.lifecycle.started
            again = await client.post(f"{PREFIX}/api/sessions")
            assert again.status_code == 201, again.text
            assert pw.state.lifecycle.started
        finally:
            await pw.state.lifecycle.stop()


async def test_under_the_prefix_the_page_and_every_asset_it_references_answer(
    environ: int, redis: Redis
) -> None:
    """A page or script with a URL from the server's root (``/static/...``) breaks under
    a mount. The page at ``/pw`` (redirected) and ``/pw/``, the files it references and
    every module those import answer 200, and none holds an absolute URL of the app's."""
    del environ, redis
    namespace = run_example("host_starlette.py")
    transport = httpx.ASGITransport(app=namespace["app"])
    async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
        try:
            bare = await client.get(PREFIX, follow_redirects=True)
            assert bare.status_code == 200 and str(bare.url) == f"http://host{PREFIX}/"
            page = await client.get(f"{PREFIX}/")
            assert page.status_code == 200 and page.text == bare.text
            base = f"http://host{PREFIX}/"
            queue = [urljoin(base, u) for u in re.findall(r'(?:href|src)="([^"]+)"', page.text)]
            seen: dict[str, str] = {base: page.text}
            while queue:
                url = queue.pop()
                if url in seen:
                    continue
                answer = await client.get(url)
                assert answer.status_code == 200, url
                seen[url] = answer.text
                if url.endswith(".js"):
                    imports = re.findall(r'^(?:import|export)\b[^;]*?from "([^"]+)"', answer.text, re.M)  # fmt: skip
                    queue += [urljoin(url, i) for i in imports]
        finally:
            await namespace["pw"].state.lifecycle.stop()
    names = {urlsplit(u).path.rsplit("/", 1)[-1] for u in seen}
    assert {"playground.css", "overlay.js", "playground.js", "chat.js", "favicon.svg"} <= names
    assert all(urlsplit(u).path.startswith(f"{PREFIX}/") for u in seen)
    for url, body in seen.items():
        found = ABSOLUTE.findall(body)
        assert not found, f"{url}: {found}"


# -- the lifespan hook -----------------------------------------------------------------


def test_the_lifespan_hook_starts_before_the_first_request_and_stops_on_shutdown(
    environ: int, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/embedding.md's FastAPI host: ``parkway_lifespan(pw)`` starts Parkway with
    the host (the first request starts nothing more) and stops it with the host; its
    authenticator makes the host's signed-in user the principal."""
    del redis
    starts: list[int] = []
    real = startup_module._start_serving

    async def counted(*args: Any, **kwargs: Any) -> Any:
        starts.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(startup_module, "_start_serving", counted)
    namespace = run_example("host_fastapi.py")
    pw = namespace["pw"]
    server = HostServer(namespace["app"], pw, environ)
    with server:
        assert pw.state.lifecycle.started and starts == [1]
        with (
            httpx.Client(base_url=server.origin, timeout=30) as ana,
            httpx.Client(base_url=server.origin, timeout=30) as bob,
        ):
            assert ana.post(f"{PREFIX}/api/chat", json={}).status_code == 401
            assert ana.post("/login", params={"user": "ana"}).status_code == 200
            assert bob.post("/login", params={"user": "bob"}).status_code == 200
            chunks = turn(ana, "hook-1")
            parked(chunks, "choose_option")
            assert ana.get(f"{PREFIX}/api/chats/hook-1").status_code == 200
            assert bob.get(f"{PREFIX}/api/chats/hook-1").status_code == 404
        assert starts == [1]
    assert not server.thread.is_alive()
    assert not pw.state.lifecycle.started


async def test_a_host_lifespan_of_its_own_starts_and_stops_parkway_inside_it(
    environ: int, redis: Redis
) -> None:
    """docs/embedding.md's host with its own lifespan: Parkway is started when the
    host's lifespan has started, under the mount's prefix, and stopped when it ends."""
    del environ, redis
    namespace = run_example("host_own_lifespan.py")
    host, pw = namespace["app"], namespace["pw"]
    transport = httpx.ASGITransport(app=host)
    async with (
        host.router.lifespan_context(host),
        httpx.AsyncClient(transport=transport, base_url="http://host") as client,
    ):
        assert pw.state.lifecycle.started and pw.state.lifecycle.prefix == PREFIX
        session = await client.post(f"{PREFIX}/api/sessions")
        assert session.status_code == 201 and "Path=/pw;" in session.headers["set-cookie"]
    assert not pw.state.lifecycle.started


async def test_a_request_after_the_hook_stopped_parkway_does_not_start_it_again(
    environ: int, redis: Redis
) -> None:
    """A request that reaches a shutting-down host after Parkway stopped must not start
    it again behind the host's back (a Redis client and a sweeper nobody would stop): it
    gets 503 ``shutting_down``. Entering the hook again starts it again."""
    del environ, redis
    pw = create_app(Settings.from_sources())
    host = Starlette(routes=[Mount(PREFIX, app=pw)])
    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
        async with parkway_lifespan(pw)(host):
            assert pw.state.lifecycle.prefix == PREFIX
            assert (await client.get(f"{PREFIX}/healthz")).status_code == 200
        late = await client.get(f"{PREFIX}/healthz")
        assert late.status_code == 503 and late.json()["error"]["code"] == "shutting_down"
        assert not pw.state.lifecycle.started
        async with parkway_lifespan(pw, prefix=PREFIX)(None):
            assert (await client.get(f"{PREFIX}/healthz")).status_code == 200


# -- a browser -------------------------------------------------------------------------


def test_the_playground_under_the_prefix_runs_the_demos_first_turn(
    browser: Browser, plain: HostServer
) -> None:
    """A person opening ``/pw`` gets the playground, says the demo's line, and answers
    its choice widget: the page's scripts, styles, API calls and session all work
    under the prefix."""
    tab = Tab.new_context(browser, plain.origin + PREFIX)
    tab.page.goto(plain.origin + PREFIX)
    expect(tab.page.get_by_test_id("composer")).to_be_visible()
    assert tab.page.url.startswith(f"{plain.origin}{PREFIX}/")
    tab.send("Plan my weather report")
    tab.expect_said("Hello! I'll check the weather")
    choice = tab.widget("choice")
    tab.expect_state(choice, "pending")
    choice.get_by_role("button", name="Oslo").click()
    tab.expect_state(choice, "answered")
    tab.expect_said("You picked Oslo, so the report will cover Oslo.")
    cookies = tab.context.cookies()
    assert [c["path"] for c in cookies if c["name"].startswith("parkway_session")] == [PREFIX]
    tab.assert_clean()
