"""The vllm backend: configuration everywhere, engine configuration where vllm is importable,
generation where vllm and a CUDA GPU are present (skipped elsewhere, with the reason)."""

from __future__ import annotations

import importlib.util
import time
from types import SimpleNamespace

import pytest
from splits.errors import ConfigError
from splits.llm import Request, SamplingParams, load_model, validate_registry
from splits.llm.vllm_backend import VLLMBackend, engine_kwargs, sampling_kwargs

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


SPEC = validate_registry(
    {
        "big": {
            "backend": "vllm",
            "model": "meta-llama/Llama-3.1-70B-Instruct",
            "tensor_parallel_size": 4,
            "max_model_len": 8192,
            "dtype": "bfloat16",
            "gpu_memory_utilization": 0.85,
        }
    }
)["big"]


def test_engine_and_sampling_kwargs():
    kwargs = engine_kwargs(SPEC, seed=7)
    assert kwargs == {
        "seed": 7,
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "tensor_parallel_size": 4,
        "max_model_len": 8192,
        "dtype": "bfloat16",
        "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": True,
        "trust_remote_code": False,
        "disable_log_stats": False,
    }
    assert sampling_kwargs(SamplingParams(temperature=0.0, max_tokens=5, seed=3)) == {
        "temperature": 0.0,
        "max_tokens": 5,
    }
    assert sampling_kwargs(SamplingParams(temperature=0.8, max_tokens=9, seed=3, stop=("\n",))) == {
        "temperature": 0.8,
        "max_tokens": 9,
        "stop": ["\n"],
        "seed": 3,
        "top_p": 1.0,
    }


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_missing_vllm_is_a_clear_config_error():
    # the engine is built on the first request that misses the cache, so that is where it fails
    model = load_model("big", {"big": SPEC}, cache_path=None)
    assert not model.built
    with pytest.raises(ConfigError, match=r"^models\.big\.backend: vllm is not installed"):
        model.generate([Request(prompt="x")])


@pytest.mark.skipif(HAS_VLLM, reason="checks the error where vllm is missing")
def test_missing_vllm_fails_before_any_tokenizer_is_fetched(monkeypatch):
    """The missing engine is said before the prompts are counted: counting them loads the
    model's tokenizer, from the Hugging Face hub for a hub id, which offline or for a large
    model takes minutes of retries and downloads before the one line that vllm is missing."""
    import splits.llm.lengths as lengths

    def fetched(*args, **kwargs):
        raise AssertionError("the tokenizer was loaded before the missing vllm was said")

    monkeypatch.setattr(lengths, "_load_tokenizer", fetched)
    model = load_model("big", {"big": SPEC}, cache_path=None)
    with pytest.raises(ConfigError, match=r"^models\.big\.backend: vllm is not installed"):
        model.generate([Request(prompt="x")])


class FakeTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and tokenize
        return [1] + [len(m["content"]) for m in messages]


class FakeEngine:
    """Records what the backend hands to vllm.LLM.generate."""

    def __init__(self):
        self.calls = []

    def get_tokenizer(self):
        return FakeTokenizer()

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append((prompts, sampling_params))
        return [
            SimpleNamespace(
                prompt_token_ids=[0] * 3,
                outputs=[
                    SimpleNamespace(
                        text=f"out{i}",
                        token_ids=[5] * (i + 1),
                        finish_reason="length" if i else "stop",
                    )
                ],
            )
            for i in range(len(prompts))
        ]


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not importable here (pip install 'splits[vllm]')")
def test_backend_builds_vllm_sampling_params_and_prompts():
    import vllm

    engine = FakeEngine()
    backend = VLLMBackend("big", {**SPEC, "chunk_size": 2}, engine=engine)
    requests = [
        Request(prompt="Answer: ", params=SamplingParams(max_tokens=4, stop=("\n",))),
        Request(
            messages=({"role": "user", "content": "abc"},),
            params=SamplingParams(temperature=0.5, seed=9),
        ),
        Request(prompt="third"),
    ]
    out = backend.generate(requests)
    assert len(engine.calls) == 2  # chunk_size 2: two engine calls
    prompts, params = engine.calls[0]
    assert prompts == ["Answer: ", {"prompt_token_ids": [1, 3]}]
    assert all(isinstance(p, vllm.SamplingParams) for p in params)
    assert (params[0].temperature, params[0].max_tokens, list(params[0].stop)) == (0.0, 4, ["\n"])
    assert (params[1].temperature, params[1].seed) == (0.5, 9)
    assert [c.text for c in out] == ["out0", "out1", "out0"]
    assert [c.finish_reason for c in out] == ["stop", "length", "stop"]
    assert [(c.prompt_tokens, c.output_tokens) for c in out] == [(3, 1), (3, 2), (3, 1)]


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_VLLM and _has_cuda()), reason="needs vllm and a CUDA GPU")
def test_vllm_generates_with_a_tiny_local_model(tmp_path, capsys):
    from splits.testing.tiny_models import build_tiny_model

    path = build_tiny_model(tmp_path / "tiny", hidden_size=128, num_attention_heads=2)
    registry = {
        "tiny": {
            "backend": "vllm",
            "model": str(path),
            "gpu_memory_utilization": 0.3,
            "max_model_len": 512,
            "dtype": "float32",
        }
    }
    requests = [
        Request(prompt=f"Post {i}: hello world", params=SamplingParams(max_tokens=16))
        for i in range(256)
    ]
    requests.append(
        Request(
            messages=({"role": "user", "content": "hello teacher"},),
            params=SamplingParams(max_tokens=8),
        )
    )
    with load_model("tiny", registry, cache_path=tmp_path / "c.sqlite") as model:
        started = time.perf_counter()
        out = model.generate(requests)
        elapsed = time.perf_counter() - started
        again = model.generate(requests[:4])
    assert len(out) == len(requests)
    assert all(c.finish_reason in ("stop", "length") for c in out)
    assert all(0 < c.output_tokens <= 16 for c in out)
    assert all(c.prompt_tokens > 3 for c in out)
    assert all(c.cached for c in again) and [c.text for c in again] == [c.text for c in out[:4]]
    tokens = sum(c.output_tokens for c in out)
    with capsys.disabled():
        print(
            f"\nvllm tiny model: {len(out) / elapsed:.1f} requests/s, {tokens / elapsed:.0f} output tokens/s"
        )
