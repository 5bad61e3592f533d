"""Configuration: loading, schema validation with defaults, and the definition files.

Every error a user can make in a config file surfaces as one ``ConfigError`` whose message names
the offending key (``graph.k: 'x' is not of type 'integer'``); the Snakefile and the CLI print it
on one line and stop.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# the files the package reads itself (package data, so that a non-editable install has them)
PACKAGE_DATA = Path(str(importlib.resources.files("splits") / "data"))
SCHEMA_PATH = PACKAGE_DATA / "config.schema.yaml"


class ConfigError(ValueError):
    """A user-facing configuration error; the message is one line and names the key."""


class InputError(Exception):
    """Input data that cannot be read as a whole (a truncated or corrupt stream, an unsupported
    compression, no records at all); the message is one line and names the file. Not a
    ValueError, so that no parser fallback mistakes it for a format variant."""


# --------------------------------------------------------------------------- config files


def _with_defaults(validator_class):
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if isinstance(subschema, dict) and "default" in subschema:
                    instance.setdefault(name, json.loads(json.dumps(subschema["default"])))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_DefaultingValidator = _with_defaults(jsonschema.Draft7Validator)


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    """The config schema, parsed once per process (the Snakefile's start checks and the model
    registry both read it while Snakemake parses the workflow); each caller gets its own copy."""
    return copy.deepcopy(_parsed_schema(Path(path)))


@functools.cache
def _parsed_schema(path: Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        # the message is "Additional properties are not allowed ('foo' was unexpected)"
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        pattern = error.schema.get("patternProperties")
        if pattern:
            import re

            extra = [k for k in extra if not any(re.search(p, k) for p in pattern)]
        return ".".join(parts + [extra[0] if extra else "?"])
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else "?"
        return ".".join(parts + [missing])
    return ".".join(parts) or "<top level>"


def validate_config(config: dict, schema: dict | None = None) -> dict:
    """Validate ``config`` in place against the schema, filling defaults; return it.

    Raises ConfigError naming the first offending key (unknown key, wrong type, bad value).
    """
    schema = load_schema() if schema is None else schema
    validator = _DefaultingValidator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        err = errors[0]
        key = _key_path(err)
        if err.validator == "additionalProperties":
            raise ConfigError(f"{key}: unknown key")
        if err.validator == "required":
            raise ConfigError(f"{key}: required key is missing")
        message = err.message.splitlines()[0]
        if len(message) > 200:
            message = message[:200] + "..."
        raise ConfigError(f"{key}: {message}")
    return config


_SCHEMA_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
_NULL_WORDS = ("null", "Null", "NULL", "~")


def _fits(value: Any, types: list[str]) -> bool:
    for name in types:
        if name in ("integer", "number") and isinstance(value, bool):
            continue
        if isinstance(value, _SCHEMA_TYPES.get(name, ())):
            return True
    return False


def _typed(value: str, types: list[str]) -> Any:
    """``value`` read as YAML when the schema wants another type than a string (``--config``
    hands nested values over as strings); unchanged when it does not read as one of them."""
    if "string" in types:
        return None if "null" in types and value in _NULL_WORDS else value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return parsed if _fits(parsed, types) else value


def coerce_to_schema(config: Any, schema: dict) -> Any:
    """Give strings the schema's type where it is not a string, recursively, in place; return
    the (possibly replaced) value. Snakemake's ``--config key='{k: 16}'`` reads nested values
    as strings (``{'k': '16'}``); values that do not read as the wanted type are left for
    validation to name."""
    if not isinstance(schema, dict):
        return config
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if isinstance(config, str) and types:
        config = _typed(config, types)
    if isinstance(config, dict):
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties")
        for key in list(config):
            sub = properties.get(key)
            if sub is None:
                sub = next((s for p, s in patterns.items() if re.search(p, str(key))), extra)
            config[key] = coerce_to_schema(config[key], sub)
    elif isinstance(config, list) and isinstance(schema.get("items"), dict):
        config[:] = [coerce_to_schema(item, schema["items"]) for item in config]
    return config


def read_config_file(path: str | Path) -> dict:
    """A config file as a mapping (not yet validated); ConfigError naming the file when it is
    missing, not YAML, or not a mapping."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    with open(path, encoding="utf-8") as fh:
        try:
            config = yaml.safe_load(fh)
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from err
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys")
    return config


