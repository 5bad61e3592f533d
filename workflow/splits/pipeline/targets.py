"""What a run writes and the command-line arguments its rules pass, as plain functions of a
validated config (``workflow/rules/common.smk`` turns them into targets and input functions).

Every path lies under the run's output root ``config["outdir"]``. Arguments are lists of
separate words: the rules quote every element with ``{params.x:q}``, so a value with spaces or
quotes (a model spec as JSON, a topic name) reaches the command as one word.
"""

from __future__ import annotations

import json
from pathlib import Path

from splits.config.definitions import PATH_NAME, load_demographics
from splits.config.settings import settings_json
from splits.evaluation.settings import TMPromptSettings, TMSettings
from splits.llm.backends import capability

# the rows an experiment evaluates on: "<N>" (or "all") rows of the dataset, or "<N>-k<K>" rows
# of the dataset sampled with calibration size K for an experiment whose largest k exceeds
# sampling.k (evaluation_sweep_dataset)
EVALUATION_ROWS = r"(?:\d+|all)(?:-k\d+)?"
EVALUATION_PLOTS = ("accuracy_vs_k", "tm_cm_heatmap", "by_pair", "by_demographic", "by_category")
HYPOTHESIS_SET = (
    rf"sample|fighting-words|file/{PATH_NAME}|theory/{PATH_NAME}/{PATH_NAME}/k-\d+|llm/{PATH_NAME}"
)
#: the sets whose lexicons a model wrote (the counting baseline takes their median size)
MODEL_SET_PREFIXES = ("theory/", "llm/")
HYPOTHESES_PLOTS = ("lift_vs_triviality", "lift_curves", "stages", "models_vs_counting")
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
#: the files of probes.reference_dir that each reference data source reads
PROBE_REFERENCE_FILES = {
    "dreaddit": ["dreaddit/dreaddit-train.csv", "dreaddit/dreaddit-test.csv"],
    "envent": [
        f"crowd_envent/crowd-enVent_{emotion}.tsv"
        for emotion in (
            "anger boredom disgust fear guilt joy pride relief sadness shame surprise trust".split()
        )
    ],
    "dices": ["dices350/dices_350_crowdsourced.json"],
}
PROBES_JUDGES_OUTPUTS = ["ratings.parquet", "raters.parquet", *PROBE_OUTPUTS["grasp"]]


def final_targets(config: dict, empathy_sets: dict) -> list[str]:
    """Every output of the default target, stage by stage. With ``release_data.path`` the
    authors' released topic posts replace ingest, graph, demographics and topic splits."""
    if config["release_data"]["path"]:
        upstream = [f"{config['outdir']}/release_data/topic_posts.parquet"]
    else:
        upstream = (
            ingest_targets(config)
            + graph_targets(config)
            + demographics_targets(config)
            + topics_targets(config)
        )
    return (
        upstream
        + sampling_targets(config)
        + evaluation_targets(config)
        + probes_targets(config, empathy_sets)
        + hypotheses_targets(config)
    )


def model_spec_json(config: dict, name: str) -> str:
    """The registry entry of model ``name`` as canonical JSON (a param: editing that entry re-runs
    the jobs that use the model, and only those)."""
    return json.dumps(config["models"][name], sort_keys=True)


# --------------------------------------------------------------------------- ingest


def synth_corpus_outputs(config: dict) -> dict[str, str]:
    """What `splits synth` writes under <outdir>/sample/corpus, by shard name."""
    synth = config["synth"]
    corpus = f"{config['outdir']}/sample/corpus"
    n = synth["shards"]
    if synth["format"] == "convokit":
        return {f"sample-{i}": f"{corpus}/sample-{i}" for i in range(n)}
    suffix = ".ndjson.zst" if synth["compress"] else ".ndjson"
    return {
        f"{prefix}_sample-{i}": f"{corpus}/{prefix}_sample-{i}{suffix}"
        for i in range(n)
        for prefix in ("RS", "RC")
    }


def ingest_shards(config: dict) -> dict[str, str]:
    """Shard name -> input path (the generated corpus, or ingest.inputs)."""
    if config["synth"]["enabled"]:
        return synth_corpus_outputs(config)
    from splits.ingest.read import shard_names

    return shard_names(config["ingest"]["inputs"])


def ingest_targets(config: dict) -> list[str]:
    """The posts table (one file, or its ``ingest.buckets`` bucket files) and the report."""
    base = f"{config['outdir']}/posts"
    buckets = config["ingest"]["buckets"]
    tables = (
        [f"{base}/posts.parquet"]
        if buckets == 1
        else [f"{base}/buckets/{b}.parquet" for b in range(buckets)]
    )
    return [*tables, f"{base}/ingest_report.json"]


