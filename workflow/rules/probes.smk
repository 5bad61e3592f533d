# Rules of the probes stage family (docs/method.md 3): stress and empathy-gap perception probes,
# GRASP agreement analysis, implicit personalization. {source}: topics (the Splits topic posts) or a
# reference data set (dreaddit, envent); the reference probes run with `snakemake --cores 2
# probes_reference --config probes='{reference_dir: ../shared/reference/realdata}'`.

import json

from splits.probes.settings import (
    EMPATHY_SETTINGS,
    STRESS_SETTINGS,
    GraspJudgesSettings,
    GraspSettings,
    personalization_settings,
)


rule probe_stress:
    input:
        data=probe_data("stress"),
        prompt=PROBES["stress"]["prompt"],
    output:
        responses=f"{PROBES_DIR}/stress/{{source}}/responses.parquet",
        groups=f"{PROBES_DIR}/stress/{{source}}/groups.parquet",
        summary=f"{PROBES_DIR}/stress/{{source}}/summary.parquet",
        summary_json=f"{PROBES_DIR}/stress/{{source}}/summary.json",
        ratings=f"{PROBES_DIR}/stress/{{source}}/ratings.parquet",
        raters=f"{PROBES_DIR}/stress/{{source}}/raters.parquet",
        plot=report(
            f"{PROBES_DIR}/stress/{{source}}/stress_rates.png",
            caption="../report/probes_stress.rst",
            category="Probes",
            subcategory="{source}",
        ),
    log:
        "logs/probe_stress/{source}.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_stress/{{source}}.tsv"
    wildcard_constraints:
        source="topics|dreaddit",
    conda:
        "../../envs/probes.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        settings=lambda w: settings_json(config, STRESS_SETTINGS[w.source]),
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name", "self_id_phrases"),
        data=probe_data_arg,
        spec=lambda w: model_spec_json(config, PROBES["stress"]["model"]),
        outdir=lambda wildcards, output: str(Path(output[0]).parent),
        cache=f"{RESULTS}/llm_cache.sqlite",
    shell:
        "splits probe stress --source {wildcards.source:q} --input {params.data:q}"
        " --prompt {input.prompt:q} --demographics {params.demographics:q}"
        " --model-spec {params.spec:q} --cache {params.cache:q}"
        " --outdir {params.outdir:q} --settings {params.settings:q} > {log:q} 2>&1"


# One job per (source, group set, prompt variant); the variants of a (source, group set) are then
# gathered side by side.
rule probe_empathy:
    input:
        unpack(probe_empathy_inputs),
    output:
        responses=f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/{{variant}}/responses.parquet",
        cells=f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/{{variant}}/cells.parquet",
        summary=f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/{{variant}}/summary.json",
        heatmap=report(
            f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/{{variant}}/heatmap.png",
            caption="../report/probes_empathy.rst",
            category="Probes",
            subcategory="{source} {group_set}",
        ),
    log:
        "logs/probe_empathy/{source}/{group_set}/{variant}.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_empathy/{{source}}/{{group_set}}/{{variant}}.tsv"
    wildcard_constraints:
        source="topics|envent",
        group_set=r"[A-Za-z0-9_\-]+",
        variant=r"[A-Za-z0-9_\-]+",
    conda:
        "../../envs/probes.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        settings=lambda w: settings_json(config, EMPATHY_SETTINGS[w.source]),
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name", "self_id_phrases"),
        group_sets_file=PROBES["empathy"]["group_sets_file"],
        group_set_slice=probe_empathy_group_slice,
        variant=lambda w: json.dumps(EMPATHY["variants"][w.variant], sort_keys=True),
        data=probe_data_arg,
        spec=lambda w: model_spec_json(config, PROBES["empathy"]["model"]),
        outdir=lambda wildcards, output: str(Path(output[0]).parent),
        cache=f"{RESULTS}/llm_cache.sqlite",
    shell:
        "splits probe empathy --source {wildcards.source:q} --input {params.data:q}"
        " --group-set {wildcards.group_set:q} --group-sets-file {params.group_sets_file:q}"
        " --variant {wildcards.variant:q} --variant-spec {params.variant:q}"
        " --demographics {params.demographics:q} --model-spec {params.spec:q}"
        " --cache {params.cache:q} --outdir {params.outdir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule probe_empathy_variants:
    input:
        summaries=probe_empathy_variant_summaries,
    output:
        table=f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/variants.csv",
        markdown=f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/variants.md",
    log:
        "logs/probe_empathy_variants/{source}/{group_set}.log",
    wildcard_constraints:
        source="topics|envent",
        group_set=r"[A-Za-z0-9_\-]+",
    conda:
        "../../envs/probes.yaml"
    threads: 1
    resources:
        mem_mb=500,
    shell:
        "splits probe empathy-variants --summaries {input.summaries:q}"
        " --out {output.table:q} > {log:q} 2>&1"


