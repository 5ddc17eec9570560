"""Real models: named providers over pydantic-ai's model layer (see docs/models.md).

- :mod:`parkway.runner.llm.spec`: model names, settings, and what each provider needs;
- :mod:`parkway.runner.llm.catalog`: building models and choosing the model of a run;
- :mod:`parkway.runner.llm.policy`: retry and timeout policies;
- :mod:`parkway.runner.llm.adapter`: the provider adapter (streaming, retries, failures), imported
  only when a provider model is first built (pydantic-ai takes seconds to import);
- :mod:`parkway.runner.llm.convert`: conversion between Parkway's history and pydantic-ai's.
"""

from parkway.runner.llm.catalog import ModelCatalog, build_model
from parkway.runner.llm.policy import ModelTimeouts, RetryPolicy
from parkway.runner.llm.spec import PROVIDERS, ModelSpec, missing_environment, parse_model_spec

__all__ = [
    "PROVIDERS",
    "ModelCatalog",
    "ModelSpec",
    "ModelTimeouts",
    "RetryPolicy",
    "build_model",
    "missing_environment",
    "parse_model_spec",
]
