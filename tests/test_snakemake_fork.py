"""The tests' Snakemake command line (tests/snakemake_fork.py): each run a process of its own,
forked from a launcher that imported Snakemake once, must give what `python -m snakemake`
gives: its exit status, its output, and the run's own working directory, environment, umask
and address-space limit; a timeout kills the run and its jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import snakemake_fork

SNAKEFILE = """
rule all:
    input: "facts.txt"

rule facts:
    output: "facts.txt"
    shell: 'printf "%s\\\\n" "$MARK" "$(pwd)" "$(umask)" "$(ulimit -v)" > {output}'

rule fails:
    shell: "echo on-stderr >&2; exit 3"

rule sleeps:
    output: "slept.txt"
    shell: "echo $$ > sleeper.pid; sleep 60; touch {output}"
"""


@pytest.fixture
def workflow(tmp_path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    return tmp_path


def _plain(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_a_run_has_its_own_directory_environment_umask_and_limit(workflow):
    env = {**os.environ, "MARK": "from the test", "PYTHONHASHSEED": "0"}
    limit = 8 * 2**30
    proc = snakemake_fork.run(["--cores", "1"], workflow, env=env, umask=0o027, limit_bytes=limit)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.args[:3] == [sys.executable, "-m", "snakemake"]
    mark, cwd, umask, ulimit = (workflow / "facts.txt").read_text().splitlines()
    assert (mark, cwd, umask) == ("from the test", str(workflow.resolve()), "0027")
    assert int(ulimit) == limit // 1024  # ulimit -v counts KiB
    assert (workflow / "facts.txt").stat().st_mode & 0o777 == 0o640
    assert "Finished job" in proc.stderr or "steps (100%) done" in proc.stderr
    # the test process's own environment and umask are untouched
    assert "MARK" not in os.environ


def test_exit_status_and_output_match_python_m_snakemake(workflow):
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    for args in (["--cores", "1", "fails"], ["--bogus-option"], ["-n", "--cores", "1"]):
        forked = snakemake_fork.run(args, workflow, env=env)
        plain = _plain(args, workflow, env)
        assert forked.returncode == plain.returncode, (args, forked.stderr[-1500:])
        if "fails" in args:
            assert forked.returncode != 0 and "exit 3" in forked.stderr + forked.stdout
        if "--bogus-option" in args:
            assert forked.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]
        if "-n" in args:
            assert "facts" in forked.stdout and forked.stdout.count("rule ") == plain.stdout.count(
                "rule "
            )


def test_timeout_kills_the_run_and_its_jobs(workflow):
    started = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        snakemake_fork.run(["--cores", "1", "sleeps"], workflow, timeout=8)
    assert time.perf_counter() - started < 60
    pid = int((workflow / "sleeper.pid").read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the job outlived its run's timeout"
    # the launcher still serves the next run
    assert snakemake_fork.run(["-n", "--cores", "1"], workflow).returncode == 0


def test_the_runs_pythonpath_is_where_its_snakefile_imports_from(tmp_path):
    """A module on the run's PYTHONPATH (a test's stand-in engine) is what the Snakefile
    imports: such a run starts a fresh interpreter."""
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "plantedmod.py").write_text("VALUE = 'found'\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "Snakefile").write_text(
        "import plantedmod\n\nrule all:\n    output: 'value.txt'\n"
        "    run:\n        open(output[0], 'w').write(plantedmod.VALUE)\n"
    )
    bare = snakemake_fork.run(["--cores", "1"], work, env=dict(os.environ))
    assert bare.returncode != 0 and "plantedmod" in bare.stderr + bare.stdout
    env = {**os.environ, "PYTHONPATH": str(planted)}
    proc = snakemake_fork.run(["--cores", "1"], work, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (work / "value.txt").read_text() == "found"


def test_an_answer_that_came_with_the_one_before_is_read(workflow):
    """A run that ends before the test reads its pid: both answers wait in the pipe, and the
    second must still be seen (a buffered reader took it with the first, and select() then
    waited for the timeout on an empty pipe)."""
    assert snakemake_fork.run(["--version"], workflow).returncode == 0  # the launcher started
    launcher = snakemake_fork._launcher
    out, err = workflow / "out.txt", workflow / "err.txt"
    out.touch()
    err.touch()
    request = {
        "args": ["--bogus-option"],
        "cwd": str(workflow),
        "env": dict(os.environ),
        "umask": -1,
        "limit_bytes": 0,
        "stdout": str(out),
        "stderr": str(err),
    }
    with snakemake_fork._launcher_lock:
        launcher.stdin.write((json.dumps(request) + "\n").encode())
        launcher.stdin.flush()
        time.sleep(8)  # the run (an argument error) ends meanwhile
        pid = snakemake_fork._answer(launcher, 10)["pid"]
        status = snakemake_fork._answer(launcher, 10)
    assert status is not None, "the second answer was not seen"
    assert pid > 0 and os.waitstatus_to_exitcode(status["status"]) == 2
    assert "unrecognized arguments: --bogus-option" in err.read_text()


def test_a_run_is_not_given_a_launcher_started_with_another_pythonpath(tmp_path, monkeypatch):
    """A launcher started while this process's PYTHONPATH held a module folder (a test's
    monkeypatch) imports from it; a run asking for the PYTHONPATH without that folder must not
    be forked from it, so its Snakefile does not find the module."""
    snakemake_fork._stop_launcher()
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "plantedmod.py").write_text("VALUE = 'found'\n")
    (tmp_path / "Snakefile").write_text("import plantedmod\n\nrule all:\n    shell: 'true'\n")
    before = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(planted))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if before is not None:
        env["PYTHONPATH"] = before
    try:
        proc = snakemake_fork.run(["--cores", "1"], tmp_path, env=env)
    finally:
        snakemake_fork._stop_launcher()  # the next tests' launcher starts without the folder
    assert proc.returncode != 0
    assert "No module named 'plantedmod'" in proc.stderr + proc.stdout, proc.stderr[-2000:]
