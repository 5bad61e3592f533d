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
        top_n=config["graph"]["top_n"],
        min_posts=config["graph"]["min_posts"],
        k=config["graph"]["k"],
        block_mb=config["graph"]["block_mb"],
        out_dir=lambda wildcards, output: Path(output.subreddits).parent,
    shell:
        "splits graph --posts {input.posts:q} --top-n {params.top_n:q} --min-posts {params.min_posts:q} --k {params.k:q} --block-mb {params.block_mb:q} --threads {threads} --out-dir {params.out_dir:q} > {log:q} 2>&1"