# --------------------------------------------------------------------------- other stages


def graph_targets(config: dict) -> list[str]:
    base = f"{config['outdir']}/graph"
    return [f"{base}/subreddits.parquet", f"{base}/neighbours.parquet", f"{base}/summary.json"]


def demographics_targets(config: dict) -> list[str]:
    base = f"{config['outdir']}/demographics"
    keys = [d.key for d in load_demographics(config["demographics"]["file"])]
    return [
        f"{base}/thresholds.json",
        f"{base}/formula_comparison.md",
        f"{config['outdir']}/health/selfid.json",
    ] + [
        path
        for key in keys
        for path in (
            f"{base}/{key}/selfid_curve.png",
            f"{config['outdir']}/health/groupness_{key}.json",
        )
    ]


def selfid_verifier_args(config: dict) -> list[str]:
    """Flags of the LLM verifier: the model's registry entry goes in as JSON, so changing that
    model's spec re-runs the stage (it is a param)."""
    demographics = config["demographics"]
    if demographics["verifier"] != "llm":
        return []
    name = demographics["verifier_model"]
    registry = json.dumps({name: config["models"][name]}, sort_keys=True)
    prompt = demographics["verifier_prompt"]
    return ["--verifier-model", name, "--models-json", registry, "--prompt", prompt]


def topics_targets(config: dict) -> list[str]:
    base = f"{config['outdir']}/topics"
    return [f"{base}/topics.parquet", f"{base}/topic_posts.parquet", f"{base}/topic_counts.csv"]


def sampling_targets(config: dict) -> list[str]:
    base = f"{config['outdir']}/dataset"
    return [
        f"{base}/quadruplets.parquet",
        f"{base}/export/README.md",
        f"{config['outdir']}/health/sampling.json",
    ]


# --------------------------------------------------------------------------- evaluation


def backend(config: dict, model: str) -> str:
    return config["models"][model]["backend"]


def in_batch_job(config: dict, model: str) -> bool:
    """Whether the model's requests run in its batch job behind its cache: LLMs and python TMs
    (builtin models run in the per-row jobs; a precomputed TM is read from its file)."""
    return capability(config["models"], model, "batch_job")


def evaluation_models(config: dict) -> list[str]:
    """Every TM and CM of some experiment, sorted."""
    experiments = config["evaluation"]["experiments"].values()
    return sorted({m for e in experiments for m in [*e["tms"], *e["cms"]]})


def evaluation_llm_models(config: dict, axis: str) -> list[str]:
    """Models with a batch job (LLMs, python TMs) used on ``axis`` (tms or cms), sorted."""
    models = {m for e in config["evaluation"]["experiments"].values() for m in e[axis]}
    return sorted(m for m in models if in_batch_job(config, m))


def experiment_rows(config: dict, name: str) -> str:
    """The experiment's rows id (see EVALUATION_ROWS)."""
    from splits.pipeline.checks import sweep_calibration_size

    experiment = config["evaluation"]["experiments"][name]
    sweep_k = sweep_calibration_size(config, experiment)
    rows = str(experiment["rows"])
    return rows if sweep_k is None else f"{rows}-k{sweep_k}"


def rows_file(config: dict, rows: str) -> str:
    return f"{config['outdir']}/evaluation/subsample/rows-{rows}.parquet"


def theories_file(config: dict, rows: str, tm: str, k) -> str:
    return f"{config['outdir']}/evaluation/theories/rows-{rows}/{tm}/k-{k}.parquet"


def evaluation_tm_plan(config: dict, tm: str) -> list[dict]:
    """What the TM batch of ``tm`` generates: (rows file, k) of every experiment using it."""
    items = set()
    for name, experiment in config["evaluation"]["experiments"].items():
        if tm in experiment["tms"]:
            rows = rows_file(config, experiment_rows(config, name))
            items |= {(rows, int(k)) for k in experiment["ks"]}
    return [{"rows": rows, "k": k} for rows, k in sorted(items)]


def evaluation_cm_plan(config: dict, cm: str) -> list[dict]:
    """What the CM batch of ``cm`` generates: (rows file, theories file) of every experiment
    using it, for each of its TMs and ks."""
    items = set()
    for name, experiment in config["evaluation"]["experiments"].items():
        if cm in experiment["cms"]:
            rows = experiment_rows(config, name)
            items |= {
                (rows_file(config, rows), theories_file(config, rows, tm, k))
                for tm in experiment["tms"]
                for k in experiment["ks"]
            }
    return [{"rows": rows, "theories": theories} for rows, theories in sorted(items)]


