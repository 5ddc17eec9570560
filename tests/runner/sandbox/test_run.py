"""The sandbox providers doing their job: a program's output, args, result, inputs,
library and brokered tool calls, spilled stdout, the probe's report, and the request
checks. Real bubblewrap (skipped, loudly, without it; a failure instead under
PARKWAY_REQUIRE_SANDBOX=1); the attacks are in test_sandbox_escapes.py."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

import pytest

from parkway.runner.sandbox import (
    BrokerError,
    BwrapProvider,
    Limits,
    RunRequest,
    UnconfinedProvider,
    _outcome,
)
from tests.helpers.sandbox_rig import run, shared_folder, write

GUEST = Path(__file__).resolve().parents[3] / "runner" / "sandbox" / "guest"


# -- output, args, results ----------------------------------------------------------


async def test_stdout_and_the_last_expression_come_back(provider: BwrapProvider) -> None:
    """What the program prints is stdout; its last expression's value is the result."""
    done = await run(provider, "print('hello')\nsum(range(5))\n")
    assert (done.status, done.stdout, done.result, done.has_result) == ("ok", b"hello\n", 10, True)
    assert done.exit_code == 0 and done.message == "" and done.stdout_total == 6
    assert done.isolation.confined and done.isolation.provider == "bwrap"


async def test_args_go_in_and_result_wins_over_the_last_expression(
    provider: BwrapProvider,
) -> None:
    """``args`` is the request's JSON; ``result(...)`` sets the result, whatever the
    last expression is; a last ``print(...)`` (None) is no result."""
    done = await run(
        provider, "result({'doubled': [x * 2 for x in args]})\n'ignored'\n", args=[1, 2]
    )
    assert done.result == {"doubled": [2, 4]}
    quiet = await run(provider, "print(args['name'])", args={"name": "Ada"})
    assert (quiet.stdout, quiet.result, quiet.has_result) == (b"Ada\n", None, False)
    none = await run(provider, "result(None)")
    assert (none.result, none.has_result) == (None, True)


async def test_a_raised_exception_is_an_error_with_its_line_and_traceback(
    provider: BwrapProvider,
) -> None:
    """The message is the exception's last line; stderr has the program's traceback,
    with its source lines and without the bootstrap's frames."""
    done = await run(provider, "x = 1\ndef f():\n    return x / 0\nf()\n")
    assert (done.status, done.exit_code) == ("error", _outcome.EXIT_PROGRAM_ERROR)
    assert done.message == "ZeroDivisionError: division by zero"
    assert b'File "<program>", line 3, in f' in done.stderr
    assert b"return x / 0" in done.stderr and b"bootstrap" not in done.stderr


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        ("import sys\nsys.exit(0)", "ok", ""),
        ("import sys\nsys.exit(3)", "error", "the program exited with status 3"),
        ("import os\nos._exit(4)", "error", "the program exited with status 4"),
        ("def broken(:\n", "error", "SyntaxError: invalid syntax"),
        ("result({1, 2})", "error", "TypeError: the result must be plain JSON"),
        ("{1, 2}", "error", "the last expression's value is not plain JSON"),
    ],
)
async def test_how_a_program_ends_is_its_status(
    provider: BwrapProvider, code: str, status: str, message: str
) -> None:
    """Exits, syntax errors and results that are not JSON each get a clear reason."""
    done = await run(provider, code)
    assert done.status == status and done.message.startswith(message), done


async def test_stderr_keeps_its_start_and_its_end(provider: BwrapProvider) -> None:
    """Past its cap, stderr keeps the first and the last bytes (the traceback), and
    says how much it left out."""
    code = "import sys\nsys.stderr.write('noise ' * 20_000)\nraise ValueError('the end')\n"
    done = await run(provider, code, limits=Limits(stderr_bytes=4096))
    assert done.message == "ValueError: the end"
    assert len(done.stderr) <= 4096
    assert done.stderr.startswith(b"noise noise")
    assert b"bytes left out" in done.stderr and done.stderr.endswith(b"ValueError: the end\n")


# -- inputs, library, helpers -------------------------------------------------------


