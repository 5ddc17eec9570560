"""Model names and settings: ``"<provider>:<model>"``, and what each provider needs.

A model is named ``anthropic:claude-sonnet-4-6``, ``openai:gpt-5-mini``,
``google:gemini-2.5-flash`` or ``openai-compatible:llama3.1`` (any server that speaks
OpenAI Chat Completions: vLLM, Ollama, LM Studio, llama.cpp, OpenRouter). It may come with
settings (``{"name": ..., "settings": {...}}``). This module only reads and checks names,
settings and the environment; it imports no provider SDK, so a template can be checked
anywhere. Keys come from the environment and are never kept in a :class:`ModelSpec`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parkway.runner.errors import TemplateError

__all__ = [
    "PROVIDERS",
    "ModelSpec",
    "ProviderInfo",
    "missing_environment",
    "parse_model_spec",
]


@dataclass(frozen=True)
class ProviderInfo:
    """What a provider prefix means: where its key and base URL come from."""

    prefix: str
    title: str
    key_vars: tuple[str, ...]  # the first one set is used
    key_required: bool
    base_url_var: str | None
    base_url_required: bool = False
    # Settings keys of pydantic-ai's model layer that belong to this provider.
    settings_prefix: str = ""


PROVIDERS: dict[str, ProviderInfo] = {
    "openai": ProviderInfo(
        "openai", "OpenAI", ("OPENAI_API_KEY",), True, "OPENAI_BASE_URL", False, "openai_"
    ),
    "anthropic": ProviderInfo(
        "anthropic",
        "Anthropic",
        ("ANTHROPIC_API_KEY",),
        True,
        "ANTHROPIC_BASE_URL",
        False,
        "anthropic_",
    ),
    "google": ProviderInfo(
        "google",
        "Google Gemini",
        ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        True,
        "GOOGLE_GEMINI_BASE_URL",
        False,
        "google_",
    ),
    # Local servers (Ollama, llama.cpp) take no key; a hosted one (OpenRouter) needs it.
    "openai-compatible": ProviderInfo(
        "openai-compatible",
        "OpenAI-compatible server",
        ("OPENAI_API_KEY",),
        False,
        "OPENAI_BASE_URL",
        True,
        "openai_",
    ),
}

# Settings every provider takes (pydantic-ai's ModelSettings). Timeouts and retries are
# the server's (settings of `parkway serve`), never an agent's; headers could carry keys.
COMMON_SETTINGS = frozenset(
    {
        "temperature",
        "max_tokens",
        "top_p",
        "thinking",
        "seed",
        "stop_sequences",
        "presence_penalty",
        "frequency_penalty",
        "parallel_tool_calls",
    }
)
SERVER_ONLY = frozenset(
    {"timeout", "request_timeout", "first_event_timeout", "max_retries", "extra_headers"}
)
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")
_THINKING = {True, False, "minimal", "low", "medium", "high", "xhigh", "max"}


@dataclass(frozen=True)
class ModelSpec:
    """A model by name (``provider:model``) with its settings, or the scripted model."""

    provider: str
    model: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    scripted: tuple[Any, ...] | None = None  # the script's turns, for provider "scripted"

    @property
    def name(self) -> str:
        return "scripted" if self.provider == "scripted" else f"{self.provider}:{self.model}"

    @property
    def info(self) -> ProviderInfo | None:
        return PROVIDERS.get(self.provider)


def _known() -> str:
    return ", ".join(f"{p}:" for p in PROVIDERS)


def _parse_name(name: str, where: str) -> tuple[str, str]:
    provider, sep, model = name.partition(":")
    if not sep:
        raise TemplateError(
            f"{where}: {name!r} is not '<provider>:<model>' (providers: {_known()})"
        )
    if provider not in PROVIDERS:
        raise TemplateError(
            f"{where}: unknown model provider {provider!r} in {name!r} (known: {_known()})"
        )
    if not _MODEL_ID.match(model):
        raise TemplateError(
            f"{where}: {name!r} has no valid model name after '{provider}:' "
            f"(for example '{provider}:{_EXAMPLES[provider]}')"
        )
    return provider, model


_EXAMPLES = {
    "openai": "gpt-5-mini",
    "anthropic": "claude-sonnet-4-6",
    "google": "gemini-2.5-flash",
    "openai-compatible": "llama3.1",
}


def _check_settings(provider: str, settings: Any, where: str) -> dict[str, Any]:
    if not isinstance(settings, Mapping):
        raise TemplateError(f"{where}.settings: expected an object")
    info = PROVIDERS[provider]
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in SERVER_ONLY:
            raise TemplateError(
                f"{where}.settings.{key}: timeouts, retries and headers are server settings "
                "(see `parkway serve --help`), not an agent's"
            )
        foreign = next(
            (
                p.settings_prefix
                for p in PROVIDERS.values()
                if p.settings_prefix and key.startswith(p.settings_prefix)
            ),
            None,
        )
        if key in COMMON_SETTINGS or (foreign is not None and foreign == info.settings_prefix):
            pass
        elif foreign is not None:
            raise TemplateError(
                f"{where}.settings.{key}: a setting for another provider than {provider!r}"
            )
        else:
            raise TemplateError(
                f"{where}.settings.{key}: unknown setting (use {', '.join(sorted(COMMON_SETTINGS))}"
                f" or a '{info.settings_prefix}' setting of the provider)"
            )
        if key == "temperature" and not (
            isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 2
        ):
            raise TemplateError(f"{where}.settings.temperature: a number from 0 to 2")
        if key == "max_tokens" and not (
            isinstance(value, int) and not isinstance(value, bool) and value > 0
        ):
            raise TemplateError(f"{where}.settings.max_tokens: a positive integer")
        if key == "thinking" and value not in _THINKING:
            raise TemplateError(
                f"{where}.settings.thinking: true, false, or one of minimal, low, medium, "
                "high, xhigh, max"
            )
        out[key] = value
    return out


def parse_model_spec(value: Any, where: str = "model") -> ModelSpec:
    """Read a model as an agent file's ``model``, a template's ``llm`` or ``--model``
    give it: ``"provider:model"``, ``{"name": ..., "settings": {...}}`` or
    ``{"scripted": {"turns": [...]}}``. Raises :class:`TemplateError` naming the problem."""
    if isinstance(value, str):
        provider, model = _parse_name(value.strip(), where)
        return ModelSpec(provider, model)
    if isinstance(value, Mapping):
        if "scripted" in value:
            if set(value) != {"scripted"}:
                raise TemplateError(f"{where}: a scripted model has no other keys")
            script = value["scripted"]
            if not isinstance(script, Mapping) or not isinstance(script.get("turns"), list):
                raise TemplateError(f"{where}.scripted.turns: expected a list of turns")
            return ModelSpec("scripted", scripted=tuple(script["turns"]))
        extra = sorted(set(value) - {"name", "settings"})
        if extra:
            raise TemplateError(f"{where}: unexpected key(s) {', '.join(extra)}")
        name = value.get("name")
        if not isinstance(name, str):
            raise TemplateError(f"{where}.name: expected '<provider>:<model>'")
        provider, model = _parse_name(name.strip(), f"{where}.name")
        return ModelSpec(
            provider, model, _check_settings(provider, value.get("settings", {}), where)
        )
    raise TemplateError(
        f"{where}: expected '<provider>:<model>', {{'name': ..., 'settings': {{...}}}} "
        "or {'scripted': {'turns': [...]}}"
    )


def missing_environment(spec: ModelSpec, environ: Mapping[str, str]) -> str | None:
    """A one-line message naming what the environment lacks for ``spec``, or None."""
    info = spec.info
    if info is None:
        return None
    if info.key_required and not any(environ.get(v) for v in info.key_vars):
        either = " or ".join(info.key_vars)
        return (
            f"model {spec.name!r} needs an {info.title} API key: set {either} in the "
            "environment (keys are read from the environment only)"
        )
    if info.base_url_required and not environ.get(info.base_url_var or ""):
        return (
            f"model {spec.name!r} needs the server's address: set {info.base_url_var} "
            "(for example http://127.0.0.1:11434/v1 for Ollama)"
        )
    return None
