"""Address quotas over HTTP against a real uvicorn and real Redis: what the anonymous
sessions of one client address store together is bounded (runner/store/addresses.py),
however many sessions it mints, while other addresses and non-anonymous principals are
not affected; concurrent sessions of one address never take more than it may have."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from parkway.runner.store import address_usage_keys, chat_keys
from parkway.transport.api import SessionAuthenticator
from parkway.transport.api.sessions import address_group
from tests.helpers.support import (
    TEST_SECRET,
    Api,
    ServerThread,
    agent_doc,
    call,
    eventually,
    server_thread,
    sse_chunks,
    text,
    user_message,
)

pytestmark = pytest.mark.slow

BULK_TOOL = {
    "type": "function",
    "name": "bulk_after_file",
    "ref": "tests.helpers.tools:bulk_after_file",
}
REPLY = "z" * 4000  # what each chat's assistant stores, about


class AddressedApi(Api):
    """An Api whose connections come from ``address`` (any 127/8 address reaches a
    server bound to 127.0.0.1 on Linux)."""

    def __init__(self, base_url: str, address: str) -> None:
        super().__init__(base_url)
        transport = httpx.AsyncHTTPTransport(local_address=address)
        self.http = httpx.AsyncClient(base_url=base_url, timeout=30, transport=transport)


def address_of(api: Api) -> str:
    """The address a session's principal was minted by (its digest)."""
    address = SessionAuthenticator.address_of(api.principal)
    assert address is not None, api.principal
    return address


async def address_total(redis: Redis, api: Api) -> int:
    return int(await redis.hget(address_usage_keys(address_of(api)).bytes, "#total") or 0)


async def stored_by(redis: Redis, chats: list[str]) -> int:
    """What the chats store, by their own counts."""
    return sum([int(await redis.hget(chat_keys(c).meta, "bytes") or 0) for c in chats])


async def counts_its_chats(redis: Redis, api: Api, chats: list[str]) -> bool:
    """Whether the address of ``api``'s session counts exactly what ``chats`` store (the
    roll-up of a run's end follows its last commit)."""
    return await address_total(redis, api) == await stored_by(redis, chats)


def refused_by(response: httpx.Response, quota: str) -> dict[str, Any]:
    assert response.status_code == 429, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "quota_exceeded" and error["quota"] == quota, error
    return error


async def test_sessions_of_one_address_share_its_storage_quota(
    redis: Redis, redis_url: str
) -> None:
    """The red team's finding: fresh sessions of one address each had 256 MiB of their
    own. Now sixteen sessions of one address storing a chat each are refused once the
    address's total is reached (429 naming the address quota), though each session is
    far from its own quota; a session of another address is served; the address's count
    is what its chats store."""
    quota = 15 * len(REPLY)
    doc = agent_doc([[text(REPLY)]], tools=[])
    with server_thread(
        redis_url, doc, quota_address_stored_bytes=quota, session_burst=20
    ) as server:
        sessions: list[Api] = []
        chats: list[str] = []
        try:
            refusal = None
            while refusal is None:
                assert len(sessions) < 20, "never refused"
                api = await AddressedApi(server.base_url, "127.0.0.1").login()
                sessions.append(api)
                chat = f"mine-{len(sessions)}"
                response = await api.chat(chat, [user_message("store this")])
                if response.status_code == 200:
                    chats.append(chat)
                else:
                    refusal = response
            error = refused_by(refusal, "address_stored_bytes")
            assert error["limit"] == quota and "your address" in error["message"]
            assert len(chats) >= 14  # each chat stores a little more than its reply
            assert not await redis.exists(chat_keys(f"mine-{len(sessions)}").meta)
            # the address's count is its chats' bytes, all its sessions together
            await eventually(lambda: counts_its_chats(redis, sessions[0], chats), what="roll-ups")
            total = await address_total(redis, sessions[0])
            assert quota <= total < quota + len(REPLY) + 1000
            assert len({address_of(api) for api in sessions}) == 1
            # another address is not affected
            other = await AddressedApi(server.base_url, "127.0.0.2").login()
            sessions.append(other)
            assert address_of(other) != address_of(sessions[0])
            served = await other.chat("theirs", [user_message("store this")])
            assert served.status_code == 200, served.text
            # ... and one more session of the first address is refused too
            late = await AddressedApi(server.base_url, "127.0.0.1").login()
            sessions.append(late)
            refused_by(await late.chat("late", [user_message("hi")]), "address_stored_bytes")
        finally:
            for api in sessions:
                await api.aclose()


