# Shared setup: config validation (one-line errors naming the key), definition files, paths and
# input functions. Stage rule files stay thin and call the functions defined here.

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from splits.config import (  # noqa: E402
    DEMOGRAPHICS_GROUP_SET,
    ConfigError,
    check_evaluation,
    check_hypotheses,
    check_prompt_templates,
    load_demographics,
    load_group_sets,
    load_topics,
    sweep_calibration_size,
    validate_config,
    validate_probes,
)

try:
    validate_config(config)
    validate_probes(config)
    check_hypotheses(config)
    check_evaluation(config)
    DEMOGRAPHICS = load_demographics(config["demographics"]["file"])
    TOPICS = load_topics(config["topics"]["file"])
    check_prompt_templates(config)
except ConfigError as err:
    sys.exit(f"config error: {err}")

RESULTS = "results"
DEMOGRAPHIC_KEYS = [d.key for d in DEMOGRAPHICS]
SEED = config["seed"]
DEMOGRAPHICS_FILE = config["demographics"]["file"]


def demographics_slice(*fields, demographic=None):
    """The part of the demographics file a rule reads, as canonical JSON, for that rule's params.

    Rules pass the file's path as a param (not an input) and this slice as another param, so that
    editing one demographic's threshold re-runs only what reads that threshold."""
    chosen = [d for d in DEMOGRAPHICS if demographic is None or d.key == demographic]
    return json.dumps(
        [{"key": d.key, **{f: getattr(d, f) for f in fields}} for d in chosen],
        sort_keys=True,
    )


wildcard_constraints:
    demographic="|".join(DEMOGRAPHIC_KEYS),
    shard=r"[A-Za-z0-9_.\-]+",


# ---------------------------------------------------------------------------------------------
# final targets: one function per stage family, gathered by rule all.
# Each stage's section below owns its own target function; keep them in this order.
# ---------------------------------------------------------------------------------------------


def final_targets():
    return (
        ingest_targets()
        + graph_targets()
        + demographics_targets()
        + topics_targets()
        + sampling_targets()
        + evaluation_targets()
        + probes_targets()
        + hypotheses_targets()
    )


# --- ingest ----------------------------------------------------------------------------------

SYNTH = config["synth"]
SAMPLE_DIR = f"{RESULTS}/sample"
SAMPLE_CORPUS = f"{SAMPLE_DIR}/corpus"


def synth_corpus_outputs():
    """What `splits synth` writes under results/sample/corpus, by shard name."""
    n = SYNTH["shards"]
    if SYNTH["format"] == "convokit":
        return {f"sample-{i}": f"{SAMPLE_CORPUS}/sample-{i}" for i in range(n)}
    suffix = ".ndjson.zst" if SYNTH["compress"] else ".ndjson"
    out = {}
    for i in range(n):
        for prefix in ("RS", "RC"):
            out[f"{prefix}_sample-{i}"] = f"{SAMPLE_CORPUS}/{prefix}_sample-{i}{suffix}"
    return out


def synth_plant_args():
    """The value of --plant-group-difference, followed by --planted-topic options when
    synth.planted_topics limits the planted difference to some topics (kept in one param so
    that configs without it keep their params and do not re-run the generator)."""
    import shlex

    plant = str(SYNTH["plant_group_difference"]).lower()
    topics = SYNTH["planted_topics"]
    if topics is None:
        return plant
    return " ".join([plant, *(f"--planted-topic {shlex.quote(t)}" for t in topics)])


def _ingest_shards():
    """Shard name -> input path (the generated corpus, or ingest.inputs)."""
    if SYNTH["enabled"]:
        return synth_corpus_outputs()
    from splits.ingest import shard_names

    inputs = config["ingest"]["inputs"]
    if not inputs:
        sys.exit("config error: ingest.inputs: empty while synth.enabled is false")
    for path in inputs:
        if not Path(path).exists():
            sys.exit(f"config error: ingest.inputs: input {path} does not exist")
    return shard_names(inputs)


try:
    INGEST_SHARDS = _ingest_shards()
except ConfigError as err:
    sys.exit(f"config error: {err}")


