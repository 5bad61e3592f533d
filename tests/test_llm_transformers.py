"""The transformers backend on a tiny random-weight Llama built in the test (nothing downloaded)."""

from __future__ import annotations

import pytest
from splits.llm import Request, SamplingParams, load_model
from splits.testing.tiny_models import build_tiny_model

torch = pytest.importorskip("torch", reason="the transformers backend needs torch")
transformers = pytest.importorskip(
    "transformers", reason="the transformers backend needs transformers"
)

PROMPTS = [
    "hi",
    "As a construction worker, I build houses every day and I love it.",
    "What do you think about the new phone?",
    "Answer:",
    "The quick brown fox jumps over the lazy dog. " * 3,
]
CHAT = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hello teacher"})
GREEDY = SamplingParams(temperature=0.0, max_tokens=10)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """A tiny model on a shared 2-core machine runs ~10x faster on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def model(tiny_path):
    registry = {
        "tiny": {
            "backend": "transformers",
            "model": str(tiny_path),
            "device": "cpu",
            "batch_size": 3,
            "cpu_threads": 1,
        }
    }
    with load_model("tiny", registry, cache_path=None) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def reference(tiny_path):
    """Independent oracle: plain Hugging Face calls, one unpadded prompt at a time."""
    tok = transformers.AutoTokenizer.from_pretrained(tiny_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_path)
    hf.eval()

    def run(ids: list[int], max_new_tokens: int) -> list[int]:
        with torch.inference_mode():
            out = hf.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
            )
        return out[0, len(ids) :].tolist()

    return tok, run


def test_tiny_model_is_cached_per_directory(tiny_path):
    stamp = (tiny_path / "config.json").stat().st_mtime_ns
    assert build_tiny_model(tiny_path) == tiny_path
    assert (tiny_path / "config.json").stat().st_mtime_ns == stamp
    config = transformers.AutoConfig.from_pretrained(tiny_path)
    assert (
        config.model_type == "llama" and config.hidden_size == 64 and config.num_hidden_layers == 2
    )


def test_mixed_length_batch_equals_unbatched_and_oracle(model, reference):
    tok, run = reference
    requests = [Request(prompt=p, params=GREEDY) for p in PROMPTS] + [
        Request(messages=CHAT, params=GREEDY)
    ]
    batched = model.generate(requests)
    alone = [model.generate([r])[0] for r in requests]
    assert [c.text for c in batched] == [c.text for c in alone]
    assert [c.output_tokens for c in batched] == [c.output_tokens for c in alone]
    assert len({c.text for c in batched}) == len(requests)  # really different outputs
    for request, completion in zip(requests, batched, strict=True):
        if request.prompt is not None:
            ids = tok(request.prompt)["input_ids"]
        else:
            text = tok.apply_chat_template(list(CHAT), add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
        assert completion.prompt_tokens == len(ids)
        expected = run(ids, GREEDY.max_tokens)
        if tok.eos_token_id in expected:
            expected = expected[: expected.index(tok.eos_token_id) + 1]
        assert completion.output_tokens == len(expected)
        assert completion.text == tok.decode(expected, skip_special_tokens=True)
        assert completion.finish_reason == ("stop" if tok.eos_token_id in expected else "length")
    again = model.generate(requests)
    assert [c.text for c in again] == [c.text for c in batched]


def test_stop_strings_cut_the_text(model):
    free = model.generate([Request(prompt=PROMPTS[1], params=SamplingParams(max_tokens=16))])[0]
    assert free.finish_reason == "length" and len(free.text) > 6
    stop = free.text[len(free.text) // 2 : len(free.text) // 2 + 2]
    prefix = free.text[: free.text.index(stop)]
    cut = model.generate(
        [Request(prompt=PROMPTS[1], params=SamplingParams(max_tokens=16, stop=(stop,)))]
    )[0]
    assert cut.text == prefix
    assert cut.finish_reason == "stop"
    assert cut.output_tokens < 16


def test_sampling_is_seeded(model):
    def sample(seed):
        params = SamplingParams(temperature=1.0, max_tokens=12, seed=seed)
        return model.generate(
            [Request(prompt="hi", params=params), Request(prompt="Answer:", params=params)]
        )

    first, same, other = sample(1), sample(1), sample(2)
    assert [c.text for c in first] == [c.text for c in same]
    assert [c.text for c in first] != [c.text for c in other]


def test_transformers_model_through_the_cache(tiny_path, tmp_path):
    registry = {"tiny": {"backend": "transformers", "model": str(tiny_path), "device": "cpu"}}
    requests = [Request(prompt=p, params=GREEDY) for p in PROMPTS[:3]]
    with load_model("tiny", registry, cache_path=tmp_path / "c.sqlite") as model:
        fresh = model.generate(requests)
    with load_model("tiny", registry, cache_path=tmp_path / "c.sqlite") as model:
        cached = model.generate(requests)
        assert model.calls == 0
    assert all(c.cached for c in cached)
    assert [(c.text, c.prompt_tokens, c.output_tokens) for c in cached] == [
        (c.text, c.prompt_tokens, c.output_tokens) for c in fresh
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_batches_equal_one_prompt_at_a_time_and_the_cpu(tiny_path, reference):
    """On a GPU (float32): the backend's padded, length-sorted batches give each prompt the
    greedy tokens it gets alone, and the tokens of the plain Hugging Face oracle on the CPU."""
    tok, run = reference
    spec = {"backend": "transformers", "model": str(tiny_path), "device": "cuda"}
    requests = [Request(prompt=p, params=GREEDY) for p in PROMPTS]
    with load_model("tiny", {"tiny": {**spec, "batch_size": 3}}, cache_path=None) as gpu:
        batched = gpu.generate(requests)
        alone = [gpu.generate([r])[0] for r in requests]
    assert [c.text for c in batched] == [c.text for c in alone]
    assert len({c.text for c in batched}) == len(requests)
    for request, completion in zip(requests, batched, strict=True):
        expected = run(tok(request.prompt)["input_ids"], GREEDY.max_tokens)
        if tok.eos_token_id in expected:
            expected = expected[: expected.index(tok.eos_token_id) + 1]
        assert completion.text == tok.decode(expected, skip_special_tokens=True)
