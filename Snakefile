# Splits: demographic- and topic-split Reddit datasets and the Group Theorization evaluation.
# Run:  snakemake --cores 2            (default config: generated sample, builtin models)
#       snakemake --cores 2 --configfile config/paper.yaml --profile profiles/slurm
# A --configfile replaces config/config.yaml (list both to extend it); each config writes under
# its own outdir.


import os

from snakemake.utils import min_version
from splits.privacy import config_salt_environment
from splits.pipeline.start import (
    hub_environment,
    jobs_bring_software,
    stop_on_config_error,
    workflow_config,
)

min_version("9.0")


with stop_on_config_error():
    # with --use-conda the jobs' environments bring the model backends' packages
    workflow_config(
        config,
        workflow.overwrite_configfiles,
        jobs_own_software=jobs_bring_software(workflow),
    )

# a config export.salt reaches the jobs through the environment variable export.salt_env when
# that is unset (never through params, logs or command lines)
os.environ.update(config_salt_environment(config["export"], os.environ))
# hub models found only in the cache, the hub unreachable: the jobs read the cache without
# waiting on the hub (HF_HUB_OFFLINE)
os.environ.update(hub_environment(config))


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/graph.smk"
include: "workflow/rules/demographics.smk"
include: "workflow/rules/topics.smk"
include: "workflow/rules/release_data.smk"
include: "workflow/rules/sampling.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/probes.smk"
include: "workflow/rules/hypotheses.smk"
include: "workflow/rules/report.smk"


import os
import time

from splits.health import print_run_health, run_health_lines
from splits.llm.serve import SERVE_ENV, settings_from_config, stop_servers
from splits.report.tables import report_pages
from splits.pipeline.runlock import claim_folder_or_stop, record_owner
from splits.pipeline.snakemake_groups import fix_group_components

# one run per folder; a run killed with SIGKILL leaves its locks: the next plain command removes
# them (splits.pipeline.runlock). Jobs that read the Snakefile again (cluster jobs) claim nothing.
if workflow.is_main_process:
    claim_folder_or_stop()

# --group-components with the topic_shards checkpoint in the DAG: Snakemake 9 bundles components
# more than once and can put a job in two cluster jobs (splits.pipeline.snakemake_groups)
fix_group_components()


onstart:
    record_owner()


# run health (splits.health): what the stages found that needs a second look, on the report's
# first page (workflow/report/workflow.rst) and on the console when the run ends
RUN_STARTED = time.time()
config["run_health"] = run_health_lines(RESULTS)


# served mode (llm.serve): jobs inherit its settings (not a rule parameter: switching modes re-runs
# nothing; batch mode clears what a shell may have set); the model servers stop when the run ends
SERVE_SETTINGS = settings_from_config(config, LLM_SERVERS_DIR)
if SERVE_SETTINGS is None:
    os.environ.pop(SERVE_ENV, None)
else:
    os.environ[SERVE_ENV] = SERVE_SETTINGS.as_json()


onsuccess:
    stop_servers(LLM_SERVERS_DIR)
    print_run_health(RESULTS, "logs", RUN_STARTED)


onerror:
    stop_servers(LLM_SERVERS_DIR)
    print_run_health(RESULTS, "logs", RUN_STARTED)


# On a cluster these run on the host that submits the jobs, not as jobs of their own: each reduces
# small per-job summaries or draws the report's tables and plots (seconds and ~100-200 MB at any
# corpus size), so a job of theirs would mostly be a queue wait on the run's critical path and a
# second Snakemake start. They run one at a time there (the Slurm profile's local-cores: 1).
# Locally (snakemake --cores N) this changes nothing. (ingest_report: with ingest.buckets > 1.)
localrules:
    ingest_report,
    graph_subreddits,
    selfid_summary,
    topic_global_stats,
    evaluation_report,
    hypotheses_report,
    report_ingest,
    report_graph,
    report_demographics,
    report_topics,
    report_sampling,
    report_export,
    report_evaluation_metrics,
    report_evaluation_groups,
    report_evaluation_throughput,
    report_hypotheses,
    report_probe_empathy_variants,
    report_probe_personalization,


rule all:
    default_target: True
    input:
        final_targets(config, EMPATHY_SETS),
        report_pages(final_targets(config, EMPATHY_SETS), RESULTS),