def ingest_input(wildcards):
    return INGEST_SHARDS[wildcards.shard]


def ingest_shard_files(kind):
    ext = "parquet" if kind == "posts" else "report.json"
    return [f"{RESULTS}/posts/shards/{name}.{ext}" for name in INGEST_SHARDS]


def posts_files():
    """The cleaned posts table (one Parquet file); downstream rules take it as input."""
    return [f"{RESULTS}/posts/posts.parquet"]


def ingest_targets():
    return posts_files() + [f"{RESULTS}/posts/ingest_report.json"]


# --- graph -----------------------------------------------------------------------------------


def graph_targets():
    return [
        f"{RESULTS}/graph/subreddits.parquet",
        f"{RESULTS}/graph/neighbours.parquet",
        f"{RESULTS}/graph/summary.json",
    ]


# --- demographics ----------------------------------------------------------------------------


def demographics_targets():
    return [
        f"{RESULTS}/demographics/thresholds.json",
        f"{RESULTS}/demographics/formula_comparison.md",
    ] + expand(
        f"{RESULTS}/demographics/{{demographic}}/selfid_curve.png",
        demographic=DEMOGRAPHIC_KEYS,
    )


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


def selfid_verifier_args():
    """Command-line flags of the LLM verifier: the model's registry entry goes in as JSON, so
    changing that model's spec re-runs the stage (it is a param)."""
    demo = config["demographics"]
    if demo["verifier"] != "llm":
        return ""
    name = demo["verifier_model"]
    if not name or name not in config["models"]:
        sys.exit(
            f"config error: demographics.verifier_model: {name!r} is not a model of the models registry"
        )
    import json
    import shlex

    registry = json.dumps({name: config["models"][name]}, sort_keys=True)
    return (
        f"--verifier-model {shlex.quote(name)} --models-json {shlex.quote(registry)} "
        f"--prompt {shlex.quote(demo['verifier_prompt'])}"
    )


# --- topics ----------------------------------------------------------------------------------


def topics_targets():
    return [
        f"{RESULTS}/topics/topics.parquet",
        f"{RESULTS}/topics/topic_posts.parquet",
        f"{RESULTS}/topics/topic_counts.csv",
    ]


def demographic_posts_files():
    """D_d of every demographic (the topic-splits CLI reads the key from the folder name)."""
    return [f"{RESULTS}/demographics/{key}/posts.parquet" for key in DEMOGRAPHIC_KEYS]


TOPIC_SHARDS = f"{RESULTS}/topics/shards/posts"
TOPIC_STATS = f"{RESULTS}/topics/shards/stats"
TOPIC_HITS = f"{RESULTS}/topics/shards/hits"


def topic_shard_outputs(pattern):
    """Input function: ``pattern`` ({shard} wildcard) for every shard the topic_shards
    checkpoint wrote, in shard order."""

    def inputs(wildcards):
        folder = checkpoints.topic_shards.get().output[0]
        names = sorted(glob_wildcards(f"{folder}/{{shard}}.parquet").shard)
        return expand(pattern, shard=names)

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
    """One-entry registry (JSON) of the model of topics.generate.model, for generate-topics."""
    import json

    name = config["topics"]["generate"]["model"]
    if not name:
        raise ValueError(
            "topics.generate.model: set a registry model to generate topics"
        )
    if name not in config["models"]:
        raise ValueError(
            f"topics.generate.model: {name!r} is not in the models registry"
        )
    return json.dumps({name: config["models"][name]}, sort_keys=True)


def generate_topics_categories_arg():
    categories = config["topics"]["generate"]["categories"]
    if not categories:
        return ""
    import shlex

    return "--categories " + " ".join(shlex.quote(c) for c in categories)


# --- sampling and export ---------------------------------------------------------------------


def sampling_targets():
    return [
        f"{RESULTS}/dataset/quadruplets.parquet",
        f"{RESULTS}/dataset/export/README.md",
    ]


