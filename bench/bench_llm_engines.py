"""The CM on N evaluation rows with vLLM against the paper release's Hugging Face loop, on the
same prompts (issue 13; target: vLLM >= 10x the release's output tokens/s on the same GPU).

Engines (``--engines``, any of):
- ``release-hf``: a re-implementation of the release's evaluator loop (eyloncaplan/splits,
  ``llama_model.py``): the tokenizer with left padding and EOS as the pad token, weights in
  float16 placed with ``device_map="auto"`` (``.to(device)`` where accelerate is absent), the
  prompts in their given order 8 at a time, ``generate(do_sample=True, temperature=0.001,
  top_p=1, max_new_tokens=400)``, and the text after the padded prompt decoded;
- ``vllm``: this pipeline's vLLM backend (prefix caching on, requests in prefix order as the
  pipeline sends them, ``chunk_size`` prompts per engine call) at temperature 0;
- ``transformers``: this pipeline's transformers backend (greedy, batches sorted by length).

Prompts: the CM prompts of the rows (a rows Parquet written by ``splits theorize subsample``,
e.g. ``results/evaluation/subsample/rows-500.parquet``) with the theories of ``--theories`` (a
theories Parquet) or empty theories, rendered with ``--template`` (default: the CM prompt of
config/paper.yaml). Per engine: load seconds, time to the first result (load included),
generation seconds, output tokens, output tokens per second of generation, and the ratio of each
engine's tokens/s to release-hf's (the peer measured in the same run).

    # a GPU machine, the paper's CM (4 GPUs):
    python bench/bench_llm_engines.py --model meta-llama/Llama-3.1-70B-Instruct \\
        --tensor-parallel-size 4 --rows results/evaluation/subsample/rows-500.parquet
    # a GPU machine where no model can be fetched: a random-weight Llama of ~0.7B parameters
    # built there, 512 generated CM-shaped prompts (no rows needed):
    python bench/bench_llm_engines.py --random-model 2048,16 --prompts 512 --max-tokens 64 \\
        --engines release-hf transformers vllm
    # a tiny random-weight model, 8 short prompts (a smoke check, not a measurement; the HF
    # paths, and vllm where it imports):
    python bench/bench_llm_engines.py --tiny
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tiny import parse_args  # bench/, the script's folder

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TEMPLATE = REPO / "resources" / "prompts" / "classify_llama3.txt"
RELEASE_BATCH = 8
RELEASE_TEMPERATURE = 0.001


def cm_prompts(args) -> list[str]:
    import polars as pl
    from splits.config.settings import schema_defaults
    from splits.config.templates import CM_SLOTS
    from splits.evaluation.classify import build_cm_requests, theories_by_row
    from splits.evaluation.common import display_names, load_template, read_rows
    from splits.evaluation.settings import CMSettings

    rows = read_rows(args.rows)
    if args.limit:
        rows = rows.head(args.limit)
    if args.theories:
        theory_of = theories_by_row(pl.read_parquet(args.theories), rows)
    else:
        theory_of = dict.fromkeys(rows["quadruplet_id"].to_list(), "")
    template = load_template(args.template, CM_SLOTS, CM_SLOTS)
    settings = schema_defaults(CMSettings, max_post_chars=args.max_post_chars)
    requests = build_cm_requests(rows, theory_of, template, display_names(None), settings)
    return [r.prompt for r in requests]


TOPICS = "cooking recipes, baking bread, the new phone release, music, politics, sports".split(", ")
WORDS = (
    "I am a teacher and I love my students . As a construction worker I build houses every day . "
    "My family goes to church every Sunday morning . We discussed politics sports food and music "
    "on Reddit . What do you think about the new phone release ? hello world good morning everyone"
).split()


def generated_prompts(n: int, seed: int = 0) -> list[str]:
    """CM-shaped prompts: the shared instructions, a theory, two sets of three posts."""
    rng = random.Random(seed)
    instructions = (
        "You will read a theory about how two groups of Reddit users write, and two sets of "
        "posts. Answer A if set 1 was written by group A and B otherwise.\n"
    )

    def post() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))

    prompts = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        sets = ["\n".join(f"- {post()}" for _ in range(3)) for _ in range(2)]
        prompts.append(
            f"{instructions}Topic: {topic}\nTheory: group A writes more about work.\n"
            f"Set 1:\n{sets[0]}\nSet 2:\n{sets[1]}\nAnswer:"
        )
    return prompts


def prompts_line(args, prompts: list[str]) -> str:
    """One line saying what is measured: the prompts' token lengths under the model's
    tokenizer, the model, dtype, new-token budget, and the device (with the machine's load)."""
    import torch
    from transformers import AutoTokenizer

    lengths = sorted(
        len(ids) for ids in AutoTokenizer.from_pretrained(args.model)(prompts)["input_ids"]
    )
    device = (
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"{os.cpu_count()} CPUs"
    )
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return (
        f"{len(prompts)} CM prompts ({lengths[0]}-{lengths[-1]} tokens, median "
        f"{lengths[len(lengths) // 2]}), model {args.model}, {args.dtype}, at most "
        f"{args.max_tokens} new tokens, on {device}; uptime: {load}"
    )


def release_hf(args, prompts: list[str]) -> dict:
    """The release's loop, timed: load, then batches of 8 in the given order."""
    import torch
    from splits.llm.hf import _dtype_argument
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    tokenizer.pad_token = tokenizer.eos_token
    dtype = {_dtype_argument(): getattr(torch, args.dtype)}
    if importlib.util.find_spec("accelerate") is not None:
        model = AutoModelForCausalLM.from_pretrained(args.model, **dtype, device_map="auto")
    else:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(args.model, **dtype).to(device)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    load_s = time.perf_counter() - started
    first = None
    output_tokens = 0
    generating = time.perf_counter()
    for start in range(0, len(prompts), RELEASE_BATCH):
        batch = prompts[start : start + RELEASE_BATCH]
        inputs = tokenizer(batch, return_tensors="pt", padding=True).to(model.device)
        width = inputs["input_ids"].size(1)
        with torch.no_grad():
            outputs = model.generate(
                **inputs,
                max_new_tokens=args.max_tokens,
                temperature=RELEASE_TEMPERATURE,
                top_p=1,
                do_sample=True,
            )
        for row in outputs:
            new = row[width:].tolist()
            # tokens up to and including the first EOS (the rest is padding)
            stop = next((i + 1 for i, t in enumerate(new) if t == tokenizer.eos_token_id), None)
            output_tokens += stop if stop is not None else len(new)
            tokenizer.decode(row[width:], skip_special_tokens=True)
        if first is None:
            first = time.perf_counter() - started
    generate_s = time.perf_counter() - generating
    return {"load_s": load_s, "first_s": first, "generate_s": generate_s, "tokens": output_tokens}


def pipeline_backend(args, prompts: list[str], backend: str) -> dict:
    """This pipeline's backend on the prompts, in the order the Model sends them."""
    from splits.llm import Request, SamplingParams, build_backend, validate_registry
    from splits.llm.registry import prefix_order_key

    spec = {"backend": backend, "model": args.model, "dtype": args.dtype}
    if backend == "vllm":
        spec.update(
            tensor_parallel_size=args.tensor_parallel_size,
            chunk_size=args.chunk_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        if args.max_model_len:
            spec["max_model_len"] = args.max_model_len
    else:
        spec["batch_size"] = RELEASE_BATCH
    spec = validate_registry({"bench": spec})["bench"]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    requests = sorted((Request(prompt=p, params=params) for p in prompts), key=prefix_order_key)
    started = time.perf_counter()
    engine = build_backend("bench", spec)
    load_s = time.perf_counter() - started
    first = None
    output_tokens = 0
    generating = time.perf_counter()
    for _, completion in engine.stream(requests):
        output_tokens += completion.output_tokens
        if first is None:
            first = time.perf_counter() - started
    generate_s = time.perf_counter() - generating
    prefix = engine.prefix_cache_stats()
    engine.close()
    out = {"load_s": load_s, "first_s": first, "generate_s": generate_s, "tokens": output_tokens}
    if prefix is not None and prefix[1]:
        out["prefix_cache_hit_rate"] = prefix[0] / prefix[1]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="hub id or local path (the CM)")
    parser.add_argument(
        "--rows", help="evaluation rows Parquet (default: --prompts generated CM-shaped prompts)"
    )
    parser.add_argument("--prompts", type=int, default=0, help="generated prompts (no --rows)")
    parser.add_argument(
        "--random-model",
        metavar="HIDDEN,LAYERS",
        help="build a random-weight Llama of this hidden size and depth (head size 128, the tiny "
        "tokenizer) instead of --model: times an engine on a GPU where no model can be fetched",
    )
    parser.add_argument("--theories", help="theories Parquet (default: empty theories)")
    parser.add_argument("--template", default=str(DEFAULT_TEMPLATE), help="CM prompt template")
    parser.add_argument("--limit", type=int, default=500, help="rows used (0: all)")
    parser.add_argument("--engines", nargs="+", default=["release-hf", "vllm"])
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--max-post-chars", type=int, default=2000)
    parser.add_argument("--dtype", default="float16", help="release-hf: float16, as released")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--chunk-size", type=int, default=4096, help="vllm prompts per call")
    # --tiny: a tiny random-weight local model, 8 generated prompts (a smoke check, not a
    # measurement), the HF engines and vllm where it imports
    tiny_engines = ["release-hf", "transformers"]
    if importlib.util.find_spec("vllm") is not None:
        tiny_engines.append("vllm")
    args = parse_args(
        parser,
        limit=8,
        prompts=8,
        max_tokens=8,
        max_post_chars=200,
        dtype="float32",
        engines=tiny_engines,
    )
    if args.rows is None and args.prompts <= 0:
        sys.exit(
            "give --rows (an evaluation rows Parquet, splits theorize subsample's) or --prompts N"
        )
    if sum(map(bool, (args.tiny, args.model, args.random_model))) != 1:
        sys.exit("give exactly one of --model, --random-model or --tiny")
    if args.tiny or args.random_model:
        from splits.testing.tiny_models import build_tiny_model

        folder = Path(tempfile.mkdtemp(prefix="tiny.")) / "model"
        if args.tiny:
            args.model = str(build_tiny_model(folder))
        else:
            try:
                hidden, layers = (int(part) for part in args.random_model.split(","))
            except ValueError:
                parser.error(
                    f"--random-model: {args.random_model!r} is not HIDDEN,LAYERS (e.g. 2048,16)"
                )
            args.model = str(
                build_tiny_model(
                    folder,
                    hidden_size=hidden,
                    num_attention_heads=max(1, hidden // 128),
                    num_hidden_layers=layers,
                    max_position_embeddings=4096,
                )
            )
    prompts = cm_prompts(args) if args.rows else generated_prompts(args.prompts)
    print(prompts_line(args, prompts))
    results = {}
    for engine in args.engines:
        if engine == "vllm" and importlib.util.find_spec("vllm") is None:
            print(
                "vllm: not measured (vllm is not importable here: envs/vllm-cpu.sh or envs/vllm-cuda.sh)"
            )
            continue
        run = release_hf if engine == "release-hf" else None
        result = run(args, prompts) if run else pipeline_backend(args, prompts, engine)
        result["tokens_per_s"] = result["tokens"] / max(result["generate_s"], 1e-9)
        results[engine] = result
        hit = result.get("prefix_cache_hit_rate")
        print(
            f"{engine:>12}: load {result['load_s']:.1f} s, first result {result['first_s']:.1f} s, "
            f"generation {result['generate_s']:.1f} s, {result['tokens']} output tokens, "
            f"{result['tokens_per_s']:.1f} tokens/s"
            + (f", prefix-cache hit rate {hit:.3f}" if hit is not None else "")
        )
    peer = results.get("release-hf")
    if peer:
        for engine, result in results.items():
            if engine != "release-hf":
                ratio = result["tokens_per_s"] / max(peer["tokens_per_s"], 1e-9)
                print(
                    f"{engine} / release-hf: {ratio:.1f}x output tokens/s (target >= 10x for vllm)"
                )


if __name__ == "__main__":
    main()