def evaluation_model_args(config: dict, model: str, cache_only: bool = False) -> list[str]:
    """--model/--model-spec (the registry entry as JSON: a param, so editing that model re-runs
    its jobs only) and the response cache of models with a batch job; ``cache_only`` for the
    per-row jobs, which read those answers from the cache."""
    words = ["--model", model, "--model-spec", model_spec_json(config, model)]
    if in_batch_job(config, model):
        words += ["--cache", f"{config['outdir']}/llm_cache/evaluation_{model}.sqlite"]
        if cache_only:
            words.append("--cache-only")
    return words


def evaluation_tm_prompt_args(prompt: list[str]) -> list[str]:
    """--template of TMs that take a prompt (``prompt`` is [] for the others)."""
    return ["--template", prompt[0]] if prompt else []


def evaluation_tm_settings(config: dict, prompt: list[str]) -> str:
    """The settings of a TM's jobs (batch and per row): a TM that takes a prompt reads
    ``evaluation.tm_raw_prompt`` too, the others do not (editing it re-runs only LLM TMs)."""
    return settings_json(config, TMPromptSettings if prompt else TMSettings)


def evaluation_groups_json(config: dict, name: str) -> str:
    """The experiment's TM groups as JSON {group: [TM, ...]}."""
    return json.dumps(config["evaluation"]["experiments"][name].get("groups", {}), sort_keys=True)


def evaluation_ordered_groups_json(config: dict, name: str) -> str:
    """The experiment's TM groups in config order as JSON [[group, [TM, ...]], ...] (the first
    group minus the second is the gap)."""
    groups = config["evaluation"]["experiments"][name].get("groups", {})
    return json.dumps([[group, tms] for group, tms in groups.items()])


def evaluation_batch_reports(config: dict) -> list[str]:
    return [
        f"{config['outdir']}/evaluation/batches/{role}/{model}.json"
        for role, axis in (("tm", "tms"), ("cm", "cms"))
        for model in evaluation_llm_models(config, axis)
    ]


def evaluation_targets(config: dict) -> list[str]:
    targets = []
    for name, experiment in config["evaluation"]["experiments"].items():
        base = f"{config['outdir']}/evaluation/experiments/{name}"
        targets += [f"{base}/metrics.json", f"{base}/tables.md", f"{base}/comparisons.md"]
        targets += [f"{base}/plots/{plot}.png" for plot in EVALUATION_PLOTS]
        if len(experiment.get("groups", {})) >= 2:
            targets += [f"{base}/group_splits.md", f"{base}/group_gaps.md"]
    if evaluation_batch_reports(config):
        targets.append(f"{config['outdir']}/evaluation/throughput.md")
    return targets


# --------------------------------------------------------------------------- probes


def probe_files(config: dict, probe: str, name: str) -> list[str]:
    return [f"{config['outdir']}/probes/{probe}/{name}/{f}" for f in PROBE_OUTPUTS[probe]]


def empathy_files(config: dict, empathy_sets: dict, source: str) -> list[str]:
    """Every variant's outputs and the side-by-side table, per group set of ``source``."""
    variants = config["probes"]["empathy"]["variants"]
    files = []
    for group_set in empathy_sets[source]:
        base = f"{config['outdir']}/probes/empathy/{source}/{group_set}"
        files += [f"{base}/{v}/{f}" for v in variants for f in PROBE_OUTPUTS["empathy"]]
        files += [f"{base}/{f}" for f in PROBE_OUTPUTS["empathy_variants"]]
    return files


def probes_grasp_names(config: dict) -> list[str]:
    grasp = config["probes"]["grasp"]
    return (["stress_topics"] if grasp["stress_ratings"] else []) + sorted(grasp["inputs"])


def probes_reference_targets(config: dict, empathy_sets: dict) -> list[str]:
    from splits.errors import ConfigError

    if not config["probes"]["reference_dir"]:
        raise ConfigError(
            "probes.reference_dir: set it to the reference data folder to run probes_reference"
        )
    return (
        probe_files(config, "stress", "dreaddit")
        + empathy_files(config, empathy_sets, "envent")
        + probe_files(config, "grasp", "dices")
    )


