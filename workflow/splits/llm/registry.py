"""The model registry (``config["models"]``), ``load_model`` and the cached ``Model`` wrapper.

A registry maps names to specs (``{backend: vllm|openai|transformers|builtin, ...}``); the keys of
each backend, their types and defaults live in ``workflow/schemas/config.schema.yaml`` (section
``models``), which is also what validates a registry handed to ``load_model`` directly.
The backends themselves, and what each can do, are the table of :mod:`splits.llm.backends`.
Engines are lazy: ``load_model`` reads the cache identity off the spec, and the engine (vLLM,
transformers weights) is built only when a request misses the response cache.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from splits.errors import ConfigError
from splits.llm.backends import (
    backend_class,
    build_backend,
    declared_identity,
    model_spec,
)
from splits.llm.base import Backend, Completion, LLMError, Request
from splits.llm.cache import ResponseCache, request_key
from splits.llm.lengths import build_meter, overlong, refusal, skipped
from splits.llm.serve import served_build

log = logging.getLogger(__name__)

#: batches with at least this many uncached requests get a progress bar
PROGRESS_MIN_REQUESTS = 16


def gpu_resources(name: str, registry: Mapping[str, Any]) -> dict[str, Any]:
    """Snakemake resources of a rule that runs model ``name``: ``{"gpu": n, "slurm_extra": s}``.

    The backend's class says how many (:mod:`splits.llm.backends`): vLLM its
    ``tensor_parallel_size``, a transformers model on ``cuda`` one, a python TM its ``gpus``, the
    others none. ``gpu`` is the resource that
    snakemake-executor-plugin-slurm turns into ``--gpus=N`` (it refuses ``--gres`` inside
    ``slurm_extra``); ``slurm_extra`` is the spec's own value (e.g. ``--qos=gpu``), else empty.
    """
    spec = model_spec(name, registry)
    gpus = backend_class(spec["backend"], f"models.{name}.backend").gpus(spec)
    return {"gpu": gpus, "slurm_extra": str(spec.get("slurm_extra") or "")}


@dataclass
class Throughput:
    """What one Model object did: requests answered, from the cache or generated, tokens, time
    inside the backend, engine builds and their load time, the engine's prefix-cache
    counters where it exposes them, and the prompt lengths counted before generation (the
    longest, the model's context, and the over-long prompts skipped under
    ``overlong_prompts: skip``)."""

    requests: int = 0
    cached: int = 0
    generated: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    generate_s: float = 0.0
    engine_builds: int = 0
    engine_load_s: float = 0.0
    prefix_cache_hit_tokens: int | None = None
    prefix_cache_query_tokens: int | None = None
    overlong_skipped: int = 0
    longest_prompt_tokens: int | None = None
    context_tokens: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        busy = self.generate_s if self.generate_s > 0 else None
        out["output_tokens_per_s"] = self.output_tokens / busy if busy else None
        out["tokens_per_s"] = (self.prompt_tokens + self.output_tokens) / busy if busy else None
        queries = self.prefix_cache_query_tokens
        out["prefix_cache_hit_rate"] = (
            (self.prefix_cache_hit_tokens or 0) / queries if queries else None
        )
        return out


def prefix_order_key(request: Request) -> str:
    """Sort key that puts requests sharing a prompt prefix next to each other (lexicographic
    order of the text the model reads), so an engine with a prefix cache computes a shared prefix
    (instructions, calibration posts, a row's post sets) once and reuses it while it is hot."""
    if request.prompt is not None:
        return request.prompt
    return "\x00".join(f"{m.get('role', '')}\x01{m.get('content', '')}" for m in request.messages)


class Model:
    """A registry model behind the response cache.

    The backend is built lazily: on the first request that misses the cache (backends whose
    class declares ``spec_identity``: vLLM, transformers), or at once for cheap backends that must
    exist to name their identity (builtin kinds, openai). ``generate`` looks every request up in
    the cache first; only the misses (each distinct request once, in prefix order) go to the
    backend, and each completion is committed to the cache the moment the backend yields it, so a
    killed run loses nothing that had finished. ``cache_only``: a miss is an error instead (jobs
    whose requests another job has already generated).
    """

    def __init__(
        self,
        name: str,
        spec: Mapping[str, Any],
        build: Callable[[], Backend],
        identity: Mapping[str, Any] | None = None,
        cache: ResponseCache | None = None,
        cache_only: bool = False,
        engine_in_job: bool = True,
    ):
        self.name = name
        self.spec = dict(spec)
        self.cache = cache
        self.cache_only = cache_only
        # False for a served model's client (its engine lives in the server, not this Python)
        self.engine_in_job = engine_in_job
        self.stats = Throughput()
        self._build = build
        self._backend: Backend | None = None
        self._declared = dict(identity) if identity is not None else None
        if identity is None:
            identity = self.backend.identity()
        self._identity = dict(identity)
        # builtin and python models read the request's payload (names, topic, posts), which is
        # then part of what they answer, so of the cache key
        self._with_payload = backend_class(spec["backend"]).payload_in_key
        self._meter = None  # prompt-length meter (splits.llm.lengths), built on first miss
        self.calls = 0  # requests sent to the backend by this object (cache misses)

    @property
    def built(self) -> bool:
        """Whether the backend (the engine, for vLLM and transformers) exists yet."""
        return self._backend is not None

    @property
    def backend(self) -> Backend:
        """The backend, built on first use."""
        if self._backend is None:
            started = time.perf_counter()
            backend = self._build()
            elapsed = time.perf_counter() - started
            if self._declared is not None and dict(backend.identity()) != self._declared:
                raise LLMError(
                    f"model {self.name}: the built backend's identity differs from the one its "
                    "spec declared, so cache keys would not match"
                )
            self._backend = backend
            # a served model's client counts the build of the server it started (else none)
            self.stats.engine_builds += getattr(backend, "engine_builds", 1)
            self.stats.engine_load_s += getattr(backend, "engine_load_s", elapsed)
            level = logging.INFO if self._declared is not None else logging.DEBUG
            log.log(level, "model %s: backend built in %.2f s", self.name, elapsed)
        return self._backend

    def key(self, request: Request) -> str:
        return request_key(self._identity, request, self._with_payload)

    def check_lengths(
        self, todo: list[Request], labels: list[str]
    ) -> tuple[dict[int, Completion], list[int]]:
        """Count the prompts of ``todo`` (requests that miss the cache) with the model's
        tokenizer (:mod:`splits.llm.lengths`): ``({index: skip completion}, prompt lengths)``;
        raises PromptTooLong under ``overlong_prompts: error``."""
        engine = backend_class(self.spec["backend"])
        if not engine.prompted:
            return {}, []
        if self._meter is None:
            # a missing engine first: counting loads the tokenizer (for a hub id, from the hub)
            in_job = self.engine_in_job and not self.cache_only
            missing = engine.not_installed(self.name) if in_job else None
            if missing:
                raise ConfigError(missing)
            self._meter = build_meter(self.name, self.spec)
        counts, over = overlong(self._meter, todo)
        if counts:
            longest = max(counts)
            self.stats.longest_prompt_tokens = max(self.stats.longest_prompt_tokens or 0, longest)
            self.stats.context_tokens = self._meter.limit
        if not over:
            return {}, counts
        if self.spec["overlong_prompts"] != "skip":
            raise refusal(self.name, self._meter.limit, counts, over, todo, labels)
        longest = max(over, key=lambda i: counts[i])
        log.warning(
            "model %s: skipped %d of %d prompts that do not fit its context of %d tokens with "
            "their answer (models.%s.overlong_prompts: skip); the longest has %d tokens (%s); "
            "their answers are empty, finish reason overlong",
            self.name,
            len(over),
            len(todo),
            self._meter.limit,
            self.name,
            counts[longest],
            labels[longest],
        )
        return {i: skipped(counts[i]) for i in over}, counts

    def generate(
        self,
        requests: list[Request],
        progress: bool | None = None,
        labels: list[str] | None = None,
    ) -> list[Completion]:
        """One completion per request, in order (``cached=True`` for cache hits).

        ``progress``: show a tqdm bar on stderr (default: when 16 or more requests miss).
        ``labels``: what names each request's row in messages (default: its position).
        Prompts that miss the cache are counted first (``check_lengths``).
        """
        requests = list(requests)
        if not requests:
            return []
        for i, request in enumerate(requests):
            if not isinstance(request, Request):
                raise TypeError(f"requests[{i}] is a {type(request).__name__}, not a Request")
        if labels is not None and len(labels) != len(requests):
            raise ValueError(f"{len(labels)} labels for {len(requests)} requests")
        started = time.perf_counter()
        keys = [self.key(r) for r in requests]
        found = self.cache.get_many(keys) if self.cache is not None else {}
        todo_keys = [k for k in dict.fromkeys(keys) if k not in found]
        first_index = {}
        for i, k in enumerate(keys):
            first_index.setdefault(k, i)
        todo_keys.sort(key=lambda k: prefix_order_key(requests[first_index[k]]))
        todo = [requests[first_index[k]] for k in todo_keys]
        skips: dict[str, Completion] = {}
        if todo:
            names = [
                labels[first_index[k]]
                if labels is not None
                else f"request {first_index[k] + 1} of {len(requests)}"
                for k in todo_keys
            ]
            skip_at, _ = self.check_lengths(todo, names)
            if skip_at:
                skips = {todo_keys[i]: c for i, c in skip_at.items()}
                keep = [i for i in range(len(todo)) if i not in skip_at]
                todo_keys = [todo_keys[i] for i in keep]
                todo = [todo[i] for i in keep]

        if todo and self.cache_only:
            where = self.cache.path if self.cache is not None else "(no cache)"
            raise LLMError(
                f"model {self.name}: {len(todo)} of {len(requests)} requests are not in the "
                f"response cache {where}, and this job only reads the cache; run the job that "
                "generates this model's requests first"
            )
        generated: dict[str, Completion] = {}
        if todo:
            backend = self.backend
            show = len(todo) >= PROGRESS_MIN_REQUESTS if progress is None else progress
            bar = _progress_bar(self.name, len(todo)) if show else None
            streaming = time.perf_counter()
            try:
                for index, completion in backend.stream(todo):
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
                            _tokens_rate(generated.values(), streaming), refresh=False
                        )
            finally:
                if bar is not None:
                    bar.close()
                self.stats.generate_s += time.perf_counter() - streaming
            missing = [k for k in todo_keys if k not in generated]
            if missing:
                raise LLMError(
                    f"model {self.name}: backend returned no completion for {len(missing)} of "
                    f"{len(todo)} requests"
                )
            prefix = backend.prefix_cache_stats()
            if prefix is not None:
                self.stats.prefix_cache_hit_tokens, self.stats.prefix_cache_query_tokens = prefix
        out = [found[k] if k in found else skips[k] if k in skips else generated[k] for k in keys]
        n_skipped = sum(k in skips for k in keys)  # requests: prompts = cached + generated + these
        self.stats.requests += len(requests)
        self.stats.overlong_skipped += n_skipped
        # cache hits and repeats
        self.stats.cached += len(requests) - len(generated) - n_skipped
        self.stats.generated += len(generated)
        self.stats.prompt_tokens += sum(c.prompt_tokens for c in generated.values())
        self.stats.output_tokens += sum(c.output_tokens for c in generated.values())
        _log_throughput(
            self.name,
            len(requests),
            len(requests) - len(todo_keys) - len(skips),
            generated,
            started,
        )
        return out

    def close(self) -> None:
        try:
            if self._backend is not None:
                self._backend.close()
        finally:
            if self.cache is not None:
                self.cache.close()
                self.cache = None
            if self.stats.requests:
                _log_totals(self.name, self.stats)

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


