"""The provider adapter: Parkway's model interface over pydantic-ai's model layer.

:class:`ProviderModel` turns a Parkway :class:`~parkway.runner.llm.model.ModelRequest` into a
pydantic-ai request (conversion in :mod:`parkway.runner.llm.convert`), streams the response as
Parkway model events, and ends with a :class:`~parkway.runner.llm.model.ModelStepEnd` carrying the
provider's parts for storage.

Failures are definite. Before the first event reaches the runner, a rate limit, an
overloaded or failing server, a timeout or a dropped connection is tried again with
backoff (honouring the provider's ``Retry-After``), a bounded number of times; after
that, or once anything has streamed, or for a refusal that waiting cannot fix (bad key,
unknown model, context too long), it raises :class:`~parkway.runner.errors.ModelError` whose
message names the provider and the cause. The retry loop is ours rather than the SDKs'
(theirs are turned off) because whether a retry is safe depends on what this stream has
already given the runner, and because it must behave the same for every provider.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

from pydantic_ai.direct import model_request_stream
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
    UnexpectedModelBehavior,
)
from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models import Model as PAModel
from pydantic_ai.settings import ModelSettings

from parkway.runner.errors import ModelError
from parkway.runner.llm.convert import request_parameters, step_end, to_messages, tool_calls
from parkway.runner.llm.model import (
    ModelEvent,
    ModelReasoningDelta,
    ModelRequest,
    ModelTextDelta,
    ModelToolInputDelta,
    ModelToolInputStart,
)
from parkway.runner.llm.policy import RetryPolicy, Sleep
from parkway.runner.llm.spec import ModelSpec

__all__ = ["ProviderModel"]

log = logging.getLogger(__name__)


def _retryable(exc: ModelAPIError) -> bool:
    if isinstance(exc, ModelQuotaExceededError):
        return False  # waiting does not refill a quota or pay a bill
    if isinstance(exc, ModelRateLimitError | ModelUnavailableError | ModelServerError):
        return True
    if isinstance(exc, ModelConnectionError):
        return True
    return isinstance(exc, ModelHTTPError) and (
        exc.status_code in {408, 409, 429} or exc.status_code >= 500
    )


def _provider_message(exc: ModelAPIError) -> str:
    """The provider's own short error text, when it sent one (never a key: providers do
    not echo keys, and the text is cut short and single-lined)."""
    body = exc.body
    text: object = None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            text = inner.get("message")
        elif isinstance(inner, str):
            text = inner
    if not isinstance(text, str) or not text.strip():
        return ""
    text = " ".join(str(text).split())
    return text[:200] + ("…" if len(text) > 200 else "")


class ProviderModel:
    """A named provider model behind Parkway's model interface (see the module doc)."""

    def __init__(
        self,
        spec: ModelSpec,
        model: PAModel,
        *,
        key_vars: tuple[str, ...] = (),
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        closers: Sequence[Callable[[], Awaitable[None]]] = (),
    ) -> None:
        self.spec = spec
        self.model = model
        self.key_vars = key_vars
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._closers = tuple(closers)
        self._settings: ModelSettings = ModelSettings(**dict(spec.settings))  # type: ignore[typeddict-item]

    @property
    def name(self) -> str:
        return self.spec.name

    async def aclose(self) -> None:
        """Close the provider SDK's HTTP client."""
        for close in self._closers:
            await close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        messages = to_messages(request)
        parameters = request_parameters(request)
        attempt = 0
        while True:
            started = False
            try:
                async with model_request_stream(
                    self.model,
                    messages,
                    model_settings=self._settings,
                    model_request_parameters=parameters,
                ) as response:
                    starts: dict[int, bool] = {}
                    async for event in response:
                        for item in self._translate(event, starts):
                            started = True
                            yield item
                    final = response.get()
                for call in tool_calls(final):
                    started = True
                    yield call
                yield step_end(final, self.spec.provider)
                return
            except ModelAPIError as exc:
                if started or not _retryable(exc) or attempt >= self.retry.retries:
                    raise self._failure(exc, started=started, attempts=attempt + 1) from None
                wait = self.retry.wait(attempt, exc.retry_after)
                if wait is None:
                    raise self._failure(exc, started=False, attempts=attempt + 1) from None
                attempt += 1
                log.warning(
                    "model %s: %s; retry %d of %d in %.1fs",
                    self.name,
                    type(exc).__name__,
                    attempt,
                    self.retry.retries,
                    wait,
                )
                await self._sleep(wait)
            except UnexpectedModelBehavior as exc:
                log.warning("model %s: unexpected response: %s", self.name, type(exc).__name__)
                raise ModelError(
                    f"{self.spec.provider}: the model's response could not be read "
                    f"({type(exc).__name__}); try again"
                ) from None

    def _translate(self, event: object, starts: dict[int, bool]) -> list[ModelEvent]:
        """pydantic-ai stream events as Parkway model events."""
        if isinstance(event, PartStartEvent):
            part = event.part
            if isinstance(part, TextPart):
                return [ModelTextDelta(part.content)] if part.content else []
            if isinstance(part, ThinkingPart):
                return [ModelReasoningDelta(part.content)] if part.content else []
            if isinstance(part, ToolCallPart):
                key = str(event.index)
                starts[event.index] = True
                out: list[ModelEvent] = [ModelToolInputStart(key, part.tool_name)]
                args = part.args
                if isinstance(args, dict):
                    args = (
                        json.dumps(args, separators=(",", ":"), ensure_ascii=False) if args else ""
                    )
                if args:
                    out.append(ModelToolInputDelta(key, args))
                return out
            return []
        if isinstance(event, PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextPartDelta):
                return [ModelTextDelta(delta.content_delta)] if delta.content_delta else []
            if isinstance(delta, ThinkingPartDelta):
                text = delta.content_delta
                return [ModelReasoningDelta(text)] if text else []
            if isinstance(delta, ToolCallPartDelta) and starts.get(event.index):
                args_delta = delta.args_delta
                if isinstance(args_delta, dict):
                    args_delta = json.dumps(args_delta, separators=(",", ":"), ensure_ascii=False)
                return [ModelToolInputDelta(str(event.index), args_delta)] if args_delta else []
        return []

    def _failure(self, exc: ModelAPIError, *, started: bool, attempts: int) -> ModelError:
        provider = self.spec.provider
        status = f" ({exc.status_code})" if isinstance(exc, ModelHTTPError) else ""
        said = _provider_message(exc)
        detail = f": {said}" if said else ""
        log.warning("model %s failed: %s%s", self.name, type(exc).__name__, status)
        if isinstance(exc, ModelAuthenticationError):
            keys = " or ".join(self.key_vars) or "the API key"
            return ModelError(f"{provider}: the API key was refused{status}; check {keys}")
        if isinstance(exc, ModelNotFoundError):
            return ModelError(
                f"{provider}: model {self.spec.model!r} was not found{status}; check the model name"
            )
        if isinstance(exc, ModelQuotaExceededError):
            return ModelError(
                f"{provider}: the account's quota or credit is used up{status}{detail}"
            )
        if isinstance(exc, ModelContextWindowExceededError):
            return ModelError(
                f"{provider}: the conversation is too long for {self.spec.model}{status}{detail}"
            )
        if started:
            return ModelError(
                f"{provider}: the response broke off after it had started{status}{detail}; "
                "send your message again",
                retryable=True,
            )
        if _retryable(exc):
            what = "rate limited" if isinstance(exc, ModelRateLimitError) else "unavailable"
            if isinstance(exc, ModelTimeoutError):
                what = "timed out"
            elif isinstance(exc, ModelConnectionError):
                what = "could not be reached"
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            return ModelError(
                f"{provider}: {what}{status}{tries}{detail}; try again later", retryable=True
            )
        return ModelError(f"{provider}: the request was refused{status}{detail}")
