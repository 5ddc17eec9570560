"""Provider failures through the real SDKs against the provider double: every refusal,
retry, timeout, cut stream and stop ends definitely, with a clear error and a usable
chat; a bad model setting stops the server at startup; keys never leak."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.helpers.llm_double import (
    Call,
    CutOff,
    Fail,
    Hang,
    ProviderDouble,
    Reset,
    StreamError,
    Turn,
)
from tests.helpers.model_rig import MODELS, said
from tests.helpers.support import (
    Api,
    user_message,
)

# -- failures -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, "API key was refused (401)"),
        (403, "API key was refused (403)"),
        (404, "was not found (404)"),
    ],
)
async def test_refusals_end_the_run_with_an_error_naming_provider_and_cause(
    status: int, words: str, double: ProviderDouble, serve: Any
) -> None:
    """Bad key, unknown model: one request (no retry), an AI SDK error chunk naming the
    provider and cause, never the key, and an idle chat that takes the next message.
    The user's message is kept (a reload shows what was asked), and sending it again
    with the same id retries the turn without storing it twice; once the retry has
    answered, the same id is a duplicate again."""
    double.script("anthropic", [Fail(status), Turn(text="Back.")])
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    chunks = await api.say("e1", "hi")
    error = chunks[-1]
    assert error["type"] == "error"
    assert error["errorText"].startswith("anthropic: ") and words in error["errorText"]
    assert "sk-ant" not in json.dumps(chunks)
    assert len(double.requests_for("anthropic")) == 1
    state = await api.state("e1")
    assert state["state"] == "idle"
    assert [(m["role"], m["id"]) for m in state["messages"]] == [("user", "u1")]
    again = await api.say("e1", "hi")
    assert said(again) == "Back."
    state = await api.state("e1")
    assert [m["role"] for m in state["messages"]] == ["user", "assistant"]
    replay = await api.chat("e1", [user_message("hi", "u1")])
    assert replay.status_code == 409 and replay.json()["error"]["code"] == "duplicate_message"
    await api.aclose()


async def test_context_too_long_names_the_cause(double: ProviderDouble, serve: Any) -> None:
    double.script(
        "openai-responses",
        [
            Fail(
                400,
                body={
                    "error": {
                        "message": "Your input exceeds the context window of this model.",
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                    }
                },
            )
        ],
    )
    server = serve(MODELS["openai"])
    api = await Api(server.base_url).login()
    chunks = await api.say("long", "hi")
    assert chunks[-1]["type"] == "error"
    assert "openai: the conversation is too long" in chunks[-1]["errorText"]
    await api.aclose()


async def test_rate_limits_are_retried_honouring_retry_after(
    double: ProviderDouble, serve: Any
) -> None:
    double.script(
        "anthropic",
        [Fail(429, headers={"retry-after": "0"}), Fail(529), Turn(text="Made it.")],
    )
    server = serve(MODELS["anthropic"], model_retries=2)
    api = await Api(server.base_url).login()
    chunks = await api.say("r1", "hi")
    assert said(chunks) == "Made it."
    assert len(double.requests_for("anthropic")) == 3
    await api.aclose()


async def test_retries_are_bounded_and_end_with_a_clear_error(
    double: ProviderDouble, serve: Any
) -> None:
    double.script("gemini", [Fail(503), Fail(503), Fail(503), Turn(text="never")])
    server = serve(MODELS["google"], model_retries=2)
    api = await Api(server.base_url).login()
    chunks = await api.say("r2", "hi")
    assert chunks[-1]["type"] == "error"
    assert "google: unavailable (503) after 3 attempts" in chunks[-1]["errorText"]
    assert len(double.requests_for("gemini")) == 3
    assert (await api.state("r2"))["state"] == "idle"
    await api.aclose()


async def test_a_retry_after_longer_than_the_limit_is_not_waited_for(
    double: ProviderDouble, serve: Any
) -> None:
    double.script("openai-chat", [Fail(429, headers={"retry-after": "3600"}), Turn(text="x")])
    server = serve(MODELS["openai-compatible"], model_retry_max_wait_s=2.0)
    api = await Api(server.base_url).login()
    chunks = await api.say("r3", "hi")
    assert chunks[-1]["type"] == "error" and "rate limited (429)" in chunks[-1]["errorText"]
    assert len(double.requests_for("openai-chat")) == 1
    await api.aclose()


async def test_connection_resets_and_overload_before_the_first_token_are_retried(
    double: ProviderDouble, serve: Any
) -> None:
    double.script("anthropic", [Reset(), StreamError(), Turn(text="Recovered.")])
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    chunks = await api.say("r4", "hi")
    assert said(chunks) == "Recovered."
    assert len(double.requests_for("anthropic")) == 3
    await api.aclose()


async def test_a_stream_cut_after_tokens_keeps_the_partial_step_and_resending_works(
    double: ProviderDouble, serve: Any
) -> None:
    double.script("openai-chat", [CutOff(text=["Half ", "an answer"]), Turn(text="Whole.")])
    server = serve(MODELS["openai-compatible"])
    api = await Api(server.base_url).login()
    chunks = await api.say("cut", "hi")
    assert said(chunks) == "Half an answer"
    assert chunks[-1]["type"] == "error" and "broke off" in chunks[-1]["errorText"]
    assert len(double.requests_for("openai-chat")) == 1  # tokens had streamed: no retry
    state = await api.state("cut")
    assert state["state"] == "idle"
    assert state["messages"][-1]["parts"][-1] == {
        "type": "text",
        "text": "Half an answer",
        "state": "done",
    }
    again = await api.say("cut", "again?", message_id="u2")
    assert said(again) == "Whole."
    await api.aclose()


async def test_stop_closes_the_providers_stream(double: ProviderDouble, serve: Any) -> None:
    """POST .../stop cancels the model request: the provider sees its stream closed, the
    partial answer is kept and the message finishes cleanly."""
    double.script("anthropic", [Hang(text=["Still ", "thinking"])])
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    import asyncio

    async def stop_soon() -> None:
        while not double.requests_for("anthropic"):
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        stopped = await api.http.post("/api/chats/stopme/stop")
        assert stopped.status_code in {200, 202, 204}, stopped.text

    stopper = asyncio.create_task(stop_soon())
    chunks = await api.say("stopme", "hi")
    await stopper
    assert chunks[-1]["type"] == "finish" and chunks[-1]["finishReason"] == "stop"
    assert await double.wait_disconnect(timeout=10)
    assert (await api.state("stopme"))["state"] == "idle"
    await api.aclose()


async def test_a_turn_stopped_before_the_model_said_anything_can_be_sent_again(
    double: ProviderDouble, serve: Any
) -> None:
    """Stopped before the first token, the turn has no answer: the user's message is
    kept (no empty reply after it), and sending it again with the same id runs the turn
    again (the playground's Retry) without storing it twice."""
    double.script("anthropic", [Hang(text=[]), Turn(text="Here now.")])
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    import asyncio

    async def stop_soon() -> None:
        while not double.requests_for("anthropic"):
            await asyncio.sleep(0.02)
        stopped = await api.http.post("/api/chats/quiet/stop")
        assert stopped.status_code in {200, 202, 204}, stopped.text

    stopper = asyncio.create_task(stop_soon())
    chunks = await api.say("quiet", "hi")
    await stopper
    assert chunks[-1]["type"] == "finish" and chunks[-1]["finishReason"] == "stop"
    state = await api.state("quiet")
    assert state["state"] == "idle"
    assert [(m["role"], m["id"]) for m in state["messages"]] == [("user", "u1")]
    assert said(await api.say("quiet", "hi")) == "Here now."
    assert [m["role"] for m in (await api.state("quiet"))["messages"]] == ["user", "assistant"]
    await api.aclose()


# -- startup --------------------------------------------------------------------------------


def _serve_cli(args: list[str], env: dict[str, str], tmp_path: Path) -> tuple[int, str]:
    import os
    import subprocess
    import sys

    from tests.helpers.support import ROOT

    clean = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parkway.transport.cli",
            "serve",
            "--data-dir",
            str(tmp_path),
            *args,
        ],
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--model", "anthropic:claude-x"], {}, "set ANTHROPIC_API_KEY"),
        (["--model", "google:gemini-x"], {}, "set GOOGLE_API_KEY or GEMINI_API_KEY"),
        (["--model", "openai-compatible:llama"], {}, "set OPENAI_BASE_URL"),
        (["--model", "mistral:large"], {}, "unknown model provider 'mistral'"),
        (["--model", "anthropic:"], {"ANTHROPIC_API_KEY": "k"}, "no valid model name"),
        (["--model", "claude"], {}, "is not '<provider>:<model>'"),
    ],
)
def test_a_bad_model_setting_fails_at_startup_with_one_line(
    args: list[str], env: dict[str, str], words: str, tmp_path: Path
) -> None:
    code, stderr = _serve_cli(args, env, tmp_path)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], stderr
    assert "Traceback" not in stderr