def load_config(path: str | Path) -> dict:
    return validate_config(read_config_file(path))


def require_file(key: str, value: str | Path) -> Path:
    """Check that a path named by config key ``key`` exists; ConfigError otherwise."""
    path = Path(value)
    if not path.exists():
        raise ConfigError(f"{key}: input {value} does not exist")
    return path


# --------------------------------------------------------------------------- demographics

RELEASE_DISPLAY_NAMES = {
    "black": "Black (African American)",
    "catholic": "Catholic",
    "construction": "construction worker",
    "hindu_jain_sikh": "Hindu/Jain/Sikh",
    "jewish": "Jewish",
    "teacher": "teacher",
}


#: the key of thresholds.json that holds how each threshold was chosen (never a demographic)
THRESHOLDS_SUPPORT_KEY = "breakpoint_support"


@dataclass(frozen=True)
class Demographic:
    key: str
    display_name: str
    seed_subreddits: tuple[str, ...]
    self_id_phrases: tuple[str, ...]
    anti_self_id_phrases: tuple[str, ...]
    threshold: int | str = "auto"  # percentile 0-100, or "auto"
    identity_words: tuple[str, ...] = ()  # words naming the group (hypothesis triviality)


def _demographic_from_mapping(key: str, entry: dict, where: str) -> Demographic:
    seeds = entry.get("seed_subreddits", entry.get("seed_set"))
    if not seeds:
        raise ConfigError(f"{where}.{key}.seed_subreddits: empty or missing")
    threshold = entry.get("threshold", "auto")
    if threshold != "auto" and not (isinstance(threshold, int | float) and 0 <= threshold < 100):
        raise ConfigError(f"{where}.{key}.threshold: must be a percentile in [0, 100) or 'auto'")
    return Demographic(
        key=key,
        display_name=entry.get("display_name", RELEASE_DISPLAY_NAMES.get(key, key)),
        seed_subreddits=tuple(str(s) for s in seeds),
        self_id_phrases=tuple(entry.get("self_id_phrases") or ()),
        anti_self_id_phrases=tuple(entry.get("anti_self_id_phrases") or ()),
        threshold=threshold,
        identity_words=_string_tuple(entry.get("identity_words"), f"{where}.{key}.identity_words"),
    )


def _string_tuple(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{key}: must be a list of non-empty strings")
    return tuple(value)


def load_demographics(path: str | Path) -> list[Demographic]:
    """Read demographics from our YAML (``demographics: [{key: ...}]``) or the release JSON
    (``{key: {seed_set, self_id_phrases, anti_self_id_phrases}}``)."""
    path = require_file("demographics.file", path)
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh) if path.suffix == ".json" else yaml.safe_load(fh)
    if isinstance(data, dict) and "demographics" in data:
        entries = data["demographics"]
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: 'demographics' must be a list")
        out = []
        for i, entry in enumerate(entries):
            if "key" not in entry:
                raise ConfigError(f"{path}: demographics[{i}].key is missing")
            out.append(_demographic_from_mapping(entry["key"], entry, str(path)))
    elif isinstance(data, dict):
        out = [_demographic_from_mapping(k, v, str(path)) for k, v in data.items()]
    else:
        raise ConfigError(f"{path}: expected a mapping of demographics")
    keys = [d.key for d in out]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{path}: duplicate demographic keys")
    if THRESHOLDS_SUPPORT_KEY in keys:
        raise ConfigError(f"{path}: {THRESHOLDS_SUPPORT_KEY!r} is reserved, not a demographic key")
    return out


# --------------------------------------------------------------------------- topics


@dataclass(frozen=True)
class Topic:
    category: str
    topic: str
    keywords: tuple[str, ...]


def validate_topics(topics: list[Topic], where: str = "topics") -> list[Topic]:
    seen: set[str] = set()
    for t in topics:
        if not t.topic or not str(t.topic).strip():
            raise ConfigError(f"{where}: a topic in category {t.category!r} has an empty name")
        if t.topic.lower() in seen:
            raise ConfigError(f"{where}: topic {t.topic!r} appears twice")
        seen.add(t.topic.lower())
        if not t.keywords or not all(isinstance(k, str) and k.strip() for k in t.keywords):
            raise ConfigError(f"{where}: topic {t.topic!r} has an empty keyword list or keyword")
    from splits.bm25 import query_tokens  # the retrieval's own words and stop words

    for t in topics:
        if not query_tokens(t.keywords):
            raise ConfigError(
                f"{where}: topic {t.topic!r}: every keyword is a stop word or has no letter or "
                f"digit ({', '.join(repr(k) for k in t.keywords[:5])}), so it would retrieve no "
                "posts; give it content words"
            )
    return topics


