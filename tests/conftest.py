"""Shared fixtures.

- ``reference_dir``: ../shared/reference (real public data); tests that need it skip, with the
  reason, where it is absent.
- ``default_run``: the default pipeline (``snakemake --cores 2`` on config/config.yaml) run once
  per test session in a temporary copy of the repository; returns that copy's root, whose
  ``results/`` holds every stage's output and the generator's ground truth. It is run as a user's
  interrupted run is (``interrupted_run``): killed half way, then finished by the plain command,
  so that tests/test_clean_runs.py checks the resume on it rather than on a whole run of its own
  (its outputs are checked byte for byte against a clean run's, the recorded manifest).
- ``pipeline_runs``: the same for any config overrides (cached per distinct override set).

Under pytest-xdist (``pytest`` runs the files on ``-n auto`` workers, pyproject.toml) a session
fixture is built once per worker; the pipeline runs are the suite's most expensive step, so the
workers share them: the first worker to ask for a run makes it in a folder beside the workers'
own (``tmp_path_factory.getbasetemp().parent``), under a file lock, and the others wait for it
and read the same copy. The tests treat a shared run as read-only (a test that changes a run
copies it first).
"""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import snakemake_fork
import yaml
from filelock import FileLock
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


def _scripts_first_on_path() -> None:
    """The running interpreter's scripts folder first on PATH, for every process the tests
    start: the pipeline's jobs run ``splits`` by name, and where a version manager (pyenv) puts a
    shim before it, each job paid the shim's shell start-up (0.06 CPU s a call, measured, over
    more than a thousand jobs) and could run another interpreter's ``splits``. A virtual
    environment's activation does the same."""
    import sysconfig

    scripts = sysconfig.get_path("scripts")
    path = os.environ.get("PATH", "").split(os.pathsep)
    if scripts and Path(scripts, "splits").exists() and path[:1] != [scripts]:
        os.environ["PATH"] = os.pathsep.join([scripts, *path])


_scripts_first_on_path()

# The test modules' rewritten bytecode (pytest's assertion rewriting) cached in
# tests/__pycache__ (ignored by git), even where the shell sets PYTHONDONTWRITEBYTECODE: without
# the cache every pytest-xdist worker rewrote every test module at each collection (18.0 against
# 11.7 CPU s a collection, measured 2026-11-28, times the workers). Test modules are imported
# after this conftest, so they are cached; the package's own bytecode: ``pytest_configure``.
sys.dont_write_bytecode = False


def pytest_configure(config) -> None:
    """The package's bytecode, compiled once by the controlling process: the pipeline runs'
    jobs import the package from this checkout (the editable install), and where Python may not
    write bytecode (PYTHONDONTWRITEBYTECODE, set in some shells and CI images) each job compiled
    every module it imports again (~0.2 CPU s a job, measured, over more than a thousand jobs in
    the suite). A user's first run writes the same files (``__pycache__``, ignored by git)."""
    if not hasattr(config, "workerinput"):  # not in each pytest-xdist worker
        compileall.compile_dir(REPO / "workflow" / "splits", quiet=1)


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
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return snakemake_fork.run(
        ["--cores", "2", *args, "--quiet", "rules"], workdir, env=env, timeout=timeout
    )


