# Rules of the ingest stage family: the sample corpus generator, one ingest job per input shard,
# and the merge of the shards into the posts table with the ingest report: one job
# (merge_posts, ingest.buckets = 1), or with P buckets by author (each ingest job writing its
# shard as P files) one merge_bucket job per bucket and the report's reduce (ingest_report;
# splits.ingest.partition).


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


if POSTS_BUCKETS == 1:

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

else:

    # each input file written as its P bucket files by author (the one-table rule's command
    # and settings above stay as they were, so that a run with one table re-runs nothing)
    rule ingest:
        input:
            corpus=ingest_input,
            bots=config["ingest"]["bots_file"],
        output:
            buckets=temp(ingest_bucket_outputs()),
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
            settings=settings_json(config, IngestBucketsSettings),
            out_dir=lambda wildcards, output: Path(output.buckets[0]).parent,
        shell:
            "splits ingest --input {input.corpus:q} --shard {wildcards.shard:q}"
            " --bots {input.bots:q} --out-dir {params.out_dir:q} --report {output.report:q}"
            " --settings {params.settings:q} > {log:q} 2>&1"

    rule merge_bucket:
        input:
            posts=shard_bucket_files,
        output:
            posts=f"{RESULTS}/posts/buckets/{{bucket}}.parquet",
            report=f"{RESULTS}/posts/buckets/{{bucket}}.report.json",
        log:
            "logs/merge_bucket/{bucket}.log",
        benchmark:
            f"{RESULTS}/benchmarks/merge_bucket/{{bucket}}.tsv"
        conda:
            "../../envs/ingest.yaml"
        threads: 1
        resources:
            mem_mb=2048,
        shell:
            "splits merge-bucket --posts {input.posts:q} --out {output.posts:q}"
            " --report {output.report:q} > {log:q} 2>&1"

    rule ingest_report:
        input:
            shards=ingest_shard_files("reports"),
            buckets=posts_bucket_files("report.json"),
        output:
            report=f"{RESULTS}/posts/ingest_report.json",
        log:
            "logs/ingest_report/ingest_report.log",
        benchmark:
            f"{RESULTS}/benchmarks/ingest_report/ingest_report.tsv"
        conda:
            "../../envs/ingest.yaml"
        threads: 1
        resources:
            mem_mb=1024,
        shell:
            "splits ingest-report --shard-reports {input.shards:q}"
            " --bucket-reports {input.buckets:q} --report {output.report:q} > {log:q} 2>&1"