async def test_a_chat_past_its_time_to_live_gives_its_room_back_to_its_address(
    redis: Redis, redis_url: str
) -> None:
    """Chats are never deleted but expire (chat_ttl_s): once an address's chats have
    lapsed, their bytes and places no longer count, and its sessions are served again.
    The worker's clock is moved past the chats' time to live."""
    doc = agent_doc([[text(REPLY)]], tools=[])
    with server_thread(
        redis_url, doc, quota_address_stored_bytes=2 * len(REPLY), quota_address_live_chats=3
    ) as server:
        api = await Api(server.base_url).login()
        try:
            for n in range(2):
                await api.say(f"old-{n}", "store this")
            refused_by(await api.chat("new", [user_message("hi")]), "address_stored_bytes")
            usage = address_usage_keys(address_of(api))
            assert await redis.zcard(usage.chats) == 2
            runner = server.app.state.runner
            ttl_s = server.settings.chat_ttl_s
            runner.clock = lambda: time.time() + ttl_s + 1
            try:
                await api.say("new", "hi")  # served: the old chats no longer count
                assert await redis.zrange(usage.chats, 0, -1) == [b"new"]
                assert await address_total(redis, api) == await stored_by(redis, ["new"])
            finally:
                runner.clock = time.time
        finally:
            await api.aclose()


async def test_concurrent_new_chats_of_one_address_never_exceed_its_live_chats(
    redis: Redis, redis_url: str
) -> None:
    """Twelve sessions of one address each start a chat at the same moment: exactly the
    address's five are served, the rest refused with nothing of them stored, however
    the checks interleave (each check counts the chat it allows, atomically)."""
    doc = agent_doc([[text("hello")]], tools=[])
    with server_thread(redis_url, doc, quota_address_live_chats=5) as server:
        sessions = [await Api(server.base_url).login() for _ in range(12)]
        try:
            responses = await asyncio.gather(
                *(api.chat(f"race-{n}", [user_message("hi")]) for n, api in enumerate(sessions))
            )
            served = [n for n, r in enumerate(responses) if r.status_code == 200]
            assert len(served) == 5, [r.status_code for r in responses]
            for n, response in enumerate(responses):
                if n not in served:
                    assert refused_by(response, "address_live_chats")["limit"] == 5
                    assert not await redis.exists(chat_keys(f"race-{n}").meta)
            usage = address_usage_keys(address_of(sessions[0]))
            counted = sorted(m.decode() for m in await redis.zrange(usage.chats, 0, -1))
            assert counted == sorted(f"race-{n}" for n in served)
        finally:
            for api in sessions:
                await api.aclose()


async def test_a_turn_its_principal_may_not_take_gives_the_address_its_place_back(
    redis: Redis, redis_url: str
) -> None:
    """The address's check counts a new chat before the claim, which may still refuse it
    (here the session's own live-chats quota): the chat's place is given back, so
    refusals never fill the address."""
    doc = agent_doc([[text("hello")]], tools=[])
    with server_thread(redis_url, doc, quota_live_chats=1, quota_address_live_chats=2) as server:
        api = await Api(server.base_url).login()
        other = await Api(server.base_url).login()
        try:
            await api.say("first", "hi")
            for n in range(3):
                refusal = await api.chat(f"more-{n}", [user_message("hi")])
                assert refused_by(refusal, "live_chats")["limit"] == 1
            usage = address_usage_keys(address_of(api))
            assert await redis.zrange(usage.chats, 0, -1) == [b"first"]
            await other.say("second", "hi")  # the address's second place is still free
            refused_by(await other.chat("third", [user_message("hi")]), "address_live_chats")
        finally:
            await api.aclose()
            await other.aclose()


@contextlib.asynccontextmanager
async def held_turn(api: Api, chat: str) -> AsyncIterator[None]:
    """A turn whose tool is holding; the block's end reads its stream to the end."""
    body = {"id": chat, "messages": [user_message("go")], "trigger": "submit-message"}
    async with api.http.stream("POST", "/api/chat", json=body) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()  # (kept: a dropped one closes the response)
        async for line in lines:
            if "tool-input-available" in line:
                break
        yield
        async for _ in lines:
            pass


