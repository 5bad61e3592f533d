# Rules of the sampling stage family: quadruplets (docs/method.md 2.7) and the dataset export.


rule sample_quadruplets:
    input:
        topic_posts=TOPIC_POSTS,
    output:
        quadruplets=f"{RESULTS}/dataset/quadruplets.parquet",
        summary=f"{RESULTS}/dataset/sampling_summary.json",
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
        k=config["sampling"]["k"],
        seed=SEED,
    shell:
        "POLARS_MAX_THREADS={threads} splits sample --topic-posts {input.topic_posts} --k {params.k} --seed {params.seed} --out {output.quadruplets} --summary {output.summary} > {log} 2>&1"


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
        k=config["sampling"]["k"],
        salt_env=config["export"]["salt_env"],
        salt_fingerprint=EXPORT_SALT_FINGERPRINT,
        out_dir=lambda wildcards, output: str(Path(output.card).parent),
    shell:
        "splits export --quadruplets {input.quadruplets} --topic-posts {input.topic_posts} --k {params.k} --salt-env {params.salt_env} --out-dir {params.out_dir} > {log} 2>&1"
