# Targets and input functions of the rule files. The config was checked when the Snakefile
# started (splits.pipeline.start); the lists of paths and arguments come from splits.pipeline.targets.

import json
import re
from pathlib import Path

from splits.config.definitions import DEMOGRAPHICS_GROUP_SET, PATH_NAME
from splits.config.settings import settings_json
from splits.errors import ConfigError
from splits.graph.settings import (
    GraphBucketSettings,
    GraphOverlapsSettings,
    GraphSettings,
    GraphTopSettings,
)
from splits.evaluation.settings import CMSettings, GroupSplitsSettings, MetricsSettings
from splits.evaluation.settings import SubsampleSettings
from splits.release_data.settings import ReleaseDataSettings
from splits.topics.settings import (
    GenerateTopicsSettings,
    TopicMergeSettings,
    TopicShardScoreSettings,
    TopicShardsSettings,
    TopicShardStatsSettings,
)
from splits.demographics.settings import (
    GroupnessSettings,
    SelfidFindSettings,
    SelfidSettings,
)
from splits.sampling.settings import ExportSettings, SampleSettings
from splits.hypotheses.settings import (
    FightingWordsSettings,
    FileSettings,
    GenerateSettings,
    LiftSettings,
    ReportSettings,
    SampleSettings as HypothesesSampleSettings,
    TableSettings,
    TheoriesSettings,
    TrivialitySettings,
)
from splits.ingest.settings import IngestBucketsSettings, IngestSettings, SynthSettings
from splits.config.definitions import load_demographics, load_group_sets, load_topics
from splits.pipeline.start import stop_on_config_error
from splits.privacy import salt_fingerprint_for_jobs
from splits.llm.backends import capability
from splits.llm.registry import gpu_resources
from splits.pipeline.targets import (
    EVALUATION_ROWS,
    HYPOTHESIS_SET,
)
from splits.pipeline.targets import (
    backend,
    evaluation_batch_reports,
    evaluation_cm_plan,
)
from splits.pipeline.targets import evaluation_groups_json, evaluation_model_args
from splits.pipeline.targets import evaluation_ordered_groups_json, evaluation_tm_plan
from splits.pipeline.targets import (
    evaluation_tm_prompt_args,
    evaluation_tm_settings,
    experiment_rows,
    final_targets,
)
from splits.pipeline.targets import hypotheses_encoder_args, hypotheses_model_args
from splits.pipeline.targets import (
    hypotheses_theory_args,
    hypothesis_model_sets,
    hypothesis_sets,
    in_batch_job,
)
from splits.pipeline.targets import (
    ingest_shards,
    model_spec_json,
    probe_grasp_column_args,
)
from splits.pipeline.targets import probe_judge_args, probe_reference_data
from splits.pipeline.targets import probes_reference_targets, rows_file
from splits.pipeline.targets import selfid_verifier_args, synth_corpus_outputs
from splits.pipeline.targets import theories_file

RESULTS = config["outdir"]
DEMOGRAPHICS = load_demographics(config["demographics"]["file"])
TOPICS = load_topics(config["topics"]["file"])
DEMOGRAPHIC_KEYS = [d.key for d in DEMOGRAPHICS]
DEMOGRAPHICS_FILE = config["demographics"]["file"]
SEED = config["seed"]
SYNTH = config["synth"]
SAMPLE_DIR = f"{RESULTS}/sample"
INGEST_SHARDS = ingest_shards(config)
TOPIC_SHARDS = f"{RESULTS}/topics/shards/posts"
TOPIC_STATS = f"{RESULTS}/topics/shards/stats"
TOPIC_HITS = f"{RESULTS}/topics/shards/hits"
EXPORT_SALT_FINGERPRINT = salt_fingerprint_for_jobs(
    config["export"]["salt_env"], config["export"]["salt"]
)
PROBES = config["probes"]
PROBES_DIR = f"{RESULTS}/probes"
EMPATHY = PROBES["empathy"]
# the empathy probe's group sets: the demographics, or sets of the group sets file
EMPATHY_SETS = {"topics": EMPATHY["group_sets"], "envent": EMPATHY["envent_group_sets"]}
EMPATHY_GROUP_SETS = (
    load_group_sets(EMPATHY["group_sets_file"])
    if any(s != DEMOGRAPHICS_GROUP_SET for sets in EMPATHY_SETS.values() for s in sets)
    else {}
)
HYPOTHESES = config["hypotheses"]
HYPOTHESES_DIR = f"{RESULTS}/hypotheses"
RELEASE_DATA = config["release_data"]
# the topic posts every later stage reads: the topic splits', or the authors' released posts
TOPIC_POSTS = (
    f"{RESULTS}/release_data/topic_posts.parquet"
    if RELEASE_DATA["path"]
    else f"{RESULTS}/topics/topic_posts.parquet"
)


