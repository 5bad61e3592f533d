# Rules of the topics stage family: BM25 topic splits (docs/method.md 2.6) and LLM topic generation.


# The BM25 topic splits run as map -> reduce -> map -> reduce over shards of the demographics'
# posts (bounded by topics.shard_posts and topics.shard_mb), so each job's memory is bounded:
# topic_shards cuts the union into shards (a checkpoint: their number depends on the data),
# topic_shard_stats counts each shard's vocabulary (and keeps its postings of the topics' terms
# and its documents' lengths, so the shard is tokenised once), topic_global_stats sums the counts
# into the corpus statistics, topic_shard_score scores each shard with them and the BM25 variant
# of topics.bm25 (its top K per demographic and topic), and topic_splits merges the shards' top Ks
# and makes the cut. With ingest.buckets > 1 topic_shards is one job per posts bucket (its folder
# and shards named by the bucket: common.smk, TOPIC_SHARD), so no job reads the whole corpus.


checkpoint topic_shards:
    input:
        posts=topic_shards_posts,
        thresholds=f"{RESULTS}/demographics/thresholds.json",
        demographics=DEMOGRAPHICS_FILE,
    output:
        directory(TOPIC_SHARDS_OUT),
    log:
        f"logs/topic_shards/{TOPIC_SHARDS_JOB}.log",
    benchmark:
        f"{RESULTS}/benchmarks/topic_shards/{TOPIC_SHARDS_JOB}.tsv"
    conda:
        "../../envs/topics.yaml"
    threads: 1
    resources:
        mem_mb=topic_shard_mem_mb,
    params:
        part=topic_shards_part_args,
        settings=settings_json(config, TopicShardsSettings),
    shell:
        "POLARS_MAX_THREADS={threads} splits topic-splits shard"
        " --demographic-posts {input.posts:q} --thresholds {input.thresholds:q}"
        " --demographics-file {input.demographics:q} --out-dir {output:q} {params.part:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule topic_shard_stats:
    input:
        shard=f"{TOPIC_SHARDS}/{TOPIC_SHARD}.parquet",
        topics=config["topics"]["file"],
    output:
        vocab=f"{TOPIC_STATS}/{TOPIC_SHARD}.vocab.parquet",
        counts=f"{TOPIC_STATS}/{TOPIC_SHARD}.counts.json",
        postings=f"{TOPIC_STATS}/{TOPIC_SHARD}.postings.parquet",
        lengths=f"{TOPIC_STATS}/{TOPIC_SHARD}.lengths.parquet",
    log:
        f"logs/topic_shard_stats/{TOPIC_SHARD}.log",
    benchmark:
        f"{RESULTS}/benchmarks/topic_shard_stats/{TOPIC_SHARD}.tsv"
    conda:
        "../../envs/topics.yaml"
    threads: 1
    resources:
        mem_mb=topic_shard_mem_mb,
    params:
        settings=settings_json(config, TopicShardStatsSettings),
    shell:
        "POLARS_MAX_THREADS={threads} splits topic-splits stats --shard {input.shard:q}"
        " --topics-file {input.topics:q} --out-vocab {output.vocab:q}"
        " --out-counts {output.counts:q} --out-postings {output.postings:q}"
        " --out-lengths {output.lengths:q} --settings {params.settings:q} > {log:q} 2>&1"


rule topic_global_stats:
    input:
        vocab=topic_shard_outputs(f"{TOPIC_STATS}/{TOPIC_SHARD}.vocab.parquet"),
        counts=topic_shard_outputs(f"{TOPIC_STATS}/{TOPIC_SHARD}.counts.json"),
        topics=config["topics"]["file"],
        cuts=topic_shard_folders(),  # with posts buckets: every bucket's cut at once
    output:
        f"{RESULTS}/topics/global_stats.json",
    log:
        "logs/topic_global_stats/topic_global_stats.log",
    benchmark:
        f"{RESULTS}/benchmarks/topic_global_stats/topic_global_stats.tsv"
    conda:
        "../../envs/topics.yaml"
    threads: 2
    resources:
        mem_mb=4000,
    shell:
        "POLARS_MAX_THREADS={threads} splits topic-splits global-stats"
        " --vocab {input.vocab:q} --counts {input.counts:q}"
        " --topics-file {input.topics:q} --out {output:q} > {log:q} 2>&1"


