"""Run health (splits.health): findings written by stages, read back, printed one line each; the
one-line errors of this run's failed jobs are found in their logs, older logs are not."""

from __future__ import annotations

import io
import json
import os
import time

from splits.health import (
    Finding,
    job_error_lines,
    print_run_health,
    read_findings,
    run_health_lines,
    write_findings,
)


def test_findings_round_trip_sorted_and_one_line_each(tmp_path):
    found = [
        Finding("topics", "off_topic", "topic 'Gardening'", "0 of 40 posts match", "add keywords"),
        Finding("sampling", "dual_membership", "pair a/b", "12 posts dropped", "raise a threshold"),
    ]
    path = write_findings(tmp_path / "health" / "x.json", found)
    records = json.loads(path.read_text())
    assert [r["code"] for r in records] == ["dual_membership", "off_topic"]
    assert sorted(read_findings([path]), key=lambda f: f.code) == sorted(
        found, key=lambda f: f.code
    )
    lines = run_health_lines(tmp_path)
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert lines[0].startswith("WARNING [sampling] pair a/b: 12 posts dropped. To change: raise")


def test_unreadable_health_file_is_skipped(tmp_path):
    (tmp_path / "health").mkdir()
    (tmp_path / "health" / "bad.json").write_text("{not json")
    assert run_health_lines(tmp_path) == []
    assert print_run_health(tmp_path, tmp_path / "logs", None, io.StringIO()) == 0


def test_job_errors_of_this_run_only(tmp_path):
    logs = tmp_path / "logs" / "sample"
    logs.mkdir(parents=True)
    old = logs / "old.log"
    old.write_text("splits sample: input error: from an earlier run\n")
    past = time.time() - 3600
    os.utime(old, (past, past))
    new = logs / "new.log"
    new.write_text("INFO x\nsplits selfid: config error: demographic 'a' curve falls\nother\n")
    lines = job_error_lines(tmp_path / "logs", since=time.time() - 60)
    assert len(lines) == 1 and "curve falls" in lines[0] and str(new) in lines[0]
    out = io.StringIO()
    assert print_run_health(tmp_path, tmp_path / "logs", time.time() - 60, out) == 1
    assert out.getvalue().splitlines()[0] == "Run health (1 job errors, 0 warnings):"