wildcard_constraints:
    demographic="|".join(re.escape(key) for key in DEMOGRAPHIC_KEYS),
    shard=r"[A-Za-z0-9_.\-]+",
    bucket=r"\d+",


def demographics_slice(*fields, demographic=None):
    """The part of the demographics file a rule reads, as canonical JSON, for that rule's params.

    Rules pass the file's path as a param (not an input) and this slice as another param, so that
    editing one demographic's threshold re-runs only what reads that threshold."""
    chosen = [d for d in DEMOGRAPHICS if demographic is None or d.key == demographic]
    return json.dumps(
        [{"key": d.key, **{f: getattr(d, f) for f in fields}} for d in chosen],
        sort_keys=True,
    )


# --- ingest, demographics, topics ------------------------------------------------------------


def ingest_input(wildcards):
    return INGEST_SHARDS[wildcards.shard]


def ingest_shard_files(kind):
    ext = "parquet" if kind == "posts" else "report.json"
    return [f"{RESULTS}/posts/shards/{name}.{ext}" for name in INGEST_SHARDS]


# the posts table's buckets by author (ingest.buckets); the graph's user buckets are the same
POSTS_BUCKETS = config["ingest"]["buckets"]


def posts_files():
    """The cleaned posts table, which downstream rules take as input: one Parquet file, or
    the P bucket files of ingest.buckets > 1 (readers scan the list)."""
    if POSTS_BUCKETS == 1:
        return [f"{RESULTS}/posts/posts.parquet"]
    return posts_bucket_files("parquet")


def posts_bucket_files(ext):
    """Every posts bucket's table (ext parquet) or report (ext report.json)."""
    return [f"{RESULTS}/posts/buckets/{b}.{ext}" for b in range(POSTS_BUCKETS)]


def ingest_bucket_outputs():
    """The bucket files of one shard ({shard} wildcard), as rule ingest writes them."""
    return [
        f"{RESULTS}/posts/shards/{{shard}}/{b}.parquet" for b in range(POSTS_BUCKETS)
    ]


def shard_bucket_files(wildcards):
    """Bucket {bucket} of every ingest shard, in shard order (the merge's first-occurrence
    order)."""
    return [
        f"{RESULTS}/posts/shards/{name}/{wildcards.bucket}.parquet"
        for name in INGEST_SHARDS
    ]


# --- graph ------------------------------------------------------------------------------------
GRAPH_BUCKETS = POSTS_BUCKETS


def graph_bucket_files(name):
    """``name`` (counts.parquet, overlaps.parquet, ...) of every user bucket of the graph."""
    return [f"{RESULTS}/graph/buckets/{b}/{name}" for b in range(GRAPH_BUCKETS)]


def graph_inputs(wildcards):
    """The graph's inputs: the posts (one job), or the buckets' subreddit table, co-membership
    counts and their stats (the reduce of ingest.buckets > 1)."""
    if GRAPH_BUCKETS == 1:
        return {"posts": posts_files()}
    return {
        "subreddits": f"{RESULTS}/graph/buckets/subreddits.parquet",
        "overlaps": graph_bucket_files("overlaps.parquet"),
        "stats": graph_bucket_files("overlaps.json"),
    }


def graph_input_args(wildcards, input):
    if GRAPH_BUCKETS == 1:
        return ["--posts", *input.posts]
    return [
        "--subreddits", input.subreddits,
        "--overlaps", *input.overlaps,
        "--bucket-stats", *input.stats,
    ]  # fmt: skip


def per_demographic(name):
    """One file per demographic, ``results/demographics/<key>/<name>``, in DEMOGRAPHIC_KEYS'
    order (what the per-bucket rules, one job for every demographic, read and write); ``name``
    may hold the rule's ``{bucket}`` wildcard."""
    return [f"{RESULTS}/demographics/{key}/{name}" for key in DEMOGRAPHIC_KEYS]


