"""A stand-in for the vLLM engine, for DAG benchmarks and tests: CPU, deterministic, with a
configurable load time, and every build recorded.

``install(builds_file, load_s)`` replaces the ``vllm`` backend class of the model registry (the
module attribute ``splits.llm.vllm_backend.VLLMBackend``, which both the current registry and
the eager one before it resolve when they build a model) with ``StandInEngine`` in this process.
To reach every Snakemake job, ``write_sitecustomize(folder, builds_file, load_s)`` writes a
``sitecustomize.py`` that installs it at interpreter start: put the folder first on PYTHONPATH.

Building a stand-in sleeps ``load_s`` seconds (the simulated engine load) and appends one JSON
line ``{"model", "pid", "load_s", "argv"}`` to ``builds_file``. Answers are deterministic and in
each stage's format, so every stage downstream runs: a spec ``model: builtin:<kind>`` (or
``builtin:{"kind": ..., <its keys>}``) answers as that builtin model would; any other model answers from the
request payload: CM prompts as the ``lexical`` CM, TM prompts as ``oracle-lexical`` (as
``no-theory`` where the rows have no labels), probe prompts as ``probe-scripted``, self-ID
verification as the rule verifier; anything else gets an empty answer.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from splits.llm.base import Backend, Completion, Request

# The stand-in's model names are on no hub: its jobs ask none (HF_HUB_OFFLINE, what the
# Snakefile gives the jobs of a real run whose hub models are cached and whose hub cannot be
# reached), so a job's prompt-length check finds no tokenizer at once instead of after the hub
# client's retries (about 25 s per lookup, two per LLM job, on a machine without a network).
SITECUSTOMIZE = """\
import os
import sys
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, {bench!r})
import standin_engine
standin_engine.install({builds!r}, {load_s!r})
"""


class StandInEngine(Backend):
    builds_file: str | None = None
    load_s: float = 0.0
    # what the vllm backend declares in the backend table (splits.llm.backends), except the
    # packages: a stand-in needs none
    prompted = True
    servable = True

    @classmethod
    def gpus(cls, spec: Mapping[str, Any]) -> int:
        return int(spec["tensor_parallel_size"])

    def __init__(self, name: str, spec: Mapping[str, Any], engine: Any = None):
        started = time.perf_counter()
        time.sleep(self.load_s)
        self.name = name
        self.spec = dict(spec)
        self._delegates: dict[str, Backend] = {}
        if self.builds_file:
            line = {
                "model": name,
                "pid": os.getpid(),
                "load_s": time.perf_counter() - started,
                "argv": sys.argv[1:3],
            }
            with open(self.builds_file, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")

    @classmethod
    def spec_identity(cls, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return {"backend": "standin", "model": spec["model"]}

    def identity(self) -> dict[str, Any]:
        return self.spec_identity(self.name, self.spec)

    def _delegate(self, kind: str) -> Backend:
        if kind not in self._delegates:
            from splits.llm.registry import build_backend

            spec = json.loads(kind) if kind.startswith("{") else {"kind": kind}
            self._delegates[kind] = build_backend(self.name, {"backend": "builtin", **spec})
        return self._delegates[kind]

    def _kind(self, request: Request) -> str:
        model = str(self.spec.get("model", ""))
        if model.startswith("builtin:"):
            return model.removeprefix("builtin:")  # a kind, or a JSON builtin spec
        payload = request.payload or {}
        if "post_set1" in payload:
            return "lexical"
        if "posts" in payload and "k" in payload:
            return "oracle-lexical" if payload.get("labels") is not None else "no-theory"
        if "probe" in payload:
            return "probe-scripted"
        if "left_context" in payload:
            return "selfid-rules"
        return "empty"

    def generate(self, requests: list[Request]) -> list[Completion]:
        by_kind: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            by_kind.setdefault(self._kind(request), []).append(i)
        out: list[Completion | None] = [None] * len(requests)
        for kind, indices in by_kind.items():
            chosen = [requests[i] for i in indices]
            if kind == "selfid-rules":
                answers = _selfid_rules(chosen)
            elif kind == "empty":
                answers = [Completion("", "stop", 0, 0, 0.0) for _ in chosen]
            else:
                answers = self._delegate(kind).generate(chosen)
            for i, completion in zip(indices, answers, strict=True):
                prompt_tokens = len((r := requests[i]).prompt or json.dumps(r.messages)) // 4
                out[i] = Completion(
                    completion.text,
                    completion.finish_reason,
                    prompt_tokens,
                    completion.output_tokens,
                    completion.latency_s,
                )
        return out


def _selfid_rules(requests: list[Request]) -> list[Completion]:
    import polars as pl

    try:
        from splits.demographics.verify import rule_reasons
    except ModuleNotFoundError:  # the tree before the demographics package (bench_llm_dag's
        from splits.selfid import rule_reasons  # "before" tree) kept it in splits.selfid

    frame = pl.DataFrame(
        {
            "left_context": [str((r.payload or {}).get("left_context", "")) for r in requests],
            "match": [str((r.payload or {}).get("match", "")) for r in requests],
            "right_context": [str((r.payload or {}).get("right_context", "")) for r in requests],
        }
    )
    reasons = rule_reasons(frame).to_list()
    return [Completion("YES" if r == "statement" else "NO", "stop", 0, 1, 0.0) for r in reasons]


def install(builds_file: str | None, load_s: float) -> None:
    """Make the registry's ``vllm`` backend build stand-ins (this process)."""
    import splits.llm.vllm_backend as vllm_backend

    StandInEngine.builds_file = builds_file
    StandInEngine.load_s = float(load_s)
    vllm_backend.VLLMBackend = StandInEngine


def write_sitecustomize(folder: str | Path, builds_file: str | Path, load_s: float) -> Path:
    """A folder whose ``sitecustomize.py`` installs the stand-in in every Python process that
    has the folder on its path (Snakemake jobs inherit PYTHONPATH)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bench = str(Path(__file__).resolve().parent)
    text = SITECUSTOMIZE.format(bench=bench, builds=str(builds_file), load_s=float(load_s))
    (folder / "sitecustomize.py").write_text(text)
    return folder


def read_builds(builds_file: str | Path) -> list[dict[str, Any]]:
    path = Path(builds_file)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
