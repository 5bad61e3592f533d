"""Shared fixtures.

- ``reference_dir``: ../shared/reference (real public data); tests that need it skip, with the
  reason, where it is absent.
- ``default_run``: the default pipeline (``snakemake --cores 2`` on config/config.yaml) run once
  per test session in a temporary copy of the repository; returns that copy's root, whose
  ``results/`` holds every stage's output and the generator's ground truth.
- ``pipeline_run``: the same for any config overrides (cached per distinct override set).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference"
COPY_IGNORE = shutil.ignore_patterns(
    "results",
    "logs",
    ".snakemake",
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    "*.egg-info",
)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.skip(f"reference data folder {REFERENCE} is absent (it is only present in CI)")
    return REFERENCE


def copy_repo(dest: Path) -> Path:
    """A working copy of the repository (no results) to run Snakemake in."""
    shutil.copytree(REPO, dest, ignore=COPY_IGNORE, dirs_exist_ok=True)
    return dest


def run_snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    # --quiet takes several values: targets must come before it
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *args, "--quiet", "rules"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env
    )
    return proc


def error_lines(stderr: str) -> list[str]:
    """The non-empty lines of a Snakemake run's stderr, without Snakemake's notice that it read
    the default profile (profiles/default), which every run prints."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not line.endswith("for setting default command line arguments.")
    ]


class PipelineRuns:
    def __init__(self, base: Path):
        self.base = base
        self.runs: dict[str, Path] = {}

    def get(self, overrides: dict | None = None, targets: tuple[str, ...] = ()) -> Path:
        key = json.dumps([overrides or {}, list(targets)], sort_keys=True)
        if key not in self.runs:
            workdir = copy_repo(self.base / f"run{len(self.runs)}")
            if overrides:
                cfg_path = workdir / "config" / "config.yaml"
                config = yaml.safe_load(cfg_path.read_text())
                update_config(config, overrides)
                cfg_path.write_text(yaml.safe_dump(config))
            proc = run_snakemake(workdir, *targets)
            if proc.returncode != 0:
                pytest.fail(
                    f"pipeline run failed ({overrides}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
                )
            self.runs[key] = workdir
        return self.runs[key]


@pytest.fixture(scope="session")
def pipeline_runs(tmp_path_factory) -> PipelineRuns:
    return PipelineRuns(tmp_path_factory.mktemp("pipeline"))


@pytest.fixture(scope="session")
def default_run(pipeline_runs) -> Path:
    return pipeline_runs.get()


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """``pytest -m vllm`` (the real-engine tests, run in the vLLM environment, which holds no
    test extras) collects only the test files that hold such tests, so that the other files'
    imports (statsmodels, hypothesis, gradio, ...) need not be installed there."""
    if config.getoption("markexpr", "") != "vllm":
        return None
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return "mark.vllm" not in collection_path.read_text(encoding="utf-8")
    return None