def export_salt_fingerprint():
    """Makes the export re-run when the salt changes, without the salt in params or logs.

    A config ``export.salt`` is handed to the job through the environment variable
    ``export.salt_env`` when that variable is unset (the variable wins)."""
    import hashlib
    import os

    env_name = config["export"]["salt_env"]
    if not os.environ.get(env_name) and config["export"]["salt"]:
        os.environ[env_name] = config["export"]["salt"]
    salt = os.environ.get(env_name, "")
    if not salt:
        return "development-salt"
    return hashlib.sha256(f"splits-export-salt:{salt}".encode()).hexdigest()[:12]


EXPORT_SALT_FINGERPRINT = export_salt_fingerprint()


# --- evaluation ------------------------------------------------------------------------------


EVALUATION_MODEL_NAME = r"[A-Za-z0-9_.\-]+"
# the rows an experiment evaluates on: "<N>" (or "all") rows of the dataset, or "<N>-k<K>" rows of
# the dataset sampled with calibration size K for an experiment whose largest k exceeds
# sampling.k (evaluation_sweep_dataset)
EVALUATION_ROWS = r"(?:\d+|all)(?:-k\d+)?"
EVALUATION_PLOTS = (
    "accuracy_vs_k",
    "tm_cm_heatmap",
    "by_pair",
    "by_demographic",
    "by_category",
)


def _evaluation_check():
    """Experiments must name registry models whose names fit in a path; one-line errors."""
    import re

    evaluation = config["evaluation"]
    for name, experiment in evaluation["experiments"].items():
        if not re.fullmatch(EVALUATION_MODEL_NAME, name):
            sys.exit(
                f"config error: evaluation.experiments.{name}: name must match {EVALUATION_MODEL_NAME}"
            )
        for axis in ("tms", "cms"):
            for model in experiment[axis]:
                if model not in config["models"]:
                    sys.exit(
                        f"config error: evaluation.experiments.{name}.{axis}: {model!r} is not a model of the models registry"
                    )
                if not re.fullmatch(EVALUATION_MODEL_NAME, model):
                    sys.exit(
                        f"config error: models.{model}: a model used by the evaluation needs a name matching {EVALUATION_MODEL_NAME}"
                    )
        for group, members in experiment.get("groups", {}).items():
            for model in members:
                if model not in experiment["tms"]:
                    sys.exit(
                        f"config error: evaluation.experiments.{name}.groups.{group}: {model!r} is not one of the experiment's tms"
                    )
    for key in ("tm_prompts", "cm_prompts"):
        for model in evaluation[key]:
            if model not in config["models"]:
                sys.exit(
                    f"config error: evaluation.{key}.{model}: not a model of the models registry"
                )


_evaluation_check()


def _experiment(name):
    return config["evaluation"]["experiments"][name]


def _experiment_rows(experiment):
    """The experiment's rows id (see EVALUATION_ROWS)."""
    sweep_k = sweep_calibration_size(config, experiment)
    rows = str(experiment["rows"])
    return rows if sweep_k is None else f"{rows}-k{sweep_k}"


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


def _backend(model):
    return config["models"][model]["backend"]


def _is_builtin(model):
    return _backend(model) == "builtin"


def _in_batch_job(model):
    """Whether the model's requests run in its batch job behind its cache: LLMs and python TMs
    (builtin models run in the per-row jobs; a precomputed TM is read from its file)."""
    return _backend(model) not in ("builtin", "precomputed")


def evaluation_tm_prompt(wildcards):
    """The TM's prompt template as an input ([] for TMs that take none: builtin, python,
    precomputed)."""
    if _backend(wildcards.tm) not in ("vllm", "openai", "transformers"):
        return []
    evaluation = config["evaluation"]
    return [evaluation["tm_prompts"].get(wildcards.tm, evaluation["tm_prompt"])]


def evaluation_tm_prompt_args(prompt):
    if not prompt:
        return ""
    raw = " --raw-prompt" if config["evaluation"]["tm_raw_prompt"] else ""
    return f"--template {prompt}{raw}"


def evaluation_cm_prompt(wildcards):
    evaluation = config["evaluation"]
    return evaluation["cm_prompts"].get(wildcards.cm, evaluation["cm_prompt"])


