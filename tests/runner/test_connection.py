"""Redis URLs: what each scheme builds, how bad ones are refused, and a Sentinel-managed
primary serving a real round trip."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from parkway.runner import CallerError, Runner, connect, parse_agent_file
from parkway.runner.events import CallParked, TextDelta
from parkway.runner.store.client import REDIS_URL_SCHEMES, parse_redis_url
from parkway.runner.store.keys import ChatKeys
from parkway.transport.settings import Settings, SettingsError
from tests.helpers.support import agent_doc, call, text
from tests.helpers.topologies import (
    HOST,
    LoopbackSentinel,
    TopologyUnavailableError,
    assert_keyspace_clean,
    unavailable,
)


@pytest.mark.parametrize(
    ("url", "kind", "nodes", "service"),
    [
        ("redis://db.internal:6380/2", "standalone", (), ""),
        ("unix:///run/redis.sock", "standalone", (), ""),
        (
            "redis+cluster://10.0.0.1:7000,10.0.0.2,[::1]:7002",
            "cluster",
            (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002)),
            "",
        ),
        (
            "redis+sentinel://s1:26380,s2/parkway/3",
            "sentinel",
            (("s1", 26380), ("s2", 26379)),
            "parkway",
        ),
    ],
)
def test_each_scheme_names_its_topology(
    url: str, kind: str, nodes: tuple[tuple[str, int], ...], service: str
) -> None:
    """The scheme decides the client: one server, a Cluster's startup nodes (default
    port 6379), or the Sentinels (default port 26379) and the service they watch."""
    target = parse_redis_url(url)
    assert (target.kind, target.nodes, target.service) == (kind, nodes, service)


def test_credentials_tls_and_options_reach_the_data_nodes_and_sentinels() -> None:
    """URL credentials authenticate to the data nodes, ``sentinel_password`` to the
    Sentinels, ``rediss+`` turns TLS on for both, and redis-py's query options pass
    through; none of it shows in the parsed target's repr."""
    cluster = parse_redis_url("rediss+cluster://app:s%40cret@h1:7000/?ssl_cert_reqs=none")
    assert cluster.options == {
        "username": "app",
        "password": "s@cret",
        "ssl": True,
        "ssl_cert_reqs": "none",
    }
    sentinel = parse_redis_url("redis+sentinel://:pw@s1/main/2?sentinel_password=sp")
    assert sentinel.options == {"password": "pw", "db": 2}
    assert sentinel.sentinel_options == {"password": "sp"}
    assert "pw" not in repr(sentinel) and "s@cret" not in repr(cluster)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://h:1", "must start with redis://"),
        ("redis+cluster://", "at least one host:port"),
        ("redis+cluster://h:1/2", "database 0 only"),
        ("redis+cluster://h:port", "is not host:port"),
        ("redis+sentinel://:hunter2@h:1", "names the service"),
        ("redis://:hunter2@h:port", "Port could not be cast"),
    ],
)
def test_a_bad_redis_url_is_refused_without_echoing_it(url: str, problem: str) -> None:
    """A wrong URL stops startup with the reason; the URL itself, which may carry a
    password, never appears in the message."""
    with pytest.raises(CallerError, match=problem) as refused:
        parse_redis_url(url)
    assert "hunter2" not in str(refused.value)
    with pytest.raises(SettingsError, match="PARKWAY_REDIS_URL") as invalid:
        Settings.from_sources({"redis_url": url}, {})
    assert "hunter2" not in str(invalid.value)


def test_settings_accept_every_scheme_and_hide_every_password() -> None:
    """Each documented scheme is a valid setting, and the printed URL hides both the
    data nodes' password and the Sentinels'."""
    examples = {
        "redis": "redis://h:6379/0",
        "rediss": "rediss://h:6380",
        "unix": "unix:///run/redis.sock",
        "redis+cluster": "redis+cluster://h1:7000,h2:7000",
        "rediss+cluster": "rediss+cluster://h1:7000",
        "redis+sentinel": "redis+sentinel://s1:26379,s2:26379/main",
        "rediss+sentinel": "rediss+sentinel://s1:26379/main/1",
    }
    assert sorted(examples) == sorted(REDIS_URL_SCHEMES)
    for url in examples.values():
        assert Settings.from_sources({"redis_url": url}, {}).redis_url == url
    settings = Settings.from_sources(
        {"redis_url": "redis+sentinel://:hunter2@s1:26379/main?sentinel_password=swordfish"}, {}
    )
    shown = repr(settings)
    assert "hunter2" not in shown and "swordfish" not in shown and "s1:26379" in shown


async def test_connect_builds_a_cluster_client_for_a_cluster_url() -> None:
    """``redis+cluster://`` gives redis-py's cluster client with every startup node."""
    client = connect("redis+cluster://127.0.0.1:7000,127.0.0.1:7001")
    try:
        assert isinstance(client, RedisCluster)
        assert sorted(client.nodes_manager.startup_nodes) == ["127.0.0.1:7000", "127.0.0.1:7001"]
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackSentinel]:
    try:
        topology = LoopbackSentinel(Path(tmp_path_factory.mktemp("sentinel")))
    except TopologyUnavailableError as exc:
        unavailable("REDIS SENTINEL", str(exc))
    topology.start()
    try:
        yield topology
    finally:
        topology.stop()


@pytest.mark.slow
async def test_a_sentinel_url_reaches_the_primary_and_serves_a_round_trip(
    sentinel: LoopbackSentinel,
) -> None:
    """``redis+sentinel://`` asks the Sentinel for the primary and runs park, settle and
    resume there; closing the client closes the Sentinel connections too (a leaked
    connection would fail the test as a ResourceWarning)."""
    primary = Redis(host=HOST, port=sentinel.primary_port)
    client = connect(sentinel.url)
    try:
        await primary.flushall()
        agent = parse_agent_file(agent_doc([[call("pick", {"q": "a"})], [text("resumed")]]))
        runner = Runner(client, agent.model, agent.template)
        run = await runner.start_turn("via-sentinel", "alice", "hi")
        [parked] = [e.call for e in await run.collect() if isinstance(e, CallParked)]
        await runner.settle(
            "via-sentinel",
            "alice",
            parked.tool_call_id,
            {"outcome": "output", "output": {"choice": "a"}},
        )
        events = await (await runner.resume("via-sentinel", "alice")).collect()
        assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == "resumed"
        assert await primary.exists(ChatKeys("via-sentinel").meta)
        await assert_keyspace_clean([primary], client)
    finally:
        await client.aclose()
        await primary.flushall()
        await primary.aclose()


async def test_a_sentinel_primary_pool_waits_for_a_free_connection(
    sentinel: LoopbackSentinel,
) -> None:
    """Behind Sentinel the pool blocks too: two connections, a hundred concurrent
    commands, all served, and the primary never sees more than two of ours."""
    primary = Redis(host=HOST, port=sentinel.primary_port)
    client = connect(sentinel.url, max_connections=2, pool_timeout_s=10)
    try:
        await primary.flushall()
        before = len(await primary.client_list())
        results = await asyncio.gather(*(client.incr("n") for _ in range(100)))
        assert sorted(results) == list(range(1, 101))
        assert len(await primary.client_list()) - before <= 2
    finally:
        await client.aclose()
        await primary.flushall()
        await primary.aclose()
