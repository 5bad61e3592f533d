# Rules of the hypotheses stage family (hypothesis validation by lift and triviality): one job per
# hypothesis set to build it (hypotheses_sample, hypotheses_file, hypotheses_theories,
# hypotheses_generate, and the counting baseline hypotheses_fighting_words), then per set its lift
# on all posts and on the held-out half (hypotheses_lift) and triviality (hypotheses_triviality),
# then the run's table with BH q, the redundancy marks and the two-stage filter
# (hypotheses_table) and its plots and the comparison with the baseline (hypotheses_report). Adding a set adds only its three jobs and
# re-runs the table and plots.


wildcard_constraints:
    hypothesis_set=HYPOTHESIS_SET,


rule hypotheses_sample:
    input:
        meta=f"{SAMPLE_DIR}/synth_meta.json",
        topic_posts=TOPIC_POSTS,
        topics=config["topics"]["file"],
        identity=hypotheses_identity_input(),
    output:
        hypotheses=f"{HYPOTHESES_DIR}/sets/sample.parquet",
        report=f"{HYPOTHESES_DIR}/sets/sample.json",
    log:
        "logs/hypotheses_sample/sample.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_sample/sample.tsv"
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=2048,
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("identity_words"),
        identity=hypotheses_identity_args,
        settings=settings_json(config, HypothesesSampleSettings),
    shell:
        "splits hypotheses sample --meta {input.meta:q} --topic-posts {input.topic_posts:q}"
        " {params.identity:q} --topics-file {input.topics:q}"
        " --demographics {params.demographics:q} --settings {params.settings:q}"
        " --out {output.hypotheses:q} --report {output.report:q} > {log:q} 2>&1"


rule hypotheses_file:
    input:
        hypotheses=lambda wildcards: HYPOTHESES["files"][wildcards.name],
        topics=config["topics"]["file"],
    output:
        hypotheses=f"{HYPOTHESES_DIR}/sets/file/{{name}}.parquet",
        report=f"{HYPOTHESES_DIR}/sets/file/{{name}}.json",
    log:
        "logs/hypotheses_file/{name}.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_file/{{name}}.tsv"
    wildcard_constraints:
        name=r"[A-Za-z0-9_.\-]+",
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice(),
        settings=settings_json(config, FileSettings),
    shell:
        "splits hypotheses file --input {input.hypotheses:q} --name {wildcards.name:q}"
        " --topics-file {input.topics:q} --demographics {params.demographics:q}"
        " --settings {params.settings:q}"
        " --out {output.hypotheses:q} --report {output.report:q} > {log:q} 2>&1"


rule hypotheses_theories:
    input:
        theories=hypotheses_theories_input,
        rows=evaluation_experiment_rows,
        topics=config["topics"]["file"],
        prompt=hypotheses_theory_prompt,
    output:
        hypotheses=f"{HYPOTHESES_DIR}/sets/theory/{{experiment}}/{{tm}}/k-{{k}}.parquet",
        report=f"{HYPOTHESES_DIR}/sets/theory/{{experiment}}/{{tm}}/k-{{k}}.json",
    log:
        "logs/hypotheses_theories/{experiment}/{tm}/k-{k}.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_theories/{{experiment}}/{{tm}}/k-{{k}}.tsv"
    wildcard_constraints:
        experiment=PATH_NAME,
        tm=PATH_NAME,
        k=r"\d+",
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=4096,
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name"),
        model_args=lambda wildcards: hypotheses_theory_args(config, wildcards.tm),
        settings=settings_json(config, TheoriesSettings),
    shell:
        "splits hypotheses theories --theories {input.theories:q} --rows {input.rows:q}"
        " --experiment {wildcards.experiment:q} --tm {wildcards.tm:q} --k {wildcards.k:q}"
        " {params.model_args:q} --topics-file {input.topics:q}"
        " --demographics {params.demographics:q} --settings {params.settings:q}"
        " --out {output.hypotheses:q} --report {output.report:q} > {log:q} 2>&1"


rule hypotheses_generate:
    input:
        topic_posts=TOPIC_POSTS,
        topics=config["topics"]["file"],
        prompt=HYPOTHESES["generate"]["prompt"],
    output:
        hypotheses=f"{HYPOTHESES_DIR}/sets/llm/{{model}}.parquet",
        report=f"{HYPOTHESES_DIR}/sets/llm/{{model}}.json",
    log:
        "logs/hypotheses_generate/{model}.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_generate/{{model}}.tsv"
    wildcard_constraints:
        model=PATH_NAME,
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        gpu=lambda wildcards: evaluation_gpus(wildcards.model),
        slurm_extra=lambda wildcards: evaluation_slurm_extra(wildcards.model),
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name"),
        model_args=lambda wildcards: hypotheses_model_args(config, wildcards.model),
        settings=settings_json(config, GenerateSettings),
    shell:
        "splits hypotheses generate --topic-posts {input.topic_posts:q}"
        " {params.model_args:q} --prompt {input.prompt:q} --topics-file {input.topics:q}"
        " --demographics {params.demographics:q} --settings {params.settings:q}"
        " --out {output.hypotheses:q} --report {output.report:q} > {log:q} 2>&1"


