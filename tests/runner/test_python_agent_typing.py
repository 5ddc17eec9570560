"""The decorators keep a tool's type for type checkers (issue 30): ``mypy --strict`` on a
user's module sees each decorated function as itself, and flags a wrong call to it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = '''
from pydantic import BaseModel

from parkway.runner import Agent, ToolContext

agent = Agent("typed", model="openai:gpt-5-mini")


class Out(BaseModel):
    x: int


@agent.tool
def plain(ctx: ToolContext, a: int, b: str = "") -> Out:
    """A tool."""
    return Out(x=a)


@agent.tool(needs_approval=lambda a: a > 1, allow_edits=True)
async def later(a: int) -> dict[str, int]:
    """Another."""
    return {"a": a}


@agent.client_tool(render="choice")
def pick(options: list[str]) -> Out:
    """Runs in the browser."""
    raise NotImplementedError


reveal_type(plain)
reveal_type(later)
reveal_type(pick)
plain("not a context", 1)
'''


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mypy_strict_sees_each_decorated_function_as_itself(tmp_path: Path) -> None:
    # mypy cannot follow the editable install's import hook: the folders are linked under
    # the names they install as (as `make lint` does). Its cache lives in build/ (ignored
    # by git), as tests/product/test_python_api_doc.py's does: a later run reads Parkway's
    # and its dependencies' types from it instead of analysing them all again; mypy
    # checks again any module whose source changed.
    linked = tmp_path / "path" / "parkway"
    linked.mkdir(parents=True)
    for package in ("runner", "transport", "widgets_api"):
        (linked / package).symlink_to(ROOT / package)
    (tmp_path / "user.py").write_text(textwrap.dedent(USER_MODULE))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports",
         "--cache-dir", str(ROOT / "build" / "mypy-typing-cache"), "user.py"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(tmp_path / "path")},
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    out = result.stdout
    assert (
        'Revealed type is "def (ctx: parkway.runner.agent.tools.ToolContext, a: int, b: str =) -> user.Out"'
        in out
    ), out
    assert 'Revealed type is "def (a: int) -> typing.Coroutine[Any, Any, dict[str, int]]"' in out, (
        out
    )
    assert 'Revealed type is "def (options: list[str]) -> user.Out"' in out, out
    # the only error: the wrong call, which a decorator returning Any would have hidden
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'Argument 1 to "plain" has incompatible type "str"' in errors[0], (
        out
    )
