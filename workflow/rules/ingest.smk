# Rules of the ingest stage family: the sample corpus generator, one ingest job per input shard,
# and the merge of the shards into the posts table with the ingest report.


rule synth:
    input:
        topics=config["topics"]["file"],
    output:
        corpus=[
            directory(path) if SYNTH["format"] == "convokit" else path
            for path in synth_corpus_outputs(config).values()
        ],
        ground_truth=f"{SAMPLE_DIR}/ground_truth.parquet",
        post_truth=f"{SAMPLE_DIR}/post_truth.parquet",
        meta=f"{SAMPLE_DIR}/synth_meta.json",
    log:
        "logs/synth/synth.log",
    benchmark:
        f"{RESULTS}/benchmarks/synth/synth.tsv"
    conda:
        "../../envs/ingest.yaml"
    threads: 1
    resources:
        mem_mb=2048,
    params:
        settings=settings_json(config, SynthSettings),
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice(
            "seed_subreddits", "self_id_phrases", "anti_self_id_phrases"
        ),
        out=lambda wildcards, output: str(Path(output.meta).parent / "corpus"),
        truth_dir=lambda wildcards, output: str(Path(output.meta).parent),
    shell:
        "splits synth --demographics {params.demographics:q} --topics {input.topics:q}"
        " --out {params.out:q} --truth-dir {params.truth_dir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule ingest:
    input:
        corpus=ingest_input,
        bots=config["ingest"]["bots_file"],
    output:
        posts=f"{RESULTS}/posts/shards/{{shard}}.parquet",
        report=f"{RESULTS}/posts/shards/{{shard}}.report.json",
    log:
        "logs/ingest/{shard}.log",
    benchmark:
        f"{RESULTS}/benchmarks/ingest/{{shard}}.tsv"
    conda:
        "../../envs/ingest.yaml"
    threads: 1
    resources:
        mem_mb=lambda wildcards: 512 + 8 * config["ingest"]["chunk_mb"],
    params:
        settings=settings_json(config, IngestSettings),
    shell:
        "splits ingest --input {input.corpus:q} --shard {wildcards.shard:q}"
        " --bots {input.bots:q} --out {output.posts:q} --report {output.report:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule merge_posts:
    input:
        posts=ingest_shard_files("posts"),
        reports=ingest_shard_files("reports"),
    output:
        posts=f"{RESULTS}/posts/posts.parquet",
        report=f"{RESULTS}/posts/ingest_report.json",
    log:
        "logs/merge_posts/merge_posts.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_posts/merge_posts.tsv"
    conda:
        "../../envs/ingest.yaml"
    threads: 1
    resources:
        mem_mb=2048,
    shell:
        "splits merge-posts --posts {input.posts:q} --reports {input.reports:q}"
        " --out {output.posts:q} --report {output.report:q} > {log:q} 2>&1"
