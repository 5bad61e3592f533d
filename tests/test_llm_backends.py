"""The one table of model backends (splits.llm.backends), the one device picker
(splits.llm.devices), and where the LLM layer may write the environment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from splits.config.schema import load_schema
from splits.errors import ConfigError
from splits.llm import gpu_resources
from splits.llm.backends import BACKENDS, backend_class, capability
from splits.llm.devices import pick_device
from splits.pipeline.checks import check_evaluation

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow" / "splits"


def test_the_table_holds_every_backend_the_schema_accepts():
    spec = load_schema()["properties"]["models"]["additionalProperties"]
    assert set(spec["properties"]["backend"]["enum"]) == set(BACKENDS)
    for name in BACKENDS:
        assert backend_class(name).__name__  # each entry imports
    with pytest.raises(ConfigError, match=r"^models\.m\.backend: unknown backend 'gpt' \(known: "):
        backend_class("gpt", "models.m.backend")


def test_gpus_come_from_the_backend_classes():
    registry = {
        "v": {"backend": "vllm", "model": "m", "tensor_parallel_size": 4, "slurm_extra": "--x"},
        "t": {"backend": "transformers", "model": "m", "device": "cuda:1"},
        "c": {"backend": "transformers", "model": "m", "device": "cpu"},
        "a": {"backend": "transformers", "model": "m"},  # auto: no GPU reserved
        "p": {"backend": "python", "function": "mod:f", "gpus": 2},
        "o": {"backend": "openai", "model": "m", "base_url": "http://h/v1"},
        "b": {"backend": "builtin", "kind": "lexical"},
    }
    got = {name: gpu_resources(name, registry) for name in registry}
    assert got["v"] == {"gpu": 4, "slurm_extra": "--x"}
    assert [got[n]["gpu"] for n in "tcapob"] == [1, 0, 0, 2, 0, 0]


def test_capabilities_that_the_workflow_asks():
    models = {
        "v": {"backend": "vllm"},
        "o": {"backend": "openai"},
        "b": {"backend": "builtin"},
        "p": {"backend": "python"},
        "f": {"backend": "precomputed"},
    }
    # a prompt template for the LLMs only; batch jobs for all but builtin and precomputed
    assert [capability(models, m, "prompted") for m in "vobpf"] == [1, 1, 0, 0, 0]
    assert [capability(models, m, "batch_job") for m in "vobpf"] == [1, 1, 0, 1, 0]
    assert [capability(models, m, "servable") for m in "vobpf"] == [1, 0, 0, 0, 0]


def test_a_theory_model_a_researcher_brings_cannot_classify(repo_root):
    from splits.config.schema import load_config

    config = load_config(repo_root / "config" / "config.yaml")
    config["models"]["mine"] = {"backend": "precomputed", "theories": "t.csv"}
    experiment = next(iter(config["evaluation"]["experiments"].values()))
    experiment["cms"] = [*experiment["cms"], "mine"]
    with pytest.raises(ConfigError, match=r"'mine' \(backend precomputed\) writes theories"):
        check_evaluation(config)


def test_pick_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device(None) == "cpu"
    assert pick_device("auto") == "cpu"
    assert pick_device("cpu") == "cpu"
    with pytest.raises(ConfigError) as err:
        pick_device("cuda:1", key="models.m.device")
    assert str(err.value) == "models.m.device: cuda:1 requested but no CUDA GPU is visible"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device(None) == "cuda"
    assert pick_device("cuda:1") == "cuda:1"


def _environment_writes(text: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(text)):
        target = None
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            target = next((t for t in targets if isinstance(t, ast.Subscript)), None)
            target = target.value if target is not None else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("pop", "update", "setdefault", "clear", "popitem"):
                target = node.func.value
            elif node.func.attr in ("putenv", "unsetenv"):
                found.append(f"{where}:{node.lineno}")
        if target is not None and ast.unparse(target) == "os.environ":
            found.append(f"{where}:{node.lineno}")
    return found


def test_the_llm_layer_writes_no_environment():
    """Only entry points (the Snakefile, a command's main) set environment variables; the LLM
    layer, the pipeline's helpers and the report read what they are handed."""
    writes = [
        w
        for folder in ("llm", "pipeline", "report")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for w in _environment_writes(path.read_text(encoding="utf-8"), path.name)
    ]
    assert not writes, f"os.environ written in library code: {writes}"
    # what served mode's settings export did before it moved to the Snakefile is found
    before = "import os\nos.environ.pop(K, None)\nos.environ[K] = v\nos.environ.get(K)\n"
    assert sorted(_environment_writes(before, "serve.py")) == ["serve.py:2", "serve.py:3"]


def test_splits_llm_by_hand_with_a_config_equals_the_settings_run(tmp_path):
    """``splits llm --config FILE`` reads the models registry and seed through the settings path,
    the same as ``--settings`` with those values."""
    import json

    import yaml
    from splits.cli import main
    from splits.llm import Backend, Completion, register_builtin

    class Echo(Backend):
        def __init__(self, name, spec):
            self.name = name

        def identity(self):
            return {"kind": "echo-seed"}

        def generate(self, requests):
            return [
                Completion(
                    f"{r.prompt} seed={r.params.seed} max={r.params.max_tokens}", "stop", 1, 1, 0.0
                )
                for r in requests
            ]

    register_builtin("test-echo-seed")(Echo)
    models = {"echo": {"backend": "builtin", "kind": "test-echo-seed"}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"seed": 7, "models": models}))
    prompts = tmp_path / "in.jsonl"
    prompts.write_text('{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": "yo", "seed": 3}\n')
    common = ["llm", "--model", "echo", "--input", str(prompts), "--no-cache", "--max-tokens", "9"]
    by_config, by_settings = tmp_path / "config.jsonl", tmp_path / "settings.jsonl"
    assert main([*common, "--config", str(config), "--output", str(by_config)]) == 0
    settings = json.dumps({"models": models, "seed": 7})
    assert main([*common, "--settings", settings, "--output", str(by_settings)]) == 0
    assert by_config.read_text() == by_settings.read_text()
    texts = [json.loads(line)["text"] for line in by_config.read_text().splitlines()]
    assert texts == ["hi seed=7 max=9", "yo seed=3 max=9"]
