"""The one table of model backends: backend name -> the class that implements it, imported only
when first asked (as lm-evaluation-harness's model registry), and what each class declares it
can do. Every other place (rules, start checks, served mode, prompt counting) asks this table
instead of listing backend names.

A class declares (class attributes of :class:`splits.llm.base.Backend`):

- ``prompted``: a language model that reads a prompt template; its prompts are counted against
  its context (:mod:`splits.llm.lengths`);
- ``servable``: served mode (``llm.serve``) runs its engine in one shared server per model;
- ``classifies``: it can be a CM of the evaluation (theory models a researcher brings cannot);
- ``batch_job``: its requests run in the model's batch job behind its response cache (builtin
  models answer in the per-row jobs; precomputed theories are read from their file);
- ``payload_in_key``: it reads the request's payload, which is then part of its cache key;
- ``requires`` / ``extra``: the Python modules its engine imports and the pip extra installing
  them (checked before any job runs);
- ``hub_files``: the spec keys naming a model or tokenizer it loads from a path or the Hugging
  Face hub (found before any job runs);
- ``gpus(spec)``: the GPUs a job running it needs.

``builtin`` is a family of non-LLM kinds (``BUILTIN_KINDS`` and kinds registered at run time with
``register_builtin``); ``precomputed`` answers no requests (its theories are a file).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from typing import Any

from splits.config.schema import load_schema, validate_config
from splits.errors import ConfigError
from splits.llm.base import BUILTIN_MODELS, Backend

#: backend name -> "module:Class", imported only when first asked
BACKENDS: dict[str, str] = {
    "vllm": "splits.llm.vllm_backend:VLLMBackend",
    "openai": "splits.llm.openai_api:OpenAIBackend",
    "transformers": "splits.llm.hf:TransformersBackend",
    "python": "splits.evaluation.custom_tm:PythonTM",
    "builtin": "splits.llm.backends:Builtin",
    "precomputed": "splits.llm.backends:Precomputed",
}
#: builtin kind (``backend: builtin``) -> "module:Class" of its Backend, imported the same way;
#: kinds registered at run time with ``register_builtin`` (tests, plugins) come first
BUILTIN_KINDS: dict[str, str] = {
    "lexical": "splits.evaluation.classify:LexicalCM",
    "no-theory": "splits.evaluation.theorize:NoTheoryTM",
    "oracle-lexical": "splits.evaluation.theorize:OracleLexicalTM",
    "probe-scripted": "splits.probes.scripted:ScriptedProbeModel",
}
#: optional library a backend imports -> the extra of this package that installs it
EXTRAS = {"vllm": "vllm", "transformers": "llm", "tokenizers": "llm", "torch": "llm"}


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
        if spec["backend"] == "python" and bool(spec.get("function")) == bool(
            spec.get("entry_point")
        ):
            raise ConfigError(
                f"models.{name}: a python TM needs exactly one of function, entry_point"
            )
    return models


def model_spec(name: str, registry: Mapping[str, Any]) -> dict[str, Any]:
    """The validated spec (defaults filled) of model ``name``."""
    if not isinstance(registry, Mapping) or name not in registry:
        known = ", ".join(sorted(registry)) if isinstance(registry, Mapping) else ""
        raise ConfigError(
            f"models.{name}: no such model in the registry (known: {known or 'none'})"
        )
    return validate_registry({name: registry[name]})[name]


def import_target(target: str, where: str):
    """The attribute named by "module:attribute"; a missing optional library is one ConfigError
    line naming the extra to install, any other import error propagates."""
    module, _, attribute = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as err:
        library = (err.name or "").split(".")[0]
        if library not in EXTRAS:
            raise
        raise ConfigError(
            f"{where}: needs {library}, which is not installed "
            f"(pip install 'splits[{EXTRAS[library]}]')"
        ) from err


def backend_class(backend: str, where: str = "backend") -> type[Backend]:
    """The class of backend ``backend`` (imported now); ConfigError naming ``where`` for a name
    the table does not hold."""
    if backend not in BACKENDS:
        known = ", ".join(sorted(BACKENDS))
        raise ConfigError(f"{where}: unknown backend {backend!r} (known: {known})")
    return import_target(BACKENDS[backend], where)


def capability(models: Mapping[str, Any], model: str, name: str) -> Any:
    """What the backend class of registry model ``model`` declares as ``name`` (``prompted``,
    ``servable``, ``classifies``, ``batch_job``, ...)."""
    backend = models[model]["backend"]
    return getattr(backend_class(backend, f"models.{model}.backend"), name)


class Builtin(Backend):
    """``backend: builtin``: the non-LLM models of the package (``kind`` names which); what it
    declares holds for every kind, and ``resolve`` gives the kind's own class."""

    payload_in_key = True
    batch_job = False

    @classmethod
    def resolve(cls, name: str, spec: Mapping[str, Any]):
        kind = str(spec["kind"])
        if kind in BUILTIN_MODELS:
            return BUILTIN_MODELS[kind]
        if kind not in BUILTIN_KINDS:
            known = ", ".join(sorted(set(BUILTIN_KINDS) | set(BUILTIN_MODELS)))
            raise ConfigError(f"models.{name}.kind: unknown builtin kind {kind!r} (known: {known})")
        return import_target(BUILTIN_KINDS[kind], f"models.{name}.kind")


class Precomputed(Backend):
    """``backend: precomputed``: a file of theories a researcher's own method wrote
    (:mod:`splits.evaluation.custom_tm`); it answers no requests, so nothing builds it."""

    classifies = False
    batch_job = False

    @classmethod
    def resolve(cls, name: str, spec: Mapping[str, Any]):
        raise ConfigError(
            f"models.{name}: a precomputed-theories model answers no requests; it can only be a "
            "TM of the evaluation"
        )


def backend_factory(name: str, spec: Mapping[str, Any]):
    """What builds the backend of a validated spec: a Backend class (or, for builtin kinds
    registered at run time, a factory ``(name, spec) -> Backend``). Importing it is cheap;
    building it may not be."""
    return backend_class(spec["backend"], f"models.{name}.backend").resolve(name, spec)


def build_backend(name: str, spec: Mapping[str, Any]) -> Backend:
    """The backend object of a validated spec (heavy libraries are imported only here)."""
    instance = backend_factory(name, spec)(name, spec)
    if spec["backend"] == "builtin":
        if not isinstance(instance, Backend):
            raise ConfigError(
                f"models.{name}.kind: factory of {spec['kind']!r} returned no Backend"
            )
        if not getattr(instance, "name", None):
            instance.name = name
    return instance


def declared_identity(name: str, spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model's cache identity from its spec alone (None: build the backend to know it)."""
    spec_identity = getattr(backend_factory(name, spec), "spec_identity", None)
    return spec_identity(name, spec) if callable(spec_identity) else None