def groupness_bucket_inputs(wildcards):
    """ingest.buckets > 1: every posts bucket's seed-user table and subreddit names of the
    demographic (rule groupness_bucket), which rule groupness reduces."""
    folder = f"{RESULTS}/demographics/{wildcards.demographic}/buckets"
    return {
        f"bucket_{kind}": [f"{folder}/{b}.{kind}.parquet" for b in range(POSTS_BUCKETS)]
        for kind in ("users", "subreddits")
    }


def users_part_files():
    """ingest.buckets > 1: the demographic's users table in P parts, one per posts bucket
    (rule groupness writes them, rule groupness_posts reads its bucket's)."""
    return [
        f"{RESULTS}/demographics/{{demographic}}/users/{b}.parquet"
        for b in range(POSTS_BUCKETS)
    ]


def groupness_bucket_args(wildcards, input):
    return [
        "--bucket-users", *input.bucket_users,
        "--bucket-subreddits", *input.bucket_subreddits,
    ]  # fmt: skip


def demographics_bots_file():
    """The known-bot list as an input (so editing it re-runs group-ness); [] when the
    configured file does not exist (AutoModerator and [deleted] are always dropped)."""
    path = config["demographics"]["bots_file"]
    return [path] if Path(path).exists() else []


def selfid_verifier_inputs():
    """The LLM verifier's prompt file, only when the LLM verifier is configured."""
    if config["demographics"]["verifier"] == "llm":
        return [config["demographics"]["verifier_prompt"]]
    return []


def sampling_members_inputs(wildcards):
    """Who belongs to each group, for the sampling's dual members: the groups' users and
    thresholds; none with the authors' released posts (their authors per group are the members).
    """
    if RELEASE_DATA["path"]:
        return {}
    return {
        "users": demographic_users_files(),
        "thresholds": f"{RESULTS}/demographics/thresholds.json",
    }


def sampling_members_args(wildcards, input):
    if not hasattr(input, "users"):
        return ["--members-from-topic-posts"]
    return ["--users", *input.users, "--thresholds", input.thresholds]


def sweep_sample_settings(wildcards):
    """The sampling settings of a sweep dataset (evaluation_sweep_dataset): sampling.k replaced
    by the dataset's k, so that changing sampling.k re-runs none of them."""
    values = json.loads(settings_json(config, SampleSettings))
    return json.dumps(
        {**values, "k": int(wildcards.k)}, sort_keys=True, separators=(",", ":")
    )


def demographic_users_files():
    """U_d of every demographic (group-ness percentiles: the sampling's dual members)."""
    return [f"{RESULTS}/demographics/{key}/users.parquet" for key in DEMOGRAPHIC_KEYS]


def demographic_posts_of(key):
    """D_d of one demographic: one file, or with ingest.buckets > 1 one part per posts bucket
    (rule groupness_posts; readers scan the list)."""
    if POSTS_BUCKETS == 1:
        return [f"{RESULTS}/demographics/{key}/posts.parquet"]
    return [
        f"{RESULTS}/demographics/{key}/posts/{b}.parquet" for b in range(POSTS_BUCKETS)
    ]


def selfid_inputs(wildcards):
    """Rule selfid's users table and what it searches: D_d itself, or with ingest.buckets > 1
    the phrase matches of each of its parts (rule selfid_bucket) with the users table's parts
    (rule groupness), bucket by bucket."""
    folder = f"{RESULTS}/demographics/{wildcards.demographic}"
    users = f"{folder}/users.parquet"
    if POSTS_BUCKETS == 1:
        return {"users": users, "posts": demographic_posts_of(wildcards.demographic)}
    matches = [f"{folder}/selfid/{b}.matches.parquet" for b in range(POSTS_BUCKETS)]
    user_parts = [f"{folder}/users/{b}.parquet" for b in range(POSTS_BUCKETS)]
    return {"users": users, "matches": matches, "user_parts": user_parts}


def selfid_source_args(wildcards, input):
    if POSTS_BUCKETS == 1:
        return ["--posts", *input.posts]
    return ["--matches", *input.matches, "--user-parts", *input.user_parts]


def demographic_posts_files():
    """D_d of every demographic, its parts together (the topic-splits CLI reads the key from
    the folder names: .../<key>/posts.parquet or .../<key>/posts/<bucket>.parquet)."""
    return [path for key in DEMOGRAPHIC_KEYS for path in demographic_posts_of(key)]