def probes_targets(config: dict, empathy_sets: dict) -> list[str]:
    """The probes on the topic posts (probes.enabled), GRASP on each experiment's LLM judges,
    and the reference-data probes when probes.reference_dir is set."""
    targets = []
    if config["probes"]["enabled"]:
        targets += probe_files(config, "stress", "topics")
        targets += empathy_files(config, empathy_sets, "topics")
        targets += probe_files(config, "personalization", "topics")
        for name in probes_grasp_names(config):
            targets += probe_files(config, "grasp", name)
        targets += [
            f"{config['outdir']}/probes/grasp_judges/{name}/{f}"
            for name in config["evaluation"]["experiments"]
            for f in PROBES_JUDGES_OUTPUTS
        ]
    if config["probes"]["reference_dir"]:
        targets += probes_reference_targets(config, empathy_sets)
    return targets


def probe_reference_data(config: dict, source: str) -> list[str]:
    folder = Path(config["probes"]["reference_dir"])
    return [str(folder / f) for f in PROBE_REFERENCE_FILES[source]]


#: the keys of a probes.grasp.inputs entry that say how its tables are read
PROBE_GRASP_READING_KEYS = (
    "item_col",
    "rater_col",
    "rating_col",
    "attribute_cols",
    "missing_ratings",
    "binarize_at",
)


def probe_grasp_column_args(spec: dict | None) -> list[str]:
    """--columns JSON: how a configured GRASP input's tables are read (its validated entry's
    reading keys); nothing for the pipeline's own tables (stress ratings, DICES)."""
    if not spec:
        return []
    columns = {key: spec[key] for key in PROBE_GRASP_READING_KEYS}
    return ["--columns", json.dumps(columns, sort_keys=True)]


def probe_judge_args(config: dict, judge_prompt: list[str]) -> list[str]:
    """--judge-model-spec/--judge-prompt when a judge model is set."""
    name = config["probes"]["personalization"]["judge_model"]
    if not name:
        return []
    return ["--judge-model-spec", model_spec_json(config, name), "--judge-prompt", judge_prompt[0]]


# --------------------------------------------------------------------------- hypotheses


def hypothesis_sets(config: dict) -> list[str]:
    """The run's hypothesis sets (each has its own set, lift and triviality jobs)."""
    hypotheses = config["hypotheses"]
    if not hypotheses["enabled"]:
        return []
    sets = ["sample"] if config["synth"]["enabled"] and hypotheses["sample"] else []
    sets += [f"file/{name}" for name in sorted(hypotheses["files"])]
    sets += [f"theory/{t['experiment']}/{t['tm']}/k-{t['k']}" for t in hypotheses["theories"]]
    sets += [f"llm/{model}" for model in hypotheses["generate"]["models"]]
    if hypotheses["fighting_words"]["enabled"]:
        sets.append("fighting-words")
    return sets


def hypothesis_model_sets(config: dict) -> list[str]:
    """The run's sets whose lexicons a model wrote (theories, the LLM generator)."""
    return [s for s in hypothesis_sets(config) if s.startswith(MODEL_SET_PREFIXES)]


def hypotheses_targets(config: dict) -> list[str]:
    if not hypothesis_sets(config):
        return []
    base = f"{config['outdir']}/hypotheses"
    return [
        f"{base}/lift.parquet",
        f"{base}/filtered.csv",
        f"{base}/stages.csv",
        f"{base}/comparison.csv",
        f"{config['outdir']}/health/hypotheses.json",
    ] + [f"{base}/plots/{plot}.png" for plot in HYPOTHESES_PLOTS]


def hypotheses_model_args(config: dict, model: str) -> list[str]:
    """--model/--model-spec (a param: editing that model re-runs its jobs) and its cache."""
    cache = f"{config['outdir']}/llm_cache/hypotheses_{model}.sqlite"
    return ["--model", model, "--model-spec", model_spec_json(config, model), "--cache", cache]


def hypotheses_theory_args(config: dict, tm: str) -> list[str]:
    """oracle-lexical: words read from the theory; an LLM TM: the theory model's arguments."""
    if backend(config, tm) == "builtin":
        return ["--tm-kind", "oracle-lexical"]
    hypotheses = config["hypotheses"]
    return [
        "--tm-kind",
        "llm",
        *hypotheses_model_args(config, hypotheses["theory_model"]),
        "--prompt",
        hypotheses["theory_prompt"],
    ]


def hypotheses_encoder_args(config: dict) -> list[str]:
    """A registry encoder's entry (a param: editing it re-runs triviality); none for a Hugging
    Face id or path (the encoder's name is in the rule's settings)."""
    name = config["hypotheses"]["encoder"]
    if name in config["models"]:
        return ["--models-json", json.dumps({name: config["models"][name]}, sort_keys=True)]
    return []
