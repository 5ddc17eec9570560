"""The ``parkway_runtime`` fixture, used as a project's tests use it: in a test of this
suite, and in a project of its own run by pytest in strict asyncio mode."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from parkway.runner import AgentFile, FunctionModel, TestModel, load_template
from parkway.transport.pytest_plugin import RuntimeFactory
from tests.helpers.support import PICK_TOOL, WEATHER_TOOL

pytest_plugins = ["pytester"]

TEMPLATE = load_template({"instructions": "x", "tools": [WEATHER_TOOL, PICK_TOOL]})


async def test_the_fixture_gives_started_runtimes_on_their_own_redis(
    parkway_runtime: RuntimeFactory,
) -> None:
    """Two runtimes from the fixture, each on a private Redis: a chat parked in one is
    unknown to the other; the test model's round trip runs to its summary."""
    agent = AgentFile(TEMPLATE, model=TestModel(args={"pick": {"q": "colour"}}))
    one = await parkway_runtime(agent)
    two = await parkway_runtime(agent, model=FunctionModel(lambda messages, info: "other"))
    assert one.redis_url != two.redis_url
    first = await one.send("chat", "go")
    parked = first.call("pick")
    assert parked.input == {"q": "colour"}
    done = await one.answer("chat", parked.id, {"choice": "red"}, resume=True)
    assert 'pick: {"choice":"red"}' in done.text
    assert (await two.send("chat", "go")).text == "other"


PROJECT_TEST = textwrap.dedent(
    """
    import pathlib

    import pytest

    from parkway.runner import AgentFile, TestModel, load_template

    TOOL = {
        "type": "client", "name": "pick", "description": "Pick.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}},
                         "required": ["q"]},
    }
    AGENT = AgentFile(load_template({"instructions": "x", "tools": [TOOL]}), model=TestModel())


    @pytest.mark.asyncio
    async def test_agent_parks(parkway_runtime):
        rt = await parkway_runtime(AGENT)
        result = await rt.send("c", "hi")
        assert result.call("pick").input["q"]
        pathlib.Path("socket.txt").write_text(rt.redis_url.removeprefix("unix://"))
    """
)


def test_a_project_uses_the_fixture_in_strict_mode_and_it_cleans_up(
    pytester: pytest.Pytester,
) -> None:
    """A project with nothing but Parkway and pytest-asyncio installed (the plugin is
    found by its entry point, no import or conftest), in pytest-asyncio's strict mode:
    the test passes, and the runtime's Redis and its folder are gone afterwards."""
    pytester.makeini("[pytest]\nasyncio_mode = strict\n")
    pytester.makepyfile(test_project=PROJECT_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert result.ret == 0, "\n".join(result.outlines + result.errlines)
    socket = Path(pytester.path.joinpath("socket.txt").read_text())
    assert socket.name == "redis.sock" and not socket.parent.exists()


def test_an_unmarked_async_test_in_strict_mode_is_told_to_mark_itself(
    pytester: pytest.Pytester,
) -> None:
    """Strict mode (pytest-asyncio's default) leaves an unmarked async test alone, and
    pytest then fails it saying to install an async plugin, which is installed. A test
    that asks for ``parkway_runtime`` is failed before the fixture starts anything, with
    what to do: mark it, or set asyncio_mode = "auto"."""
    pytester.makeini("[pytest]\nasyncio_mode = strict\n")
    unmarked = PROJECT_TEST.replace("@pytest.mark.asyncio\n", "")
    assert "mark.asyncio" not in unmarked
    pytester.makepyfile(test_project=unmarked)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert result.ret == 1
    output = "\n".join(result.outlines)
    assert "not natively supported" not in output
    assert (
        "test_agent_parks is an async test that pytest-asyncio does not run in its strict "
        "mode (the default): mark it @pytest.mark.asyncio (or the module: pytestmark = "
        'pytest.mark.asyncio), or set asyncio_mode = "auto" in the pytest configuration'
    ) in output
    assert not pytester.path.joinpath("socket.txt").exists()  # the fixture never ran