def evaluation_model_args(model):
    """--model/--model-spec (the registry entry as JSON: a param, so editing that model re-runs
    its jobs only) and the response cache of LLM models."""
    import json
    import shlex

    spec = json.dumps(config["models"][model], sort_keys=True)
    args = f"--model {shlex.quote(model)} --model-spec {shlex.quote(spec)}"
    if _in_batch_job(model):
        args += f" --cache {RESULTS}/llm_cache/evaluation_{model}.sqlite"
    return args


def evaluation_row_model_args(model):
    """The model arguments of a per-(rows, TM, k[, CM]) job: an LLM's (or python TM's) answers
    come from its batch job through the cache (--cache-only), builtin models run in the job
    itself and a precomputed TM is read from its file."""
    args = evaluation_model_args(model)
    return f"{args} --cache-only" if _in_batch_job(model) else args


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
    from splits.llm.registry import gpu_resources

    try:
        return gpu_resources(model, config["models"])["gpu"]
    except ConfigError as err:
        sys.exit(f"config error: {err}")


# One batch job per LLM and role (TM, CM) runs every prompt of that model across experiments,
# TMs and ks through one engine (splits model-batch); the per-row jobs read the answers from
# the model's cache. The batch jobs are checkpoints and the per-row jobs take their report as an
# ancient input: when a batch job re-runs (a new k, a new TM for a CM), Snakemake re-evaluates
# the DAG after it and runs only the per-row jobs that are new or changed, not every job of the
# model (a plain ancient input would hide the new jobs too).


def _evaluation_theories(rows, tm, k):
    return f"{RESULTS}/evaluation/theories/rows-{rows}/{tm}/k-{k}.parquet"


def _evaluation_rows_file(rows):
    return f"{RESULTS}/evaluation/subsample/rows-{rows}.parquet"


def evaluation_llm_models(axis):
    """Models with a batch job (LLMs, python TMs) used on ``axis`` (tms or cms) by some
    experiment, sorted."""
    models = {m for e in config["evaluation"]["experiments"].values() for m in e[axis]}
    return sorted(m for m in models if _in_batch_job(m))


def evaluation_tm_plan(tm):
    """What the TM batch of ``tm`` generates: (rows file, k) of every experiment using it."""
    items = set()
    for experiment in config["evaluation"]["experiments"].values():
        if tm in experiment["tms"]:
            rows = _experiment_rows(experiment)
            items |= {(_evaluation_rows_file(rows), int(k)) for k in experiment["ks"]}
    return [{"rows": rows, "k": k} for rows, k in sorted(items)]


def evaluation_cm_plan(cm):
    """What the CM batch of ``cm`` generates: (rows file, theories file) of every experiment
    using it, for each of its TMs and ks."""
    items = set()
    for experiment in config["evaluation"]["experiments"].values():
        if cm in experiment["cms"]:
            rows = _experiment_rows(experiment)
            items |= {
                (_evaluation_rows_file(rows), _evaluation_theories(rows, tm, k))
                for tm in experiment["tms"]
                for k in experiment["ks"]
            }
    return [{"rows": rows, "theories": theories} for rows, theories in sorted(items)]


def evaluation_plan_arg(plan):
    import json
    import shlex

    return shlex.quote(json.dumps(plan, sort_keys=True))


def evaluation_tm_batch_inputs(wildcards):
    return sorted({item["rows"] for item in evaluation_tm_plan(wildcards.tm)})


def evaluation_cm_batch_inputs(wildcards):
    plan = evaluation_cm_plan(wildcards.cm)
    return {
        "rows": sorted({item["rows"] for item in plan}),
        "theories": sorted({item["theories"] for item in plan}),
    }


def evaluation_tm_batch_done(wildcards):
    """The TM batch report of an LLM or python TM (ancient: see above); [] for the others."""
    if not _in_batch_job(wildcards.tm):
        return []
    return ancient(checkpoints.evaluation_tm_batch.get(tm=wildcards.tm).output.report)


