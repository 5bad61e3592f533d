"""Oracles and probes shared by several test files (plain functions, no fixtures)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import snakemake_fork


def exact_sign_flip_p(differences) -> float:
    """Share of all 2^n sign assignments whose |mean| reaches the observed one."""
    d = np.asarray(differences, dtype=float)
    observed = abs(d.mean())
    hits = [
        abs((np.array(signs) * d).mean()) >= observed - 1e-12
        for signs in itertools.product((-1, 1), repeat=len(d))
    ]
    return float(np.mean(hits))


class TableCells(HTMLParser):
    """The cells of an HTML page's tables, row by row (header rows included), and every tag."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def splits_jobs_of(session: int) -> list[int]:
    """Pids of the `splits` job processes of a snakemake run started in session ``session``."""
    pids = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit() or int(proc_dir.name) == session:
            continue
        try:
            if os.getsid(int(proc_dir.name)) != session:
                continue
            cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        if any(part.endswith(b"splits") or part == b"splits.cli" for part in cmdline):
            pids.append(int(proc_dir.name))
    return pids


def start_snakemake(workdir: Path) -> subprocess.Popen:
    """The plain command (``snakemake --cores 2``) started in its own session, output dropped, so
    that ``splits_jobs_of(proc.pid)`` finds its jobs and ``os.killpg`` can kill them all."""
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )


def plain_command(workdir: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """The README's command (``snakemake --cores 2``), nothing added."""
    return snakemake_fork.run(
        ["--cores", "2"], workdir, env={**os.environ, "PYTHONHASHSEED": "0"}, timeout=timeout
    )


def git(workdir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=workdir,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def dry_run_job_counts(stdout: str) -> dict[str, int]:
    """Jobs per rule from the job-stats table of a ``snakemake -n`` run's output."""
    counts = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def users_table(authors: list[str], groupness, demographic: str) -> pl.DataFrame:
    """A group-ness users table (the columns ``splits groupness`` writes) for ``authors`` with
    scores ``groupness`` in rising order: percentiles spread evenly, every formula's score the
    same, ten posts and one seed post each."""
    n = len(authors)
    return pl.DataFrame(
        {
            "author": authors,
            "demographic": demographic,
            "groupness": groupness,
            "percentile": np.arange(n) * 100.0 / n,
            "n_posts": [10] * n,
            "n_seed_posts": [1] * n,
            "n_seed_subreddits": [1] * n,
            "g_sum_log": groupness,
            "g_breadth_x_volume": groupness,
            "g_entropy": groupness,
        }
    )


# The posts' and the graph's user buckets of the Slurm test (ingest.buckets; the local run has one),
# and its per-bucket rules bundled GRAPH_BUCKETS connected components to a Slurm job (Snakemake's
# --groups / --group-components, the recipe docs/cluster.md gives for many short jobs): a Slurm
# job costs a jobstep Snakemake (~3 CPU s to import it and parse the workflow) whatever its work,
# so the sample's per-bucket jobs of a second each would be most of that test's CPU. Read by
# tests/test_slurm.py (the run) and tests/test_group_components.py (the groups it plans).
GRAPH_BUCKETS = 4
BUCKET_GROUPS = {
    "merge_bucket": "posts_bucket_jobs",
    "graph_bucket": "graph_bucket_jobs",
    "graph_overlaps": "graph_overlap_jobs",
    "groupness_bucket": "groupness_bucket_jobs",
    "groupness_posts": "demographic_part_jobs",  # with the self-ID search of the part it writes
    "selfid_bucket": "demographic_part_jobs",
}


def write_topics_yaml(path: Path, topics) -> Path:
    """A topics file (the pipeline's YAML) listing ``topics`` (splits.config.definitions.Topic)."""
    path.write_text(
        "topics:\n"
        + "".join(
            f"- {{category: {t.category}, topic: {t.topic}, keywords: {list(t.keywords)}}}\n"
            for t in topics
        )
    )
    return path