# With ingest.buckets > 1 the cut runs once per posts bucket, not once over the whole union (its
# time grew with the corpus, on the critical path): a bucket holds its authors' posts in every
# demographic's D_d, so the buckets' unions together are the union, each post once. Bucket b's
# shards go to their own folder, so a shard is named <bucket>/<00000> and the per-shard rules'
# paths hold both wildcards (TOPIC_SHARD); with P = 1 the paths are the one cut's, as before.
TOPIC_SHARD = "{shard}" if POSTS_BUCKETS == 1 else "{bucket}/{shard}"
TOPIC_SHARDS_OUT = TOPIC_SHARDS if POSTS_BUCKETS == 1 else f"{TOPIC_SHARDS}/{{bucket}}"
# the name of a cut job's log and benchmark file
TOPIC_SHARDS_JOB = "topic_shards" if POSTS_BUCKETS == 1 else "{bucket}"


def topic_shards_posts(wildcards):
    """The D_d files one topic_shards job reads: every part, or bucket b's part of each
    demographic (the job of bucket b)."""
    if POSTS_BUCKETS == 1:
        return demographic_posts_files()
    return [
        f"{RESULTS}/demographics/{key}/posts/{wildcards.bucket}.parquet"
        for key in DEMOGRAPHIC_KEYS
    ]


def topic_shards_part_args(wildcards):
    """A bucket's cut may find no post at or above the thresholds (it writes no shard); the
    run stops only if every bucket finds none (topic_global_stats then gets no shard).
    """
    return [] if POSTS_BUCKETS == 1 else ["--allow-empty"]


def topic_shard_folders():
    """Every bucket's topic_shards folder, an input of the rules that gather the shards
    (topic_global_stats, topic_splits): topic_shard_outputs waits for one bucket's checkpoint at
    a time (the first one not done), so without these Snakemake would run the buckets' cuts one
    after another. None with P = 1."""
    if POSTS_BUCKETS == 1:
        return []
    return expand(TOPIC_SHARDS_OUT, bucket=range(POSTS_BUCKETS))


def topic_shard_outputs(pattern):
    """Input function: ``pattern`` (TOPIC_SHARD's wildcards) for every shard the topic_shards
    checkpoint wrote, in shard order; with posts buckets every bucket's shards, bucket by bucket
    in bucket order (the union's order: the vocabulary's order of first appearance, behind the
    mean idf, follows it)."""

    def shard_names(folder):
        return sorted(glob_wildcards(f"{folder}/{{shard}}.parquet").shard)

    def inputs(wildcards):
        if POSTS_BUCKETS == 1:
            folder = checkpoints.topic_shards.get().output[0]
            return expand(pattern, shard=shard_names(folder))
        paths = []
        for b in range(POSTS_BUCKETS):
            folder = checkpoints.topic_shards.get(bucket=b).output[0]
            paths += expand(pattern, bucket=b, shard=shard_names(folder))
        return paths

    return inputs


def topic_shard_mem_mb(wildcards, attempt):
    """Per-shard jobs hold one shard's texts and its tokens: a few times topics.shard_mb."""
    return int((1024 + 4 * config["topics"]["shard_mb"]) * attempt)


def topic_merge_mem_mb(wildcards, attempt):
    """The merge holds the top K of every (demographic, topic), twice while folding a shard in,
    and the kept posts' texts."""
    rows = config["topics"]["top_k"] * len(TOPICS) * len(DEMOGRAPHIC_KEYS)
    return int((1024 + rows * 2000 / 2**20) * attempt)


def generate_topics_model_spec(wildcards):
    """One-entry registry (JSON) of topics.generate.model (a target outside the default run)."""
    name = config["topics"]["generate"]["model"]
    with stop_on_config_error():
        if not name:
            raise ConfigError(
                "topics.generate.model: set a registry model to generate topics"
            )
    return json.dumps({name: config["models"][name]}, sort_keys=True)


# --- evaluation ------------------------------------------------------------------------------
# One batch job per LLM and role (TM, CM) runs every prompt of that model across experiments,
# TMs and ks through one engine (splits model-batch); the per-row jobs read the answers from
# the model's cache. The batch jobs are checkpoints and the per-row jobs take their report as an
# ancient input: when a batch job re-runs (a new k, a new TM for a CM), Snakemake re-evaluates
# the DAG after it and runs only the per-row jobs that are new or changed, not every job of the
# model (a plain ancient input would hide the new jobs too).


def _experiment(name):
    return config["evaluation"]["experiments"][name]


def evaluation_dataset():
    return config["evaluation"]["dataset"] or f"{RESULTS}/dataset/quadruplets.parquet"


