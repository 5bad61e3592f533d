"""Job groups on a cluster (`--groups` with `--group-components NAME=N`, the recipe docs/cluster.md
gives for the per-bucket jobs): every job in exactly one group job, at most N components to a
group job.

Snakemake 9 merges the components of a group by growing one component's group object in place;
it caches those objects and merges them again each time the DAG is post-processed, which happens
twice before the first job whenever a job waits for a checkpoint (the topic splits wait for
topic_shards). Unfixed, the second pass merges grown objects: a group job of many more
components than asked, or one job in two group jobs, which a cluster runs twice at once (in
CI's Slurm run a self-ID job failed while the same job finished in another group job). The
Snakefile applies
splits.pipeline.snakemake_groups; these dry runs show the groups a run would submit.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest
import snakemake_fork
import yaml
from conftest import copy_repo
from helpers import BUCKET_GROUPS, GRAPH_BUCKETS

REPO = Path(__file__).resolve().parents[1]

# components per group job: the Slurm test's, one per bucket
COMPONENTS = GRAPH_BUCKETS

# A map (a -> b per id) bundled N components a job, and a checkpoint after it: the smallest DAG
# in which Snakemake post-processes twice before running anything.
TOY_SNAKEFILE = """
from splits.pipeline.snakemake_groups import fix_group_components

fix_group_components()

IDS = range(12)


def after_collect(wildcards):
    return [checkpoints.collect.get().output[0] + "/x.txt"]


rule all:
    input:
        "done.txt",


rule a:
    output:
        "a/{i}.txt",
    shell:
        "touch {output}"


rule b:
    input:
        "a/{i}.txt",
    output:
        "b/{i}.txt",
    shell:
        "touch {output}"


checkpoint collect:
    input:
        expand("b/{i}.txt", i=IDS),
    output:
        directory("c"),
    shell:
        "mkdir -p {output} && touch {output}/x.txt"


rule done:
    input:
        after_collect,
    output:
        "done.txt",
    shell:
        "touch {output}"
"""


def planned_groups(workdir: Path, *args: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The group jobs a cluster run would submit (a dry run with the Slurm executor, which needs
    no cluster for -n): each group's name and its jobs as (rule, output)."""
    proc = snakemake_fork.run(
        ["-n", "--executor", "slurm", "--jobs", "100", *args], workdir, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    inside = False
    rule = ""
    for line in proc.stdout.splitlines():
        header = re.search(r"Group job (\S+) \(jobs", line)
        if header:
            groups.append((header.group(1), []))
            inside = True
            continue
        # a group's jobs are indented; the next unindented line that is not a time stamp or a
        # job's shell command (printshellcmds) ends it
        if inside and line.strip() and not line.startswith((" ", "[", "Shell command:")):
            inside = False
        if inside and (found := re.match(r"\s+(?:rule|checkpoint) (\w+):", line)):
            rule = found.group(1)
        if inside and (found := re.match(r"\s+output: (.*)", line)):
            groups[-1][1].append((rule, found.group(1)))
    return groups


def components(jobs: list[tuple[str, str]], connect) -> set:
    """The connected components of a group's jobs, by the key ``connect`` gives each job."""
    return {connect(rule, output) for rule, output in jobs}


def assert_each_job_once(groups) -> None:
    seen = collections.Counter(job for _, jobs in groups for job in jobs)
    twice = sorted(job for job, n in seen.items() if n > 1)
    assert not twice, f"{len(twice)} jobs in more than one group job, e.g. {twice[:4]}"


def test_toy_map_before_a_checkpoint_is_bundled_n_components_a_job(tmp_path):
    (tmp_path / "Snakefile").write_text(TOY_SNAKEFILE)
    for _ in range(3):  # the unfixed merge depends on set order: it differs between runs
        groups = planned_groups(
            tmp_path, "--groups", "a=g", "b=g", "--group-components", f"g={COMPONENTS}"
        )
        assert_each_job_once(groups)
        # a component is a/{i} with b/{i}: 12 of them, 4 to a group job
        ids = [components(jobs, lambda rule, out: out.split("/")[1]) for _, jobs in groups]
        assert [len(c) for c in ids] == [COMPONENTS] * 3, ids
        assert sorted(len(jobs) for _, jobs in groups) == [2 * COMPONENTS] * 3
        assert set().union(*ids) == {f"{i}.txt" for i in range(12)}


@pytest.fixture(scope="module")
def bucketed_repo(tmp_path_factory) -> Path:
    workdir = copy_repo(tmp_path_factory.mktemp("groups") / "repo")
    config_path = workdir / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["ingest"]["buckets"] = GRAPH_BUCKETS
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return workdir


def test_per_bucket_jobs_of_the_pipeline_are_bundled_as_asked(bucketed_repo):
    """The default pipeline at four buckets with the Slurm test's groups (docs/cluster.md's
    recipe, four components a job): each job in one group job, no group job over four
    components, and every per-bucket job of each grouped rule in some group job."""
    groups = planned_groups(
        bucketed_repo,
        "--groups",
        *(f"{rule}={group}" for rule, group in BUCKET_GROUPS.items()),
        "--group-components",
        *(f"{group}={COMPONENTS}" for group in sorted(set(BUCKET_GROUPS.values()))),
    )
    assert_each_job_once(groups)
    by_name = collections.defaultdict(list)
    for name, jobs in groups:
        by_name[name].append(jobs)
    assert set(by_name) == set(BUCKET_GROUPS.values())

    # a component of demographic_part_jobs is one bucket's D_d parts and the self-ID search of
    # those parts (every demographic's, one job each): both name the bucket in their outputs
    def part(rule: str, output: str) -> str:
        found = re.search(r"demographics/\w+/(?:posts|selfid)/(\d+)\.", output)
        assert found, output
        return found.group(1)

    for name, group_jobs in by_name.items():
        for jobs in group_jobs:
            connect = part if name == "demographic_part_jobs" else (lambda rule, out: out)
            assert len(components(jobs, connect)) <= COMPONENTS, (name, jobs)
        rules = collections.Counter(rule for jobs in group_jobs for rule, _ in jobs)
        assert set(rules) == {rule for rule, group in BUCKET_GROUPS.items() if group == name}
    parts = {part(r, o) for jobs in by_name["demographic_part_jobs"] for r, o in jobs}
    rules = collections.Counter(r for jobs in by_name["demographic_part_jobs"] for r, _ in jobs)
    # four buckets: each bucket's parts written by one job and searched by one job
    assert len(parts) == 4 and rules == {"groupness_posts": 4, "selfid_bucket": 4}
