"""Lint gates enforced in CI: `snakemake --lint`, `snakefmt --check`, `ruff check`,
`ruff format --check`; every rule runs in a pinned conda environment of its family."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "workflow" / "rules"
ENVS = REPO / "envs"
FAMILIES = (
    "ingest",
    "graph",
    "demographics",
    "topics",
    "report",
    "sampling",
    "llm",
    "evaluation",
    "probes",
    "hypotheses",
)


def _run(*cmd: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        list(cmd), cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env
    )


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        candidate = Path(sys.executable).with_name(name)
        if candidate.exists():
            return str(candidate)
        pytest.fail(f"{name} is not installed (pip install -e '.[test]')")
    return path


def test_snakemake_lint_is_clean():
    proc = _run(sys.executable, "-m", "snakemake", "--lint", "text")
    assert proc.returncode == 0, f"snakemake --lint found problems:\n{proc.stdout}\n{proc.stderr}"


def test_snakefmt_check():
    proc = _run(_tool("snakefmt"), "--check", ".")
    assert proc.returncode == 0, f"snakefmt would reformat:\n{proc.stdout}\n{proc.stderr}"


def test_ruff_check():
    proc = _run(_tool("ruff"), "check", ".")
    assert proc.returncode == 0, f"ruff check:\n{proc.stdout}\n{proc.stderr}"


def test_ruff_format_check():
    proc = _run(_tool("ruff"), "format", "--check", ".")
    assert proc.returncode == 0, f"ruff format would reformat:\n{proc.stdout}\n{proc.stderr}"


def _rule_blocks(text: str) -> list[tuple[str, str]]:
    """(rule name, rule body) for every `rule NAME:` in a rule file."""
    starts = list(re.finditer(r"^rule (\w+):", text, flags=re.MULTILINE))
    blocks = []
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        body = text[match.end() : end]
        # the body ends at the first top-level (unindented, non-empty) line
        top = re.search(r"^\S", body, flags=re.MULTILINE)
        blocks.append((match.group(1), body[: top.start()] if top else body))
    return blocks


def test_every_rule_runs_in_a_family_env():
    files = sorted(p for p in RULES.glob("*.smk") if p.name != "common.smk")
    assert files, "no rule files found"
    problems = []
    n_rules = 0
    for path in files:
        for name, body in _rule_blocks(path.read_text()):
            if not re.search(r"^\s+(shell|script|wrapper|notebook):", body, flags=re.MULTILINE):
                continue  # a target-only rule: nothing runs
            n_rules += 1
            match = re.search(r"^\s+conda:\s*\n?\s*\"([^\"]+)\"", body, flags=re.MULTILINE)
            if match is None:
                problems.append(f"{path.name}: rule {name} has no conda: directive")
                continue
            env_path = (path.parent / match.group(1)).resolve()
            if env_path.parent != ENVS.resolve() or env_path.stem not in FAMILIES:
                problems.append(
                    f"{path.name}: rule {name} uses {match.group(1)}, not envs/<family>"
                )
            elif not env_path.is_file():
                problems.append(f"{path.name}: rule {name}: {env_path} is missing")
    assert not problems, "\n".join(problems)
    assert n_rules > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_env_files_are_pinned(family):
    env = yaml.safe_load((ENVS / f"{family}.yaml").read_text())
    assert env["channels"][0] == "conda-forge"
    deps = env["dependencies"]
    conda_specs = [d for d in deps if isinstance(d, str)]
    assert any(spec.startswith("python=") for spec in conda_specs)
    for spec in conda_specs:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+=[0-9][0-9A-Za-z.\-]*", spec), f"unpinned: {spec}"
    pip_specs = [s for d in deps if isinstance(d, dict) for s in d.get("pip", [])]
    # the splits package itself, from this checkout (relative to envs/)
    assert "--editable .." in pip_specs
    assert (ENVS / ".." / "pyproject.toml").resolve().is_file()
    for spec in pip_specs:
        assert spec == "--editable .." or "==" in spec, f"unpinned pip requirement: {spec}"