def evaluation_cm_batch_done(wildcards):
    """The CM batch report of an LLM CM (ancient: see above); [] for builtin CMs."""
    if not _in_batch_job(wildcards.cm):
        return []
    return ancient(checkpoints.evaluation_cm_batch.get(cm=wildcards.cm).output.report)


def evaluation_batch_reports():
    return [
        f"{RESULTS}/evaluation/batches/{role}/{model}.json"
        for role, axis in (("tm", "tms"), ("cm", "cms"))
        for model in evaluation_llm_models(axis)
    ]


def evaluation_slurm_extra(model):
    """The model's own ``slurm_extra`` (the ``gpu`` resource already requests the GPUs)."""
    return config["models"][model].get("slurm_extra") or ""


def evaluation_groups_arg(name):
    """The experiment's TM groups as a shell-quoted JSON argument."""
    import json
    import shlex

    return shlex.quote(json.dumps(_experiment(name).get("groups", {}), sort_keys=True))


def evaluation_ordered_groups_arg(wildcards):
    """The experiment's TM groups in config order, as a shell-quoted JSON list of [name, TMs]
    (the first group minus the second is the gap)."""
    import json
    import shlex

    groups = _experiment(wildcards.experiment).get("groups", {})
    return shlex.quote(json.dumps([[name, tms] for name, tms in groups.items()]))


def evaluation_group_theories(wildcards):
    """The theories of the TMs of an experiment's groups, at each of its ks."""
    experiment = _experiment(wildcards.experiment)
    tms = sorted(
        {tm for members in experiment.get("groups", {}).values() for tm in members}
    )
    rows = _experiment_rows(experiment)
    return [_evaluation_theories(rows, tm, k) for tm in tms for k in experiment["ks"]]


def evaluation_experiment_rows(wildcards):
    rows = _experiment_rows(_experiment(wildcards.experiment))
    return f"{RESULTS}/evaluation/subsample/rows-{rows}.parquet"


def evaluation_experiment_predictions(wildcards):
    experiment = _experiment(wildcards.experiment)
    return expand(
        f"{RESULTS}/evaluation/predictions/rows-{{rows}}/{{tm}}/k-{{k}}/{{cm}}.parquet",
        rows=_experiment_rows(experiment),
        tm=experiment["tms"],
        k=experiment["ks"],
        cm=experiment["cms"],
    )


def evaluation_targets():
    targets = []
    for name in config["evaluation"]["experiments"]:
        base = f"{RESULTS}/evaluation/experiments/{name}"
        targets += [
            f"{base}/metrics.json",
            f"{base}/tables.md",
            f"{base}/comparisons.md",
        ]
        targets += [f"{base}/plots/{plot}.png" for plot in EVALUATION_PLOTS]
        if len(_experiment(name).get("groups", {})) >= 2:
            targets += [f"{base}/group_splits.md", f"{base}/group_gaps.md"]
    if evaluation_batch_reports():
        targets += [f"{RESULTS}/evaluation/throughput.md"]
    return targets


# --- probes ----------------------------------------------------------------------------------


PROBES = config["probes"]
PROBES_DIR = f"{RESULTS}/probes"
PROBE_OUTPUTS = {
    "stress": [
        "responses.parquet",
        "groups.parquet",
        "summary.parquet",
        "ratings.parquet",
        "raters.parquet",
    ],
    "empathy": ["responses.parquet", "cells.parquet", "summary.json", "heatmap.png"],
    "empathy_variants": ["variants.csv", "variants.md"],
    "grasp": [
        "groups.parquet",
        "dsi.parquet",
        "nulls.parquet",
        "skipped_groups.parquet",
        "summary.json",
        "gai.png",
        "null_histograms.png",
    ],
    "personalization": [
        "rewrites.parquet",
        "responses.parquet",
        "tests.parquet",
        "summary.json",
    ],
}
PROBE_REFERENCE_FILES = {
    "dreaddit": ["dreaddit/dreaddit-train.csv", "dreaddit/dreaddit-test.csv"],
    "envent": [
        f"crowd_envent/crowd-enVent_{e}.tsv"
        for e in (
            "anger boredom disgust fear guilt joy pride relief sadness shame surprise trust".split()
        )
    ],
    "dices": ["dices350/dices_350_crowdsourced.json"],
}


