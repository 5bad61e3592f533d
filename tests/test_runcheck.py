"""``splits check RUNDIR`` (issue 35, case 6): an output damaged after it was written, with its
time kept, is never noticed by a rerun (Snakemake goes by file times: "Nothing to be done"); the
check reads every output of the run and names each damaged one with the rule that re-creates it.

Oracles: the damage done here (which file, how), Snakemake's dry run (which sees none of it), the
rules that make each file in the Snakefile, the files under the outdir counted here, and a rerun
of the printed command after which the check passes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_snakemake

#: damaged file -> the rule of the Snakefile that writes it
DAMAGED = {
    "results/topics/topic_posts.parquet": "topic_splits",
    "results/posts/ingest_report.json": "merge_posts",
    "results/graph/summary.json": "graph",
    "results/hypotheses/plots/lift_curves.png": "hypotheses_report",
    "results/dataset/export/counts_by_category.csv": "export_dataset",
}


def _check(run: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "splits.cli", "check", *args],
        cwd=cwd or run,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _keep_times(path: Path):
    stat = path.stat()
    return lambda: os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _cut(path: Path, keep: float = 0.5) -> None:
    restore = _keep_times(path)
    with open(path, "r+b") as fh:
        fh.truncate(int(path.stat().st_size * keep))
    restore()


@pytest.fixture
def run_copy(default_run, tmp_path) -> Path:
    """A copy of the finished default run (its files' times kept, Snakemake's records with it):
    the fixture's run is shared, so nothing is damaged there."""
    copy = tmp_path / "run"
    shutil.copytree(default_run, copy, symlinks=True)
    return copy


def test_an_intact_run_passes_with_one_line(run_copy):
    proc = _check(run_copy, ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "none is damaged" in lines[0]
    files = [p for p in (run_copy / "results").rglob("*") if p.is_file()]
    read = len([p for p in files if p.suffix != ".sqlite"])  # the LLM cache: its own code's
    assert f"{read} files" in lines[0]
    # from another folder, naming the run folder
    elsewhere = _check(run_copy, str(run_copy), cwd=run_copy.parent)
    assert elsewhere.returncode == 0 and "none is damaged" in elsewhere.stdout


def test_damage_a_rerun_cannot_see_is_named_with_its_rule(run_copy):
    for relative in DAMAGED:
        path = run_copy / relative
        assert path.is_file(), relative
    _cut(run_copy / "results/topics/topic_posts.parquet")
    _cut(run_copy / "results/posts/ingest_report.json", 0.7)
    _cut(run_copy / "results/hypotheses/plots/lift_curves.png", 0.9)
    # a text output edited in place, same length, time kept: only the bytes tell
    csv = run_copy / "results/dataset/export/counts_by_category.csv"
    restore = _keep_times(csv)
    text = csv.read_bytes()
    digit = re.search(rb"\d", text).start()
    csv.write_bytes(text[:digit] + (b"8" if text[digit] == ord("7") else b"7") + text[digit + 1 :])
    restore()

    # the defect: a rerun sees none of it
    dry = run_snakemake(run_copy, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr

    (run_copy / "results/graph/summary.json").unlink()
    proc = _check(run_copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.strip().splitlines()
    named = {line.split(": ", 1)[0]: line for line in lines[:-1]}
    assert set(named) == set(DAMAGED), lines  # one line per damaged file, no other
    for relative, rule in DAMAGED.items():
        if relative == "results/graph/summary.json":  # a missing file: made by naming it
            fix = f"snakemake --cores all {relative}"
            assert f"missing (made by rule {rule})" in named[relative]
        else:
            fix = f"snakemake --cores all --forcerun {rule}"
        assert named[relative].endswith(f"re-create it: {fix}")
    assert "Parquet" in named["results/topics/topic_posts.parquet"]
    assert "JSON" in named["results/posts/ingest_report.json"]
    assert "PNG" in named["results/hypotheses/plots/lift_curves.png"]
    assert "changed after rule" in named["results/dataset/export/counts_by_category.csv"]
    assert lines[-1].startswith("splits check: 5 of the run's files damaged or missing")
    assert all(rule in lines[-1] for rule in set(DAMAGED.values()) - {"graph"})


def test_the_printed_command_re_creates_the_file(run_copy):
    png = run_copy / "results/hypotheses/plots/lift_curves.png"
    _cut(png, 0.5)
    proc = _check(run_copy, "--cores", "2")
    assert proc.returncode == 1
    (line,) = proc.stdout.strip().splitlines()[:-1]
    fix = line.split("re-create it: ", 1)[1]
    assert fix == "snakemake --cores 2 --forcerun hypotheses_report"
    rerun = run_snakemake(run_copy, *fix.split()[3:])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    again = _check(run_copy)
    assert again.returncode == 0, again.stdout
    assert png.read_bytes().endswith(b"IEND\xaeB`\x82")


def test_bad_arguments_are_one_line(tmp_path, run_copy):
    for args, message in (
        ([str(tmp_path / "none")], "no such folder"),
        ([str(run_copy), "--configfile", "config/none.yaml"], "no such file"),
    ):
        proc = _check(run_copy, *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("splits check: config error: ")
        assert message in proc.stderr and "Traceback" not in proc.stderr


def test_the_making_rule_of_an_absolute_path_is_found(tmp_path, monkeypatch):
    """The sandbox may be given ``--results`` as an absolute path: Snakemake recorded the path
    relative to the folder it ran in."""
    from base64 import urlsafe_b64encode

    from splits.filecheck import making_rule

    monkeypatch.chdir(tmp_path)
    name = "results/posts/posts.parquet"
    meta = tmp_path / ".snakemake" / "metadata"
    meta.mkdir(parents=True)
    (meta / urlsafe_b64encode(name.encode()).decode()).write_text('{"rule": "merge_posts"}')
    assert making_rule(tmp_path / name) == "merge_posts"
    assert making_rule(tmp_path.parent / "elsewhere.parquet") is None


def test_an_output_marked_incomplete_is_named_with_rerun_incomplete(run_copy):
    """Snakemake marks the outputs of a job while it runs and unmarks them when it ends: a mark
    left by a killed job is named (Snakemake's own spelling of the path, base64 in
    .snakemake/incomplete)."""
    from base64 import urlsafe_b64encode

    name = "results/hypotheses/lift.parquet"
    marks = run_copy / ".snakemake" / "incomplete"
    marks.mkdir(exist_ok=True)
    (marks / urlsafe_b64encode(name.encode()).decode()).write_text('{"external_jobid": null}')
    proc = _check(run_copy)
    assert proc.returncode == 1
    (line,) = proc.stdout.strip().splitlines()[:-1]
    assert line.startswith(f"{name}: marked incomplete by Snakemake")
    assert line.endswith("re-create it: snakemake --cores all --rerun-incomplete")
