"""The model registry (``config["models"]``), ``load_model`` and the cached ``Model`` wrapper.

A registry maps names to specs (``{backend: vllm|openai|transformers|builtin, ...}``); the keys of
each backend, their types and defaults live in ``workflow/schemas/config.schema.yaml`` (section
``models``), which is also what validates a registry handed to ``load_model`` directly.
"""

from __future__ import annotations

import copy
import importlib
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from splits.config import ConfigError, load_schema, validate_config
from splits.llm.base import BUILTIN_MODELS, Backend, Completion, LLMError, Request
from splits.llm.cache import ResponseCache, request_key

log = logging.getLogger(__name__)

#: modules that register builtin kinds; imported lazily, only when a kind is not yet known
BUILTIN_PROVIDERS = ("splits.theory", "splits.classify", "splits.probes.scripted")
#: batches with at least this many uncached requests get a progress bar
PROGRESS_MIN_REQUESTS = 16

_MODELS_SCHEMA: dict | None = None


def _models_schema() -> dict:
    global _MODELS_SCHEMA
    if _MODELS_SCHEMA is None:
        models = load_schema()["properties"]["models"]
        _MODELS_SCHEMA = {"type": "object", "properties": {"models": models}}
    return _MODELS_SCHEMA


def validate_registry(registry: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A validated deep copy of ``registry`` with defaults filled in.

    Raises ConfigError naming ``models.<name>.<key>`` for unknown keys, wrong types, missing
    required keys and bad values.
    """
    if not isinstance(registry, Mapping):
        raise ConfigError("models: must be a mapping of model name -> spec")
    checked = validate_config({"models": copy.deepcopy(dict(registry))}, _models_schema())
    models = checked["models"]
    for name, spec in models.items():
        if spec["backend"] == "openai":
            url = str(spec["base_url"])
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"models.{name}.base_url: must start with http:// or https://")
    return models


def model_spec(name: str, registry: Mapping[str, Any]) -> dict[str, Any]:
    """The validated spec (defaults filled) of model ``name``."""
    if not isinstance(registry, Mapping) or name not in registry:
        known = ", ".join(sorted(registry)) if isinstance(registry, Mapping) else ""
        raise ConfigError(
            f"models.{name}: no such model in the registry (known: {known or 'none'})"
        )
    return validate_registry({name: registry[name]})[name]


def gpu_resources(name: str, registry: Mapping[str, Any]) -> dict[str, Any]:
    """Snakemake resources of a rule that runs model ``name``: ``{"gpu": n, "slurm_extra": s}``.

    vLLM uses ``tensor_parallel_size`` GPUs; a transformers model on ``cuda`` one; builtin,
    openai (remote) and CPU/auto transformers models none. ``gpu`` is the resource that
    snakemake-executor-plugin-slurm turns into ``--gpus=N`` (it refuses ``--gres`` inside
    ``slurm_extra``); ``slurm_extra`` is the spec's own value (e.g. ``--qos=gpu``), else empty.
    """
    spec = model_spec(name, registry)
    backend = spec["backend"]
    gpus = 0
    if backend == "vllm":
        gpus = int(spec["tensor_parallel_size"])
    elif backend == "transformers" and str(spec["device"]).startswith("cuda"):
        gpus = 1
    extra = spec.get("slurm_extra") if backend in ("vllm", "transformers") else None
    return {"gpu": gpus, "slurm_extra": str(extra or "")}


def _builtin_factory(name: str, kind: str):
    if kind in BUILTIN_MODELS:
        return BUILTIN_MODELS[kind]
    failures: list[str] = []
    for module in BUILTIN_PROVIDERS:
        if kind in BUILTIN_MODELS:
            break
        if module in sys.modules:
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name is not None and module.startswith(err.name):
                continue  # that provider does not exist (yet): other kinds still work
            failures.append(f"{module}: {err}")
            log.warning("builtin model provider %s failed to import: %s", module, err)
        except Exception as err:  # a broken provider must not break the other kinds
            failures.append(f"{module}: {type(err).__name__}: {err}")
            log.warning("builtin model provider %s failed to import: %s", module, err)
    if kind in BUILTIN_MODELS:
        return BUILTIN_MODELS[kind]
    known = ", ".join(sorted(BUILTIN_MODELS)) or "none"
    hint = f"; provider import errors: {'; '.join(failures)}" if failures else ""
    raise ConfigError(f"models.{name}.kind: unknown builtin kind {kind!r} (known: {known}){hint}")


def build_backend(name: str, spec: Mapping[str, Any]) -> Backend:
    """The backend object of a validated spec (heavy libraries are imported only here)."""
    backend = spec["backend"]
    if backend == "builtin":
        factory = _builtin_factory(name, str(spec["kind"]))
        instance = factory(name, spec)
        if not isinstance(instance, Backend):
            raise ConfigError(
                f"models.{name}.kind: factory of {spec['kind']!r} returned no Backend"
            )
        if not getattr(instance, "name", None):
            instance.name = name
        return instance
    if backend == "openai":
        from splits.llm.openai_api import OpenAIBackend

        return OpenAIBackend(name, spec)
    if backend == "transformers":
        from splits.llm.hf import TransformersBackend

        return TransformersBackend(name, spec)
    if backend == "vllm":
        from splits.llm.vllm_backend import VLLMBackend

        return VLLMBackend(name, spec)
    raise ConfigError(f"models.{name}.backend: unknown backend {backend!r}")


class Model:
    """A registry model behind the response cache.

    ``generate`` looks every request up in the cache first; only the misses (each distinct
    request once) go to the backend, and each completion is committed to the cache the moment the
    backend yields it, so a killed run loses nothing that had finished.
    """

    def __init__(
        self,
        name: str,
        spec: Mapping[str, Any],
        backend: Backend,
        cache: ResponseCache | None = None,
    ):
        self.name = name
        self.spec = dict(spec)
        self.backend = backend
        self.cache = cache
        self._identity = dict(backend.identity())
        self._with_payload = spec["backend"] == "builtin"
        self.calls = 0  # requests sent to the backend by this object (cache misses)

    def key(self, request: Request) -> str:
        return request_key(self._identity, request, self._with_payload)

    def generate(self, requests: list[Request], progress: bool | None = None) -> list[Completion]:
        """One completion per request, in order (``cached=True`` for cache hits).

        ``progress``: show a tqdm bar on stderr (default: when 16 or more requests miss).
        """
        requests = list(requests)
        if not requests:
            return []
        for i, request in enumerate(requests):
            if not isinstance(request, Request):
                raise TypeError(f"requests[{i}] is a {type(request).__name__}, not a Request")
        started = time.perf_counter()
        keys = [self.key(r) for r in requests]
        found = self.cache.get_many(keys) if self.cache is not None else {}
        todo_keys = [k for k in dict.fromkeys(keys) if k not in found]
        first_index = {}
        for i, k in enumerate(keys):
            first_index.setdefault(k, i)
        todo = [requests[first_index[k]] for k in todo_keys]
        generated: dict[str, Completion] = {}
        if todo:
            show = len(todo) >= PROGRESS_MIN_REQUESTS if progress is None else progress
            bar = _progress_bar(self.name, len(todo)) if show else None
            try:
                for index, completion in self.backend.stream(todo):
                    key = todo_keys[index]
                    if key in generated:
                        raise LLMError(f"model {self.name}: backend returned request {index} twice")
                    generated[key] = completion
                    self.calls += 1
                    if self.cache is not None and completion.finish_reason != "error":
                        self.cache.put(key, completion)
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix_str(
                            _tokens_rate(generated.values(), started), refresh=False
                        )
            finally:
                if bar is not None:
                    bar.close()
            missing = [k for k in todo_keys if k not in generated]
            if missing:
                raise LLMError(
                    f"model {self.name}: backend returned no completion for {len(missing)} of "
                    f"{len(todo)} requests"
                )
        out = [found[k] if k in found else generated[k] for k in keys]
        _log_throughput(
            self.name, len(requests), len(requests) - len(todo_keys), generated, started
        )
        return out

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            if self.cache is not None:
                self.cache.close()
                self.cache = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Model({self.name!r}, backend={self.spec['backend']!r})"


def _progress_bar(name: str, total: int):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=f"llm {name}",
        unit="req",
        file=sys.stderr,
        mininterval=1.0 if sys.stderr.isatty() else 15.0,
        dynamic_ncols=True,
    )


def _tokens_rate(completions, started: float) -> str:
    elapsed = max(time.perf_counter() - started, 1e-9)
    tokens = sum(c.output_tokens for c in completions)
    return f"{tokens / elapsed:.1f} out tok/s"


def _log_throughput(
    name: str, n_requests: int, n_cached: int, generated: Mapping[str, Completion], started: float
) -> None:
    elapsed = max(time.perf_counter() - started, 1e-9)
    n_generated = len(generated)
    prompt_tokens = sum(c.prompt_tokens for c in generated.values())
    output_tokens = sum(c.output_tokens for c in generated.values())
    level = logging.INFO if n_generated >= PROGRESS_MIN_REQUESTS else logging.DEBUG
    log.log(
        level,
        "model %s: %d requests (%d cached, %d generated) in %.2f s: %.2f requests/s, "
        "%.1f tokens/s (prompt %d, output %d tokens)",
        name,
        n_requests,
        n_cached,
        n_generated,
        elapsed,
        n_requests / elapsed,
        (prompt_tokens + output_tokens) / elapsed,
        prompt_tokens,
        output_tokens,
    )


def load_model(
    name: str, registry: Mapping[str, Any], cache_path: str | Path | None = None
) -> Model:
    """Model ``name`` of ``registry`` (validated), behind the response cache at ``cache_path``
    (SQLite, created on first use; ``None``: no cache)."""
    spec = model_spec(name, registry)
    backend = build_backend(name, spec)
    cache = ResponseCache(cache_path) if cache_path is not None else None
    return Model(name, spec, backend, cache)
