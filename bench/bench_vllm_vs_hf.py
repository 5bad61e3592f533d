"""The release evaluator's way (Hugging Face ``generate``, batch 8, left padding) against this
pipeline's ``vllm`` backend: same prompts, same model, one run; prints both and the ratio.

Runs anywhere vLLM imports: on CPU in the vLLM environment (``bash envs/vllm-cpu.sh``, then
``VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python bench/bench_vllm_vs_hf.py``), on a GPU machine
with the CUDA environment (``envs/vllm-cuda.sh``) and ``--model`` a real model. Without
``--model`` it builds a tiny random-weight Llama locally (hidden size 128, 2 heads: vLLM's CPU
attention wants a head size of 64 or more; nothing is downloaded). Prompts: the CM prompts of
``--rows`` (evaluation rows Parquet, ``splits theorize subsample``'s) when given, else
``--prompts`` generated Reddit-like prompts that share the CM prompt's instructions (as the
evaluation's do, so vLLM's prefix cache has its usual share to reuse).

``release-hf`` is the release's loop (``bench_llm_engines.release_hf``: EOS as the pad token,
left padding, the prompts in their given order 8 at a time, ``do_sample=True,
temperature=0.001``); ``vllm`` is the project's backend (prefix caching, prefix-ordered
requests, greedy). Both generate ``--max-tokens`` tokens at most; the figure compared is output
tokens per second of generation (load excluded, printed beside it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from tiny import parse_args, skip  # noqa: E402 - bench/, the script's folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="hub id or local path (default: a tiny local Llama)")
    parser.add_argument("--rows", help="evaluation rows Parquet: use their CM prompts")
    parser.add_argument("--theories", help="theories Parquet (with --rows)")
    parser.add_argument("--template", help="CM prompt template (with --rows)")
    parser.add_argument("--prompts", type=int, default=64, help="generated prompts (no --rows)")
    parser.add_argument("--limit", type=int, default=64, help="rows used with --rows (0: all)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-post-chars", type=int, default=2000)
    parser.add_argument("--dtype", default="float32", help="both engines (float16 on a GPU)")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--chunk-size", type=int, default=4096, help="vllm prompts per call")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    # --tiny: 8 generated prompts, 8 new tokens; skipped where vllm cannot be imported
    args = parse_args(parser, prompts=8, limit=8, max_tokens=8, max_model_len=512)
    if importlib.util.find_spec("vllm") is None:
        message = "vllm is not importable here (envs/vllm-cpu.sh or envs/vllm-cuda.sh)"
        if args.tiny:
            skip(message)
        sys.exit(message)

    import bench_llm_engines as engines

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.model is None:
        from splits.testing.tiny_models import build_tiny_model

        folder = Path(tempfile.mkdtemp(prefix="tiny.")) / "model"
        args.model = str(build_tiny_model(folder, hidden_size=128, num_attention_heads=2))
    if args.rows:
        from bench_llm_engines import DEFAULT_TEMPLATE

        args.template = args.template or str(DEFAULT_TEMPLATE)
        prompts = engines.cm_prompts(args)
    else:
        prompts = engines.generated_prompts(args.prompts)
    print(engines.prompts_line(args, prompts))
    results = {}
    for name in ("release-hf", "vllm"):
        if name == "release-hf":
            result = engines.release_hf(args, prompts)
        else:
            result = engines.pipeline_backend(args, prompts, "vllm")
        result["tokens_per_s"] = result["tokens"] / max(result["generate_s"], 1e-9)
        results[name] = result
        hit = result.get("prefix_cache_hit_rate")
        print(
            f"{name:>10}: load {result['load_s']:.1f} s, generation {result['generate_s']:.1f} s, "
            f"{result['tokens']} output tokens, {result['tokens_per_s']:.1f} output tokens/s"
            + (f", prefix-cache hit rate {hit:.3f}" if hit is not None else "")
        )
    ratio = results["vllm"]["tokens_per_s"] / max(results["release-hf"]["tokens_per_s"], 1e-9)
    print(f"vllm / release-hf: {ratio:.1f}x output tokens/s (same prompts, model and run)")


if __name__ == "__main__":
    main()
