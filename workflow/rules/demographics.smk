# Rules of the demographics stage family (docs/method.md 2.4-2.5): per demographic, U_d, D_d and
# group-ness (rule groupness), self-ID search, verification, curve and threshold (rule selfid);
# then thresholds.json and the formula comparison over all demographics (rule selfid_summary).
# With ingest.buckets > 1, rule groupness_bucket counts and scores each posts bucket's seed users,
# rule groupness reduces those users tables (no post read) into the users table and each bucket's
# rows of it, and rule groupness_posts writes each bucket's part of D_d from that bucket's rows
# (a user's percentile and the top-user cut are global, so the part waits for the reduce, but it
# reads its own bucket's users only); rule selfid_bucket finds the self-ID phrases
# in each part, and rule selfid verifies all the parts' matches and makes the curve and threshold.
# The three per-bucket rules serve every demographic in one job per bucket (one process start per
# bucket, not one per demographic and bucket: at P buckets 3P jobs, not 18P; group-ness reads the
# bucket three times for all demographics together), so editing one demographic's seeds or
# phrases re-runs them, and what follows, for all.

if POSTS_BUCKETS > 1:

    rule groupness_bucket:
        input:
            posts=f"{RESULTS}/posts/buckets/{{bucket}}.parquet",
            subreddits=f"{RESULTS}/graph/subreddits.parquet",
        output:
            users=per_demographic("buckets/{bucket}.users.parquet"),
            # the bucket's subreddit names, the same file for each demographic (the reduce of
            # each reads only its own folder)
            subreddits=per_demographic("buckets/{bucket}.subreddits.parquet"),
        log:
            "logs/groupness_bucket/{bucket}.log",
        benchmark:
            f"{RESULTS}/benchmarks/groupness_bucket/{{bucket}}.tsv"
        conda:
            "../../envs/demographics.yaml"
        threads: config["demographics"]["threads"]
        resources:
            mem_mb=4096,
        params:
            demographics=DEMOGRAPHICS_FILE,
            demographic_keys=DEMOGRAPHIC_KEYS,
            demographics_slice=demographics_slice("seed_subreddits"),
        shell:
            "POLARS_MAX_THREADS={threads} splits groupness-bucket --posts {input.posts:q}"
            " --subreddits {input.subreddits:q} --demographics {params.demographics:q}"
            " --demographic {params.demographic_keys:q} --out-users {output.users:q}"
            " --out-subreddits {output.subreddits:q} > {log:q} 2>&1"

    rule groupness:
        input:
            unpack(groupness_bucket_inputs),
            subreddits=f"{RESULTS}/graph/subreddits.parquet",
            bots=demographics_bots_file(),
        output:
            users=f"{RESULTS}/demographics/{{demographic}}/users.parquet",
            # each posts bucket's rows of the users table, for that bucket's D_d part
            parts=users_part_files(),
            report=f"{RESULTS}/demographics/{{demographic}}/groupness_report.json",
            health=f"{RESULTS}/health/groupness_{{demographic}}.json",
        log:
            "logs/groupness/{demographic}.log",
        benchmark:
            f"{RESULTS}/benchmarks/groupness/{{demographic}}.tsv"
        conda:
            "../../envs/demographics.yaml"
        threads: config["demographics"]["threads"]
        resources:
            mem_mb=4096,
        params:
            demographics=DEMOGRAPHICS_FILE,
            demographics_slice=lambda w: demographics_slice(
                "seed_subreddits", demographic=w.demographic
            ),
            settings=settings_json(config, GroupnessSettings),
            bots=lambda wildcards, input: ["--bots", *input.bots] if input.bots else [],
            buckets=groupness_bucket_args,
        shell:
            "POLARS_MAX_THREADS={threads} splits groupness"
            " --subreddits {input.subreddits:q} --demographics {params.demographics:q}"
            " --demographic {wildcards.demographic:q} {params.bots:q}"
            " --out-users {output.users:q} --out-user-parts {output.parts:q}"
            " --out-report {output.report:q} --health {output.health:q}"
            " --settings {params.settings:q} {params.buckets:q} > {log:q} 2>&1"

    rule groupness_posts:
        input:
            posts=f"{RESULTS}/posts/buckets/{{bucket}}.parquet",
            # each demographic's users of this bucket (not its whole users table)
            users=per_demographic("users/{bucket}.parquet"),
            subreddits=f"{RESULTS}/graph/subreddits.parquet",
        output:
            posts=per_demographic("posts/{bucket}.parquet"),
        log:
            "logs/groupness_posts/{bucket}.log",
        benchmark:
            f"{RESULTS}/benchmarks/groupness_posts/{{bucket}}.tsv"
        conda:
            "../../envs/demographics.yaml"
        threads: config["demographics"]["threads"]
        resources:
            mem_mb=4096,
        shell:
            "POLARS_MAX_THREADS={threads} splits groupness-posts --posts {input.posts:q}"
            " --users {input.users:q} --subreddits {input.subreddits:q}"
            " --out {output.posts:q} > {log:q} 2>&1"

    rule selfid_bucket:
        input:
            posts=per_demographic("posts/{bucket}.parquet"),
        output:
            matches=per_demographic("selfid/{bucket}.matches.parquet"),
        log:
            "logs/selfid_bucket/{bucket}.log",
        benchmark:
            f"{RESULTS}/benchmarks/selfid_bucket/{{bucket}}.tsv"
        conda:
            "../../envs/demographics.yaml"
        threads: config["demographics"]["threads"]
        resources:
            mem_mb=4096,
        params:
            demographics=DEMOGRAPHICS_FILE,
            demographic_keys=DEMOGRAPHIC_KEYS,
            demographics_slice=demographics_slice(
                "self_id_phrases", "anti_self_id_phrases"
            ),
            settings=settings_json(config, SelfidFindSettings),
        shell:
            "POLARS_MAX_THREADS={threads} splits selfid find --posts {input.posts:q}"
            " --demographics {params.demographics:q} --demographic {params.demographic_keys:q}"
            " --out {output.matches:q} --settings {params.settings:q} > {log:q} 2>&1"

