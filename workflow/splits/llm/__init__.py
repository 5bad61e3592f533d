"""The LLM layer: one interface over vLLM, OpenAI-compatible servers, local Hugging Face models
and builtin (non-LLM) models, with a persistent SQLite response cache.

    from splits.llm import Request, SamplingParams, load_model
    model = load_model("cm", config["models"], cache_path="results/llm_cache.sqlite")
    completions = model.generate([Request(messages=({"role": "user", "content": "hi"},))])

Importing this package is cheap: torch, transformers, vllm and httpx load only when a model of
that backend is built, and vLLM and transformers engines only when a request misses the cache.
"""

from splits.llm.backends import (
    BACKENDS,
    build_backend,
    declared_identity,
    model_spec,
    validate_registry,
)
from splits.llm.base import (
    BUILTIN_MODELS,
    Backend,
    Completion,
    LLMError,
    Request,
    SamplingParams,
    register_builtin,
)
from splits.llm.cache import ResponseCache, request_key
from splits.llm.registry import (
    Model,
    Throughput,
    gpu_resources,
    load_model,
)

__all__ = [
    "BACKENDS",
    "BUILTIN_MODELS",
    "Backend",
    "Completion",
    "LLMError",
    "Model",
    "Request",
    "ResponseCache",
    "SamplingParams",
    "Throughput",
    "build_backend",
    "declared_identity",
    "gpu_resources",
    "load_model",
    "model_spec",
    "register_builtin",
    "request_key",
    "validate_registry",
]