rule probe_grasp:
    input:
        unpack(probe_grasp_inputs),
    output:
        groups=f"{PROBES_DIR}/grasp/{{name}}/groups.parquet",
        dsi=f"{PROBES_DIR}/grasp/{{name}}/dsi.parquet",
        nulls=f"{PROBES_DIR}/grasp/{{name}}/nulls.parquet",
        skipped=f"{PROBES_DIR}/grasp/{{name}}/skipped_groups.parquet",
        summary=f"{PROBES_DIR}/grasp/{{name}}/summary.json",
        plot=report(
            f"{PROBES_DIR}/grasp/{{name}}/gai.png",
            caption="../report/probes_grasp.rst",
            category="Probes",
            subcategory="{name}",
        ),
        nulls_plot=report(
            f"{PROBES_DIR}/grasp/{{name}}/null_histograms.png",
            caption="../report/probes_grasp_nulls.rst",
            category="Probes",
            subcategory="{name}",
        ),
    log:
        "logs/probe_grasp/{name}.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_grasp/{{name}}.tsv"
    conda:
        "../../envs/probes.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        settings=settings_json(config, GraspSettings),
        columns=lambda w: probe_grasp_column_args(PROBES["grasp"]["inputs"].get(w.name)),
        raters=lambda w, input: ["--raters", *input.raters] if input.raters else [],
        outdir=lambda wildcards, output: str(Path(output[0]).parent),
    shell:
        "splits probe grasp --ratings {input.ratings:q} {params.raters:q}"
        " {params.columns:q} --outdir {params.outdir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


# GRASP on LLM judges: each (TM, CM, k) of an evaluation experiment is a rater of the
# experiment's quadruplets (its CM answer); groups by tm, cm, k, tm_kind, cm_kind.
rule probe_grasp_judges:
    input:
        judgments=evaluation_experiment_predictions,
    output:
        ratings=f"{PROBES_DIR}/grasp_judges/{{experiment}}/ratings.parquet",
        raters=f"{PROBES_DIR}/grasp_judges/{{experiment}}/raters.parquet",
        groups=f"{PROBES_DIR}/grasp_judges/{{experiment}}/groups.parquet",
        dsi=f"{PROBES_DIR}/grasp_judges/{{experiment}}/dsi.parquet",
        nulls=f"{PROBES_DIR}/grasp_judges/{{experiment}}/nulls.parquet",
        skipped=f"{PROBES_DIR}/grasp_judges/{{experiment}}/skipped_groups.parquet",
        summary=f"{PROBES_DIR}/grasp_judges/{{experiment}}/summary.json",
        plot=report(
            f"{PROBES_DIR}/grasp_judges/{{experiment}}/gai.png",
            caption="../report/probes_grasp_judges.rst",
            category="Probes",
            subcategory="judges {experiment}",
        ),
        nulls_plot=report(
            f"{PROBES_DIR}/grasp_judges/{{experiment}}/null_histograms.png",
            caption="../report/probes_grasp_nulls.rst",
            category="Probes",
            subcategory="judges {experiment}",
        ),
    log:
        "logs/probe_grasp_judges/{experiment}.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_grasp_judges/{{experiment}}.tsv"
    wildcard_constraints:
        experiment=PATH_NAME,
    conda:
        "../../envs/probes.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        settings=settings_json(config, GraspJudgesSettings),
        kinds=probe_grasp_judge_kinds,
        outdir=lambda wildcards, output: str(Path(output.groups).parent),
    shell:
        "splits probe grasp --judgments {input.judgments:q}"
        " --judge-kinds {params.kinds:q} --outdir {params.outdir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule probe_personalization:
    input:
        data=probe_data("personalization"),
        rewrite_prompt=PROBES["personalization"]["rewrite_prompt"],
        task_prompts=probe_task_prompts(),
        judge_prompt=probe_judge_prompt(),
    output:
        rewrites=f"{PROBES_DIR}/personalization/{{source}}/rewrites.parquet",
        responses=f"{PROBES_DIR}/personalization/{{source}}/responses.parquet",
        tests=f"{PROBES_DIR}/personalization/{{source}}/tests.parquet",
        summary=f"{PROBES_DIR}/personalization/{{source}}/summary.json",
    log:
        "logs/probe_personalization/{source}.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_personalization/{{source}}.tsv"
    wildcard_constraints:
        source="topics",
    conda:
        "../../envs/probes.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        settings=settings_json(
            config, personalization_settings(PROBES["personalization"]["judge_model"])
        ),
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name", "self_id_phrases"),
        data=probe_data_arg,
        spec=lambda w: model_spec_json(config, PROBES["personalization"]["model"]),
        judge=lambda wildcards, input: probe_judge_args(config, input.judge_prompt),
        outdir=lambda wildcards, output: str(Path(output[0]).parent),
        cache=f"{RESULTS}/llm_cache.sqlite",
    shell:
        "splits probe personalization --input {params.data:q}"
        " --rewrite-prompt {input.rewrite_prompt:q} {params.judge:q}"
        " --demographics {params.demographics:q} --model-spec {params.spec:q}"
        " --cache {params.cache:q} --outdir {params.outdir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


# Reference-data probes (Dreaddit, crowd-enVent, DICES-350); needs probes.reference_dir.
rule probes_reference:
    input:
        probes_reference_inputs,
