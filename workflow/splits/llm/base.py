"""The one interface every language-model stage uses.

A stage builds ``Request`` objects (chat ``messages`` or a raw ``prompt`` for completion models,
plus ``SamplingParams``), hands a batch to a ``Backend`` and gets one ``Completion`` per request,
in order. Backends: ``vllm``, ``openai``, ``transformers`` and ``builtin`` (non-LLM models of the
evaluation and probes, registered with ``register_builtin``).
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    max_tokens: int = 256
    seed: int = 0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """Exactly one of ``messages`` (chat: tuple of {"role", "content"} dicts) or ``prompt``
    (raw completion string). ``payload`` carries structured data for builtin models (e.g. the
    row a builtin theory model reads); it is part of the cache key only for builtin models."""

    messages: tuple[Mapping[str, str], ...] | None = None
    prompt: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    payload: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("a Request needs exactly one of messages or prompt")


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str  # "stop", "length", "error", ...
    prompt_tokens: int
    output_tokens: int
    latency_s: float
    cached: bool = False


class Backend(ABC):
    """A model behind the interface. ``identity`` is what makes two models the same for the
    response cache (backend, model path or id, revision, ...); secrets never go in it."""

    name: str
    #: Python modules the engine imports when it is built, and the pip extra of splits that
    #: installs them: checked before any job runs (splits.pipeline.start.check_extras)
    requires: tuple[str, ...] = ()
    extra: str | None = None
    #: spec keys naming what the engine loads from a local path or the Hugging Face hub (a
    #: model, a tokenizer): found before any job runs (splits.pipeline.model_files)
    hub_files: tuple[str, ...] = ()
    #: what the backend can do, asked through the backend table (splits.llm.backends): a
    #: language model reading a prompt template (its prompts counted against its context); one
    #: whose engine served mode serves; one that can classify (be a CM); one whose requests run
    #: in the model's batch job; one that reads the request's payload (then part of the cache key)
    prompted: bool = False
    servable: bool = False
    classifies: bool = True
    batch_job: bool = True
    payload_in_key: bool = False

    @classmethod
    def gpus(cls, spec: Mapping[str, Any]) -> int:
        """GPUs a job running a model of this validated ``spec`` needs."""
        return 0

    @classmethod
    def not_installed(cls, name: str) -> str | None:
        """Why model ``name``'s engine cannot be built in this Python (one line naming the
        missing modules and what installs them), or None when ``requires`` is importable."""
        missing = [module for module in cls.requires if importlib.util.find_spec(module) is None]
        if not missing:
            return None
        verb = "is" if len(missing) == 1 else "are"
        return (
            f"models.{name}.backend: {' and '.join(missing)} {verb} not installed in this Python "
            f"(pip install 'splits[{cls.extra}]')"
        )

    @classmethod
    def resolve(cls, name: str, spec: Mapping[str, Any]) -> Callable[..., Backend]:
        """What builds model ``name`` of this backend: the class itself, or (a family of kinds,
        ``builtin``) the kind's own class or factory."""
        return cls

    @abstractmethod
    def identity(self) -> dict[str, Any]: ...

    @abstractmethod
    def generate(self, requests: list[Request]) -> list[Completion]: ...

    #: requests per ``generate`` call when ``stream`` is not overridden: the response cache
    #: stores each chunk as soon as it is done, so a killed run loses at most one chunk.
    stream_chunk_size: int = 64

    def stream(self, requests: list[Request]) -> Iterator[tuple[int, Completion]]:
        """Yield ``(index into requests, completion)`` as completions finish, in any order.

        The default generates in chunks of ``stream_chunk_size``; backends that finish requests
        one at a time (HTTP servers) override it so each result is cached the moment it arrives.
        """
        step = max(1, int(self.stream_chunk_size))
        for start in range(0, len(requests), step):
            chunk = requests[start : start + step]
            completions = self.generate(chunk)
            if len(completions) != len(chunk):
                raise LLMError(
                    f"model {getattr(self, 'name', '?')}: backend returned {len(completions)} "
                    f"completions for {len(chunk)} requests"
                )
            for offset, completion in enumerate(completions):
                yield start + offset, completion

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (GPU memory, HTTP clients)."""

    @classmethod
    def spec_identity(cls, name: str, spec: Mapping[str, Any]) -> dict[str, Any] | None:
        """The identity of the model a validated ``spec`` describes, known without building the
        backend, or None when it must be built first (cheap backends). Backends that load an
        engine (weights on a GPU) override it: the response cache is then consulted before the
        engine exists, and a job whose requests are all cached never builds it."""
        return None

    def prefix_cache_stats(self) -> tuple[int, int] | None:
        """``(hit tokens, queried tokens)`` of the engine's prefix cache since it was built, where
        the engine exposes them; None elsewhere."""
        return None


class LLMError(RuntimeError):
    """A model call failed for good (server unreachable, retries exhausted, bad response); the
    message names the model or server and the last status, never a secret."""


BuiltinFactory = Callable[[str, Mapping[str, Any]], Backend]
BUILTIN_MODELS: dict[str, BuiltinFactory] = {}


def register_builtin(kind: str) -> Callable[[BuiltinFactory], BuiltinFactory]:
    """Register a builtin (non-LLM) model kind: ``models: {name: {backend: builtin, kind: ...}}``."""

    def decorator(factory: BuiltinFactory) -> BuiltinFactory:
        BUILTIN_MODELS[kind] = factory
        return factory

    return decorator
