"""Building models by name, once each, and choosing the model of a run.

:class:`ModelCatalog` is what the runner asks for the model of a run: the server's
override (``parkway serve --model``) if there is one, else the run's template ``llm``,
else the agent file's model. Provider models are built on first use and kept (one HTTP
connection pool per model), with the keys and base URLs of the environment it was given.
With a model tape (:mod:`parkway.runner.llm.tape`, a cassette's recorded model steps),
provider models are served through the tape instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from parkway.runner.errors import ModelError, TemplateError
from parkway.runner.llm.model import Model
from parkway.runner.llm.policy import ModelTimeouts, RetryPolicy, Sleep
from parkway.runner.llm.scripted import ScriptedModel
from parkway.runner.llm.spec import ModelSpec, missing_environment
from parkway.runner.llm.tape import ModelTape

__all__ = ["ModelCatalog", "build_model"]


def _key(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((environ[n] for n in names if environ.get(n)), None)


def build_model(
    spec: ModelSpec,
    environ: Mapping[str, str],
    *,
    timeouts: ModelTimeouts | None = None,
    retry: RetryPolicy | None = None,
    sleep: Sleep | None = None,
) -> Model:
    """The model ``spec`` names. Raises :class:`ModelError` when the environment lacks
    what it needs (the message names the variable)."""
    if spec.provider == "scripted":
        return ScriptedModel(list(spec.scripted or ()))
    problem = missing_environment(spec, environ)
    if problem is not None:
        raise ModelError(problem)
    info = spec.info
    assert info is not None
    timeouts = timeouts or ModelTimeouts()
    # The provider SDKs are imported here, on first use: a server on the scripted model
    # never loads them.
    import httpx2  # noqa: PLC0415

    timeout = httpx2.Timeout(timeouts.read_s, connect=timeouts.connect_s)
    key = _key(environ, info.key_vars)
    base_url = environ.get(info.base_url_var or "") or None
    pa_model: Any
    closers: list[Callable[[], Awaitable[None]]] = []
    if spec.provider in {"openai", "openai-compatible"}:
        from openai import AsyncOpenAI  # noqa: PLC0415
        from pydantic_ai.models.openai import (  # noqa: PLC0415
            OpenAIChatModel,
            OpenAIResponsesModel,
        )
        from pydantic_ai.providers.openai import OpenAIProvider  # noqa: PLC0415

        client = AsyncOpenAI(
            api_key=key or "not-needed",
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
        )
        closers.append(client.close)
        provider = OpenAIProvider(openai_client=client)
        if spec.provider == "openai":
            pa_model = OpenAIResponsesModel(spec.model, provider=provider)
        else:
            pa_model = OpenAIChatModel(spec.model, provider=provider)
    elif spec.provider == "anthropic":
        from anthropic import AsyncAnthropic  # noqa: PLC0415
        from pydantic_ai.models.anthropic import AnthropicModel  # noqa: PLC0415
        from pydantic_ai.providers.anthropic import AnthropicProvider  # noqa: PLC0415

        client_a = AsyncAnthropic(api_key=key, base_url=base_url, max_retries=0, timeout=timeout)
        closers.append(client_a.close)
        pa_model = AnthropicModel(spec.model, provider=AnthropicProvider(anthropic_client=client_a))
    elif spec.provider == "google":
        from google.genai.types import HttpRetryOptions  # noqa: PLC0415
        from pydantic_ai.models.google import GoogleModel  # noqa: PLC0415
        from pydantic_ai.providers.google import GoogleProvider  # noqa: PLC0415

        http_client = httpx2.AsyncClient(timeout=timeout)
        closers.append(http_client.aclose)
        google = GoogleProvider(
            api_key=key,
            base_url=base_url,
            http_client=http_client,
            retry_options=HttpRetryOptions(attempts=1),
        )
        pa_model = GoogleModel(spec.model, provider=google)
    else:  # pragma: no cover - parse_model_spec admits only the providers above
        raise TemplateError(f"unknown model provider {spec.provider!r}")
    from parkway.runner.llm.adapter import ProviderModel  # noqa: PLC0415

    kwargs: dict[str, Any] = {"key_vars": info.key_vars, "retry": retry, "closers": closers}
    if sleep is not None:
        kwargs["sleep"] = sleep
    return ProviderModel(spec, pa_model, **kwargs)


class ModelCatalog:
    """Chooses and builds the model of each run (see the module doc)."""

    def __init__(
        self,
        default: Model | None,
        *,
        default_spec: ModelSpec | None = None,
        override: ModelSpec | None = None,
        environ: Mapping[str, str] | None = None,
        timeouts: ModelTimeouts | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        tape: ModelTape | None = None,
        pinned: Model | None = None,
    ) -> None:
        self.default = default
        # A model object every run uses, whatever its template names (a test's model
        # swapped in for the agent's: Runtime(..., model=FunctionModel(...))).
        self.pinned = pinned
        # A cassette's model tape (replays of real-model chats): provider models are
        # served through it, and built only when a step goes to the real model.
        self.tape = tape
        self.default_spec = default_spec
        self.override = override
        # The environment is read when the catalog is made (a server: at startup).
        self._environ = dict(os.environ if environ is None else environ)
        self._timeouts = timeouts
        self._retry = retry
        self._sleep = sleep
        self._built: dict[str, Model] = {}

    def chosen(self, llm: ModelSpec | None) -> ModelSpec | None:
        """The spec a run with this template ``llm`` uses (None: the default model, or
        the pinned one)."""
        if self.pinned is not None:
            return None
        if self.override is not None:
            return self.override
        if llm is not None:
            return llm
        return self.default_spec if self.default is None else None

    def problem(self, spec: ModelSpec | None) -> str | None:
        """What the environment lacks to build ``spec``, in one line, or None."""
        if spec is None or spec.provider == "scripted":
            return None
        if self.tape is not None and not self.tape.needs_model:
            return None  # every step comes from the tape: no key is needed
        return missing_environment(spec, self._environ)

    def model_for(self, llm: ModelSpec | None) -> Model:
        """The model of a run whose template says ``llm`` (None: the agent file's)."""
        if self.pinned is not None:
            return self.pinned
        spec = self.chosen(llm)
        if spec is None:
            if self.default is None:
                raise ModelError(
                    "no model is configured: give the agent file a 'model', the template "
                    "an 'llm', or start the server with --model"
                )
            return self.default
        cache_key = repr((spec.name, sorted(spec.settings.items()), spec.scripted))
        model = self._built.get(cache_key)
        if model is None:

            def build(spec: ModelSpec = spec) -> Model:
                return build_model(
                    spec,
                    self._environ,
                    timeouts=self._timeouts,
                    retry=self._retry,
                    sleep=self._sleep,
                )

            if self.tape is not None and spec.provider != "scripted":
                model = self.tape.wrap(spec.name, build)
            else:
                model = build()
            self._built[cache_key] = model
        return model

    async def aclose(self) -> None:
        """Close the HTTP clients of the models built so far (at server shutdown)."""
        built, self._built = list(self._built.values()), {}
        for model in built:
            close = getattr(model, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
