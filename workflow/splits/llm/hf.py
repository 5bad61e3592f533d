"""The ``transformers`` backend: a local Hugging Face causal LM (path or hub id), CPU or GPU.

Batched, left-padded generation; chat requests go through the tokenizer's chat template. Greedy
requests (temperature 0) are grouped by sampling parameters, sorted by prompt length and run
``batch_size`` at a time; their output does not depend on the batch. Sampled requests run one at
a time after ``torch.manual_seed(seed)``, so each is reproducible on its own. Stop strings end
generation and are cut from the text (finish reason ``stop``); hitting ``max_tokens`` gives
``length``. Token counts: prompt tokens without padding, output tokens up to and including EOS.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from splits.errors import ConfigError
from splits.llm.base import Backend, Completion, Request, SamplingParams
from splits.llm.devices import pick_device
from splits.llm.fingerprint import hf_identity

log = logging.getLogger(__name__)


def _dtype_argument() -> str:
    """``dtype`` since transformers 4.56, ``torch_dtype`` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` up to the earliest stop string, and whether one was found."""
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class TransformersBackend(Backend):
    requires = ("torch", "transformers")
    extra = "llm"
    hub_files = ("model", "tokenizer")
    prompted = True
    servable = True

    @classmethod
    def gpus(cls, spec: Mapping[str, Any]) -> int:
        return 1 if str(spec["device"]).startswith("cuda") else 0

    def __init__(self, name: str, spec: Mapping[str, Any]):
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as err:
            raise ConfigError(
                f"models.{name}.backend: the transformers backend needs torch and transformers "
                f"(pip install 'splits[llm]'): {err}"
            ) from err
        self.name = name
        self.spec = dict(spec)
        self.batch_size = int(spec["batch_size"])
        self.device = torch.device(pick_device(spec["device"], key=f"models.{name}.device"))
        if spec.get("cpu_threads") and self.device.type == "cpu":
            torch.set_num_threads(int(spec["cpu_threads"]))
        dtype_name = str(spec["dtype"])
        if dtype_name == "auto":
            dtype_name = "bfloat16" if self.device.type == "cuda" else "float32"
        self.dtype = getattr(torch, dtype_name)
        source = spec["model"]
        common = {
            "revision": spec.get("revision"),
            "trust_remote_code": spec["trust_remote_code"],
        }
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                spec.get("tokenizer") or source, **common
            )
            self.model = AutoModelForCausalLM.from_pretrained(
                source, **{_dtype_argument(): self.dtype}, **common
            )
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"models.{name}.model: cannot load {source!r}: {str(err).splitlines()[0]}"
            ) from err
        self.model.to(self.device)
        self.model.eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.pad_id = int(self.tokenizer.pad_token_id)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = {
            int(e) for e in (eos if isinstance(eos, list | tuple) else [eos]) if e is not None
        }
        self._identity = self.spec_identity(name, self.spec)

    @classmethod
    def spec_identity(cls, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return hf_identity("transformers", dict(spec), ("dtype",))

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    # ------------------------------------------------------------------ encoding

    def encode(self, request: Request) -> list[int]:
        """Prompt token ids: the chat template for messages, the tokenizer's specials for raw
        prompts."""
        if request.messages is not None:
            if not getattr(self.tokenizer, "chat_template", None):
                raise ConfigError(
                    f"models.{self.name}: the tokenizer has no chat template; send raw prompts"
                )
            text = self.tokenizer.apply_chat_template(
                [dict(m) for m in request.messages], add_generation_prompt=True, tokenize=False
            )
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(self.tokenizer(request.prompt, add_special_tokens=True)["input_ids"])

    # ------------------------------------------------------------------ generation

    def _run_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        import torch

        started = time.perf_counter()
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            if ids:
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention[row, width - len(ids) :] = 1
        sampled = params.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": int(params.max_tokens),
            "do_sample": sampled,
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids) or None,
        }
        if sampled:
            kwargs.update(temperature=float(params.temperature), top_p=1.0, top_k=0)
            torch.manual_seed(int(params.seed))
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        stop = tuple(s for s in params.stop if s)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                **kwargs,
            )
        new_tokens = out[:, width:].tolist()
        latency = time.perf_counter() - started
        completions = []
        for row, tokens in enumerate(new_tokens):
            n_out, hit_eos = len(tokens), False
            for i, token in enumerate(tokens):
                if token in self.eos_ids:
                    n_out, hit_eos = i + 1, True
                    break
                if token == self.pad_id:
                    n_out = i
                    break
            kept = [t for t in tokens[:n_out] if t not in self.eos_ids]
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            text, hit_stop = cut_at_stop(text, stop)
            if hit_eos or hit_stop:
                finish = "stop"
            elif n_out >= params.max_tokens:
                finish = "length"
            else:
                finish = "stop"
            completions.append(Completion(text, finish, len(prompts[row]), n_out, latency))
        return completions

    def stream(self, requests: list[Request]) -> Iterator[tuple[int, Completion]]:
        encoded = [self.encode(r) for r in requests]
        greedy: dict[SamplingParams, list[int]] = {}
        sampled: list[int] = []
        for i, request in enumerate(requests):
            if request.params.temperature > 0:
                sampled.append(i)
            else:
                greedy.setdefault(request.params, []).append(i)
        for params, indices in greedy.items():
            indices = sorted(indices, key=lambda i: len(encoded[i]))
            for start in range(0, len(indices), self.batch_size):
                batch = indices[start : start + self.batch_size]
                for i, completion in zip(
                    batch, self._run_batch([encoded[i] for i in batch], params), strict=True
                ):
                    yield i, completion
        for i in sampled:
            yield i, self._run_batch([encoded[i]], requests[i].params)[0]

    def generate(self, requests: list[Request]) -> list[Completion]:
        results: dict[int, Completion] = dict(self.stream(requests))
        return [results[i] for i in range(len(requests))]

    def close(self) -> None:
        model = getattr(self, "model", None)
        if model is not None and self.device.type == "cuda":
            import torch

            del self.model
            torch.cuda.empty_cache()