rule hypotheses_fighting_words:
    input:
        topic_posts=TOPIC_POSTS,
        threads=hypotheses_threads_input(),
        models=hypotheses_model_set_files(),
        topics=config["topics"]["file"],
    output:
        hypotheses=f"{HYPOTHESES_DIR}/sets/fighting-words.parquet",
        report=f"{HYPOTHESES_DIR}/sets/fighting-words.json",
    log:
        "logs/hypotheses_fighting_words/fighting-words.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_fighting_words/fighting-words.tsv"
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=4096,
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice(),
        threads=hypotheses_threads_args,
        settings=settings_json(config, FightingWordsSettings),
    shell:
        "splits hypotheses fighting-words --topic-posts {input.topic_posts:q}"
        " {params.threads:q} --model-sets {input.models:q} --topics-file {input.topics:q}"
        " --demographics {params.demographics:q} --settings {params.settings:q}"
        " --out {output.hypotheses:q} --report {output.report:q} > {log:q} 2>&1"


rule hypotheses_lift:
    input:
        hypotheses=f"{HYPOTHESES_DIR}/sets/{{hypothesis_set}}.parquet",
        topic_posts=TOPIC_POSTS,
        threads=hypotheses_threads_input(),
        vocab=hypotheses_vocab_input(),
    output:
        lift=f"{HYPOTHESES_DIR}/lift/{{hypothesis_set}}.parquet",
        matches=f"{HYPOTHESES_DIR}/matches/{{hypothesis_set}}.parquet",
        report=f"{HYPOTHESES_DIR}/lift/{{hypothesis_set}}.json",
    log:
        "logs/hypotheses_lift/{hypothesis_set}.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_lift/{{hypothesis_set}}.tsv"
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=4096,
    params:
        threads=hypotheses_threads_args,
        settings=settings_json(config, LiftSettings),
    shell:
        "POLARS_MAX_THREADS={threads} splits hypotheses lift --set {input.hypotheses:q}"
        " --topic-posts {input.topic_posts:q} {params.threads:q} --settings {params.settings:q}"
        " --out {output.lift:q} --matches {output.matches:q}"
        " --report {output.report:q} > {log:q} 2>&1"


rule hypotheses_triviality:
    input:
        hypotheses=f"{HYPOTHESES_DIR}/sets/{{hypothesis_set}}.parquet",
        identity=hypotheses_identity_input(),
    output:
        f"{HYPOTHESES_DIR}/triviality/{{hypothesis_set}}.parquet",
    log:
        "logs/hypotheses_triviality/{hypothesis_set}.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_triviality/{{hypothesis_set}}.tsv"
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=4096,
        gpu=hypotheses_encoder_gpus(),
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("identity_words"),
        identity=hypotheses_identity_args,
        encoder=hypotheses_encoder_args(config),
        settings=settings_json(config, TrivialitySettings),
    shell:
        "splits hypotheses triviality --set {input.hypotheses:q}"
        " --demographics {params.demographics:q} {params.identity:q} {params.encoder:q}"
        " --settings {params.settings:q} --out {output:q} > {log:q} 2>&1"


rule hypotheses_table:
    input:
        hypotheses=hypotheses_set_files("sets"),
        lift=hypotheses_set_files("lift"),
        triviality=hypotheses_set_files("triviality"),
        matches=hypotheses_set_files("matches"),
    output:
        table=f"{HYPOTHESES_DIR}/lift.parquet",
        filtered=f"{HYPOTHESES_DIR}/filtered.csv",
        stages=f"{HYPOTHESES_DIR}/stages.csv",
    log:
        "logs/hypotheses_table/table.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_table/table.tsv"
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=4096,
    params:
        settings=settings_json(config, TableSettings),
    shell:
        "splits hypotheses table --lift {input.lift:q} --triviality {input.triviality:q}"
        " --sets {input.hypotheses:q} --matches {input.matches:q}"
        " --settings {params.settings:q}"
        " --out-table {output.table:q} --out-filtered {output.filtered:q}"
        " --out-stages {output.stages:q} > {log:q} 2>&1"


rule hypotheses_report:
    input:
        table=f"{HYPOTHESES_DIR}/lift.parquet",
        stages=f"{HYPOTHESES_DIR}/stages.csv",
    output:
        scatter=report(
            f"{HYPOTHESES_DIR}/plots/lift_vs_triviality.png",
            caption="../report/hypotheses_scatter.rst",
            category="Hypotheses",
        ),
        curves=report(
            f"{HYPOTHESES_DIR}/plots/lift_curves.png",
            caption="../report/hypotheses_curves.rst",
            category="Hypotheses",
        ),
        stages=report(
            f"{HYPOTHESES_DIR}/plots/stages.png",
            caption="../report/hypotheses_stages_plot.rst",
            category="Hypotheses",
        ),
        comparison=f"{HYPOTHESES_DIR}/comparison.csv",
        comparison_plot=report(
            f"{HYPOTHESES_DIR}/plots/models_vs_counting.png",
            caption="../report/hypotheses_models_vs_counting.rst",
            category="Hypotheses",
        ),
        health=f"{RESULTS}/health/hypotheses.json",
    log:
        "logs/hypotheses_report/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/hypotheses_report/report.tsv"
    conda:
        "../../envs/hypotheses.yaml"
    threads: 1
    resources:
        mem_mb=2048,
    params:
        settings=settings_json(config, ReportSettings),
    shell:
        "splits hypotheses report --table {input.table:q} --stages {input.stages:q}"
        " --settings {params.settings:q} --out-scatter {output.scatter:q}"
        " --out-curves {output.curves:q} --out-stages {output.stages:q}"
        " --out-comparison {output.comparison:q}"
        " --out-comparison-plot {output.comparison_plot:q}"
        " --health {output.health:q} > {log:q} 2>&1"