rule topic_shard_score:
    input:
        shard=f"{TOPIC_SHARDS}/{TOPIC_SHARD}.parquet",
        stats=f"{RESULTS}/topics/global_stats.json",
        topics=config["topics"]["file"],
        postings=f"{TOPIC_STATS}/{TOPIC_SHARD}.postings.parquet",
        lengths=f"{TOPIC_STATS}/{TOPIC_SHARD}.lengths.parquet",
    output:
        f"{TOPIC_HITS}/{TOPIC_SHARD}.parquet",
    log:
        f"logs/topic_shard_score/{TOPIC_SHARD}.log",
    benchmark:
        f"{RESULTS}/benchmarks/topic_shard_score/{TOPIC_SHARD}.tsv"
    conda:
        "../../envs/topics.yaml"
    threads: 1
    resources:
        mem_mb=topic_shard_mem_mb,
    params:
        settings=settings_json(config, TopicShardScoreSettings),
    shell:
        "POLARS_MAX_THREADS={threads} splits topic-splits score --shard {input.shard:q}"
        " --global-stats {input.stats:q} --topics-file {input.topics:q}"
        " --postings {input.postings:q} --lengths {input.lengths:q} --out {output:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule topic_splits:
    input:
        hits=topic_shard_outputs(f"{TOPIC_HITS}/{TOPIC_SHARD}.parquet"),
        shards=topic_shard_outputs(f"{TOPIC_SHARDS}/{TOPIC_SHARD}.parquet"),
        topics=config["topics"]["file"],
        demographics=DEMOGRAPHICS_FILE,
        cuts=topic_shard_folders(),  # with posts buckets: every bucket's cut at once
    output:
        topics=f"{RESULTS}/topics/topics.parquet",
        topic_posts=f"{RESULTS}/topics/topic_posts.parquet",
        counts=f"{RESULTS}/topics/topic_counts.csv",
        retrieval=f"{RESULTS}/topics/topic_retrieval.csv",
        seed_share=f"{RESULTS}/topics/seed_share.csv",
        health=f"{RESULTS}/health/topics.json",
    log:
        "logs/topic_splits/topic_splits.log",
    benchmark:
        f"{RESULTS}/benchmarks/topic_splits/topic_splits.tsv"
    conda:
        "../../envs/topics.yaml"
    threads: 2
    resources:
        mem_mb=topic_merge_mem_mb,
    params:
        demographics=DEMOGRAPHIC_KEYS,
        settings=settings_json(config, TopicMergeSettings),
    shell:
        "POLARS_MAX_THREADS={threads} splits topic-splits merge --hits {input.hits:q}"
        " --shards {input.shards:q} --demographics {params.demographics:q}"
        " --topics-file {input.topics:q} --demographics-file {input.demographics:q}"
        " --out-topics {output.topics:q} --out-topic-posts {output.topic_posts:q}"
        " --out-counts {output.counts:q} --out-retrieval {output.retrieval:q}"
        " --out-seed-share {output.seed_share:q} --out-health {output.health:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


# Not in the default DAG: snakemake results/topics/generated_topics.yaml (needs topics.generate.model).
rule generate_topics:
    input:
        categories="resources/prompts/generate_topics_categories.txt",
        topics="resources/prompts/generate_topics_topics.txt",
        keywords="resources/prompts/generate_topics_keywords.txt",
    output:
        f"{RESULTS}/topics/generated_topics.yaml",
    log:
        "logs/generate_topics/generate_topics.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate_topics/generate_topics.tsv"
    conda:
        "../../envs/llm.yaml"
    threads: 1
    params:
        spec=generate_topics_model_spec,
        settings=settings_json(config, GenerateTopicsSettings),
        cache=f"{RESULTS}/topics/generate_topics_cache.sqlite",
    shell:
        "splits generate-topics --model-spec {params.spec:q}"
        " --prompt-categories {input.categories:q} --prompt-topics {input.topics:q}"
        " --prompt-keywords {input.keywords:q} --cache {params.cache:q} --out {output:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"