def load_topics(path: str | Path) -> list[Topic]:
    """Read topics from our YAML (``topics: [{category, topic, keywords}]``) or the release JSON
    (``{category: {topic: [keywords]}}``)."""
    path = require_file("topics.file", path)
    with open(path, encoding="utf-8") as fh:
        try:
            data = json.load(fh) if path.suffix == ".json" else yaml.safe_load(fh)
        except (json.JSONDecodeError, yaml.YAMLError) as err:
            raise ConfigError(f"{path}: cannot parse ({str(err).splitlines()[0]})") from err
    topics: list[Topic] = []
    if isinstance(data, dict) and "topics" in data:
        for i, entry in enumerate(data["topics"] or []):
            if not isinstance(entry, dict):
                raise ConfigError(f"{path}: topics[{i}] is not a mapping")
            name = entry.get("topic")
            for field in ("category", "topic", "keywords"):
                if field not in entry:
                    raise ConfigError(f"{path}: topic {name or i!r} is missing {field!r}")
            keywords = entry["keywords"]
            if not isinstance(keywords, list):
                raise ConfigError(f"{path}: topic {name!r}: keywords must be a list")
            topics.append(Topic(str(entry["category"]), str(name), tuple(keywords)))
    elif isinstance(data, dict):
        for category, by_topic in data.items():
            if not isinstance(by_topic, dict):
                raise ConfigError(f"{path}: category {category!r} must map topics to keyword lists")
            for name, keywords in by_topic.items():
                if not isinstance(keywords, list):
                    raise ConfigError(f"{path}: topic {name!r}: keywords must be a list")
                topics.append(Topic(str(category), str(name), tuple(keywords)))
    else:
        raise ConfigError(f"{path}: expected a mapping")
    return validate_topics(topics, str(path))


# --------------------------------------------------------------------------- probes

#: the group set built from the demographics file (plus probes.extra_groups)
DEMOGRAPHICS_GROUP_SET = "demographics"


def load_group_sets(path: str | Path, key: str = "probes.empathy.group_sets_file") -> dict:
    """Read the empathy probe's group sets: ``{set: {group: [name, ...]}}``. Every set has at
    least two groups, every group at least one name, and a name appears once per set."""
    path = require_file(key, path)
    with open(path, encoding="utf-8") as fh:
        try:
            data = yaml.safe_load(fh) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of group sets")
    sets: dict[str, dict[str, list[str]]] = {}
    for name, groups in data.items():
        where = f"{path}: {name}"
        if name == DEMOGRAPHICS_GROUP_SET:
            raise ConfigError(f"{where}: the name is reserved for the demographics")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
            raise ConfigError(f"{where}: a set name may hold only letters, digits, _ and -")
        if not isinstance(groups, dict) or len(groups) < 2:
            raise ConfigError(f"{where}: needs at least two groups, each with a list of names")
        seen: set[str] = set()
        sets[str(name)] = {}
        for group, names in groups.items():
            if not isinstance(names, list) or not names:
                raise ConfigError(f"{where}.{group}: needs a non-empty list of names")
            for entry in names:
                if not isinstance(entry, str) or not entry.strip():
                    raise ConfigError(f"{where}.{group}: names must be non-empty strings")
                if entry in seen:
                    raise ConfigError(f"{where}: name {entry!r} appears twice")
                seen.add(entry)
            sets[str(name)][str(group)] = [str(n) for n in names]
    return sets


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


def section(config: dict, name: str) -> dict[str, Any]:
    """The config slice of one stage (after validation, defaults are filled)."""
    return config.get(name, {})


# --------------------------------------------------------------------------- hypotheses

#: registry names that appear in the hypotheses stage's file paths
PATH_NAME = r"[A-Za-z0-9_.\-]+"
ORACLE_KIND = "oracle-lexical"