def error_lines(stderr: str) -> list[str]:
    """The non-empty lines of a Snakemake run's stderr, without Snakemake's notice that it read
    the default profile (profiles/default), which every run prints."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not line.endswith("for setting default command line arguments.")
    ]


class PipelineRuns:
    """Pipeline runs of a session, one per distinct (overrides, targets, start); ``shared``
    (under xdist: the folder all workers of the session see) holds runs that other workers may
    have made or be making. A run with ``from_default`` goes on from a copy of the default run,
    as after a user's config edit (for overrides of later stages only: the plain command then
    re-runs the jobs whose settings changed, not the DAG from the corpus)."""

    def __init__(self, base: Path, shared: Path | None = None):
        self.base = base
        self.shared = shared
        self.runs: dict[str, Path] = {}

    def get(
        self,
        overrides: dict | None = None,
        targets: tuple[str, ...] = (),
        from_default: bool = False,
    ) -> Path:
        key = json.dumps([overrides or {}, list(targets)], sort_keys=True)
        if from_default:
            key = json.dumps(["from the default run", key])
        if key not in self.runs:
            start = self.get() if from_default else None
            if self.shared is None:
                folder = self.base / f"run{len(self.runs)}"
                self.runs[key] = self._run(folder, overrides, targets, start)
            else:
                self.runs[key] = self._shared_run(key, overrides, targets, start)
        return self.runs[key]

    def _shared_run(
        self, key: str, overrides: dict | None, targets: tuple[str, ...], start: Path | None
    ) -> Path:
        name = hashlib.sha256(key.encode()).hexdigest()[:16]
        folder = self.shared / name
        done, failed = folder / "done", folder / "failed.txt"
        with FileLock(str(self.shared / f"{name}.lock")):
            if failed.is_file():  # a failed run is not retried by every worker
                pytest.fail(failed.read_text())
            if not done.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                try:
                    self._run(folder / "run", overrides, targets, start)
                except pytest.fail.Exception as error:
                    failed.write_text(str(error))
                    raise
                done.touch()
        return folder / "run"

    @staticmethod
    def _run(
        workdir: Path, overrides: dict | None, targets: tuple[str, ...], start: Path | None = None
    ) -> Path:
        if start is not None:
            shutil.copytree(start, workdir, symlinks=True)
        else:
            copy_repo(workdir)
        if start is None and not overrides and not targets:  # the default run
            interrupted_run(workdir)
            return workdir
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
        return workdir


def interrupted_record_path(workdir: Path) -> Path:
    return workdir.with_name(f"{workdir.name}.interrupted.json")


def interrupted_run(workdir: Path) -> None:
    """The default run as a user's interrupted one: the checkout committed to git (so that
    ``git status`` shows anything the run adds or changes), the plain command killed with
    SIGKILL (Snakemake and its jobs, as a closed terminal or the OOM killer would) once the posts
    table is written and jobs of later stages run, then finished by the plain command and run once
    more. What each step returned is recorded beside the run (``interrupted_record_path``) for
    tests/test_clean_runs.py; the git folder is removed after."""
    from helpers import git, plain_command, splits_jobs_of, start_snakemake

    git(workdir, "init", "-q")
    git(workdir, "add", "-A")
    git(workdir, "commit", "-q", "-m", "checkout")
    proc = start_snakemake(workdir)
    posts = workdir / "results" / "posts" / "posts.parquet"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if posts.is_file() and splits_jobs_of(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    record = {
        "killed": proc.returncode,
        "locks": sorted(p.name for p in (workdir / ".snakemake" / "locks").glob("*.lock")),
    }
    done = plain_command(workdir)
    record["done"] = {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    if done.returncode == 0:
        again = plain_command(workdir)
        record["again"] = {"returncode": again.returncode, "output": again.stdout + again.stderr}
        record["git_status"] = git(workdir, "status", "--porcelain", "--untracked-files=all")
    shutil.rmtree(workdir / ".git")
    interrupted_record_path(workdir).write_text(json.dumps(record))
    if done.returncode != 0:
        pytest.fail(
            f"default pipeline run (killed, then the plain command) failed:\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
        )


@pytest.fixture(scope="session")
def pipeline_runs(tmp_path_factory) -> PipelineRuns:
    shared = None
    if os.environ.get("PYTEST_XDIST_WORKER"):  # set in each xdist worker
        shared = tmp_path_factory.getbasetemp().parent / "pipeline-shared"
        shared.mkdir(exist_ok=True)
    return PipelineRuns(tmp_path_factory.mktemp("pipeline"), shared)


@pytest.fixture(scope="session")
def default_run(pipeline_runs) -> Path:
    return pipeline_runs.get()


# The quick subset, ``pytest -m quick`` (docs/running.md#tests): the files of unit tests that
# run in seconds, chosen by their measured durations, covering every package; a test in them that
# asks for a pipeline run or is marked slow stays out. A new fast test file joins by its name here.
QUICK_FILES = frozenset(
    f"test_{name}.py"
    for name in """
    api architecture arrays atomic_outputs bm25 classify_parse classify_render cli comparison config
    custom_tm docs empty_results engine_padding evaluation_settings evaluation_tiny export
    fighting_words graph group_components groupness health heldout_lift heldout_redundancy human
    hypotheses_baseline_set hypotheses_config hypotheses_retrieval hypotheses_sets
    hypotheses_triviality ingest lint llm_backends llm_batch llm_cache llm_openai llm_registry
    llm_transformers metrics phrases probes release_data report report_tables sampling sandbox
    seeds selfid selfid_support snakemake_fork stats synth text theory topics topics_bm25
    topics_relevance
    """.split()
)
PIPELINE_FIXTURES = frozenset({"default_run", "pipeline_runs"})


# The test files that take longest (their summed durations in a full run on 2 cores, 2026-11-27),
# longest first. With ``--no-loadscope-reorder`` (pyproject.toml) xdist's ``--dist loadfile`` hands
# the files to the workers in collection order (by default it orders them by their number of
# tests), so a long file collected late is the last worker's tail; collected first, the short
# files fill the other workers around it (longest-first scheduling).
LONG_FILES = tuple(
    f"test_{name}.py"
    for name in """
    slurm bench install pipeline_faults llm_serve security group_splits llm_batch
    evaluation_pipeline groupness_buckets posts_partitions ingest_faults reruns topics_pipeline
    custom_tm graph_buckets hypotheses_release sandbox_fails_closed hypotheses_pipeline llm_vllm
    """.split()
)
LONG_FILE_RANK = {name: rank for rank, name in enumerate(LONG_FILES)}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if (
            item.path.name in QUICK_FILES
            and not PIPELINE_FIXTURES & set(item.fixturenames)
            and item.get_closest_marker("slow") is None
        ):
            item.add_marker(pytest.mark.quick)
    # stable: a file's tests keep their order, the other files theirs
    items.sort(key=lambda item: LONG_FILE_RANK.get(item.path.name, len(LONG_FILES)))


@pytest.hookimpl(optionalhook=True)  # an xdist hook: no error where xdist is absent
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker more than the cores this process may use. The long files wait
    much of their time (the Slurm test on its scheduler's status checks, the served-LLM tests on
    their servers, the base-install test on the package index): with one worker per core the
    suite used 151% of 2 cores; the extra worker fills those waits."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores + 1


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """``pytest -m vllm`` (the real-engine tests, run in the vLLM environment, which holds no
    test extras) collects only the test files that hold such tests, so that the other files'
    imports (statsmodels, hypothesis, gradio, ...) need not be installed there."""
    if config.getoption("markexpr", "") != "vllm":
        return None
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return "mark.vllm" not in collection_path.read_text(encoding="utf-8")
    return None