def evaluation_subsample_dataset(wildcards):
    """The quadruplets a rows id draws from: the evaluation dataset, or the sweep dataset of
    calibration size K for "<N>-k<K>"."""
    _, _, sweep_k = wildcards.rows.partition("-k")
    if sweep_k:
        return f"{RESULTS}/evaluation/datasets/k-{sweep_k}/quadruplets.parquet"
    return evaluation_dataset()


def evaluation_rows_count(wildcards):
    return wildcards.rows.partition("-k")[0]


def evaluation_tm_prompt(wildcards):
    """The TM's prompt template as an input ([] for TMs that take none: builtin, python,
    precomputed)."""
    if not capability(config["models"], wildcards.tm, "prompted"):
        return []
    evaluation = config["evaluation"]
    return [evaluation["tm_prompts"].get(wildcards.tm, evaluation["tm_prompt"])]


def evaluation_cm_prompt(wildcards):
    evaluation = config["evaluation"]
    return evaluation["cm_prompts"].get(wildcards.cm, evaluation["cm_prompt"])


def evaluation_tm_files(wildcards):
    """Files a TM reads besides the rows: a precomputed TM's theories, a python TM's .py file
    (inputs, so that editing them re-runs the TM's jobs)."""
    spec = config["models"][wildcards.tm]
    if spec["backend"] == "precomputed":
        return [spec["theories"]]
    if spec["backend"] == "python" and spec.get("function"):
        source = str(spec["function"]).rpartition(":")[0]
        return [source] if source.endswith(".py") else []
    return []


def evaluation_gpus(model):
    """GPUs of a job running ``model`` (the Slurm profile's ``gpu`` resource)."""
    return gpu_resources(model, config["models"])["gpu"]


def evaluation_slurm_extra(model):
    """The model's own ``slurm_extra`` (the ``gpu`` resource already requests the GPUs)."""
    return config["models"][model].get("slurm_extra") or ""


def evaluation_tm_batch_inputs(wildcards):
    return sorted({item["rows"] for item in evaluation_tm_plan(config, wildcards.tm)})


def evaluation_cm_batch_inputs(wildcards):
    plan = evaluation_cm_plan(config, wildcards.cm)
    return {
        "rows": sorted({item["rows"] for item in plan}),
        "theories": sorted({item["theories"] for item in plan}),
    }


def evaluation_tm_batch_done(wildcards):
    """The TM batch report of an LLM or python TM (ancient: see above); [] for the others."""
    if not in_batch_job(config, wildcards.tm):
        return []
    return ancient(checkpoints.evaluation_tm_batch.get(tm=wildcards.tm).output.report)


def evaluation_cm_batch_done(wildcards):
    """The CM batch report of an LLM CM (ancient: see above); [] for builtin CMs."""
    if not in_batch_job(config, wildcards.cm):
        return []
    return ancient(checkpoints.evaluation_cm_batch.get(cm=wildcards.cm).output.report)


def evaluation_group_theories(wildcards):
    """The theories of the TMs of an experiment's groups, at each of its ks."""
    experiment = _experiment(wildcards.experiment)
    groups = experiment.get("groups", {})
    tms = sorted({tm for members in groups.values() for tm in members})
    rows = experiment_rows(config, wildcards.experiment)
    return [theories_file(config, rows, tm, k) for tm in tms for k in experiment["ks"]]


def evaluation_experiment_rows(wildcards):
    return rows_file(config, experiment_rows(config, wildcards.experiment))


def evaluation_experiment_predictions(wildcards):
    experiment = _experiment(wildcards.experiment)
    return expand(
        f"{RESULTS}/evaluation/predictions/rows-{{rows}}/{{tm}}/k-{{k}}/{{cm}}.parquet",
        rows=experiment_rows(config, wildcards.experiment),
        tm=experiment["tms"],
        k=experiment["ks"],
        cm=experiment["cms"],
    )


# --- probes ----------------------------------------------------------------------------------


def probe_data(probe):
    """Input function: the topic posts, or the reference files of a reference source."""

    def inputs(wildcards):
        if wildcards.source == "topics":
            return [TOPIC_POSTS]
        return probe_reference_data(config, wildcards.source)

    return inputs


def probe_data_arg(wildcards, input):
    if wildcards.source == "topics":
        return input.data[0]
    return str(Path(input.data[0]).parent)


def probe_empathy_inputs(wildcards):
    variant = EMPATHY["variants"][wildcards.variant]
    return {
        "data": probe_data("empathy")(wildcards),
        "system_prompt": variant["system_prompt"],
        "prompt": variant["prompt"],
    }


