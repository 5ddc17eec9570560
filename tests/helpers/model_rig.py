"""Shared pieces of the real-model tests: which wire the double speaks for each provider,
the environment that points the SDKs at it, agents and stream readers. The fixtures
``double`` and ``serve`` are in ``tests/conftest.py``."""

from __future__ import annotations

from typing import Any

from tests.helpers.llm_double import ProviderDouble
from tests.helpers.support import ALL_TOOLS

# provider prefix → (wire the double speaks for it, the environment pointing at the double)
WIRES = {
    "anthropic": "anthropic",
    "openai": "openai-responses",
    "google": "gemini",
    "openai-compatible": "openai-chat",
}
MODELS = {
    "anthropic": "anthropic:claude-test",
    # A reasoning model's name: pydantic-ai asks for encrypted reasoning by model profile.
    "openai": "openai:gpt-5-mini",
    "google": "google:gemini-test",
    "openai-compatible": "openai-compatible:local-test",
}


def provider_env(double: ProviderDouble) -> dict[str, str]:
    return {
        "ANTHROPIC_API_KEY": "sk-ant-test-key-do-not-log",
        "ANTHROPIC_BASE_URL": double.base_url,
        "OPENAI_API_KEY": "sk-openai-test-key-do-not-log",
        "OPENAI_BASE_URL": double.openai_base_url,
        "GOOGLE_API_KEY": "google-test-key-do-not-log",
        "GOOGLE_GEMINI_BASE_URL": double.base_url,
    }


def agent(model: str, tools: list[Any] = ALL_TOOLS) -> dict[str, Any]:
    return {
        "template": {"instructions": "You are a test agent.", "tools": list(tools)},
        "model": model,
    }


def said(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def reasoning(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "reasoning-delta")
