"""Checks across config keys, run when the Snakefile starts (after schema validation)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from splits.config.definitions import (
    DEMOGRAPHICS_GROUP_SET,
    PATH_NAME,
    SAMPLE_SIZE,
    load_group_sets,
)
from splits.config.settings import settings_from_config
from splits.config.templates import FSTRING_START, PROMPT_SLOTS, unknown_slot_error, unknown_slots
from splits.errors import ConfigError
from splits.hypotheses.settings import LiftSettings, ReportSettings
from splits.llm.backends import capability


def validate_probes(config: dict) -> None:
    """Checks of the probes section that the schema cannot express (after validate_config)."""
    probes = config.get("probes", {})
    for name, spec in probes.get("grasp", {}).get("inputs", {}).items():
        if spec.get("attribute_cols") and spec.get("raters"):
            raise ConfigError(
                f"probes.grasp.inputs.{name}.raters: give rater attributes either on the rating "
                "rows (attribute_cols) or in rater tables (raters), not both"
            )
    empathy = probes.get("empathy", {})
    wanted = [
        (key, value)
        for key in ("group_sets", "envent_group_sets")
        for value in empathy.get(key, [])
        if value != DEMOGRAPHICS_GROUP_SET
    ]
    if wanted:
        sets = load_group_sets(empathy["group_sets_file"])
        for key, value in wanted:
            if value not in sets:
                raise ConfigError(
                    f"probes.empathy.{key}: {value!r} is neither {DEMOGRAPHICS_GROUP_SET!r} nor a "
                    f"set of {empathy['group_sets_file']} ({', '.join(sorted(sets))})"
                )
    for name, variant in empathy.get("variants", {}).items():
        low, high = variant.get("scale", [0, 100])
        if not low < high:
            raise ConfigError(
                f"probes.empathy.variants.{name}.scale: must be [low, high], low < high"
            )


# --------------------------------------------------------------------------- hypotheses

ORACLE_KIND = "oracle-lexical"


def check_hypotheses(config: dict) -> None:
    """Cross-key checks of the ``hypotheses`` section (after schema validation): theories name an
    experiment's TM and k, models are in the registry and usable for their role, report_k is
    one of k_fractions, hypothesis files exist. Raises ConfigError naming the key."""

    section_ = config.get("hypotheses", {})
    if not section_.get("enabled", True):
        return
    models = config.get("models", {})
    experiments = config.get("evaluation", {}).get("experiments", {})

    def llm(key: str, name: str | None) -> None:
        if name is None:
            return
        if name not in models:
            raise ConfigError(f"{key}: {name!r} is not a model of the models registry")
        if models[name].get("backend") == "builtin":
            raise ConfigError(f"{key}: {name!r} is a builtin model; an LLM is needed here")
        if not re.fullmatch(PATH_NAME, name):
            raise ConfigError(f"{key}: model name {name!r} must match {PATH_NAME}")

    for name, path in section_.get("files", {}).items():
        if not Path(path).is_file():
            raise ConfigError(f"hypotheses.files.{name}: {path} does not exist")
    for i, entry in enumerate(section_.get("theories", [])):
        key = f"hypotheses.theories[{i}]"
        experiment = experiments.get(entry["experiment"])
        if experiment is None:
            raise ConfigError(
                f"{key}.experiment: {entry['experiment']!r} is not an evaluation experiment"
            )
        if entry["tm"] not in experiment["tms"]:
            raise ConfigError(
                f"{key}.tm: {entry['tm']!r} is not a TM of experiment {entry['experiment']!r}"
            )
        if entry["k"] not in experiment["ks"]:
            raise ConfigError(
                f"{key}.k: {entry['k']} is not a k of experiment {entry['experiment']!r}"
            )
        spec = models.get(entry["tm"], {})
        if spec.get("backend") == "builtin":
            if spec.get("kind") != ORACLE_KIND:
                raise ConfigError(
                    f"{key}.tm: builtin {spec.get('kind')!r} theories hold no lexicon "
                    f"(builtin TMs: only {ORACLE_KIND})"
                )
        elif section_.get("theory_model") is None:
            raise ConfigError(
                f"hypotheses.theory_model: needed to turn {entry['tm']!r}'s theories into lexicons"
            )
    llm("hypotheses.theory_model", section_.get("theory_model"))
    for name in section_.get("generate", {}).get("models", []):
        llm("hypotheses.generate.models", name)
    # the lift and plot jobs' settings, built as the jobs build them: a wrong combination of
    # hypotheses.retrieval keys is an error at the start, not in the middle of the run
    fractions = settings_from_config(LiftSettings, config).k_fractions
    report_k = settings_from_config(ReportSettings, config).report_k
    if not any(abs(f - report_k) < 1e-12 for f in fractions):
        raise ConfigError(f"hypotheses.report_k: {report_k} is not one of k_fractions")
    encoder = section_.get("encoder")
    if encoder in models:
        spec = models[encoder]
        usable = spec.get("backend") == "transformers" or (
            spec.get("backend") == "builtin" and spec.get("kind") == "hashed-ngrams"
        )
        if not usable:
            raise ConfigError(
                f"hypotheses.encoder: {encoder!r} must be a transformers model or builtin "
                "kind hashed-ngrams"
            )


def _config_value(config: dict, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def configured_templates(config: dict) -> list[tuple[str, str, tuple[str, ...]]]:
    """(config key, file, slots) of every prompt template the config names."""
    out = []
    for pattern, slots in PROMPT_SLOTS.items():
        if ".*." in pattern:  # one template per named entry (e.g. the empathy variants)
            parent, leaf = pattern.split(".*.")
            entries = _config_value(config, parent)
            if isinstance(entries, dict):
                out += [
                    (f"{parent}.{name}.{leaf}", str(entry[leaf]), slots)
                    for name, entry in entries.items()
                    if isinstance(entry, dict) and isinstance(entry.get(leaf), str)
                ]
            continue
        key = pattern
        value = _config_value(config, key)
        if isinstance(value, str):
            out.append((key, value, slots))
        elif isinstance(value, dict):
            out += [(f"{key}.{name}", str(path), slots) for name, path in value.items()]
        elif isinstance(value, list):
            out += [
                (f"{key}[{i}].prompt", str(task["prompt"]), slots)
                for i, task in enumerate(value)
                if isinstance(task, dict) and "prompt" in task
            ]
    return out


def check_prompt_templates(config: dict) -> None:
    """Refuse a configured prompt template that uses a placeholder other than its slots
    (ConfigError naming the key, the file and the placeholder). Files that do not exist are
    left to the stage that reads them."""
    for key, path, slots in configured_templates(config):
        file = Path(path)
        if not file.is_file():
            continue
        text = file.read_text(encoding="utf-8")
        if FSTRING_START.match(text):
            from splits.evaluation.common import (
                parse_template,  # the f-string reader, only when needed
            )

            try:
                parse_template(text, f"{key}: {path}", slots)
            except ConfigError as err:
                raise ConfigError(str(err)) from err
            continue
        unknown = unknown_slots(text, slots)
        if unknown:
            raise unknown_slot_error(f"{key}: {path}", unknown[0], slots)


# --------------------------------------------------------------------------- evaluation


def sweep_calibration_size(config: dict, experiment: dict) -> int | None:
    """The calibration size of the rows an experiment evaluates on when its largest k exceeds
    the dataset's: the experiment's largest k (rounded up to even, the sampler draws k/2 posts of
    each group), for which the pipeline samples a dataset of its own; None when the pipeline's
    quadruplets (calibration size ``sampling.k``) serve, or when ``evaluation.dataset`` names a
    table the pipeline cannot re-sample."""
    if config["evaluation"].get("dataset"):
        return None
    largest = max(int(k) for k in experiment["ks"])
    if largest <= int(config["sampling"]["k"]):
        return None
    return largest + largest % 2


def check_evaluation(config: dict) -> None:
    """Checks of the evaluation section across keys (after schema validation); ConfigError with
    one line naming the key."""
    models = config.get("models", {})
    top_k = int(config["topics"]["top_k"])
    for name, experiment in config["evaluation"]["experiments"].items():
        for model in experiment["cms"]:
            # the theory models a researcher brings (python, precomputed) cannot classify
            if model in models and not capability(models, model, "classifies"):
                backend = models[model]["backend"]
                raise ConfigError(
                    f"evaluation.experiments.{name}.cms: {model!r} (backend {backend}) writes "
                    "theories and cannot classify; list it under tms"
                )
        sweep_k = sweep_calibration_size(config, experiment)
        if sweep_k is not None and sweep_k // 2 + SAMPLE_SIZE > top_k:
            raise ConfigError(
                f"evaluation.experiments.{name}.ks: k={sweep_k} needs {sweep_k // 2} calibration "
                f"+ {SAMPLE_SIZE} sample posts per group and topic, more than the "
                f"topics.top_k={top_k} posts the topic splits keep"
            )
