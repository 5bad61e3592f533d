"""Job groups bundled N components a cluster job (``--group-components NAME=N``), each job in one.

Snakemake 9 (9.27 included) forms one group job per connected component of a group and, for
``--group-components NAME=N``, merges N of them by growing the first one's group object in place
(``DAG._update_group_components``). Those objects come from a cache keyed by the component's own
jobs, and the DAG is post-processed again before the first job runs whenever a job waits for a
checkpoint (the topic splits wait for ``topic_shards``), and once more after the checkpoint: the
next pass gets the grown objects back and merges them again, in set order. The result is group
jobs of many more components than asked and, worse, one job in two group jobs, which a cluster
runs twice at once (two processes rewriting the same file: the likely cause of a self-ID
search that failed in CI's Slurm run while the same job also finished in another group job).

:func:`fix_group_components` replaces that one method with one that builds each bundle as a new
group object (from the same cache, keyed by the bundle's jobs) and leaves the components' own
objects as they were, so every pass bundles the same components the same way: the components in
a fixed order (by their jobs' outputs), N to a bundle, as Snakemake documents the option.
The Snakefile applies it; ``tests/test_group_components.py`` checks the groups a dry run plans.
"""

from __future__ import annotations

import sys
from collections import defaultdict


def _component_key(group) -> tuple[str, ...]:
    """A fixed order of a group's components: their jobs' outputs, sorted."""
    return tuple(sorted(str(path) for job in group.jobs for path in job.output))


def _distinct(groups) -> list:
    """Each group object once (a group maps each of its jobs to itself)."""
    return list({id(group): group for group in groups}.values())


def _update_group_components(self) -> None:
    """``DAG._update_group_components`` without changing any cached group object."""
    components = defaultdict(list)
    for group in _distinct(self._group.values()):
        components[group.groupid].append(group)
    for groupid, groups in components.items():
        lookup_id = self.workflow.parent_groupids.get(groupid, groupid)
        per_job = self.workflow.group_settings.group_components.get(lookup_id, 1)
        if per_job <= 1:
            continue
        groups.sort(key=_component_key)
        for start in range(0, len(groups), per_job):
            chunk = groups[start : start + per_job]
            if len(chunk) == 1:
                continue
            bundle = self.group_job_factory.new(
                groupid,
                (job for group in chunk for job in group.jobs),
                self.workflow.global_resources,
            )
            for job in bundle.jobs:
                self._group[job] = bundle
    for group in _distinct(self._group.values()):
        group.finalize()


def fix_group_components() -> None:
    """Install the fix (in every Snakemake process that reads the Snakefile; ``--group-components``
    is not known yet at that point, and without it the method changes nothing). A Snakemake
    without the method it replaces is left as it is, with one line saying so (its groups are then
    its own)."""
    from snakemake.dag import DAG

    if not callable(getattr(DAG, "_update_group_components", None)):
        print(
            "splits: this Snakemake has no DAG._update_group_components to fix: check that no job"
            " is listed in two group jobs (snakemake -n) before a cluster run",
            file=sys.stderr,
        )
        return
    DAG._update_group_components = _update_group_components
