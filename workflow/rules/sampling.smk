# Rules of the sampling stage family: quadruplets (docs/method.md 2.7) and the dataset export.


rule sample_quadruplets:
    input:
        unpack(sampling_members_inputs),
        topic_posts=TOPIC_POSTS,
    output:
        quadruplets=f"{RESULTS}/dataset/quadruplets.parquet",
        summary=f"{RESULTS}/dataset/sampling_summary.json",
        health=f"{RESULTS}/health/sampling.json",
    log:
        "logs/sample_quadruplets/sample_quadruplets.log",
    benchmark:
        f"{RESULTS}/benchmarks/sample_quadruplets/sample_quadruplets.tsv"
    conda:
        "../../envs/sampling.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        settings=settings_json(config, SampleSettings),
        members=sampling_members_args,
    shell:
        "POLARS_MAX_THREADS={threads} splits sample --topic-posts {input.topic_posts:q}"
        " --out {output.quadruplets:q} --summary {output.summary:q}"
        " --health {output.health:q} {params.members:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule export_dataset:
    input:
        quadruplets=f"{RESULTS}/dataset/quadruplets.parquet",
        topic_posts=TOPIC_POSTS,
    output:
        quadruplets=f"{RESULTS}/dataset/export/quadruplets.parquet",
        topic_posts=f"{RESULTS}/dataset/export/topic_posts.parquet",
        card=f"{RESULTS}/dataset/export/README.md",
        by_topic=f"{RESULTS}/dataset/export/counts_by_topic.csv",
        by_category=f"{RESULTS}/dataset/export/counts_by_category.csv",
        by_topic_md=f"{RESULTS}/dataset/export/counts_by_topic.md",
        by_category_md=f"{RESULTS}/dataset/export/counts_by_category.md",
    log:
        "logs/export_dataset/export_dataset.log",
    benchmark:
        f"{RESULTS}/benchmarks/export_dataset/export_dataset.tsv"
    conda:
        "../../envs/sampling.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        settings=settings_json(config, ExportSettings),
        # the export re-runs when the salt changes; the salt itself stays out of params
        salt_fingerprint=EXPORT_SALT_FINGERPRINT,
        out_dir=lambda wildcards, output: str(Path(output.card).parent),
    shell:
        "splits export --quadruplets {input.quadruplets:q}"
        " --topic-posts {input.topic_posts:q} --out-dir {params.out_dir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"
