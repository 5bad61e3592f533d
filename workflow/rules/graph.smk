# Rules of the graph stage family. With ingest.buckets = 1 the rule graph builds the graph from
# the posts in one job; with P > 1 it is the reduce of per-bucket jobs (splits.graph.buckets):
# graph_bucket (memberships of one user bucket, read from that bucket of the posts table),
# graph_subreddits (counts added, top N), graph_overlaps (one bucket's co-membership counts of
# the kept subreddits).


rule graph_bucket:
    input:
        posts=f"{RESULTS}/posts/buckets/{{bucket}}.parquet",
    output:
        counts=temp(f"{RESULTS}/graph/buckets/{{bucket}}/counts.parquet"),
        memberships=temp(f"{RESULTS}/graph/buckets/{{bucket}}/memberships.parquet"),
    log:
        "logs/graph/bucket-{bucket}.log",
    benchmark:
        f"{RESULTS}/benchmarks/graph/bucket-{{bucket}}.tsv"
    conda:
        "../../envs/graph.yaml"
    params:
        settings=settings_json(config, GraphBucketSettings),
        out_dir=lambda wildcards, output: Path(output.counts).parent,
    shell:
        "splits graph-bucket --posts {input.posts:q} --bucket {wildcards.bucket:q}"
        " --out-dir {params.out_dir:q} --settings {params.settings:q} > {log:q} 2>&1"


rule graph_subreddits:
    input:
        counts=graph_bucket_files("counts.parquet"),
    output:
        subreddits=temp(f"{RESULTS}/graph/buckets/subreddits.parquet"),
    log:
        "logs/graph/subreddits.log",
    benchmark:
        f"{RESULTS}/benchmarks/graph/subreddits.tsv"
    conda:
        "../../envs/graph.yaml"
    params:
        settings=settings_json(config, GraphTopSettings),
    shell:
        "splits graph-subreddits --counts {input.counts:q} --out {output.subreddits:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule graph_overlaps:
    input:
        counts=f"{RESULTS}/graph/buckets/{{bucket}}/counts.parquet",
        memberships=f"{RESULTS}/graph/buckets/{{bucket}}/memberships.parquet",
        subreddits=f"{RESULTS}/graph/buckets/subreddits.parquet",
    output:
        overlaps=temp(f"{RESULTS}/graph/buckets/{{bucket}}/overlaps.parquet"),
        stats=temp(f"{RESULTS}/graph/buckets/{{bucket}}/overlaps.json"),
    log:
        "logs/graph/overlaps-{bucket}.log",
    benchmark:
        f"{RESULTS}/benchmarks/graph/overlaps-{{bucket}}.tsv"
    conda:
        "../../envs/graph.yaml"
    resources:
        mem_mb=lambda wildcards: int(2048 + config["graph"]["block_mb"]),
    params:
        settings=settings_json(config, GraphOverlapsSettings),
        bucket_dir=lambda wildcards, input: Path(input.counts).parent,
        out_dir=lambda wildcards, output: Path(output.overlaps).parent,
    shell:
        "splits graph-overlaps --bucket-dir {params.bucket_dir:q} --subreddits {input.subreddits:q}"
        " --out-dir {params.out_dir:q} --settings {params.settings:q} > {log:q} 2>&1"


rule graph:
    input:
        unpack(graph_inputs),
    output:
        subreddits=f"{RESULTS}/graph/subreddits.parquet",
        neighbours=f"{RESULTS}/graph/neighbours.parquet",
        summary=f"{RESULTS}/graph/summary.json",
    log:
        "logs/graph/graph.log",
    benchmark:
        f"{RESULTS}/benchmarks/graph/graph.tsv"
    conda:
        "../../envs/graph.yaml"
    threads: config["graph"]["threads"]
    resources:
        mem_mb=lambda wildcards, threads: int(
            2048 + threads * config["graph"]["block_mb"]
        ),
    params:
        inputs=graph_input_args,
        settings=settings_json(config, GraphSettings),
        out_dir=lambda wildcards, output: Path(output.subreddits).parent,
    shell:
        "splits graph {params.inputs:q} --threads {threads} --out-dir {params.out_dir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"