def _log_totals(name: str, stats: Throughput) -> None:
    """The job's throughput line: what every LLM job logs when it closes its model."""
    summary = stats.as_dict()
    rate = summary["output_tokens_per_s"]
    hit_rate = summary["prefix_cache_hit_rate"]
    log.info(
        "model %s totals: %d prompts, %d cached, %d generated; %d prompt + %d output tokens; "
        "%s output tokens/s; engine builds %d (load %.2f s); prefix-cache hit rate %s",
        name,
        stats.requests,
        stats.cached,
        stats.generated,
        stats.prompt_tokens,
        stats.output_tokens,
        f"{rate:.1f}" if rate is not None else "n/a",
        stats.engine_builds,
        stats.engine_load_s,
        f"{hit_rate:.3f}" if hit_rate is not None else "n/a",
    )


def load_model(
    name: str,
    registry: Mapping[str, Any],
    cache_path: str | Path | None = None,
    cache_only: bool = False,
) -> Model:
    """Model ``name`` of ``registry`` (validated), behind the response cache at ``cache_path``
    (SQLite, created on first use; ``None``: no cache). Engines (vLLM, transformers) are built on
    the first request that misses the cache (in served mode, ``splits.llm.serve``, the model's
    shared server is used, started if needed); ``cache_only``: a miss is an error instead."""
    spec = model_spec(name, registry)
    identity = declared_identity(name, spec)
    # served mode (llm.serve): the engine lives in the model's server, the job is its client
    served = served_build(name, spec, identity)
    build = served or functools.partial(build_backend, name, spec)
    cache = ResponseCache(cache_path) if cache_path is not None else None
    try:
        return Model(name, spec, build, identity, cache, cache_only, engine_in_job=served is None)
    except BaseException:
        if cache is not None:
            cache.close()
        raise