async def test_inputs_are_read_through_artifacts(provider: BwrapProvider) -> None:
    """Each input is mounted read-only; ``artifacts`` reads it as bytes, text or JSON."""
    with shared_folder() as folder:
        inputs = {
            "notes.txt": write(folder / "a", "café\n"),
            "data.json": write(folder / "b", json.dumps({"n": [1, 2, 3]})),
            "raw": write(folder / "c", b"\x00\xff"),
        }
        code = """
            assert artifacts.get("raw") == b"\\x00\\xff"
            [artifacts.names(), artifacts.text("notes.txt"), sum(artifacts.json("data.json")["n"]),
             artifacts.path("raw")]
        """
        done = await run(provider, code, inputs=inputs)
    assert done.status == "ok", done
    assert done.result == [["data.json", "notes.txt", "raw"], "café\n", 6, "/inputs/raw"]
    missing = await run(provider, "artifacts.get('nope')")
    assert "no input named 'nope'" in missing.message


async def test_the_library_imports_and_pw_is_bound(provider: BwrapProvider) -> None:
    """``from library import f`` finds the mounted library; ``pw`` is the helper module."""
    with shared_folder() as root:
        (root / "library").mkdir(mode=0o755)
        write(root / "library" / "__init__.py", "def shout(s):\n    return s.upper() + '!'\n")
        code = "from library import shout\n[shout('hi'), pw.word_count('a b c')]"
        done = await run(provider, code, library=root)
    assert (done.status, done.result) == ("ok", ["HI!", 3]), done


def test_request_checks_refuse_bad_names_and_missing_files(
    provider: BwrapProvider, tmp_path: Path
) -> None:
    """Input names become file names: no separators or dot files. The server opens the
    inputs and the library itself (bwrap copies them in from the descriptors), so a
    file in a private folder is fine; a missing input, a folder given as an input, and
    a file given as the library are refused before anything is spawned."""
    good = tmp_path / "f.txt"
    good.write_text("x")
    for name in ("../x", "a/b", ".hidden", "", "x" * 129):
        with pytest.raises(ValueError, match="input name"):
            provider._launch(RunRequest(code="", inputs={name: good}))
    launch = provider._launch(RunRequest(code="", inputs={"f": good}, library=tmp_path))
    assert len(launch.fds) == 2  # the input, and the library's one file: the same f.txt
    for fd in launch.fds:
        os.close(fd)
    with pytest.raises(ValueError, match="cannot open"):
        provider._launch(RunRequest(code="", inputs={"f": tmp_path / "missing"}))
    with pytest.raises(ValueError, match="is not a file"):
        provider._launch(RunRequest(code="", inputs={"f": tmp_path}))
    with pytest.raises(ValueError, match=r"library: .* is not a folder"):
        provider._launch(RunRequest(code="", library=good))


async def test_an_oversize_request_is_an_error_without_a_run(provider: BwrapProvider) -> None:
    """Code + args past request_bytes never reach a sandbox; non-JSON args are the
    caller's mistake."""
    done = await run(provider, "x = 1\n" * 1000, limits=Limits(request_bytes=4096))
    assert done.status == "error" and "over the 4096-byte cap" in done.message
    assert done.exit_code is None
    with pytest.raises(ValueError, match="plain JSON"):
        await run(provider, "1", args={1, 2})


# -- brokered tool calls --------------------------------------------------------------


async def test_tool_calls_round_trip_through_the_broker(provider: BwrapProvider) -> None:
    """``tools.call`` hands (name, input) to the host's broker and returns its output; a
    BrokerError comes back as ToolCallError with the broker's message."""
    calls: list[tuple[str, Any]] = []

    async def broker(name: str, tool_input: Any) -> Any:
        calls.append((name, tool_input))
        if name == "forbidden":
            raise BrokerError("'forbidden' needs a human's approval")
        return {"temperature": 21, "city": tool_input["city"]}

    code = """
        weather = tools.call("get_weather", {"city": "Paris"})
        try:
            tools.call("forbidden", {})
        except ToolCallError as exc:
            refused = str(exc)
        [weather, refused]
    """
    done = await run(provider, code, broker=broker)
    assert done.status == "ok", done
    assert done.result == [
        {"temperature": 21, "city": "Paris"},
        "'forbidden' needs a human's approval",
    ]
    assert calls == [("get_weather", {"city": "Paris"}), ("forbidden", {})]
    assert done.tool_calls == 2


