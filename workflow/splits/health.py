"""Run health: what a stage found that a researcher should not trust without a second look.

A stage that finds such a thing (overlapping groups, a topic with no relevant posts, a self-ID
curve that points the wrong way, ...) records a :class:`Finding` and writes all of its findings to
its health file, ``{outdir}/health/<stage>.json``, a declared output of its rule (an empty list when
all is well, so that a fixed problem also clears its warning). Each finding is one line: what is
wrong, with its numbers, and what to change.

The findings reach the user three ways:

- the job's log, one WARNING line each (:func:`log_findings`);
- the console at the end of every run, success or failure (the Snakefile's ``onsuccess`` and
  ``onerror`` call :func:`print_run_health`), together with the one-line errors of the jobs that
  failed in this run;
- the first page of ``snakemake --report``: the Snakefile puts the lines into the config under
  ``run_health`` when it is read (:func:`run_health_lines`), and ``workflow/report/workflow.rst``
  lists them.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

HEALTH_DIR = "health"
# the line splits.cli prints for a handled error: "splits <command>: <kind> error: <message>"
JOB_ERROR = re.compile(r"^splits [\w-]+: (config|input|model) error: .+")


@dataclass(frozen=True)
class Finding:
    """One thing a stage found wrong. ``code`` is a stable identifier (tests and scripts match on
    it), ``subject`` what it concerns (a demographic, a pair, a topic), ``message`` what is wrong
    with its numbers, ``fix`` what to change."""

    stage: str
    code: str
    subject: str
    message: str
    fix: str

    def line(self) -> str:
        return f"WARNING [{self.stage}] {self.subject}: {self.message}. To change: {self.fix}"


def health_file(outdir: str | Path, stage: str) -> Path:
    return Path(outdir) / HEALTH_DIR / f"{stage}.json"


def write_findings(path: str | Path, findings: Iterable[Finding]) -> Path:
    """Write a stage's findings (sorted, so that the same findings give the same file)."""
    records = sorted((asdict(f) for f in findings), key=lambda r: (r["code"], r["subject"]))
    from splits.io import write_json  # here: the Snakefile imports this module, not polars

    return write_json(records, path)


def log_findings(findings: Iterable[Finding], logger: logging.Logger = log) -> None:
    for finding in findings:
        logger.warning("%s", finding.line())


def read_findings(paths: Iterable[str | Path]) -> list[Finding]:
    """The findings of the given health files; a missing or unreadable file is skipped (a stage
    that has not run yet has nothing to say)."""
    findings: list[Finding] = []
    for path in paths:
        try:
            records = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for record in records if isinstance(records, list) else []:
            try:
                findings.append(Finding(**record))
            except TypeError:
                continue
    return findings


def run_findings(outdir: str | Path) -> list[Finding]:
    """Every finding of the run's health files, in stage order of the file names."""
    return read_findings(sorted((Path(outdir) / HEALTH_DIR).glob("*.json")))


def run_health_lines(outdir: str | Path) -> list[str]:
    return [finding.line() for finding in run_findings(outdir)]


def job_error_lines(log_dir: str | Path, since: float) -> list[str]:
    """The one-line errors (``splits <command>: ... error: ...``) of job logs written since
    ``since`` (seconds since the epoch): the jobs that failed in this run."""
    lines: list[str] = []
    for path in sorted(Path(log_dir).rglob("*.log")):
        try:
            if path.stat().st_mtime < since:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines.extend(f"{line} (log: {path})" for line in text.splitlines() if JOB_ERROR.match(line))
    return lines


def print_run_health(outdir: str | Path, log_dir: str | Path = "logs", since: float | None = None,
                     stream=None) -> int:  # fmt: skip
    """Print the run's findings (and, with ``since``, the errors of jobs that failed in this run)
    to stderr, one line each, under one heading; returns the number of lines printed."""
    stream = stream or sys.stderr
    errors = job_error_lines(log_dir, since) if since is not None else []
    warnings = run_health_lines(outdir)
    if not errors and not warnings:
        return 0
    print(f"Run health ({len(errors)} job errors, {len(warnings)} warnings):", file=stream)
    for line in errors + warnings:
        print(f"  {line}", file=stream)
    return len(errors) + len(warnings)
