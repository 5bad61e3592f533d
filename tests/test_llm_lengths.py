"""Prompt lengths (splits.llm.lengths): every prompt that misses the cache is counted with the
model's tokenizer before generation; over-long ones (prompt + max_tokens > context) are refused
at start in one line, or skipped under ``overlong_prompts: skip``. The transformers backend on a
tiny local Llama (context 1024), the openai backend against a scripted server that counts with
the same tokenizer (as ``vllm serve`` does) or with a local ``tokenizer``. The token counts of the
oracle are the Hugging Face tokenizer's, called here directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from splits.llm import Request, SamplingParams, load_model
from splits.llm.lengths import PromptTooLong
from splits.testing.fake_openai_server import FakeOpenAIServer
from splits.testing.tiny_models import build_tiny_model

transformers = pytest.importorskip("transformers", reason="counting needs transformers")
torch = pytest.importorskip("torch", reason="the transformers backend needs torch")

REPO = Path(__file__).resolve().parents[1]
CONTEXT = 1024  # the tiny model's max_position_embeddings
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def tokenizer(tiny_path):
    return transformers.AutoTokenizer.from_pretrained(tiny_path)


def n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text)["input_ids"])  # with BOS, as the backends send raw prompts


def prompt_of(tokenizer, tokens: int) -> str:
    """A raw prompt of exactly ``tokens`` tokens (BOS included), checked with the tokenizer."""
    words = ["fox"] * (tokens - 1)
    text = " ".join(words)
    while n_tokens(tokenizer, text) > tokens:
        words.pop()
        text = " ".join(words)
    while n_tokens(tokenizer, text) < tokens:
        text += " fox"
    assert n_tokens(tokenizer, text) == tokens
    return text


def requests_for(tokenizer, sizes: list[int]) -> list[Request]:
    params = SamplingParams(max_tokens=MAX_TOKENS)
    return [Request(prompt=prompt_of(tokenizer, n), params=params) for n in sizes]


def hf_registry(tiny_path, policy: str) -> dict:
    return {
        "tiny": {
            "backend": "transformers",
            "model": str(tiny_path),
            "device": "cpu",
            "cpu_threads": 1,
            "overlong_prompts": policy,
        }
    }


def test_transformers_refuses_at_start_naming_the_longest_row(tiny_path, tokenizer):
    fits = CONTEXT - MAX_TOKENS  # prompt + answer == context: fits exactly
    requests = requests_for(tokenizer, [20, fits, fits + 1, fits + 40])
    labels = ["row a", "row b", "row c", "row d"]
    model = load_model("tiny", hf_registry(tiny_path, "error"), cache_path=None)
    with model, pytest.raises(PromptTooLong) as caught:
        model.generate(requests, labels=labels)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("model tiny: 2 of 4 prompts do not fit its context of 1024 tokens")
    assert f"the longest has {fits + 40} prompt tokens + max_tokens {MAX_TOKENS} (row d)" in message
    assert "overlong_prompts: skip" in message
    assert not model.built  # refused before the weights were loaded
    assert model.calls == 0


def test_transformers_skips_counts_and_answers_the_rest(tiny_path, tokenizer, tmp_path):
    fits = CONTEXT - MAX_TOKENS
    sizes = [12, fits + 1, 30, fits, fits + 300]
    requests = requests_for(tokenizer, sizes)
    cache = tmp_path / "cache.sqlite"
    with load_model("tiny", hf_registry(tiny_path, "skip"), cache_path=cache) as model:
        out = model.generate(requests)
        stats = model.stats
    assert [c.finish_reason == "overlong" for c in out] == [False, True, False, False, True]
    assert [c.prompt_tokens for c in out] == sizes  # the counts, also of the skipped ones
    assert all(c.text == "" and c.output_tokens == 0 for c in out if c.finish_reason == "overlong")
    assert all(c.output_tokens > 0 for c in out if c.finish_reason != "overlong")
    assert (stats.overlong_skipped, stats.generated, stats.cached) == (2, 3, 0)
    assert (stats.longest_prompt_tokens, stats.context_tokens) == (fits + 300, CONTEXT)
    # the answers of the prompts that fit equal a run without the over-long ones
    with load_model("tiny", hf_registry(tiny_path, "error"), cache_path=None) as alone:
        oracle = alone.generate([requests[i] for i in (0, 2, 3)])
    assert [out[i].text for i in (0, 2, 3)] == [c.text for c in oracle]
    # skips are not cached: a second run answers the fitting ones from the cache, skips again
    with load_model("tiny", hf_registry(tiny_path, "skip"), cache_path=cache) as again:
        second = again.generate(requests)
        assert not again.built
    assert [c.cached for c in second] == [True, False, True, True, False]
    assert again.stats.overlong_skipped == 2


def test_cli_refusal_is_one_line(tiny_path, tokenizer, tmp_path):
    lines = [
        {"id": "short", "prompt": "hello"},
        {"id": "long-one", "prompt": prompt_of(tokenizer, 1500)},
    ]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"models": hf_registry(tiny_path, "error")}))
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    result = subprocess.run(
        [sys.executable, "-m", "splits.cli", "llm", "--config", str(config), "--model", "tiny"]
        + ["--input", str(tmp_path / "in.jsonl"), "--no-cache", "--max-tokens", "4"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "do not fit" in line]
    assert len(errors) == 1, result.stderr
    assert "model tiny: 1 of 2 prompts do not fit its context of 1024 tokens" in errors[0]
    assert "the longest has 1500 prompt tokens" in errors[0]
    assert f"request 2 of {tmp_path / 'in.jsonl'}, id long-one" in errors[0]


def openai_registry(base_url: str, policy: str, **extra) -> dict:
    return {
        "api": {
            "backend": "openai",
            "base_url": base_url,
            "model": "fake",
            "overlong_prompts": policy,
            "max_retries": 0,
            **extra,
        }
    }


def test_openai_reads_the_servers_context_and_counts_with_its_tokenize(tokenizer):
    def count(body):
        return n_tokens(tokenizer, body["prompt"])

    sizes = [10, 95, 200, 40]  # context 100 with max_tokens 8: 95 and 200 do not fit
    requests = requests_for(tokenizer, sizes)
    with FakeOpenAIServer(context=100, count_tokens=count) as server:
        model = load_model("api", openai_registry(server.base_url, "error"), cache_path=None)
        with model, pytest.raises(PromptTooLong, match=r"2 of 4 prompts .* context of 100 "):
            model.generate(requests)
        assert server.calls("/completions") == []  # nothing was sent for generation
        with load_model("api", openai_registry(server.base_url, "skip"), None) as model:
            out = model.generate(requests)
        sent = [r["body"]["prompt"] for r in server.calls("/completions")]
    assert [c.finish_reason == "overlong" for c in out] == [False, True, True, False]
    assert sorted(sent) == sorted([requests[0].prompt, requests[3].prompt])
    assert model.stats.overlong_skipped == 2 and model.stats.context_tokens == 100


def test_openai_local_tokenizer_and_configured_context(tiny_path, tokenizer):
    requests = requests_for(tokenizer, [10, 60])
    registry = openai_registry(
        "http://127.0.0.1:9/v1", "error", max_model_len=64, tokenizer=str(tiny_path)
    )
    model = load_model("api", registry, cache_path=None)  # nothing listens on port 9
    with model, pytest.raises(PromptTooLong) as caught:
        model.generate(requests)
    assert "1 of 2 prompts do not fit its context of 64 tokens" in str(caught.value)
    assert "the longest has 60 prompt tokens + max_tokens 8 (request 2 of 2)" in str(caught.value)


def test_openai_server_that_tells_no_context_is_not_checked(tokenizer):
    requests = requests_for(tokenizer, [10, 3000])
    with FakeOpenAIServer() as server:
        with load_model("api", openai_registry(server.base_url, "error"), None) as model:
            out = model.generate(requests)
    assert [c.finish_reason for c in out] == ["length", "length"]  # all sent
    assert model.stats.context_tokens is None


def test_throughput_table_turns_skips_into_run_health(tmp_path):
    reports = [
        {"model": "tm8b", "role": "tm", "requests": 64, "overlong_skipped": 3},
        {"model": "cm", "role": "cm", "requests": 10, "overlong_skipped": 0},
    ]
    reports[0].update(context_tokens=1024, longest_prompt_tokens=1345)
    paths = []
    for n, report in enumerate(reports):
        paths.append(tmp_path / f"r{n}.json")
        paths[-1].write_text(json.dumps(report))
    health = tmp_path / "health" / "evaluation_llm.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    argv = [sys.executable, "-m", "splits.cli", "model-batch", "throughput", "--reports"]
    argv += [*map(str, paths), "--out-csv", str(tmp_path / "t.csv")]
    argv += ["--out-md", str(tmp_path / "t.md"), "--health", str(health)]
    subprocess.run(argv, check=True, env=env, timeout=300)
    findings = json.loads(health.read_text())
    assert [(f["code"], f["subject"]) for f in findings] == [
        ("overlong_prompts_skipped", "tm8b TM")
    ]
    assert "3 of 64 TM prompts did not fit the context of 1024 tokens" in findings[0]["message"]
    assert "longest prompt 1345 tokens" in findings[0]["message"]
    assert "models.tm8b.max_model_len" in findings[0]["fix"]
    reports[0]["overlong_skipped"] = 0  # fixed: the finding clears
    paths[0].write_text(json.dumps(reports[0]))
    subprocess.run(argv, check=True, env=env, timeout=300)
    assert json.loads(health.read_text()) == []
