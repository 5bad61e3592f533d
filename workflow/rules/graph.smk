# Rules of the graph stage family.


rule graph:
    input:
        posts=posts_files(),
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
        settings=settings_json(config, GraphSettings),
        out_dir=lambda wildcards, output: Path(output.subreddits).parent,
    shell:
        "splits graph --posts {input.posts:q} --threads {threads} --out-dir {params.out_dir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"
