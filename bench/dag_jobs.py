"""The jobs of a Snakemake run and the edges between them, read from the run's own job log, and
the critical path through them (bench/bench_scale.py).

Snakemake prints one block per job it starts (``rule NAME:``, ``checkpoint NAME:`` or
``localrule NAME:``, then indented ``input:``, ``output:``, ``log:``, ``jobid:``,
``benchmark:`` lines). That log, not a list of rule names, is the source: a rule added later
(another per-bucket job) is found without a change here. The jobs started after a checkpoint
are in it too, where ``snakemake --dag`` before the run, or a forced dry run after it, stops at
the checkpoint.

An edge runs from job A to job B where B reads a file A wrote, or a file inside a directory A
wrote (a checkpoint's folder of shards): Snakemake's own rule for what a job depends on."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

JOB_HEAD = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOB_FIELD = re.compile(r"^\s+(\w+): (.*)$")


def parse_jobs(log: str) -> list[dict]:
    """One dict per job block: rule, jobid, input, output (lists of paths), log, benchmark."""
    jobs = []
    current: dict | None = None
    for line in log.splitlines():
        head = JOB_HEAD.match(line)
        if head:
            current = {"rule": head.group(1), "input": [], "output": [], "benchmark": None}
            jobs.append(current)
            continue
        field = JOB_FIELD.match(line) if current is not None else None
        if field is None:
            current = None
            continue
        key, value = field.groups()
        if key in ("input", "output", "log"):
            current[key] = value.split(", ")
        elif key == "benchmark":
            current["benchmark"] = value
        elif key == "jobid":
            current["jobid"] = int(value)
    # a job retried or restarted is printed again: keep its last block
    by_id = {job.get("jobid", -i - 1): job for i, job in enumerate(jobs)}
    return list(by_id.values())


def job_key(job: dict) -> str:
    """A job's name in the records: its benchmark file, or its rule and id where it has none."""
    return job["benchmark"] or f"{job['rule']}#{job.get('jobid', '?')}"


def edges(jobs: list[dict]) -> list[tuple[str, str]]:
    """(producer, consumer) job keys: the consumer reads an output of the producer, or a file
    under an output folder of it."""
    writer = {}
    for job in jobs:
        for path in job["output"]:
            writer[PurePosixPath(path)] = job_key(job)
    found = set()
    for job in jobs:
        for path in job["input"]:
            path = PurePosixPath(path)
            for candidate in (path, *path.parents):
                if candidate in writer:
                    if writer[candidate] != job_key(job):
                        found.add((writer[candidate], job_key(job)))
                    break
    return sorted(found)


def critical_path(seconds: dict[str, float], links: list[tuple[str, str]]) -> tuple[float, list]:
    """The longest path through the DAG, a path's length being the sum of its jobs' seconds:
    the wall time of the run given unlimited machines. Returns its length and its jobs."""
    parents: dict[str, list[str]] = {key: [] for key in seconds}
    for before, after in links:
        parents.setdefault(after, []).append(before)
        parents.setdefault(before, [])
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}

    def visit(key: str, trail: frozenset) -> float:
        if key in finish:
            return finish[key]
        if key in trail:
            raise ValueError(f"the job graph has a cycle through {key}")
        best, best_parent = 0.0, None
        for parent in parents[key]:
            done = visit(parent, trail | {key})
            if done > best:
                best, best_parent = done, parent
        finish[key] = best + seconds.get(key, 0.0)
        via[key] = best_parent
        return finish[key]

    for key in parents:
        visit(key, frozenset())
    if not finish:
        return 0.0, []
    end = max(finish, key=finish.get)
    path = [end]
    while via[path[-1]] is not None:
        path.append(via[path[-1]])
    return finish[end], path[::-1]


def topological_rules(jobs: list[dict], links: list[tuple[str, str]]) -> list[str]:
    """The rules in the order their first job can start (depth in the DAG), for tables."""
    rule_of = {job_key(job): job["rule"] for job in jobs}
    parents: dict[str, list[str]] = {key: [] for key in rule_of}
    for before, after in links:
        parents.setdefault(after, []).append(before)
    level: dict[str, int] = {}

    def lvl(key: str) -> int:
        if key not in level:
            level[key] = 1 + max((lvl(p) for p in parents.get(key, [])), default=0)
        return level[key]

    first: dict[str, int] = {}
    for key, rule in rule_of.items():
        first[rule] = min(first.get(rule, 1 << 30), lvl(key))
    return sorted(first, key=lambda rule: (first[rule], rule))