async def test_tool_calls_past_the_limit_are_refused(provider: BwrapProvider) -> None:
    """Past max_tool_calls the host answers a refusal without asking the broker."""
    calls: list[str] = []

    async def broker(name: str, tool_input: Any) -> Any:
        calls.append(name)
        return len(calls)

    code = """
        outcomes = []
        for i in range(5):
            try:
                outcomes.append(tools.call("count"))
            except ToolCallError as exc:
                outcomes.append(str(exc))
        outcomes
    """
    done = await run(provider, code, broker=broker, limits=Limits(max_tool_calls=3))
    refusal = "tool call limit reached: at most 3 per run"
    assert done.result == [1, 2, 3, refusal, refusal]
    assert len(calls) == 3 and done.tool_calls == 3


async def test_without_a_broker_tools_call_raises(provider: BwrapProvider) -> None:
    done = await run(provider, "tools.call('anything', {})")
    assert done.status == "error"
    assert done.message == "ToolCallError: no tools are available to this program"


async def test_stdout_past_the_inline_cap_is_spilled_whole(provider: BwrapProvider) -> None:
    """Under the hard cap the run is ok: the first part inline, all of it spilled."""
    stream = b"".join(b"line %05d\n" % i for i in range(10_000))
    code = "import sys\nsys.stdout.buffer.write(args.encode())\n"
    with shared_folder() as spill:
        done = await run(
            provider,
            code,
            args=stream.decode(),
            limits=Limits(stdout_inline_bytes=4096),
            spill_dir=spill,
        )
        assert done.status == "ok", done
        assert done.stdout == stream[:4096] and done.stdout_total == len(stream)
        assert done.stdout_spill is not None and done.stdout_spill.read_bytes() == stream
    small = await run(provider, "print('x')", spill_dir=None)
    assert small.stdout_spill is None


# -- the probe, and the protocol's two sides ----------------------------------------


def test_check_reports_the_isolation_layers(provider: BwrapProvider) -> None:
    """The probe ran a real sandbox: its report names every layer the approval shows."""
    isolation = provider.check()
    assert isolation is provider.check()  # probed once
    assert isolation.confined and isolation.provider == "bwrap"
    for layer in ("user ns", "net ns (no network)", "uid 65534", "nested user ns disabled"):
        assert layer in isolation.layers
    assert "bubblewrap" in isolation.detail and "Python 3." in isolation.detail
    assert json.loads(json.dumps(isolation.as_dict()))["layers"] == list(isolation.layers)


def test_the_host_and_the_bootstrap_agree_on_the_protocol() -> None:
    """The bootstrap cannot import the server's modules: its constants are copies."""
    tree = ast.parse((GUEST / "bootstrap.py").read_text())
    constants = {
        target.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
        and target.id.isupper()
        and target.id != "TYPE_CHECKING"
        and isinstance(node.value, ast.Constant)
    }
    assert constants["EXIT_PROGRAM_ERROR"] == _outcome.EXIT_PROGRAM_ERROR
    assert constants["EXIT_BOOTSTRAP_FAILURE"] == _outcome.EXIT_BOOTSTRAP_FAILURE
    assert constants["STARTED"] == _outcome.STARTED


def test_limits_validate_and_serialize() -> None:
    assert Limits().as_dict()["memory_bytes"] == 512 * 2**20
    for bad in ({"wall_s": 0}, {"processes": 0}, {"cpu_s": 1.5}, {"memory_bytes": 2**20}):
        with pytest.raises(ValueError, match="Limits"):
            Limits(**bad)
    with pytest.raises(ValueError, match="stdout_inline_bytes"):
        Limits(stdout_inline_bytes=2, stdout_cap_bytes=1)


async def test_unconfined_mode_says_it_is_not_confined() -> None:
    """Unsafe local mode runs the same bootstrap, and its isolation says confined=False
    for the approval widget to show."""
    unconfined = UnconfinedProvider()
    isolation = unconfined.check()
    assert not isolation.confined and "UNSAFE" in isolation.detail
    done = await unconfined.run(
        RunRequest(code="import os\nprint(sorted(os.environ))\nargs + 1", args=1)
    )
    assert (done.status, done.result) == ("ok", 2), done
    assert done.stdout == b"['HOME', 'LANG', 'PATH', 'TMPDIR']\n"
    assert not done.isolation.confined
    slept = await unconfined.run(
        RunRequest(code="import time\ntime.sleep(30)", limits=Limits(wall_s=0.5))
    )
    assert slept.status == "timeout"
