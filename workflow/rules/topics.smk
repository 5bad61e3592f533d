# Rules of the topics stage family: BM25 topic splits (SPEC 2.6) and LLM topic generation.


rule topic_splits:
    input:
        posts=demographic_posts_files(),
        thresholds=f"{RESULTS}/demographics/thresholds.json",
        topics=config["topics"]["file"],
    output:
        topics=f"{RESULTS}/topics/topics.parquet",
        topic_posts=f"{RESULTS}/topics/topic_posts.parquet",
        counts=report(
            f"{RESULTS}/topics/topic_counts.csv",
            caption="../report/topics_counts.rst",
            category="Topics",
        ),
    log:
        "logs/topic_splits/topic_splits.log",
    benchmark:
        "benchmarks/topic_splits/topic_splits.tsv"
    conda:
        "../../envs/topics.yaml"
    threads: 2
    resources:
        mem_mb=8000,
    params:
        top_k=config["topics"]["top_k"],
        drop_fraction=config["topics"]["drop_fraction"],
        index=config["topics"]["index"],
    shell:
        "POLARS_MAX_THREADS={threads} splits topic-splits --demographic-posts {input.posts} --thresholds {input.thresholds} --topics-file {input.topics} --top-k {params.top_k} --drop-fraction {params.drop_fraction} --index {params.index} --out-topics {output.topics} --out-topic-posts {output.topic_posts} --out-counts {output.counts} > {log} 2>&1"


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
        "benchmarks/generate_topics/generate_topics.tsv"
    conda:
        "../../envs/llm.yaml"
    threads: 1
    params:
        spec=generate_topics_model_spec,
        model=config["topics"]["generate"]["model"],
        categories=generate_topics_categories_arg(),
        n_categories=config["topics"]["generate"]["n_categories"],
        n_topics=config["topics"]["generate"]["n_topics"],
        n_keywords=config["topics"]["generate"]["n_keywords"],
        max_tokens=config["topics"]["generate"]["max_tokens"],
        seed=SEED,
        cache=f"{RESULTS}/topics/generate_topics_cache.sqlite",
    shell:
        "splits generate-topics --model-spec {params.spec:q} --model {params.model:q} {params.categories} --n-categories {params.n_categories} --n-topics {params.n_topics} --n-keywords {params.n_keywords} --max-tokens {params.max_tokens} --seed {params.seed} --prompt-categories {input.categories} --prompt-topics {input.topics} --prompt-keywords {input.keywords} --cache {params.cache} --out {output} > {log} 2>&1"
