"""The README's quick start from a base install: a fresh virtual environment (no system site
packages, no extras), a non-editable `pip install .`, the default pipeline with the plain command,
then `snakemake --report`. The jobs run the installed `splits` (not the source tree), so the
package must carry what it reads at runtime (the config schema, the prompts, the bot list).

Needs the package index (or pip's configured mirror); skips, saying so, where it is unreachable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_repo

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _index_reachable(python: Path, env: dict, tmp: Path) -> bool:
    probe = _run(
        [str(python), "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp), "tqdm"],
        tmp,
        env,
        120,
    )
    return probe.returncode == 0


def test_base_install_runs_quick_start_and_report(tmp_path):
    work = copy_repo(tmp_path / "clone")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, bindir = venv / "bin" / "python", venv / "bin"
    # nothing of the developer's environment: no PYTHONPATH to the source tree, the venv first
    # nor PYTHONDONTWRITEBYTECODE (set in some developers' and CI shells): a user's fresh
    # environment compiles each module at its first import and reuses it (with --no-compile
    # below, that is where the compiling happens); inherited, every job of the run recompiled
    # scipy, matplotlib and polars (the test's run 180 CPU s against ~80 for a default run)
    inherited = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    env |= {"PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}", "PYTHONHASHSEED": "0"}
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    if not _index_reachable(python, env, probe_dir):
        pytest.skip("the package index is unreachable: cannot build a fresh environment")

    # --no-compile: the run compiles what it imports; byte-compiling every installed module
    # (scipy's and matplotlib's included) would only cost the test time
    install = _run(
        [str(python), "-m", "pip", "install", "-q", "--no-compile", str(work)], work, env, 1800
    )
    assert install.returncode == 0, install.stderr[-4000:]
    where = _run([str(python), "-c", "import splits; print(splits.__file__)"], tmp_path, env, 60)
    assert str(venv) in where.stdout, where.stdout + where.stderr  # the installed copy

    run = _run([str(bindir / "snakemake"), "--cores", "2"], work, env, 1800)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert (work / "results" / "dataset" / "quadruplets.parquet").is_file()

    report = _run([str(bindir / "snakemake"), "--report", "results/report.html"], work, env, 900)
    assert report.returncode == 0, report.stderr[-4000:]
    page = (work / "results" / "report.html").read_text(errors="replace")
    assert "Splits" in page and len(page) > 100_000