def _probe_files(probe, name):
    return [f"{PROBES_DIR}/{probe}/{name}/{f}" for f in PROBE_OUTPUTS[probe]]


# The empathy probe's group sets: the demographics, or sets of the group sets file (read here
# only when a run asks for one).
EMPATHY = PROBES["empathy"]
EMPATHY_SETS = {
    "topics": EMPATHY["group_sets"],
    "envent": EMPATHY["envent_group_sets"],
}
EMPATHY_GROUP_SETS = (
    load_group_sets(EMPATHY["group_sets_file"])
    if any(s != DEMOGRAPHICS_GROUP_SET for sets in EMPATHY_SETS.values() for s in sets)
    else {}
)


def _empathy_files(source):
    """Every variant's outputs and the side-by-side table, per group set of ``source``."""
    files = []
    for group_set in EMPATHY_SETS[source]:
        base = f"{PROBES_DIR}/empathy/{source}/{group_set}"
        files += [
            f"{base}/{variant}/{f}"
            for variant in EMPATHY["variants"]
            for f in PROBE_OUTPUTS["empathy"]
        ]
        files += [f"{base}/{f}" for f in PROBE_OUTPUTS["empathy_variants"]]
    return files


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


def probes_reference_available():
    ref = PROBES["reference_dir"]
    return bool(ref) and Path(ref).is_dir()


def probes_reference_targets():
    if not PROBES["reference_dir"]:
        sys.exit(
            "config error: probes.reference_dir: set it to the reference data folder to run probes_reference"
        )
    return (
        _probe_files("stress", "dreaddit")
        + _empathy_files("envent")
        + _probe_files("grasp", "dices")
    )


def probes_grasp_names():
    names = ["stress_topics"] if PROBES["grasp"]["stress_ratings"] else []
    return names + sorted(PROBES["grasp"]["inputs"])


# GRASP on LLM judges (the probe_grasp_judges rule). Judges are few (TMs x CMs x ks), so a group of
# two judges is analysed (probes.grasp.min_raters is for human rater pools).
PROBES_JUDGES_MIN_RATERS = 2
PROBES_JUDGES_OUTPUTS = [
    "ratings.parquet",
    "raters.parquet",
    "groups.parquet",
    "dsi.parquet",
    "nulls.parquet",
    "skipped_groups.parquet",
    "summary.json",
    "gai.png",
    "null_histograms.png",
]


def probes_grasp_judges_targets():
    """One judges analysis per evaluation experiment."""
    return [
        f"{PROBES_DIR}/grasp_judges/{name}/{f}"
        for name in config["evaluation"]["experiments"]
        for f in PROBES_JUDGES_OUTPUTS
    ]


def probe_grasp_judge_kinds(wildcards):
    """JSON {model: builtin|llm} of the experiment's TMs and CMs (the tm_kind/cm_kind
    attributes)."""
    experiment = _experiment(wildcards.experiment)
    models = sorted(set(experiment["tms"]) | set(experiment["cms"]))
    return json.dumps(
        {m: "builtin" if _is_builtin(m) else "llm" for m in models}, sort_keys=True
    )


def probes_targets():
    targets = []
    if PROBES["enabled"]:
        targets += _probe_files("stress", "topics") + _empathy_files("topics")
        targets += _probe_files("personalization", "topics")
        for name in probes_grasp_names():
            targets += _probe_files("grasp", name)
        targets += probes_grasp_judges_targets()
    if probes_reference_available():
        targets += probes_reference_targets()
    return targets


def probe_model_spec(probe):
    name = PROBES[probe]["model"]
    if name not in config["models"]:
        sys.exit(
            f"config error: probes.{probe}.model: {name!r} is not in the models registry"
        )
    import json

    return json.dumps(config["models"][name], sort_keys=True)