else:

    rule groupness:
        input:
            posts=posts_files(),
            subreddits=f"{RESULTS}/graph/subreddits.parquet",
            bots=demographics_bots_file(),
        output:
            users=f"{RESULTS}/demographics/{{demographic}}/users.parquet",
            posts=f"{RESULTS}/demographics/{{demographic}}/posts.parquet",
            report=f"{RESULTS}/demographics/{{demographic}}/groupness_report.json",
            health=f"{RESULTS}/health/groupness_{{demographic}}.json",
        log:
            "logs/groupness/{demographic}.log",
        benchmark:
            f"{RESULTS}/benchmarks/groupness/{{demographic}}.tsv"
        conda:
            "../../envs/demographics.yaml"
        threads: config["demographics"]["threads"]
        resources:
            mem_mb=4096,
        params:
            demographics=DEMOGRAPHICS_FILE,
            demographics_slice=lambda w: demographics_slice(
                "seed_subreddits", demographic=w.demographic
            ),
            settings=settings_json(config, GroupnessSettings),
            bots=lambda wildcards, input: ["--bots", *input.bots] if input.bots else [],
        shell:
            "POLARS_MAX_THREADS={threads} splits groupness --posts {input.posts:q}"
            " --subreddits {input.subreddits:q} --demographics {params.demographics:q}"
            " --demographic {wildcards.demographic:q} {params.bots:q}"
            " --out-users {output.users:q} --out-posts {output.posts:q}"
            " --out-report {output.report:q} --health {output.health:q}"
            " --settings {params.settings:q} > {log:q} 2>&1"


rule selfid:
    input:
        unpack(selfid_inputs),
        prompt=selfid_verifier_inputs(),
    output:
        matches=f"{RESULTS}/demographics/{{demographic}}/selfid_matches.parquet",
        curve=f"{RESULTS}/demographics/{{demographic}}/selfid_curve.parquet",
        threshold=f"{RESULTS}/demographics/{{demographic}}/threshold.json",
        comparison=f"{RESULTS}/demographics/{{demographic}}/formula_comparison.parquet",
    log:
        "logs/selfid/{demographic}.log",
    benchmark:
        f"{RESULTS}/benchmarks/selfid/{{demographic}}.tsv"
    conda:
        "../../envs/demographics.yaml"
    threads: config["demographics"]["threads"]
    resources:
        mem_mb=4096,
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=lambda w: demographics_slice(
            "display_name",
            "self_id_phrases",
            "anti_self_id_phrases",
            "threshold",
            demographic=w.demographic,
        ),
        settings=settings_json(config, SelfidSettings),
        source=selfid_source_args,
        verifier_args=selfid_verifier_args(config),
        llm_cache=f"{RESULTS}/llm_cache/selfid_{{demographic}}.sqlite",
    shell:
        "POLARS_MAX_THREADS={threads} splits selfid search --users {input.users:q}"
        " {params.source:q} --demographics {params.demographics:q}"
        " --demographic {wildcards.demographic:q} {params.verifier_args:q}"
        " --llm-cache {params.llm_cache:q} --out-matches {output.matches:q}"
        " --out-curve {output.curve:q} --out-threshold {output.threshold:q}"
        " --out-comparison {output.comparison:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule selfid_summary:
    input:
        thresholds=expand(
            f"{RESULTS}/demographics/{{demographic}}/threshold.json",
            demographic=DEMOGRAPHIC_KEYS,
        ),
        comparisons=expand(
            f"{RESULTS}/demographics/{{demographic}}/formula_comparison.parquet",
            demographic=DEMOGRAPHIC_KEYS,
        ),
        curves=expand(
            f"{RESULTS}/demographics/{{demographic}}/selfid_curve.parquet",
            demographic=DEMOGRAPHIC_KEYS,
        ),
    output:
        thresholds=f"{RESULTS}/demographics/thresholds.json",
        csv=f"{RESULTS}/demographics/formula_comparison.csv",
        md=f"{RESULTS}/demographics/formula_comparison.md",
        health=f"{RESULTS}/health/selfid.json",
        # every demographic's curve drawn here, in one process: matplotlib's start (~0.5 CPU s)
        # once per run, not once per demographic
        plots=[
            report(
                f"{RESULTS}/demographics/{key}/selfid_curve.png",
                caption="../report/selfid_curve.rst",
                category="Demographics",
                subcategory="Self-identification curves",
                labels={"demographic": key},
            )
            for key in DEMOGRAPHIC_KEYS
        ],
    log:
        "logs/selfid_summary/selfid_summary.log",
    benchmark:
        f"{RESULTS}/benchmarks/selfid_summary/selfid_summary.tsv"
    conda:
        "../../envs/demographics.yaml"
    threads: 1
    resources:
        mem_mb=1024,
    params:
        demographics=DEMOGRAPHICS_FILE,
        demographics_slice=demographics_slice("display_name"),
    shell:
        "splits selfid summary --thresholds {input.thresholds:q}"
        " --comparisons {input.comparisons:q} --out-thresholds {output.thresholds:q}"
        " --out-csv {output.csv:q} --out-md {output.md:q} --health {output.health:q}"
        " --curves {input.curves:q} --demographics {params.demographics:q}"
        " --out-plots {output.plots:q} > {log:q} 2>&1"
