# Rules of the evaluation stage family (SPEC 2.8-2.10): the seeded subsample every TM, CM and k
# shares (evaluation_subsample), theories per (subsample, TM, k) (evaluation_theorize), CM
# predictions per (subsample, TM, k, CM) (evaluation_classify), then per experiment the tables
# (evaluation_metrics) and plots (evaluation_report). Experiments come from
# config["evaluation"]["experiments"]; adding one TM adds only its jobs. Human validation
# (splits human export/score) is command-line only, not part of the DAG.


rule evaluation_subsample:
    input:
        dataset=evaluation_dataset(),
        topics=config["topics"]["file"],
    output:
        rows=f"{RESULTS}/evaluation/subsample/rows-{{rows}}.parquet",
        report=f"{RESULTS}/evaluation/subsample/rows-{{rows}}.json",
    log:
        "logs/evaluation_subsample/rows-{rows}.log",
    benchmark:
        "benchmarks/evaluation_subsample/rows-{rows}.tsv"
    wildcard_constraints:
        rows=r"\d+|all",
    conda:
        "../../envs/evaluation.yaml"
    threads: 1
    resources:
        mem_mb=4096,
    params:
        seed=SEED,
        layout=config["evaluation"]["dataset_layout"],
    shell:
        "splits theorize subsample --dataset {input.dataset} --rows {wildcards.rows} --seed {params.seed} --layout {params.layout} --topics {input.topics} --out {output.rows} --report {output.report} > {log} 2>&1"


rule evaluation_theorize:
    input:
        rows=f"{RESULTS}/evaluation/subsample/rows-{{rows}}.parquet",
        prompt=evaluation_tm_prompt,
    output:
        f"{RESULTS}/evaluation/theories/rows-{{rows}}/{{tm}}/k-{{k}}.parquet",
    log:
        "logs/evaluation_theorize/rows-{rows}/{tm}/k-{k}.log",
    benchmark:
        "benchmarks/evaluation_theorize/rows-{rows}/{tm}/k-{k}.tsv"
    wildcard_constraints:
        rows=r"\d+|all",
        tm=EVALUATION_MODEL_NAME,
        k=r"\d+",
    conda:
        "../../envs/llm.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        gpu=lambda wildcards: evaluation_gpus(wildcards.tm),
        slurm_extra=lambda wildcards: evaluation_slurm_extra(wildcards.tm),
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name"),
        model_args=lambda wildcards: evaluation_model_args(wildcards.tm),
        prompt_args=lambda wildcards, input: evaluation_tm_prompt_args(input.prompt),
        temperature=config["evaluation"]["tm_sampling"]["temperature"],
        max_tokens=config["evaluation"]["tm_sampling"]["max_tokens"],
        max_post_chars=config["evaluation"]["max_post_chars"],
        seed=SEED,
    shell:
        "splits theorize generate --rows {input.rows} --k {wildcards.k} --demographics {params.demographics} {params.model_args} {params.prompt_args} --temperature {params.temperature} --max-tokens {params.max_tokens} --max-post-chars {params.max_post_chars} --seed {params.seed} --out {output} > {log} 2>&1"


