# The authors' released posts (Hugging Face dataset ecaplan/splits, a local copy) as the topic
# posts table, when release_data.path is set (splits.release_data.load).


rule release_topic_posts:
    input:
        dataset=release_data_input(),
        topics=config["topics"]["file"],
    output:
        topic_posts=f"{RESULTS}/release_data/topic_posts.parquet",
        report=f"{RESULTS}/release_data/topic_posts.json",
        health=f"{RESULTS}/health/release_data.json",
    log:
        "logs/release_topic_posts/release_topic_posts.log",
    benchmark:
        f"{RESULTS}/benchmarks/release_topic_posts/release_topic_posts.tsv"
    conda:
        "../../envs/sampling.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        dataset=RELEASE_DATA["path"],
        settings=settings_json(config, ReleaseDataSettings),
        salt_fingerprint=EXPORT_SALT_FINGERPRINT,
    shell:
        "POLARS_MAX_THREADS={threads} splits release-data topic-posts"
        " --dataset {params.dataset:q} --topics-file {input.topics:q}"
        " --out {output.topic_posts:q} --report {output.report:q}"
        " --health {output.health:q} --settings {params.settings:q} > {log:q} 2>&1"