def probe_data(probe):
    """Input function: the topic posts, or the reference files of a reference source."""

    def inputs(wildcards):
        if wildcards.source == "topics":
            return [f"{RESULTS}/topics/topic_posts.parquet"]
        return [
            str(Path(PROBES["reference_dir"]) / f)
            for f in PROBE_REFERENCE_FILES[wildcards.source]
        ]

    return inputs


def probe_data_arg(wildcards, input):
    if wildcards.source == "topics":
        return input.data[0]
    return str(Path(input.data[0]).parent)


def probe_grasp_inputs(wildcards):
    if wildcards.name == "stress_topics":
        return {
            "ratings": [f"{PROBES_DIR}/stress/topics/ratings.parquet"],
            "raters": [f"{PROBES_DIR}/stress/topics/raters.parquet"],
        }
    if wildcards.name == "dices":
        return {
            "ratings": [
                str(Path(PROBES["reference_dir"]) / PROBE_REFERENCE_FILES["dices"][0])
            ],
            "raters": [],
        }
    spec = PROBES["grasp"]["inputs"][wildcards.name]
    return {"ratings": spec["ratings"], "raters": spec.get("raters", [])}


def probe_grasp_columns(wildcards):
    """The reading options of a configured GRASP input as command-line flags."""
    spec = PROBES["grasp"]["inputs"].get(wildcards.name, {})
    flags = " ".join(
        f"--{flag} {spec.get(key, default)}"
        for flag, key, default in (
            ("item-col", "item_col", "item"),
            ("rater-col", "rater_col", "rater"),
            ("rating-col", "rating_col", "rating"),
        )
    )
    for flag, key in (
        ("attribute-cols", "attribute_cols"),
        ("missing-ratings", "missing_ratings"),
    ):
        if spec.get(key):
            values = " ".join(json.dumps(str(v)) for v in spec[key])
            flags = f"{flags} --{flag} {values}"
    if spec.get("binarize_at") is not None:
        flags = f"{flags} --binarize-at {spec['binarize_at']}"
    return flags


def probe_stress_groups_arg(wildcards):
    """--groups JSON when probes.stress.groups names the exact groups, else nothing."""
    groups = PROBES["stress"]["groups"]
    if not groups:
        return ""
    import shlex

    return f"--groups {shlex.quote(json.dumps(groups, sort_keys=True))}"


def probe_judge_prompt():
    """The rewrite judge's prompt file (an input only when a judge model is set)."""
    if not PROBES["personalization"]["judge_model"]:
        return []
    return [PROBES["personalization"]["judge_prompt"]]


def probe_judge_args(wildcards, input):
    """--judge-model/--judge-model-spec/--judge-prompt when a judge model is set."""
    name = PROBES["personalization"]["judge_model"]
    if not name:
        return ""
    if name not in config["models"]:
        sys.exit(
            f"config error: probes.personalization.judge_model: {name!r} is not in the models registry"
        )
    import shlex

    spec = shlex.quote(json.dumps(config["models"][name], sort_keys=True))
    max_tokens = PROBES["personalization"]["judge_max_tokens"]
    return (
        f"--judge-model {shlex.quote(name)} --judge-model-spec {spec} "
        f"--judge-prompt {input.judge_prompt} --judge-max-tokens {max_tokens}"
    )


def probe_task_prompts():
    return [t["prompt"] for t in PROBES["personalization"]["tasks"]]


# --- hypotheses ------------------------------------------------------------------------------

HYPOTHESES = config["hypotheses"]
HYPOTHESES_DIR = f"{RESULTS}/hypotheses"
HYPOTHESIS_SET = r"sample|file/[A-Za-z0-9_.\-]+|theory/[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+/k-\d+|llm/[A-Za-z0-9_.\-]+"
HYPOTHESES_PLOTS = ("lift_vs_triviality", "lift_curves", "stages")


def hypothesis_sets():
    """The run's hypothesis sets (each has its own set, lift and triviality jobs)."""
    if not HYPOTHESES["enabled"]:
        return []
    sets = ["sample"] if SYNTH["enabled"] and HYPOTHESES["sample"] else []
    sets += [f"file/{name}" for name in sorted(HYPOTHESES["files"])]
    sets += [
        f"theory/{t['experiment']}/{t['tm']}/k-{t['k']}" for t in HYPOTHESES["theories"]
    ]
    sets += [f"llm/{model}" for model in HYPOTHESES["generate"]["models"]]
    return sets


