"""Lazy engines and one engine per model (issue 13).

- A job whose requests are all cached never builds its engine: the real ``splits theorize
  generate`` runs in a process where importing torch, transformers or vllm fails, for a
  transformers model whose weights do not exist; a request that misses the cache then fails on
  exactly that (the engine is built on the first miss, not before).
- Requests reach the engine in prefix order; the vLLM backend reads the engine's prefix-cache
  counters; the throughput figures are the ones a hand count gives.
- The whole evaluation of the sample config with every model behind a stand-in engine
  (bench/standin_engine.py: records each build): one build per model, the same accuracies as the
  builtin models, no build on a fully cached re-run, and adding a TM generates only the new
  prompts and runs only the new per-row jobs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
import snakemake_fork
import yaml
from splits.cli import main
from splits.config.schema import validate_config
from splits.config.settings import schema_defaults, settings_json
from splits.evaluation.common import display_names
from splits.evaluation.settings import TMPromptSettings, TMSampling, TMSettings
from splits.io import write_parquet
from splits.llm import (
    Backend,
    Completion,
    Request,
    ResponseCache,
    load_model,
    register_builtin,
    request_key,
    validate_registry,
)
from splits.llm.fingerprint import hf_identity

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import standin_engine  # noqa: E402

BLOCKED_RUNNER = textwrap.dedent(
    """
    import importlib.machinery
    import sys

    # finds torch, transformers and vllm (availability checks pass) but importing one fails
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "transformers", "vllm"):
                return importlib.machinery.ModuleSpec(name, self)
            return None

        def create_module(self, spec):
            raise ImportError(f"import of {spec.name} is blocked in this process")

        def exec_module(self, module):
            raise ImportError(f"import of {module.__name__} is blocked in this process")

    sys.meta_path.insert(0, Block())
    from splits.cli import main

    code = main(sys.argv[1:])
    assert not {"torch", "transformers", "vllm"} & set(sys.modules)
    sys.exit(code)
    """
)


def _quadruplets(n=6, k=4):
    rng = random.Random(7)
    return pl.DataFrame(
        [
            {
                "quadruplet_id": f"q{i}",
                "description": "Basketball",
                "category": "Sports & Fitness",
                "demographic_A": "catholic",
                "demographic_B": "teacher",
                "example_posts": [f"post {j} of row {i}" for j in range(k)],
                "example_labels": ["A", "B"] * (k // 2),
                "sample_A": ["We went to Mass.", "parish game"],
                "sample_B": ["Grading tonight", "my students"],
                "switched": rng.random() < 0.5,
            }
            for i in range(n)
        ]
    )


def test_fully_cached_job_never_builds_its_engine(tmp_path):
    from splits.config.templates import TM_SLOTS
    from splits.evaluation.common import load_template
    from splits.evaluation.theorize import TM_REQUIRED, build_tm_requests

    write_parquet(_quadruplets(), tmp_path / "quads.parquet")
    rows_path = tmp_path / "rows.parquet"
    subsample = ["theorize", "subsample", "--dataset", str(tmp_path / "quads.parquet")]
    subsample += ["--settings", json.dumps({"dataset_layout": "auto", "seed": 1})]
    assert main([*subsample, "--rows", "6", "--out", str(rows_path)]) == 0
    # a transformers model whose weights do not exist: building it can only fail
    spec = {"backend": "transformers", "model": str(tmp_path / "absent-model"), "device": "cpu"}
    template_path = REPO / "resources/prompts/theory.txt"
    cache_path = tmp_path / "cache.sqlite"
    rows = pl.read_parquet(rows_path)
    settings = schema_defaults(
        TMPromptSettings, sampling=TMSampling(temperature=0.0, max_tokens=12), seed=0
    )
    template = load_template(template_path, TM_SLOTS, TM_REQUIRED)
    requests = build_tm_requests(rows, 2, template, display_names(None), settings)
    # the cache keys computed here from the spec, independently of the Model
    identity = hf_identity("transformers", validate_registry({"m": spec})["m"], ("dtype",))
    cache = ResponseCache(cache_path)
    for i, request in enumerate(requests):
        cache.put(
            request_key(identity, request, False), Completion(f"theory {i}", "stop", 9, 2, 0.1)
        )
    cache.close()
    runner = tmp_path / "blocked.py"
    runner.write_text(BLOCKED_RUNNER)

    def generate(k, *extra):
        out = tmp_path / f"theories-{k}.parquet"
        cmd = [sys.executable, str(runner), "theorize", "generate", "--rows", str(rows_path)]
        cmd += ["--k", str(k), "--model", "m", "--model-spec", json.dumps(spec)]
        cmd += ["--template", str(template_path)]
        cmd += ["--settings", json.dumps(dataclasses.asdict(settings))]
        cmd += ["--cache", str(cache_path), "--out", str(out), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return proc, out

    proc, out = generate(2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theories = pl.read_parquet(out)
    assert theories["theory"].to_list() == [f"theory {i}" for i in range(len(requests))]
    # k=4 is not cached: the engine is built for it, and building it fails on the blocked import
    proc, _ = generate(4)
    assert proc.returncode == 2
    assert "the transformers backend needs torch and transformers" in proc.stderr
    # a per-row job reading the cache only says what is missing, in one line
    proc, _ = generate(4, "--cache-only")
    assert proc.returncode == 3
    message = proc.stderr.strip().splitlines()[-1]
    assert "model m: 6 of 6 requests are not in the response cache" in message


class RecordingBackend(Backend):
    def __init__(self, name, spec):
        self.name = name
        self.seen: list[str] = []

    def identity(self):
        return {"kind": "test_recording"}

    def generate(self, requests):
        self.seen += [r.prompt for r in requests]
        return [Completion(r.prompt.upper(), "stop", 1, 1, 0.0) for r in requests]


register_builtin("test_recording")(RecordingBackend)


def test_requests_reach_the_engine_in_prefix_order():
    prompts = [f"{head} {tail}" for tail in range(4) for head in ("theory B", "theory A", "inst")]
    random.Random(3).shuffle(prompts)
    model = load_model("r", {"r": {"backend": "builtin", "kind": "test_recording"}})
    out = model.generate([Request(prompt=p) for p in prompts + prompts[:2]])
    assert [c.text for c in out] == [p.upper() for p in prompts + prompts[:2]]
    assert model.backend.seen == sorted(
        prompts
    )  # each distinct prompt once, shared prefixes together


def test_vllm_prefix_cache_hit_rate_from_the_engine_metrics():
    from splits.llm.vllm_backend import VLLMBackend

    backend = VLLMBackend.__new__(VLLMBackend)  # no vllm here: only the metrics reader
    backend.engine = SimpleNamespace(
        get_metrics=lambda: [
            SimpleNamespace(name="vllm:prefix_cache_queries", value=1000),
            SimpleNamespace(name="vllm:prefix_cache_hits", value=640),
            SimpleNamespace(name="vllm:num_requests_running", value=3),
        ]
    )
    assert backend.prefix_cache_stats() == (640, 1000)
    backend.engine = SimpleNamespace(
        get_metrics=lambda: [SimpleNamespace(name="vllm:prefix_cache_queries_total", value=10)]
    )
    assert backend.prefix_cache_stats() == (0, 10)
    backend.engine = SimpleNamespace()  # an engine without metrics: no figure, no failure
    assert backend.prefix_cache_stats() is None


class SlowEngine(Backend):
    """A lazy engine: identity from the spec, half a second to build."""

    built = 0

    def __init__(self, name, spec, engine=None):
        time.sleep(0.5)
        SlowEngine.built += 1
        self.name, self.spec = name, dict(spec)

    @classmethod
    def spec_identity(cls, name, spec):
        return {"backend": "slow", "model": spec["model"]}

    def identity(self):
        return self.spec_identity(self.name, self.spec)

    def generate(self, requests):
        return [Completion("x" * len(r.prompt), "stop", 10, len(r.prompt), 0.0) for r in requests]

    def prefix_cache_stats(self):
        return (30, 120)


def test_engine_is_built_on_the_first_miss_and_counted(tmp_path, monkeypatch):
    import splits.llm.vllm_backend as vllm_backend

    monkeypatch.setattr(vllm_backend, "VLLMBackend", SlowEngine)
    monkeypatch.setattr(SlowEngine, "built", 0)
    registry = {"big": {"backend": "vllm", "model": "some/model"}}
    cache = tmp_path / "c.sqlite"
    with load_model("big", registry, cache_path=cache) as model:
        assert not model.built and SlowEngine.built == 0
        model.generate([Request(prompt="ab"), Request(prompt="abc"), Request(prompt="ab")])
        model.generate([Request(prompt="abcd")])
        stats = model.stats.as_dict()
    assert SlowEngine.built == 1
    assert (stats["requests"], stats["cached"], stats["generated"]) == (4, 1, 3)
    assert (stats["prompt_tokens"], stats["output_tokens"]) == (30, 9)
    assert stats["engine_builds"] == 1 and stats["engine_load_s"] >= 0.5
    assert stats["output_tokens_per_s"] == pytest.approx(9 / stats["generate_s"])
    assert stats["prefix_cache_hit_rate"] == pytest.approx(0.25)
    with load_model("big", registry, cache_path=cache) as again:
        assert [c.cached for c in again.generate([Request(prompt="abc")])] == [True]
        assert again.stats.engine_builds == 0
    assert SlowEngine.built == 1


def test_model_batch_plan_and_throughput_errors(tmp_path, capsys):
    spec = json.dumps({"backend": "builtin", "kind": "no-theory"})
    base = ["model-batch", "tm", "--model", "n", "--model-spec", spec, "--cache", "c.sqlite"]
    base += ["--report", str(tmp_path / "r.json")]
    base += ["--settings", settings_json(validate_config({}), TMSettings)]
    assert main([*base, "--plan", "[{'rows': 1}]"]) == 2
    assert "--plan: not JSON" in capsys.readouterr().err
    assert main([*base, "--plan", json.dumps([{"rows": "x.parquet", "k": -1}])]) == 2
    assert "--plan[0].k: must be a non-negative integer" in capsys.readouterr().err
    bogus = tmp_path / "bogus.json"
    bogus.write_text("{}")
    table = ["model-batch", "throughput", "--out-csv", "t.csv", "--out-md", "t.md"]
    assert main([*table, "--reports", str(bogus)]) == 2
    assert "not a model-batch report" in capsys.readouterr().err


# --------------------------------------------------------------------------- the pipeline


STANDIN_MODELS = {
    "no-theory": "builtin:no-theory",
    "oracle-lexical": "builtin:oracle-lexical",
    "lexical": "builtin:lexical",
}
# What these tests read: the sample experiment's tables and the engines' throughput. Only their
# jobs run (the TM and CM batches, theories, classifications, metrics), not the hypotheses and
# probes that the models' change also makes stale (24 jobs for the whole default target).
EVALUATION_TARGETS = (
    "results/evaluation/experiments/sample/summary.csv",
    "results/evaluation/experiments/sample/splits.csv",
    "results/evaluation/experiments/sample/predictions.parquet",
    "results/evaluation/throughput.csv",
)


def _snakemake(workdir: Path, env: dict, *args: str) -> str:
    proc = snakemake_fork.run(["--cores", "2", *args], workdir, env, 900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def standin_run(default_run, tmp_path_factory):
    """The finished default run with the sample experiment's models behind stand-in engines
    (``backend: vllm`` specs whose engine answers as the builtin model of the same name)."""
    root = tmp_path_factory.mktemp("standin")
    workdir = root / "repo"
    shutil.copytree(default_run, workdir, symlinks=True)
    config_path = workdir / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    for name, model in STANDIN_MODELS.items():
        config["models"][name] = {"backend": "vllm", "model": model}
    # oracle-lexical's words become lexicons only as a builtin; the stand-in is an LLM
    config["hypotheses"]["theories"] = []
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    builds = root / "builds.jsonl"
    site = standin_engine.write_sitecustomize(root / "site", builds, 0.2)
    pythonpath = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": pythonpath}
    _snakemake(workdir, env, *EVALUATION_TARGETS, "--quiet", "rules")
    return SimpleNamespace(workdir=workdir, builds=builds, env=env, config=config)


def _builds(path: Path) -> list[tuple[str, str]]:
    records = standin_engine.read_builds(path)
    path.unlink(missing_ok=True)
    return sorted((r["model"], r["argv"][1]) for r in records)


def test_standin_engine_builds_once_per_model(standin_run, default_run):
    assert _builds(standin_run.builds) == [
        ("lexical", "cm"),
        ("no-theory", "tm"),
        ("oracle-lexical", "tm"),
    ]
    experiment = "results/evaluation/experiments/sample"
    # the same answers as the builtin models: the same accuracies
    for table in ("summary.csv", "splits.csv"):
        assert pl.read_csv(standin_run.workdir / experiment / table).equals(
            pl.read_csv(default_run / experiment / table)
        )
    throughput = pl.read_csv(standin_run.workdir / "results/evaluation/throughput.csv")
    assert throughput.select("model", "role").rows() == [
        ("lexical", "cm"),
        ("no-theory", "tm"),
        ("oracle-lexical", "tm"),
    ]
    predictions = pl.read_parquet(standin_run.workdir / experiment / "predictions.parquet")
    lexical = throughput.row(0, named=True)
    assert lexical["prompts"] == predictions.height  # every (row, TM, k) once
    assert lexical["engine_builds"] == 1 and lexical["cached"] + lexical["generated"] == (
        predictions.height
    )


def test_fully_cached_rerun_builds_nothing(standin_run):
    _builds(standin_run.builds)
    _snakemake(
        standin_run.workdir,
        standin_run.env,
        *EVALUATION_TARGETS,
        "--quiet",
        "rules",
        "--forcerun",
        "evaluation_tm_batch",
        "evaluation_cm_batch",
    )
    assert _builds(standin_run.builds) == []
    throughput = pl.read_csv(standin_run.workdir / "results/evaluation/throughput.csv")
    assert throughput["generated"].to_list() == [0, 0, 0]
    assert (throughput["cached"] == throughput["prompts"]).all()


def test_adding_a_tm_generates_only_its_prompts(standin_run, tmp_path):
    workdir = standin_run.workdir
    _builds(standin_run.builds)
    predictions = workdir / "results/evaluation/predictions"
    theories = workdir / "results/evaluation/theories"
    files = [p for p in [*predictions.rglob("*"), *theories.rglob("*")] if p.is_file()]
    before = {p: p.stat().st_mtime_ns for p in files}
    config = json.loads(json.dumps(standin_run.config))
    new_tm = {"kind": "oracle-lexical", "n_words": 20}
    config["models"]["oracle-20"] = {"backend": "vllm", "model": "builtin:" + json.dumps(new_tm)}
    config["evaluation"]["experiments"]["sample"]["tms"].append("oracle-20")
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump(config, sort_keys=False))
    _snakemake(
        workdir,
        standin_run.env,
        *EVALUATION_TARGETS,
        "--quiet",
        "rules",
        "--configfile",
        str(extra),
    )
    # the new TM's batch and the CM's batch (it has new prompts) build an engine; nothing else
    assert _builds(standin_run.builds) == [("lexical", "cm"), ("oracle-20", "tm")]
    assert before and all(p.stat().st_mtime_ns == mtime for p, mtime in before.items())
    experiment = config["evaluation"]["experiments"]["sample"]
    rows = pl.read_parquet(
        workdir / f"results/evaluation/subsample/rows-{experiment['rows']}.parquet"
    )
    all_predictions = pl.read_parquet(
        workdir / "results/evaluation/experiments/sample/predictions.parquet"
    )
    new = all_predictions.filter(pl.col("tm") == "oracle-20")
    assert new.height == rows.height * len(experiment["ks"])
    report = json.loads((workdir / "results/evaluation/batches/cm/lexical.json").read_text())
    assert report["requests"] == all_predictions.height
    # prompts already answered come from the cache: at most the new TM's prompts are generated
    assert report["cached"] >= all_predictions.height - new.height
    assert 0 < report["generated"] <= new.height