def probe_empathy_group_slice(wildcards):
    """The group set a job asks about, as canonical JSON (a param: editing one set re-runs only
    the jobs of that set)."""
    if wildcards.group_set == DEMOGRAPHICS_GROUP_SET:
        return ""
    return json.dumps(EMPATHY_GROUP_SETS[wildcards.group_set], sort_keys=True)


def probe_empathy_variant_summaries(wildcards):
    base = f"{PROBES_DIR}/empathy/{wildcards.source}/{wildcards.group_set}"
    return [f"{base}/{variant}/summary.json" for variant in EMPATHY["variants"]]


def probes_reference_inputs(wildcards):
    with stop_on_config_error():
        return probes_reference_targets(config, EMPATHY_SETS)


def probe_grasp_inputs(wildcards):
    if wildcards.name == "stress_topics":
        return {
            "ratings": [f"{PROBES_DIR}/stress/topics/ratings.parquet"],
            "raters": [f"{PROBES_DIR}/stress/topics/raters.parquet"],
        }
    if wildcards.name == "dices":
        return {"ratings": probe_reference_data(config, "dices"), "raters": []}
    spec = PROBES["grasp"]["inputs"][wildcards.name]
    return {"ratings": spec["ratings"], "raters": spec.get("raters", [])}


def probe_grasp_judge_kinds(wildcards):
    """JSON {model: builtin|llm} of the experiment's TMs and CMs (the tm_kind/cm_kind
    attributes)."""
    experiment = _experiment(wildcards.experiment)
    models = sorted(set(experiment["tms"]) | set(experiment["cms"]))
    kinds = {m: "builtin" if backend(config, m) == "builtin" else "llm" for m in models}
    return json.dumps(kinds, sort_keys=True)


def probe_judge_prompt():
    """The rewrite judge's prompt file (an input only when a judge model is set)."""
    if not PROBES["personalization"]["judge_model"]:
        return []
    return [PROBES["personalization"]["judge_prompt"]]


def probe_task_prompts():
    return [t["prompt"] for t in PROBES["personalization"]["tasks"]]


# --- hypotheses ------------------------------------------------------------------------------


def hypotheses_set_files(kind):
    """The per-set outputs of every set: kind is sets, lift, matches or triviality."""
    return [
        f"{HYPOTHESES_DIR}/{kind}/{name}.parquet" for name in hypothesis_sets(config)
    ]


def hypotheses_model_set_files():
    """The model sets (theories, LLM generator): the counting baseline takes their lexicon sizes."""
    return [
        f"{HYPOTHESES_DIR}/sets/{name}.parquet"
        for name in hypothesis_model_sets(config)
    ]


def hypotheses_threads_input():
    """The merged posts table, whose conversation_id are the threads of the held-out split; none
    with release_data.path (the released posts carry no thread: each post is its own).
    """
    return [] if RELEASE_DATA["path"] else posts_files()


def hypotheses_threads_args(wildcards, input):
    return ["--posts", *input.threads] if input.threads else []


def release_data_input():
    """The local copy as an input (a folder), none for the hub cache (ecaplan/splits)."""
    path = RELEASE_DATA["path"]
    return [path] if path and Path(path).exists() else []


def hypotheses_vocab_input():
    vocab = HYPOTHESES["retrieval"]["vocab"]
    return (
        [vocab] if HYPOTHESES["retrieval"]["analyzer"] == "wordpiece" and vocab else []
    )


def hypotheses_identity_input():
    """The identity-words file as an input ([]: they come from the demographics file)."""
    path = HYPOTHESES["identity_words"]
    return [path] if path else []


def hypotheses_identity_args(wildcards, input):
    return ["--identity-words", input.identity[0]] if input.identity else []


def hypotheses_theories_input(wildcards):
    rows = experiment_rows(config, wildcards.experiment)
    return theories_file(config, rows, wildcards.tm, wildcards.k)


def hypotheses_theory_prompt(wildcards):
    if backend(config, wildcards.tm) == "builtin":
        return []
    return [HYPOTHESES["theory_prompt"]]


def hypotheses_encoder_gpus():
    name = HYPOTHESES["encoder"]
    if name not in config["models"] or backend(config, name) == "builtin":
        return 0
    return evaluation_gpus(name)


# served mode (llm.serve): where the run's model servers keep their endpoints, logs and locks
LLM_SERVERS_DIR = f"{RESULTS}/llm/servers"