def hypotheses_targets():
    if not hypothesis_sets():
        return []
    return [
        f"{HYPOTHESES_DIR}/lift.parquet",
        f"{HYPOTHESES_DIR}/filtered.csv",
        f"{HYPOTHESES_DIR}/stages.csv",
    ] + [f"{HYPOTHESES_DIR}/plots/{plot}.png" for plot in HYPOTHESES_PLOTS]


def hypotheses_set_files(kind):
    """The per-set outputs of every set: kind is sets, lift or triviality."""
    return [f"{HYPOTHESES_DIR}/{kind}/{name}.parquet" for name in hypothesis_sets()]


def hypotheses_identity_input():
    """The identity-words file as an input ([]: they come from the demographics file)."""
    path = HYPOTHESES["identity_words"]
    return [path] if path else []


def hypotheses_identity_arg(wildcards, input):
    return f"--identity-words {input.identity[0]}" if input.identity else ""


def hypotheses_limits():
    return (
        f"--max-entries {HYPOTHESES['max_entries']} "
        f"--max-phrase-tokens {HYPOTHESES['max_phrase_tokens']}"
    )


def hypotheses_theory_rows(wildcards):
    return evaluation_experiment_rows(wildcards)


def hypotheses_theories_input(wildcards):
    rows = _experiment_rows(_experiment(wildcards.experiment))
    return f"{RESULTS}/evaluation/theories/rows-{rows}/{wildcards.tm}/k-{wildcards.k}.parquet"


def hypotheses_theory_is_llm(tm):
    return not _is_builtin(tm)


def hypotheses_theory_prompt(wildcards):
    return (
        [HYPOTHESES["theory_prompt"]] if hypotheses_theory_is_llm(wildcards.tm) else []
    )


def hypotheses_theory_args(wildcards):
    """oracle-lexical: words read from the theory; an LLM TM: the theory model's arguments."""
    if not hypotheses_theory_is_llm(wildcards.tm):
        return "--tm-kind oracle-lexical"
    return (
        f"--tm-kind llm {hypotheses_model_args(HYPOTHESES['theory_model'])} "
        f"--prompt {HYPOTHESES['theory_prompt']}"
    )


def hypotheses_model_args(model):
    """--model/--model-spec (a param: editing that model re-runs its jobs) and its cache."""
    spec = json.dumps(config["models"][model], sort_keys=True)
    return (
        f"--model {shlex_quote(model)} --model-spec {shlex_quote(spec)} "
        f"--cache {RESULTS}/llm_cache/hypotheses_{model}.sqlite"
    )


def hypotheses_encoder_args():
    """--encoder and, for a registry encoder, its entry (a param: editing it re-runs triviality)."""
    name = HYPOTHESES["encoder"]
    args = f"--encoder {shlex_quote(name)}"
    if name in config["models"]:
        spec = json.dumps({name: config["models"][name]}, sort_keys=True)
        args += f" --models-json {shlex_quote(spec)}"
    return args


def hypotheses_encoder_gpus():
    name = HYPOTHESES["encoder"]
    if name not in config["models"]:
        return 0
    return (
        evaluation_gpus(name) if config["models"][name]["backend"] != "builtin" else 0
    )


def shlex_quote(value):
    import shlex

    return shlex.quote(value)


# --- llm served mode -------------------------------------------------------------------------

LLM_SERVERS_DIR = f"{RESULTS}/llm/servers"


def llm_serve_export():
    """Served mode (llm.serve): put its settings in the environment every job inherits (not a
    param: switching modes re-runs nothing; the response cache is the same either way).
    """
    from splits.llm.serve import export_settings

    export_settings(config, LLM_SERVERS_DIR)


def llm_serve_stop():
    """Stop the run's model servers (onsuccess/onerror; idle servers also stop by themselves)."""
    from splits.llm.serve import stop_servers

    stop_servers(LLM_SERVERS_DIR)
