# Splits: demographic- and topic-split Reddit datasets and the Group Theorization evaluation.
# Run:  snakemake --cores 2            (default config: generated sample, builtin models)
#       snakemake --cores 2 --configfile config/paper.yaml --profile profiles/slurm


from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/graph.smk"
include: "workflow/rules/demographics.smk"
include: "workflow/rules/topics.smk"
include: "workflow/rules/sampling.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/probes.smk"
include: "workflow/rules/hypotheses.smk"
include: "workflow/rules/report.smk"


from splits.report_tables import report_pages
from splits.runlock import record_owner, release_stale_locks

# a run killed with SIGKILL leaves its locks: the next plain command removes them (splits.runlock)
release_stale_locks()


onstart:
    record_owner()


rule all:
    default_target: True
    input:
        final_targets(),
        report_pages(final_targets(), RESULTS),