def check_hypotheses(config: dict) -> None:
    """Cross-key checks of the ``hypotheses`` section (after schema validation): theories name an
    experiment's TM and k, models are in the registry and usable for their role, report_k is
    one of k_fractions, hypothesis files exist. Raises ConfigError naming the key."""
    import re

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
    fractions = section_.get("k_fractions", [])
    if not any(abs(f - section_.get("report_k", 0.05)) < 1e-12 for f in fractions):
        raise ConfigError(
            f"hypotheses.report_k: {section_.get('report_k')} is not one of k_fractions"
        )
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


# --------------------------------------------------------------------------- prompt templates

TM_SLOTS = ("group_a", "group_b", "topic", "category", "k", "posts")
CM_SLOTS = ("demo_a", "demo_b", "post_set1", "post_set2", "theories")
#: the slots a prompt template named by each config key may use (``<key>.<name>`` entries of
#: the per-model maps and the personalization tasks take the slots of their key)
PROMPT_SLOTS: dict[str, tuple[str, ...]] = {
    "demographics.verifier_prompt": ("demographic", "phrase", "context"),
    "evaluation.tm_prompt": TM_SLOTS,
    "evaluation.tm_prompts": TM_SLOTS,
    "evaluation.cm_prompt": CM_SLOTS,
    "evaluation.cm_prompts": CM_SLOTS,
    "probes.stress.prompt": ("group", "text"),
    "probes.empathy.variants.*.system_prompt": ("perceiver",),
    "probes.empathy.variants.*.prompt": ("experiencer", "text", "emotion"),
    "probes.personalization.rewrite_prompt": ("source", "target", "text"),
    "probes.personalization.judge_prompt": ("source", "target", "original", "rewrite"),
    "probes.personalization.tasks": ("text", "topic"),
    "hypotheses.theory_prompt": ("group_a", "group_b", "topic", "category", "theory"),
    "hypotheses.generate.prompt": (
        "group_a",
        "group_b",
        "topic",
        "category",
        "posts_a",
        "posts_b",
        "n",
    ),
}
# a template file holding one Python f-string literal (the paper's CM prompt is one)
FSTRING_START = re.compile(r"^\s*[fF][rR]?(\"\"\"|''')|^\s*[rR][fF](\"\"\"|''')")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def unknown_slots(text: str, allowed: Iterable[str]) -> list[str]:
    """The ``{name}`` placeholders of a plain template that are none of ``allowed`` (each once,
    in order): a misspelt slot would otherwise reach the model as literal text. Braces around
    anything but a bare name (``{ "key": 1 }``) are text."""
    allowed = set(allowed)
    found = [m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1) not in allowed]
    return list(dict.fromkeys(found))


def unknown_slot_error(where: str, name: str, allowed: Iterable[str]) -> ConfigError:
    slots = " ".join("{" + s + "}" for s in allowed)
    return ConfigError(f"{where}: unknown slot {{{name}}} (the template's slots: {slots})")


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
            from splits.evaluation import parse_template  # the f-string reader, only when needed

            try:
                parse_template(text, f"{key}: {path}", slots)
            except ConfigError as err:
                raise ConfigError(str(err)) from err
            continue
        unknown = unknown_slots(text, slots)
        if unknown:
            raise unknown_slot_error(f"{key}: {path}", unknown[0], slots)


# --------------------------------------------------------------------------- evaluation

#: posts of each group per evaluation row besides the calibration half (sample_A or sample_B)
EVALUATION_SAMPLE_POSTS = 3
#: backends of the theory models a researcher brings, which cannot classify
TM_ONLY_BACKENDS = ("python", "precomputed")


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
            backend = models.get(model, {}).get("backend")
            if backend in TM_ONLY_BACKENDS:
                raise ConfigError(
                    f"evaluation.experiments.{name}.cms: {model!r} (backend {backend}) writes "
                    "theories and cannot classify; list it under tms"
                )
        sweep_k = sweep_calibration_size(config, experiment)
        if sweep_k is not None and sweep_k // 2 + EVALUATION_SAMPLE_POSTS > top_k:
            raise ConfigError(
                f"evaluation.experiments.{name}.ks: k={sweep_k} needs {sweep_k // 2} calibration "
                f"+ {EVALUATION_SAMPLE_POSTS} sample posts per group and topic, more than the "
                f"topics.top_k={top_k} posts the topic splits keep"
            )
