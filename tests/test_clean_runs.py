"""What a user sees around a run of the default pipeline: the checkout stays clean (no tracked or
untracked file changes), two clean runs give byte-identical outputs, and a run killed with SIGKILL
(Snakemake and its jobs, as a closed terminal or the OOM killer would) is finished by the plain
command with no manual step, with the outputs of a clean run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import copy_repo
from helpers import splits_jobs_of, start_snakemake

# Snakemake's benchmark records and the LLM response cache (its latencies and times) hold
# timings, as the logs do; they are working records, not outputs of the method
NOT_COMPARED = ("benchmarks", "llm_cache.sqlite")


def output_files(workdir: Path) -> dict[str, bytes]:
    results = workdir / "results"
    return {
        str(p.relative_to(results)): p.read_bytes()
        for p in sorted(results.rglob("*"))
        if p.is_file() and p.relative_to(results).parts[0] not in NOT_COMPARED
    }


def assert_same_outputs(got: Path, expected: Path) -> None:
    got_files, expected_files = output_files(got), output_files(expected)
    assert sorted(got_files) == sorted(expected_files)
    differ = [name for name in expected_files if got_files[name] != expected_files[name]]
    assert differ == [], f"{len(differ)} outputs differ between two runs: {differ[:20]}"


def plain_command(workdir: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """The README's command, nothing added."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )


def git(workdir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=workdir,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_run_leaves_checkout_clean_and_repeats_byte_for_byte(tmp_path, default_run):
    work = copy_repo(tmp_path / "clone")
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "checkout")
    proc = plain_command(work)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert git(work, "status", "--porcelain", "--untracked-files=all") == ""
    assert (work / "results" / "benchmarks").is_dir()  # the benchmark records are kept, ignored
    assert_same_outputs(work, default_run)


def test_killed_run_is_finished_by_the_plain_command(tmp_path, default_run):
    work = copy_repo(tmp_path / "clone")
    proc = start_snakemake(work)
    # kill when some stages are done and jobs of later ones run (their outputs half-written)
    posts = work / "results" / "posts" / "posts.parquet"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if posts.is_file() and splits_jobs_of(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert list((work / ".snakemake" / "locks").glob("*.lock")), "the killed run left no lock"

    done = plain_command(work)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Removed the locks of a killed Snakemake run" in done.stderr
    assert_same_outputs(work, default_run)
    again = plain_command(work)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_no_test_installs_system_packages():
    """Tests skip, with the reason, where a system tool is missing; `.ci/run` installs them."""
    package_manager = re.compile(r"""\[\s*["'](?:apt-get|apt|dpkg|yum|dnf)["']""")
    here = Path(__file__).resolve().parent
    calls = [
        f"{path.name}: {line.strip()}"
        for path in sorted(here.rglob("*.py"))
        for line in path.read_text().splitlines()
        if package_manager.search(line)
    ]
    assert calls == []
