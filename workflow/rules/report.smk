# HTML pages of the tables the report shows: a browser shows images, HTML and PDF in the report,
# while CSV, Parquet, JSON and Markdown would be downloads only. Each page lies beside its table;
# `splits report-tables` renders them from the outputs themselves; rule all asks for the pages of
# the tables its targets' jobs write (splits.report.tables.report_pages).


rule report_ingest:
    input:
        report=f"{RESULTS}/posts/ingest_report.json",
    output:
        report=report(
            f"{RESULTS}/posts/ingest_report.html",
            caption="../report/ingest_report.rst",
            category="Ingest",
        ),
    log:
        "logs/report_ingest/ingest.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_ingest/ingest.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_graph:
    input:
        summary=f"{RESULTS}/graph/summary.json",
    output:
        summary=report(
            f"{RESULTS}/graph/summary.html",
            caption="../report/graph_summary.rst",
            category="Subreddit graph",
        ),
    log:
        "logs/report_graph/graph.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_graph/graph.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_demographics:
    input:
        thresholds=f"{RESULTS}/demographics/thresholds.json",
        formulas=f"{RESULTS}/demographics/formula_comparison.md",
    output:
        thresholds=report(
            f"{RESULTS}/demographics/thresholds.html",
            caption="../report/demographics_thresholds.rst",
            category="Demographics",
        ),
        formulas=report(
            f"{RESULTS}/demographics/formula_comparison.html",
            caption="../report/demographics_formulas.rst",
            category="Demographics",
        ),
    log:
        "logs/report_demographics/demographics.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_demographics/demographics.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_topics:
    input:
        counts=f"{RESULTS}/topics/topic_counts.csv",
        retrieval=f"{RESULTS}/topics/topic_retrieval.csv",
        seed_share=f"{RESULTS}/topics/seed_share.csv",
    output:
        counts=report(
            f"{RESULTS}/topics/topic_counts.html",
            caption="../report/topics_counts.rst",
            category="Topics",
        ),
        retrieval=report(
            f"{RESULTS}/topics/topic_retrieval.html",
            caption="../report/topics_retrieval.rst",
            category="Topics",
        ),
        seed_share=report(
            f"{RESULTS}/topics/seed_share.html",
            caption="../report/topics_seed_share.rst",
            category="Topics",
        ),
    log:
        "logs/report_topics/topics.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_topics/topics.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_sampling:
    input:
        summary=f"{RESULTS}/dataset/sampling_summary.json",
    output:
        summary=report(
            f"{RESULTS}/dataset/sampling_summary.html",
            caption="../report/dataset_summary.rst",
            category="Dataset",
        ),
    log:
        "logs/report_sampling/sampling.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_sampling/sampling.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_export:
    input:
        card=f"{RESULTS}/dataset/export/README.md",
        by_topic=f"{RESULTS}/dataset/export/counts_by_topic.csv",
        by_category=f"{RESULTS}/dataset/export/counts_by_category.csv",
    output:
        card=report(
            f"{RESULTS}/dataset/export/dataset_card.html",
            caption="../report/dataset_card.rst",
            category="Dataset",
        ),
        by_topic=report(
            f"{RESULTS}/dataset/export/counts_by_topic.html",
            caption="../report/dataset_counts_by_topic.rst",
            category="Dataset",
        ),
        by_category=report(
            f"{RESULTS}/dataset/export/counts_by_category.html",
            caption="../report/dataset_counts_by_category.rst",
            category="Dataset",
        ),
    log:
        "logs/report_export/export.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_export/export.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_evaluation_metrics:
    input:
        summary=f"{RESULTS}/evaluation/experiments/{{experiment}}/summary.csv",
        splits=f"{RESULTS}/evaluation/experiments/{{experiment}}/splits.csv",
        comparisons=f"{RESULTS}/evaluation/experiments/{{experiment}}/comparisons.csv",
    output:
        summary=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/summary.html",
            caption="../report/evaluation_summary.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        splits=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/splits.html",
            caption="../report/evaluation_splits.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        comparisons=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/comparisons.html",
            caption="../report/evaluation_comparisons.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
    log:
        "logs/report_evaluation_metrics/{experiment}.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_evaluation_metrics/{{experiment}}.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_evaluation_groups:
    input:
        groups=f"{RESULTS}/evaluation/experiments/{{experiment}}/groups.csv",
        group_splits=f"{RESULTS}/evaluation/experiments/{{experiment}}/group_splits.csv",
        gaps=f"{RESULTS}/evaluation/experiments/{{experiment}}/group_gaps.md",
    output:
        groups=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/groups.html",
            caption="../report/evaluation_groups.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        group_splits=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/group_splits.html",
            caption="../report/evaluation_group_splits.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
        gaps=report(
            f"{RESULTS}/evaluation/experiments/{{experiment}}/group_gaps.html",
            caption="../report/evaluation_group_gaps.rst",
            category="Evaluation",
            subcategory="{experiment}",
        ),
    log:
        "logs/report_evaluation_groups/{experiment}.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_evaluation_groups/{{experiment}}.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_evaluation_throughput:
    input:
        throughput=f"{RESULTS}/evaluation/throughput.csv",
    output:
        throughput=report(
            f"{RESULTS}/evaluation/throughput.html",
            caption="../report/evaluation_throughput.rst",
            category="Evaluation",
            subcategory="LLM throughput",
        ),
    log:
        "logs/report_evaluation_throughput/evaluation_throughput.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_evaluation_throughput/evaluation_throughput.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_hypotheses:
    input:
        filtered=f"{HYPOTHESES_DIR}/filtered.csv",
        stages=f"{HYPOTHESES_DIR}/stages.csv",
        comparison=f"{HYPOTHESES_DIR}/comparison.csv",
    output:
        filtered=report(
            f"{HYPOTHESES_DIR}/filtered.html",
            caption="../report/hypotheses_filtered.rst",
            category="Hypotheses",
        ),
        stages=report(
            f"{HYPOTHESES_DIR}/stages.html",
            caption="../report/hypotheses_stages.rst",
            category="Hypotheses",
        ),
        comparison=report(
            f"{HYPOTHESES_DIR}/comparison.html",
            caption="../report/hypotheses_comparison.rst",
            category="Hypotheses",
        ),
    log:
        "logs/report_hypotheses/hypotheses.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_hypotheses/hypotheses.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_probe_empathy_variants:
    input:
        variants=f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/variants.csv",
    output:
        variants=report(
            f"{PROBES_DIR}/empathy/{{source}}/{{group_set}}/variants.html",
            caption="../report/probes_empathy_variants.rst",
            category="Probes",
            subcategory="{source} {group_set}",
        ),
    log:
        "logs/report_probe_empathy_variants/{source}/{group_set}.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_probe_empathy_variants/{{source}}/{{group_set}}.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"


rule report_probe_personalization:
    input:
        tests=f"{PROBES_DIR}/personalization/{{source}}/tests.parquet",
    output:
        tests=report(
            f"{PROBES_DIR}/personalization/{{source}}/tests.html",
            caption="../report/probes_personalization.rst",
            category="Probes",
            subcategory="{source}",
        ),
    log:
        "logs/report_probe_personalization/{source}.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_probe_personalization/{{source}}.tsv"
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    shell:
        "splits report-tables --sources {input:q} --pages {output:q} > {log:q} 2>&1"
