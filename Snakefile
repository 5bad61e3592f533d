# Splits: demographic- and topic-split Reddit datasets and the Group Theorization evaluation.
# Run:  snakemake --cores 2            (default config: generated sample, builtin models)
#       snakemake --cores 2 --configfile config/paper.yaml --profile workflow/profiles/slurm


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


# served mode (llm.serve): jobs inherit its settings; the model servers stop when the run ends
llm_serve_export()


onsuccess:
    llm_serve_stop()


onerror:
    llm_serve_stop()


rule all:
    default_target: True
    input:
        final_targets(),
