"""What a user sees around a run of the default pipeline: a run killed with SIGKILL (Snakemake and
its jobs, as a closed terminal or the OOM killer would) is finished by the plain command with no
manual step, its outputs byte for byte those of another run (the session's default run), and the
checkout stays clean (no tracked or untracked file changes). One run serves both cases (a whole
default pipeline run is the file's cost)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
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


@dataclass
class KilledRun:
    """A run of the plain command in a git checkout of the repository, killed with SIGKILL half
    way, then finished by the plain command and run once more: what each step returned."""

    work: Path
    killed: int  # the killed run's return code
    locks: list[Path]  # the locks it left
    done: subprocess.CompletedProcess
    again: subprocess.CompletedProcess | None  # None where ``done`` failed


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory) -> KilledRun:
    """One run for both cases below (a default pipeline run is this file's cost): the checkout is
    committed first, so that ``git status`` shows anything the run adds or changes."""
    work = copy_repo(tmp_path_factory.mktemp("clean-runs") / "clone")
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "checkout")
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
    locks = list((work / ".snakemake" / "locks").glob("*.lock"))
    done = plain_command(work)
    again = plain_command(work) if done.returncode == 0 else None
    return KilledRun(work, proc.returncode, locks, done, again)


def test_run_leaves_checkout_clean_and_repeats_byte_for_byte(killed_run, default_run):
    """The finished run's outputs are byte for byte those of the session's default run (another
    run of the same command and config), and the checkout holds no change and no new file."""
    work = killed_run.work
    assert killed_run.done.returncode == 0, killed_run.done.stderr[-4000:]
    assert git(work, "status", "--porcelain", "--untracked-files=all") == ""
    assert (work / "results" / "benchmarks").is_dir()  # the benchmark records are kept, ignored
    assert_same_outputs(work, default_run)


def test_killed_run_is_finished_by_the_plain_command(killed_run, default_run):
    assert killed_run.killed == -signal.SIGKILL, "the run finished before it could be killed"
    assert killed_run.locks, "the killed run left no lock"
    done = killed_run.done
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Removed the locks of a killed Snakemake run" in done.stderr
    assert_same_outputs(killed_run.work, default_run)
    again = killed_run.again
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