async def test_a_provider_that_stalls_past_the_read_timeout_fails_clearly(
    double: ProviderDouble, serve: Any
) -> None:
    """The read timeout bounds a silent provider; each attempt is retried, then the run
    ends with an error saying it timed out, and the chat is idle."""
    double.script(
        "anthropic",
        [Turn(text="late", pause_before_first=5.0), Turn(text="late", pause_before_first=5.0)],
    )
    server = serve(MODELS["anthropic"], model_read_timeout_s=0.5, model_retries=1)
    api = await Api(server.base_url).login()
    chunks = await api.say("slow", "hi")
    assert chunks[-1]["type"] == "error"
    assert "anthropic: timed out after 2 attempts" in chunks[-1]["errorText"]
    assert (await api.state("slow"))["state"] == "idle"
    await api.aclose()


async def test_keys_are_never_logged_stored_or_sent_to_the_browser(
    double: ProviderDouble, serve: Any, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    double.script("anthropic", [Fail(401), Turn(text="ok", calls=[Call("pick", {"q": "a"})])])
    server = serve(MODELS["anthropic"])
    api = await Api(server.base_url).login()
    failed = await api.say("k", "hi")
    parked = await api.say("k", "again", message_id="u2")
    state = await api.state("k")
    await api.aclose()
    key = "sk-ant-test-key-do-not-log"
    sent = double.requests_for("anthropic")[0].headers
    assert key in (sent.get("x-api-key", ""), sent.get("authorization", "")[len("Bearer ") :])
    assert key not in json.dumps([failed, parked, state])
    assert key not in caplog.text
    for name in await redis.keys("*"):
        kind = await redis.type(name)
        dump = await redis.dump(name)
        assert dump is None or key.encode() not in dump, (name, kind)


async def test_an_exhausted_quota_is_not_retried(double: ProviderDouble, serve: Any) -> None:
    """OpenAI answers an exhausted quota with 429 ``insufficient_quota``: waiting does not
    help, so it is reported at once, not retried as a rate limit."""
    body = {
        "error": {
            "message": "You exceeded your current quota.",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    double.script("openai-chat", [Fail(429, body=body), Turn(text="never")])
    server = serve(MODELS["openai-compatible"])
    api = await Api(server.base_url).login()
    chunks = await api.say("quota", "hi")
    assert chunks[-1]["type"] == "error"
    assert "quota or credit is used up (429)" in chunks[-1]["errorText"]
    assert len(double.requests_for("openai-chat")) == 1
    await api.aclose()