rule evaluation_classify:
    input:
        rows=f"{RESULTS}/evaluation/subsample/rows-{{rows}}.parquet",
        theories=f"{RESULTS}/evaluation/theories/rows-{{rows}}/{{tm}}/k-{{k}}.parquet",
        template=evaluation_cm_prompt,
    output:
        predictions=f"{RESULTS}/evaluation/predictions/rows-{{rows}}/{{tm}}/k-{{k}}/{{cm}}.parquet",
        summary=f"{RESULTS}/evaluation/predictions/rows-{{rows}}/{{tm}}/k-{{k}}/{{cm}}.json",
    log:
        "logs/evaluation_classify/rows-{rows}/{tm}/k-{k}/{cm}.log",
    benchmark:
        "benchmarks/evaluation_classify/rows-{rows}/{tm}/k-{k}/{cm}.tsv"
    wildcard_constraints:
        rows=r"\d+|all",
        tm=EVALUATION_MODEL_NAME,
        k=r"\d+",
        cm=EVALUATION_MODEL_NAME,
    conda:
        "../../envs/llm.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        gpu=lambda wildcards: evaluation_gpus(wildcards.cm),
        slurm_extra=lambda wildcards: evaluation_slurm_extra(wildcards.cm),
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name"),
        model_args=lambda wildcards: evaluation_model_args(wildcards.cm),
        temperature=config["evaluation"]["cm_sampling"]["temperature"],
        max_tokens=config["evaluation"]["cm_sampling"]["max_tokens"],
        max_post_chars=config["evaluation"]["max_post_chars"],
        seed=SEED,
    shell:
        "splits classify --rows {input.rows} --theories {input.theories} --template {input.template} --demographics {params.demographics} {params.model_args} --temperature {params.temperature} --max-tokens {params.max_tokens} --max-post-chars {params.max_post_chars} --seed {params.seed} --out {output.predictions} --summary {output.summary} > {log} 2>&1"


rule evaluation_metrics:
    input:
        rows=evaluation_experiment_rows,
        predictions=evaluation_experiment_predictions,
    output:
        predictions=f"{RESULTS}/evaluation/experiments/{{experiment}}/predictions.parquet",
        metrics=f"{RESULTS}/evaluation/experiments/{{experiment}}/metrics.json",
        summary=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/summary.csv",
            caption="../report/evaluation_summary.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        splits=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/splits.csv",
            caption="../report/evaluation_splits.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        comparisons=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/comparisons.csv",
            caption="../report/evaluation_comparisons.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        tables=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/tables.md",
            caption="../report/evaluation_tables.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        groups=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/groups.csv",
            caption="../report/evaluation_groups.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        comparisons_md=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/comparisons.md",
            caption="../report/evaluation_comparisons.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
    log:
        "logs/evaluation_metrics/{experiment}.log",
    benchmark:
        "benchmarks/evaluation_metrics/{experiment}.tsv"
    wildcard_constraints:
        experiment=EVALUATION_MODEL_NAME,
    conda:
        "../../envs/evaluation.yaml"
    threads: 1
    resources:
        mem_mb=4096,
    params:
        out_dir=f"{RESULTS}/evaluation/experiments/{{experiment}}",
        groups=lambda wildcards: evaluation_groups_arg(wildcards.experiment),
        seed=SEED,
    shell:
        "splits metrics --rows {input.rows} --predictions {input.predictions} --experiment {wildcards.experiment} --groups {params.groups} --seed {params.seed} --out-dir {params.out_dir} > {log} 2>&1"


rule evaluation_report:
    input:
        summary=f"{RESULTS}/evaluation/experiments/{{experiment}}/summary.csv",
        splits=f"{RESULTS}/evaluation/experiments/{{experiment}}/splits.csv",
    output:
        accuracy_vs_k=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/plots/accuracy_vs_k.png",
            caption="../report/evaluation_accuracy_vs_k.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        heatmap=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/plots/tm_cm_heatmap.png",
            caption="../report/evaluation_heatmap.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        by_pair=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/plots/by_pair.png",
            caption="../report/evaluation_by_split.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        by_demographic=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/plots/by_demographic.png",
            caption="../report/evaluation_by_split.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        by_category=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/plots/by_category.png",
            caption="../report/evaluation_by_split.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
    log:
        "logs/evaluation_report/{experiment}.log",
    benchmark:
        "benchmarks/evaluation_report/{experiment}.tsv"
    wildcard_constraints:
        experiment=EVALUATION_MODEL_NAME,
    conda:
        "../../envs/evaluation.yaml"
    threads: 1
    resources:
        mem_mb=2048,
    params:
        out_dir=f"{RESULTS}/evaluation/experiments/{{experiment}}/plots",
    shell:
        "splits report --summary {input.summary} --splits {input.splits} --experiment {wildcards.experiment} --out-dir {params.out_dir} > {log} 2>&1"