async def test_concurrent_artifacts_of_one_address_never_exceed_its_stored_bytes(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Eight sessions of one address hold a run each in a tool, released together: each
    tool answers 50 kB (kept as an artifact) at the same moment. The address's 175 kB
    take exactly three; the others' outputs are refused and the model is told why. What
    the address's chats store stays within its quota, and its count is exactly that."""
    release = tmp_path / "release"
    size = 50_000
    tool_input = {"path": str(release), "bytes": size}
    doc = agent_doc([[call("bulk_after_file", tool_input)], [text("done")]], tools=[BULK_TOOL])
    quota = 175_000
    server = ServerThread(
        redis_url, doc, quota_address_stored_bytes=quota, artifact_threshold_bytes=1024
    ).start()
    sessions = [await Api(server.base_url).login() for _ in range(8)]
    chats = [f"bulk-{n}" for n in range(8)]
    try:
        async with contextlib.AsyncExitStack() as stack:
            await asyncio.gather(
                *(
                    stack.enter_async_context(held_turn(a, c))
                    for a, c in zip(sessions, chats, strict=True)
                )
            )
            release.write_text("go")  # every run is in its tool: all answer at once
        kept = [int(await redis.hlen(chat_keys(c).artifacts)) for c in chats]
        assert sum(kept) == 3, kept
        stored = await stored_by(redis, chats)
        assert stored <= quota
        await eventually(lambda: counts_its_chats(redis, sessions[0], chats), what="roll-ups")
        for api, chat, has in zip(sessions, chats, kept, strict=True):
            if not has:
                messages = (await api.state(chat))["messages"]
                assert "shared storage quota" in str(messages)
    finally:
        release.write_text("go")
        for api in sessions:
            await api.aclose()
        server.stop()


async def test_principals_of_a_proxy_or_a_token_are_not_counted_by_address(
    redis: Redis, redis_url: str
) -> None:
    """The address quota is for anonymous sessions only: sixteen users a trusted proxy
    names, all from one address, store far past the (tiny) address quota, each within
    their own quota; no address is counted."""
    doc = agent_doc([[text(REPLY)]], tools=[])
    with server_thread(
        redis_url, doc, auth="header", auth_header="x-forwarded-user",
        trusted_proxies=("127.0.0.1",), quota_address_stored_bytes=1,
        quota_address_live_chats=1,
    ) as server:  # fmt: skip
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
            for n in range(16):
                body = {"id": f"user-{n}", "messages": [user_message("store this")],
                        "trigger": "submit-message"}  # fmt: skip
                response = await http.post(
                    "/api/chat", json=body, headers={"x-forwarded-user": f"user-{n}"}
                )
                assert response.status_code == 200, response.text
                assert any(c["type"] == "finish" for c in sse_chunks(response.text))
        assert [k async for k in redis.scan_iter(match="pw:{addr:*")] == []


async def test_the_address_is_the_one_the_throttle_sees_ipv6_by_its_64(
    redis: Redis, redis_url: str
) -> None:
    """Behind a trusted proxy a session's address is the forwarded client's, as for the
    session throttle; two IPv6 addresses of one /64 are one address, another /64 is
    another. A session that renews its token keeps the address it was minted by."""
    del redis
    doc = agent_doc([[text("hi")]], tools=[])
    with server_thread(redis_url, doc, trusted_proxies=("127.0.0.1",)) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:

            async def minted(client: str, token: str = "") -> tuple[str, str]:
                headers = {"x-forwarded-for": client}
                if token:
                    headers["authorization"] = f"Bearer {token}"
                response = await http.post("/api/sessions", headers=headers)
                assert response.status_code == 201, response.text
                http.cookies.clear()  # (each request says who it is, or nobody)
                body = response.json()
                return body["principal"], body["token"]

            first, token = await minted("2001:db8::1")
            same, _ = await minted("2001:db8::ffff:2")
            other, _ = await minted("2001:db8:0:1::1")
            v4, _ = await minted("192.0.2.7")
            addresses = [SessionAuthenticator.address_of(p) for p in (first, same, other, v4)]
            assert addresses[0] == addresses[1]
            assert len(set(addresses)) == 3 and None not in addresses
            renewed, _ = await minted("192.0.2.8", token)
            assert renewed == first


def test_address_groups_and_principals_minted_before_addresses() -> None:
    """IPv6 by its /64, IPv4 (mapped or not) by itself; a principal minted before
    principals named their address (or not by this authenticator) has none."""
    assert address_group("2001:db8::1") == address_group("2001:db8::abcd:1") == "2001:db8::/64"
    assert address_group("::ffff:192.0.2.1") == address_group("192.0.2.1") == "192.0.2.1"
    assert address_group("testclient") == "testclient"
    sessions = SessionAuthenticator(TEST_SECRET)
    principal, _ = sessions.issue(address="192.0.2.1")
    assert sessions.address_of(principal) is not None
    assert sessions.address_of("usr_abcdefghijklmnopqrstuv") is None
    assert sessions.address_of("alice") is None
