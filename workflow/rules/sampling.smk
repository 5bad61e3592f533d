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
        k=config["sampling"]["k"],
        seed=SEED,
        members=sampling_members_args,
    shell:
        "POLARS_MAX_THREADS={threads} splits sample --topic-posts {input.topic_posts:q} --k {params.k:q} --seed {params.seed:q} --out {output.quadruplets:q} --summary {output.summary:q} --health {output.health:q} {params.members:q} > {log:q} 2>&1"


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
        post_ids=config["export"]["post_ids"],
        salt_fingerprint=EXPORT_SALT_FINGERPRINT,
        card=[
            arg
            for key in ("license", "source")
            if config["export"][key]
            for arg in (f"--{key}", config["export"][key])
        ],
        out_dir=lambda wildcards, output: str(Path(output.card).parent),
    shell:
        "splits export --quadruplets {input.quadruplets:q} --topic-posts {input.topic_posts:q} --k {params.k:q} --salt-env {params.salt_env:q} --post-ids {params.post_ids:q} --out-dir {params.out_dir:q} {params.card:q} > {log:q} 2>&1"
