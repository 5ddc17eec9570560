"""Models: the interface the engine asks of a model, the scripted model, and real
providers over pydantic-ai's model layer (see docs/models.md).

- :mod:`parkway.runner.llm.model`: the model interface (:class:`Model`, its requests,
  messages and streamed events);
- :mod:`parkway.runner.llm.scripted`: :class:`ScriptedModel`, the agent file's scripted
  turns (the demo, tests, replays);
- :mod:`parkway.runner.llm.function`: :class:`FunctionModel`, a model a Python function
  steers (tests, demos);
- :mod:`parkway.runner.llm.testmodel`: :class:`TestModel`, which calls every tool once
  with arguments made from its schema (:mod:`parkway.runner.llm.samples`), then sums up;
- :mod:`parkway.runner.llm.tape`: model tapes, a real model's steps recorded in a
  cassette and served back;
- :mod:`parkway.runner.llm.spec`: model names, settings, and what each provider needs;
- :mod:`parkway.runner.llm.catalog`: building models and choosing the model of a run;
- :mod:`parkway.runner.llm.policy`: retry and timeout policies;
- :mod:`parkway.runner.llm.adapter`: the provider adapter (streaming, retries, failures), imported
  only when a provider model is first built (pydantic-ai takes seconds to import);
- :mod:`parkway.runner.llm.convert`: conversion between Parkway's history and pydantic-ai's.
"""

from parkway.runner.llm.catalog import ModelCatalog, build_model
from parkway.runner.llm.function import (
    FunctionInfo,
    FunctionModel,
    Reply,
    ReplyFunction,
    ToolCall,
)
from parkway.runner.llm.model import (
    AssistantTurn,
    Model,
    ModelEvent,
    ModelMessage,
    ModelReasoningDelta,
    ModelRequest,
    ModelStepEnd,
    ModelTextDelta,
    ModelToolCall,
    ModelToolInputDelta,
    ModelToolInputStart,
    ModelUsage,
    ToolDescription,
    ToolResult,
    UserTurn,
)
from parkway.runner.llm.policy import ModelTimeouts, RetryPolicy
from parkway.runner.llm.samples import SampleError, sample
from parkway.runner.llm.scripted import END_OF_SCRIPT, ScriptedModel
from parkway.runner.llm.spec import PROVIDERS, ModelSpec, missing_environment, parse_model_spec
from parkway.runner.llm.tape import ModelTape, TapeMode, TapeStep, event_from_json
from parkway.runner.llm.testmodel import TestModel

__all__ = [
    "END_OF_SCRIPT",
    "PROVIDERS",
    "AssistantTurn",
    "FunctionInfo",
    "FunctionModel",
    "Model",
    "ModelCatalog",
    "ModelEvent",
    "ModelMessage",
    "ModelReasoningDelta",
    "ModelRequest",
    "ModelSpec",
    "ModelStepEnd",
    "ModelTape",
    "ModelTextDelta",
    "ModelTimeouts",
    "ModelToolCall",
    "ModelToolInputDelta",
    "ModelToolInputStart",
    "ModelUsage",
    "Reply",
    "ReplyFunction",
    "RetryPolicy",
    "SampleError",
    "ScriptedModel",
    "TapeMode",
    "TapeStep",
    "TestModel",
    "ToolCall",
    "ToolDescription",
    "ToolResult",
    "UserTurn",
    "build_model",
    "event_from_json",
    "missing_environment",
    "parse_model_spec",
    "sample",
]
